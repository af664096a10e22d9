"""Transformer blocks: LayerNorm against torch, the feed-forward activations, pre-/post-norm blocks with masks,
causality, KV-cache equivalence, gradients, and input validation (chapter `nbs/04_blocks.ipynb`)."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformerbook.blocks import ACTIVATIONS, FeedForward, LayerNorm, TransformerBlock
from transformerbook.masking import causal_mask, combine_masks, make_padding_mask
from transformerbook.sampling import LayerKVCache



# ---------------------------------------------------------------- LayerNorm

@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=3), d_model=st.integers(1, 33),
       eps=st.sampled_from([0.0, 1e-6, 1e-5, 1e-2, 1.0]), bias=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-2, 1.0, 100.0]))
def test_layer_norm_matches_torch(shape, d_model, eps, bias, dtype, seed, scale):
    if eps == 0.0 and d_model == 1:
        eps = 1e-5  # a single element has σ = 0: without ε both divide 0 by 0
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, d_model, generator=g, dtype=dtype) * scale + 3.0)
    ours = LayerNorm(d_model, eps=eps, bias=bias).to(dtype)
    ref = nn.LayerNorm(d_model, eps=eps, bias=bias).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.rand(d_model, generator=g, dtype=dtype) + 0.5)
        if bias:
            ours.bias.copy_(torch.randn(d_model, generator=g, dtype=dtype))
    ref.load_state_dict(ours.state_dict())
    # Rounding x (about 3) costs ~ulp(3) in x - μ, which x̂ divides by σ: allow for that conditioning, or a row of
    # two nearly equal values with ε = 0 fails in float32 although both implementations are right.
    cond = (x.abs().amax(-1) / (x.var(-1, unbiased=False) + eps).sqrt()).max().item() if x.numel() else 1.0
    unit = torch.finfo(dtype).eps * 10 * cond * 2.0  # γ < 1.5
    tol = (dict(atol=1e-4 + unit, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10 + unit, rtol=1e-10))
    out = ours(x)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, ref(x), **tol)
    torch.testing.assert_close(out, F.layer_norm(x, (d_model,), ours.weight, ours.bias, eps), **tol)


def test_layer_norm_statistics_and_population_variance():
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    y = LayerNorm(4, eps=0.0)(x)
    torch.testing.assert_close(y, (x - 3.0) / math.sqrt(3.5))  # population σ² = 14/4, not 14/3
    assert abs(y.mean().item()) < 1e-6 and abs(y.var(unbiased=False).item() - 1) < 1e-5


def test_layer_norm_constant_vector_is_finite():
    y = LayerNorm(5)(torch.full((2, 5), 7.0))
    assert torch.isfinite(y).all() and y.abs().max() == 0


def test_layer_norm_without_bias_has_no_bias_parameter():
    ln = LayerNorm(8, bias=False)
    assert ln.bias is None and [n for n, _ in ln.named_parameters()] == ["weight"]


def test_layer_norm_errors_name_the_values():
    with pytest.raises(ValueError, match=r"d_model=4.*\(2, 5\)"):
        LayerNorm(4)(torch.randn(2, 5))
    with pytest.raises(ValueError, match="d_model=0"):
        LayerNorm(0)
    with pytest.raises(ValueError, match="eps=-1"):
        LayerNorm(4, eps=-1)


@pytest.mark.parametrize("bias", [True, False])
def test_fused_layer_norm_equals_book_layer_norm_values_and_gradients(bias):
    torch.manual_seed(0)
    book, fused = LayerNorm(16, bias=bias), LayerNorm(16, bias=bias, fused=True)
    with torch.no_grad():
        book.weight.uniform_(0.5, 1.5)
        if bias: book.bias.normal_()
    fused.load_state_dict(book.state_dict())
    x = (torch.randn(3, 5, 16) * 4 + 2).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    g = torch.randn(3, 5, 16)
    (book(x) * g).sum().backward()
    (fused(x2) * g).sum().backward()
    torch.testing.assert_close(fused(x2), book(x))
    torch.testing.assert_close(x2.grad, x.grad, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(book.named_parameters(), fused.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_fused_layer_norm_with_another_input_dtype_promotes_like_the_book_one(dtype):
    book, fused = LayerNorm(8), LayerNorm(8, fused=True)  # float32 parameters
    x = torch.randn(3, 8).to(dtype)
    out = fused(x)
    assert out.dtype == book(x).dtype == torch.promote_types(dtype, torch.float32)
    torch.testing.assert_close(out, book(x))


def test_fused_layer_norm_checks_its_input_like_the_book_one():
    with pytest.raises(ValueError, match=r"d_model=4.*\(2, 5\)"):
        LayerNorm(4, fused=True)(torch.randn(2, 5))
    with pytest.raises(TypeError, match="got torch.int64"):
        LayerNorm(4, fused=True)(torch.ones(2, 4, dtype=torch.int64))


def test_fused_block_uses_fused_kernels_everywhere():
    block = TransformerBlock(16, 4, fused=True)
    assert block.ln_1.fused and block.ln_2.fused and block.attn.fused
    assert not any((TransformerBlock(16, 4).ln_1.fused, TransformerBlock(16, 4).attn.fused))


# ---------------------------------------------------------------- feed-forward network

def test_activation_formulas():
    z = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    torch.testing.assert_close(ACTIVATIONS["relu"](z), z.clamp_min(0))
    torch.testing.assert_close(ACTIVATIONS["gelu"](z), z * 0.5 * (1 + torch.erf(z / math.sqrt(2))))
    tanh_gelu = 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    torch.testing.assert_close(ACTIVATIONS["gelu_tanh"](z), tanh_gelu)
    gap = (ACTIVATIONS["gelu"](z) - ACTIVATIONS["gelu_tanh"](z)).abs().max().item()
    assert 1e-4 < gap < 5e-4  # close, but not the same function


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_feed_forward_is_position_wise_and_matches_formula(activation):
    torch.manual_seed(0)
    ffn = FeedForward(8, 32, activation=activation)
    x = torch.randn(3, 5, 8)
    expected = ACTIVATIONS[activation](x @ ffn.fc.weight.T + ffn.fc.bias) @ ffn.proj.weight.T + ffn.proj.bias
    torch.testing.assert_close(ffn(x), expected)
    torch.testing.assert_close(ffn(x)[:, 2], ffn(x[:, 2]))  # each position alone gives the same result
    perturbed = x.clone()
    perturbed[:, 1] += 1.0
    assert torch.equal(ffn(perturbed)[:, [0, 2, 3, 4]], ffn(x)[:, [0, 2, 3, 4]])


def test_feed_forward_sizes_and_errors():
    ffn = FeedForward(16, 64, bias=False)
    assert ffn.fc.weight.shape == (64, 16) and ffn.proj.weight.shape == (16, 64) and ffn.fc.bias is None
    with pytest.raises(ValueError, match="activation='swish'"):
        FeedForward(8, 32, activation="swish")


# ---------------------------------------------------------------- blocks

def _block(norm_placement, seed=0, **kw):
    torch.manual_seed(seed)
    block = TransformerBlock(16, 4, norm_placement=norm_placement, **kw).eval()
    with torch.no_grad():  # random γ, β so LayerNorm is not the identity-like default
        for ln in (block.ln_1, block.ln_2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.normal_()
    return block


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_block_matches_jm_equations(norm_placement):
    block, mask = _block(norm_placement), causal_mask(6)
    x = torch.randn(2, 6, 16)
    attn = lambda h: block.attn(h, mask=mask)
    if norm_placement == "pre":  # J&M eqs. 10.38-10.43
        t3 = x + attn(block.ln_1(x))
        expected = t3 + block.mlp(block.ln_2(t3))
    else:  # J&M eqs. 10.26-10.31
        t3 = block.ln_1(x + attn(x))
        expected = block.ln_2(block.mlp(t3) + t3)
    torch.testing.assert_close(block(x, mask=mask), expected)


def test_pre_and_post_norm_differ():
    pre, post = _block("pre"), _block("post")
    post.load_state_dict(pre.state_dict())
    x = torch.randn(1, 4, 16)
    assert (pre(x) - post(x)).abs().max() > 1e-2


def test_default_d_ff_is_four_times_d_model():
    assert TransformerBlock(16, 4).mlp.fc.out_features == 64
    assert TransformerBlock(16, 4, d_ff=24).mlp.fc.out_features == 24


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_block_is_causal(norm_placement):
    block, T = _block(norm_placement), 7
    x = torch.randn(2, T, 16)
    y = block(x, mask=causal_mask(T))
    for t in range(T):
        x2 = x.clone()
        x2[:, t:] = torch.randn_like(x2[:, t:])  # change position t and everything after it
        y2 = block(x2, mask=causal_mask(T))
        torch.testing.assert_close(y2[:, :t], y[:, :t])  # the past is unchanged
        assert (y2[:, t] - y[:, t]).abs().max() > 1e-4  # position t itself does change


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_only_attention_mixes_positions(norm_placement):
    block, T = _block(norm_placement), 6
    x = torch.randn(1, T, 16)
    x2 = x.clone()
    x2[:, 2] += torch.randn(16)  # not a constant shift: LayerNorm would remove that
    no_mask = (block(x2) - block(x)).abs().amax(-1)[0]
    assert (no_mask > 1e-6).all()  # unmasked attention: every position sees the change
    for part in (block.ln_1, block.mlp):
        delta = (part(x2) - part(x)).abs().amax(-1)[0]
        assert (delta > 1e-6).tolist() == [t == 2 for t in range(T)]


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_block_with_padding_mask_ignores_padded_keys(norm_placement):
    block, T = _block(norm_placement), 5
    lengths = torch.tensor([5, 3])
    # (B, 1, T, S); seq 1 padded at 0, 1
    mask = combine_masks(causal_mask(T), make_padding_mask(lengths, T, side="left"))
    x = torch.randn(2, T, 16)
    x2 = x.clone()
    x2[1, :2] = torch.randn(2, 16)  # change only the padding of sequence 1
    torch.testing.assert_close(block(x2, mask=mask)[1, 2:], block(x, mask=mask)[1, 2:])
    torch.testing.assert_close(block(x[1:, 2:], mask=causal_mask(3)), block(x, mask=mask)[1:, 2:])
    torch.testing.assert_close(block(x, mask=mask)[0], block(x[:1], mask=causal_mask(T))[0])
    no_padding = block(x, mask=causal_mask(T))[1, 2:]
    assert (no_padding - block(x, mask=mask)[1, 2:]).abs().max() > 1e-4  # the mask does matter


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
@pytest.mark.parametrize("fused", [False, True])
def test_kv_cache_through_a_block_matches_full_pass(norm_placement, fused):
    block, T = _block(norm_placement, fused=fused), 6
    x = torch.randn(2, T, 16)
    full = block(x, mask=causal_mask(T))
    cache = LayerKVCache()
    prefix = block(x[:, :2], mask=causal_mask(2), layer_cache=cache)  # a 2-token prompt, then one token at a time
    steps = [block(x[:, t:t + 1], mask=causal_mask(1, t + 1), layer_cache=cache) for t in range(2, T)]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, atol=1e-5, rtol=1e-4)
    assert len(cache) == T


@pytest.mark.parametrize("norm_placement", ["pre", "post"])
def test_gradients_are_finite_and_reach_every_parameter(norm_placement):
    torch.manual_seed(0)
    blocks = nn.ModuleList([TransformerBlock(16, 4, norm_placement=norm_placement) for _ in range(6)])
    x = torch.randn(2, 8, 16, requires_grad=True)
    h = x
    for block in blocks:
        h = block(h, mask=causal_mask(8))
    h.pow(2).mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in blocks.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} received a zero gradient"


def test_pre_norm_block_is_identity_when_sublayers_output_zero():
    block = _block("pre")
    with torch.no_grad():
        for lin in (block.attn.out_proj, block.mlp.proj):
            lin.weight.zero_()
            lin.bias.zero_()
    x = torch.randn(2, 5, 16) * 10
    torch.testing.assert_close(block(x, mask=causal_mask(5)), x)


def test_post_norm_output_is_normalised():
    block = TransformerBlock(16, 4, norm_placement="post")  # γ = 1, β = 0 at init
    y = block(torch.randn(3, 5, 16) * 10 + 4)
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3, rtol=0)


def test_block_errors_name_the_values():
    with pytest.raises(ValueError, match="norm_placement='middle'"):
        TransformerBlock(16, 4, norm_placement="middle")
    with pytest.raises(ValueError, match="d_model=18 is not divisible by n_heads=4"):
        TransformerBlock(18, 4)
    with pytest.raises(ValueError, match="activation='tanh'"):
        TransformerBlock(16, 4, activation="tanh")
    with pytest.raises(ValueError, match="d_model=16"):
        TransformerBlock(16, 4)(torch.randn(1, 3, 8))


@pytest.mark.parametrize("d_ff", [0, -1, 2.5, True])
def test_bad_d_ff_is_rejected_not_replaced(d_ff):
    with pytest.raises(ValueError, match=f"d_ff={d_ff!r} must be a positive int"):
        FeedForward(16, d_ff)
    with pytest.raises(ValueError, match=f"d_ff={d_ff!r} must be a positive int"):
        TransformerBlock(16, 4, d_ff=d_ff)  # 0 used to become 4·d_model silently


@pytest.mark.parametrize("d_model", [0, -3, 4.0])
def test_feed_forward_rejects_bad_d_model(d_model):
    with pytest.raises(ValueError, match=f"d_model={d_model!r} must be a positive int"):
        FeedForward(d_model, 8)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_layer_norm_rejects_non_float_input(dtype):
    with pytest.raises(TypeError, match=f"got {dtype}"):
        LayerNorm(4)(torch.ones(2, 4, dtype=dtype))
    with pytest.raises(TypeError, match=f"got {dtype}"):
        TransformerBlock(4, 2)(torch.ones(1, 3, 4, dtype=dtype))
    with pytest.raises(TypeError, match="got list"):
        LayerNorm(4)([1.0, 2.0, 3.0, 4.0])


def test_block_with_cache_of_another_batch_raises_value_error():
    block, cache = TransformerBlock(16, 4), LayerKVCache()
    block(torch.randn(2, 3, 16), mask=causal_mask(3), layer_cache=cache)
    with pytest.raises(ValueError, match=r"cache holds \(B, H, S, Dh\) = \(2, 4, 3, 4\)"):
        block(torch.randn(3, 1, 16), mask=causal_mask(1, 4), layer_cache=cache)
    assert len(cache) == 3


def test_a_dtype_that_differs_from_the_weights_is_named_not_a_raw_torch_error():
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="float64.*float32|float32.*float64"):
        FeedForward(8, 16)(x)
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the weights have torch.float32"):
        TransformerBlock(8, 2)(x)
    with pytest.raises(TypeError, match="got list"):
        FeedForward(8, 16)([[0.0] * 8])
    assert TransformerBlock(8, 2).double()(x).dtype == torch.float64  # converting the module is the fix


def test_autocast_may_mix_dtypes():
    "Under torch.autocast torch itself mixes float32 weights with bfloat16 activations: no dtype error then."
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert FeedForward(8, 16)(torch.randn(1, 3, 8).bfloat16()).dtype == torch.bfloat16
        assert torch.isfinite(TransformerBlock(8, 2, fused=True)(torch.randn(1, 3, 8).bfloat16())).all()


def test_old_names_of_blocks_still_work_and_warn_once(monkeypatch):
    "`NORMS` is `NORMALIZATIONS`; TransformerBlock's `norm`/`layer_norm_eps` are `norm_placement`/`norm_eps`."
    import warnings

    from transformerbook import blocks, validation
    monkeypatch.setattr(validation, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert blocks.NORMS is blocks.NORMALIZATIONS == ("layer", "rms")
        from transformerbook.blocks import NORMS  # noqa: F401 (the import itself is the check)
        old = TransformerBlock(16, 4, norm="post", layer_norm_eps=1e-3)
        TransformerBlock(16, 4, norm="post")
    assert old.norm_placement == "post" and old.ln_1.eps == 1e-3 and old.attn.q_norm is None
    assert [str(w.message) for w in caught] == [
        "transformerbook.blocks.NORMS is deprecated: use transformerbook.blocks.NORMALIZATIONS",
        "TransformerBlock(norm=...) is deprecated: use norm_placement=",
        "TransformerBlock(layer_norm_eps=...) is deprecated: use norm_eps="]
    with pytest.raises(AttributeError, match="has no attribute 'NORM'"):
        blocks.NORM
