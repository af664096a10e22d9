"""Mixture of experts: the router against its two textbook forms, the batched layer against a per-token loop and
against Hugging Face's `MixtralSparseMoeBlock`, the load-balancing loss against HF's, properties, parameter counts
and input validation (chapter `nbs/10_moe.ipynb`)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformerbook.blocks import FeedForward, TransformerBlock
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.masking import causal_mask
from transformerbook.blocks import SwiGLUFeedForward
from transformerbook.moe import (MoEFeedForward, TopKRouter, collect_router_logits,
                                 copy_from_mixtral, copy_to_mixtral, expert_usage, load_balancing_loss, make_expert,
                                 count_moe_params, use_moe)

mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
from transformers import MixtralConfig, MixtralForCausalLM  # noqa: E402


def moe_loop(x, router, experts):
    "Notes eq. 19.18 one token at a time: y_n = Σ_k w_nk · experts[i_nk](x_n)."
    _, weights, indices = router(x)
    y = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for w, i in zip(weights[n], indices[n].tolist()):
            y[n] += w * experts[i](x[n])
    return y


def hf_block(d_model, d_ff, n_experts, top_k, seed=0):
    torch.manual_seed(seed)
    config = MixtralConfig(hidden_size=d_model, intermediate_size=d_ff, num_local_experts=n_experts,
                           num_experts_per_tok=top_k)
    config._experts_implementation = "eager"
    block = mixtral.MixtralSparseMoeBlock(config).eval()
    for p in block.parameters():
        nn.init.normal_(p, std=0.2)
    return block


# ---------------------------------------------------------------- router

@settings(max_examples=30, deadline=None)
@given(n_experts=st.integers(1, 9), data=st.data(), seed=st.integers(0, 2**16), scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_router_equals_topk_then_softmax(n_experts, data, seed, scale):
    top_k = data.draw(st.integers(1, n_experts))
    logits = torch.randn(13, n_experts, generator=torch.Generator().manual_seed(seed)) * scale
    router = TopKRouter(n_experts, n_experts, top_k)
    with torch.no_grad():
        router.gate.weight.copy_(torch.eye(n_experts))
    out_logits, weights, indices = router(logits)
    torch.testing.assert_close(out_logits, logits)
    top_logits, top_idx = logits.topk(top_k, -1)
    assert torch.equal(indices, top_idx)
    torch.testing.assert_close(weights, top_logits.softmax(-1))
    torch.testing.assert_close(weights.sum(-1), torch.ones(13))
    raw = TopKRouter(n_experts, n_experts, top_k, renormalize=False)
    raw.load_state_dict(router.state_dict())
    torch.testing.assert_close(raw(logits)[1], logits.softmax(-1).gather(-1, top_idx))  # notes eq. 19.18 as written


def test_router_softmax_in_float32_for_half_inputs():
    router = TopKRouter(8, 4, 2).to(torch.bfloat16)
    logits, weights, indices = router(torch.randn(5, 8, dtype=torch.bfloat16))
    assert logits.dtype == torch.bfloat16 and weights.dtype == torch.float32 and indices.dtype == torch.int64


# ---------------------------------------------------------------- the layer

@pytest.mark.parametrize("activation", ["swiglu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("n_experts,top_k", [(1, 1), (4, 1), (4, 2), (5, 3), (3, 3)])
def test_batched_equals_loop(activation, n_experts, top_k):
    torch.manual_seed(n_experts * 10 + top_k)
    moe = MoEFeedForward(12, 24, n_experts, top_k, activation=activation, bias=activation != "swiglu")
    x = torch.randn(3, 7, 12)
    y = moe(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y, moe_loop(x.reshape(-1, 12), moe.router, moe.experts).reshape(3, 7, 12))


@pytest.mark.parametrize("d_model,d_ff,n_experts,top_k,shape", [
    (16, 32, 4, 2, (2, 9)), (8, 12, 8, 2, (1, 33)), (24, 40, 6, 1, (3, 5)), (16, 16, 3, 3, (4, 4)),
    (8, 8, 1, 1, (2, 3))])
def test_matches_hf_mixtral_both_ways(d_model, d_ff, n_experts, top_k, shape):
    hf = hf_block(d_model, d_ff, n_experts, top_k)
    x = torch.randn(*shape, d_model)
    ours = copy_from_mixtral(MoEFeedForward(d_model, d_ff, n_experts, top_k), hf)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x))
        hf_logits, hf_weights, hf_indices = hf.gate(x)
        _, weights, indices = ours.router(x.reshape(-1, d_model))
    torch.testing.assert_close(ours.router_logits, hf_logits)
    torch.testing.assert_close(weights, hf_weights)
    assert torch.equal(indices, hf_indices)
    torch.manual_seed(1)
    fresh = MoEFeedForward(d_model, d_ff, n_experts, top_k)
    other = copy_to_mixtral(fresh, hf_block(d_model, d_ff, n_experts, top_k, seed=5))
    with torch.no_grad():
        torch.testing.assert_close(other(x), fresh(x))


def test_hf_block_gradients_match():
    hf = hf_block(16, 32, 4, 2).train()
    ours = copy_from_mixtral(MoEFeedForward(16, 32, 4, 2), hf)
    x = torch.randn(2, 5, 16)
    ours(x).pow(2).sum().backward()
    hf(x).pow(2).sum().backward()
    torch.testing.assert_close(ours.router.gate.weight.grad, hf.gate.weight.grad)
    torch.testing.assert_close(torch.stack([e.w2.weight.grad for e in ours.experts]), hf.experts.down_proj.grad)


def test_one_expert_is_a_dense_ffn():
    torch.manual_seed(0)
    moe = MoEFeedForward(16, 32, n_experts=1, top_k=1, activation="gelu", bias=True)
    dense = FeedForward(16, 32, activation="gelu")
    dense.load_state_dict(moe.experts[0].state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(moe(x), dense(x))


def test_tokens_are_independent_of_the_batch():
    torch.manual_seed(0)
    moe = MoEFeedForward(16, 32, n_experts=4, top_k=2)
    x = torch.randn(4, 6, 16)
    full = moe(x)
    for b in range(4):
        for t in (0, 5):
            torch.testing.assert_close(full[b, t], moe(x[b, t][None, None])[0, 0])
    torch.testing.assert_close(moe(x[:, :3]), full[:, :3])


def test_uniform_router_with_all_experts_is_the_average():
    torch.manual_seed(0)
    moe = MoEFeedForward(16, 32, n_experts=5, top_k=5)
    with torch.no_grad():
        moe.router.gate.weight.zero_()
    x = torch.randn(2, 4, 16)
    torch.testing.assert_close(moe(x), torch.stack([e(x) for e in moe.experts]).mean(0))


def test_gradients_reach_router_and_chosen_experts_only():
    torch.manual_seed(0)
    moe = MoEFeedForward(8, 16, n_experts=4, top_k=2)
    x = torch.randn(1, 1, 8)
    moe(x).sum().backward()
    chosen = set(moe.router(x.reshape(1, 8))[2].flatten().tolist())
    assert moe.router.gate.weight.grad.abs().sum() > 0
    for e, expert in enumerate(moe.experts):
        has_grad = expert.w1.weight.grad is not None and expert.w1.weight.grad.abs().sum() > 0
        assert has_grad == (e in chosen)


@pytest.mark.parametrize("renormalize", [True, False])
def test_top1_router_gradient_needs_raw_probabilities(renormalize):
    "With k = 1, a renormalised weight is always 1 and the router learns nothing; Switch keeps the raw probability."
    torch.manual_seed(0)
    moe = MoEFeedForward(8, 16, n_experts=4, top_k=1, renormalize=renormalize)
    moe(torch.randn(2, 3, 8)).sum().backward()
    assert (moe.router.gate.weight.grad.abs().max() > 1e-6) == (not renormalize)  # w / w = 1 leaves only rounding


def test_drops_into_a_transformer_block_and_stays_causal():
    torch.manual_seed(0)
    block = TransformerBlock(16, 4)
    block.mlp = MoEFeedForward(16, 32, 4, 2)
    x = torch.randn(2, 6, 16)
    x2 = x.clone()
    x2[:, -1] += 1.0
    torch.testing.assert_close(block(x, mask=causal_mask(6))[:, :-1], block(x2, mask=causal_mask(6))[:, :-1])


def test_use_moe_gpt_trains_with_balancing_loss():
    torch.manual_seed(0)
    gpt = use_moe(GPT(GPTConfig(vocab_size=20, context_length=8, d_model=16, n_heads=2, n_layers=2)), 4, 2)
    assert all(isinstance(b.mlp, MoEFeedForward) for b in gpt.blocks)
    ids = torch.randint(20, (2, 8))
    loss = F.cross_entropy(gpt(ids).flatten(0, 1), ids.flatten())
    loss = loss + 0.01 * load_balancing_loss(collect_router_logits(gpt), 2)
    loss.backward()
    assert all(b.mlp.router.gate.weight.grad.abs().sum() > 0 for b in gpt.blocks)


# ---------------------------------------------------------------- load balancing

@pytest.mark.parametrize("n_layers,n_experts,top_k", [(1, 4, 1), (1, 8, 2), (3, 6, 2), (2, 5, 3)])
def test_load_balancing_loss_matches_hf(n_layers, n_experts, top_k):
    g = torch.Generator().manual_seed(n_layers * 100 + n_experts)
    layers = tuple(torch.randn(30, n_experts, generator=g) * 2 for _ in range(n_layers))
    theirs = mixtral.load_balancing_loss_func(layers, num_experts=n_experts, top_k=top_k)
    torch.testing.assert_close(load_balancing_loss(layers, top_k), theirs)
    torch.testing.assert_close(load_balancing_loss(list(layers), top_k), theirs)


def test_load_balancing_loss_extremes():
    E = 8
    collapsed = torch.zeros(16, E)
    collapsed[:, 2] = 30.0
    torch.testing.assert_close(load_balancing_loss(collapsed, 1), torch.tensor(float(E)))
    even = torch.zeros(E, E).fill_diagonal_(30.0)
    torch.testing.assert_close(load_balancing_loss(even, 1), torch.tensor(1.0))


def test_expert_usage_counts_fractions():
    f = expert_usage(torch.tensor([[0, 1], [0, 2], [0, 1], [3, 0]]), 5)
    torch.testing.assert_close(f, torch.tensor([1.0, 0.5, 0.25, 0.25, 0.0]))
    assert f.sum().item() == pytest.approx(2.0)


# ---------------------------------------------------------------- parameter counts

def test_param_counts_match_hf_mixtral_model():
    hf_config = MixtralConfig(vocab_size=50, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                              num_attention_heads=6, num_key_value_heads=2, head_dim=4, num_local_experts=3,
                              num_experts_per_tok=2)
    n_hf = sum(p.numel() for p in MixtralForCausalLM(hf_config).parameters())
    counts = count_moe_params(2, 24, 40, 3, 2, 50, 6, n_kv_heads=2)
    assert counts["total"] == n_hf
    assert counts["total"] - counts["active"] == 2 * 1 * 3 * 24 * 40


def test_param_counts_match_our_layer_and_published_mixtral():
    moe = MoEFeedForward(32, 48, 6, 2)
    c1, c0 = count_moe_params(1, 32, 48, 6, 2, 1, 1), count_moe_params(1, 32, 48, 6, 6, 1, 1)
    assert c0["active"] - c1["active"] == 4 * sum(p.numel() for p in moe.experts[0].parameters())
    m = count_moe_params(32, 4096, 14336, 8, 2, 32000, 32, n_kv_heads=8)
    assert m["total"] == pytest.approx(46.7e9, rel=0.01) and m["active"] == pytest.approx(12.9e9, rel=0.01)


@pytest.mark.parametrize("gated,tie,kv,E,K", [(True, False, 2, 5, 2), (False, True, 4, 3, 1), (True, True, 1, 4, 4)])
def test_moe_counts_equal_a_gpt_with_experts(gated, tie, kv, E, K):
    "The count is built on `count_params` and equals the real model: chapter 6's GPT with `use_moe`'s experts."
    model_cfg = GPTConfig(vocab_size=37, context_length=8, d_model=32, n_heads=4, n_layers=2, d_ff=24, n_kv_heads=kv,
                    bias=False, tie_weights=tie, normalization="rms", positional="rotary",
                    activation="swiglu" if gated else "gelu_tanh")
    counts = count_moe_params(2, 32, 24, E, K, 37, 4, n_kv_heads=kv, gated=gated, tie_weights=tie)
    assert counts["total"] == use_moe(GPT(model_cfg), n_experts=E, top_k=K).n_params()
    assert counts["total"] - counts["active"] == 2 * (E - K) * (3 if gated else 2) * 32 * 24


def test_moe_param_counts_is_the_old_name():
    from transformerbook.moe import moe_param_counts
    assert moe_param_counts is count_moe_params


# ---------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("kwargs,match", [
    (dict(top_k=5), "top_k=5 is larger than n_experts=4"),
    (dict(top_k=0), "top_k=0 must be a positive int"),
    (dict(n_experts=0, top_k=1), "n_experts=0 must be a positive int"),
    (dict(d_model=-2), "d_model=-2 must be a positive int"),
    (dict(d_ff=0), "d_ff=0 must be a positive int"),
    (dict(top_k=2.0), "top_k=2.0 must be a positive int"),
    (dict(activation="swish"), "activation='swish'"),
])
def test_bad_sizes(kwargs, match):
    args = dict(d_model=8, d_ff=16, n_experts=4, top_k=2) | kwargs
    with pytest.raises(ValueError, match=match):
        MoEFeedForward(**args)


def test_bad_inputs():
    moe = MoEFeedForward(8, 16, 4, 2)
    with pytest.raises(ValueError, match=r"d_model=8, got shape \(2, 3, 7\)"):
        moe(torch.randn(2, 3, 7))
    with pytest.raises(TypeError, match="torch.int64"):
        moe(torch.ones(2, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.float64"):
        moe(torch.randn(2, 3, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="got list"):
        moe([[0.0] * 8])
    with pytest.raises(ValueError, match="top_k=3 is larger than n_experts=2"):
        load_balancing_loss(torch.randn(4, 2), 3)
    with pytest.raises(TypeError, match="float tensor"):
        load_balancing_loss(torch.ones(4, 2, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="empty"):
        load_balancing_loss([], 1)
    with pytest.raises(ValueError, match=r"n_experts=3\), got values in \[0, 3\]"):
        expert_usage(torch.tensor([[0, 3]]), 3)
    with pytest.raises(ValueError, match="activation='gelu'"):
        copy_from_mixtral(MoEFeedForward(16, 32, 4, 2, activation="gelu"), hf_block(16, 32, 4, 2))
    with pytest.raises(ValueError, match="top_k=1"):
        copy_to_mixtral(MoEFeedForward(16, 32, 4, 2), hf_block(16, 32, 4, 1))
    with pytest.raises(TypeError, match="MixtralSparseMoeBlock"):
        copy_from_mixtral(MoEFeedForward(16, 32, 4, 2), nn.Linear(2, 2))
    with pytest.raises(TypeError, match="model must be a GPT"):
        use_moe(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="d_ff=0"):
        SwiGLUFeedForward(8, 0)
    with pytest.raises(ValueError, match="activation='tanh'"):
        make_expert(8, 8, "tanh")
