"""Multi-head attention (transformerbook.multihead): reference equivalence, loop vs batched, KV cache, causality,
errors."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import nn

from transformerbook.attention import scaled_dot_product_attention
from transformerbook.masking import causal_mask, combine_masks, make_padding_mask
from transformerbook.multihead import AttentionContext, MultiHeadAttention, merge_heads, split_heads

SHAPES = [(8, 1, 1, 1), (8, 2, 5, 2), (12, 3, 7, 3), (16, 4, 6, 2), (32, 8, 9, 1), (24, 6, 4, 3)]  # (D, H, T, B)


def seeded_mha(d_model, n_heads, seed=0, **kwargs):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_model, n_heads, **kwargs)
    for p in mha.parameters():  # non-zero biases everywhere, so that a dropped bias shows
        nn.init.normal_(p, std=0.3)
    return mha


def to_torch(mha):
    "nn.MultiheadAttention with mha's weights: in_proj_weight stacks [W_Q; W_K; W_V]."
    theirs = nn.MultiheadAttention(mha.d_model, mha.n_heads, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        theirs.out_proj.weight.copy_(mha.out_proj.weight)
        theirs.out_proj.bias.copy_(mha.out_proj.bias)
    return theirs.eval()


def multihead_loop(mha, x, mask=None):
    "One head at a time with its own slices of W_Q, W_K, W_V (J&M eqs. 10.17-10.19)."
    Dh = mha.d_head
    heads = []
    for i in range(mha.n_heads):
        rows = slice(i * Dh, (i + 1) * Dh)
        q, k, v = (F.linear(x, p.weight[rows], p.bias[rows]) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
        heads.append(scaled_dot_product_attention(q, k, v, mask))
    return mha.out_proj(torch.cat(heads, -1))


@pytest.mark.parametrize("D,H,T,B", SHAPES)
def test_matches_torch_multihead_attention(D, H, T, B):
    mha = seeded_mha(D, H, seed=D + H)
    theirs = to_torch(mha)
    x = torch.randn(B, T, D)
    torch.testing.assert_close(mha(x), theirs(x, x, x, need_weights=False)[0])
    m = causal_mask(T)
    torch.testing.assert_close(mha(x, mask=m), theirs(x, x, x, attn_mask=~m, need_weights=False)[0])
    # torch's default path (need_weights=True) computes the same output
    torch.testing.assert_close(mha(x, mask=m), theirs(x, x, x, attn_mask=~m)[0])


@pytest.mark.parametrize("D,H,T,B", [s for s in SHAPES if s[2] > 1])
def test_matches_torch_with_padding_masks(D, H, T, B):
    mha = seeded_mha(D, H, seed=1)
    theirs = to_torch(mha)
    x = torch.randn(B, T, D)
    lengths = torch.randint(1, T + 1, (B,), generator=torch.Generator().manual_seed(T))
    kp = make_padding_mask(lengths, T)
    ours = mha(x, mask=combine_masks(causal_mask(T), kp))
    ref = theirs(x, x, x, attn_mask=~causal_mask(T), key_padding_mask=~kp, need_weights=False)[0]
    torch.testing.assert_close(ours, ref)


def test_torch_bool_mask_polarity_is_opposite():
    mha = seeded_mha(16, 4)
    theirs = to_torch(mha)
    x = torch.randn(2, 5, 16)
    m = causal_mask(5)
    same_polarity = theirs(x, x, x, attn_mask=m, need_weights=False)[0]
    assert not torch.allclose(same_polarity, mha(x, mask=m), atol=1e-3)


@pytest.mark.parametrize("D,H,T,B", SHAPES)
def test_loop_over_heads_equals_batched(D, H, T, B):
    mha = seeded_mha(D, H, seed=3)
    x = torch.randn(B, T, D)
    torch.testing.assert_close(multihead_loop(mha, x), mha(x))
    torch.testing.assert_close(multihead_loop(mha, x, causal_mask(T)), mha(x, mask=causal_mask(T)))


@pytest.mark.parametrize("D,H,T,B", SHAPES)
def test_fused_path_equals_book_path(D, H, T, B):
    mha = seeded_mha(D, H, seed=4)
    fused = MultiHeadAttention(D, H, fused=True)
    fused.load_state_dict(mha.state_dict())
    x = torch.randn(B, T, D)
    mask = combine_masks(causal_mask(T), make_padding_mask([max(1, T - b) for b in range(B)], T, side="left"))
    torch.testing.assert_close(fused(x, mask=mask), mha(x, mask=mask))


@pytest.mark.parametrize("D,H", [(8, 1), (16, 4), (64, 8), (512, 8), (768, 12)])
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count(D, H, bias):
    n = sum(p.numel() for p in MultiHeadAttention(D, H, bias=bias).parameters())
    assert n == 4 * D * D + (4 * D if bias else 0)
    if bias:
        assert n == sum(p.numel() for p in nn.MultiheadAttention(D, H).parameters())


@pytest.mark.parametrize("D,H,T,B", SHAPES)
def test_split_merge_roundtrip_and_head_slices(D, H, T, B):
    mha = MultiHeadAttention(D, H)
    x = torch.randn(B, T, D)
    s = split_heads(x, mha.d_head)
    assert s.shape == (B, H, T, D // H)
    torch.testing.assert_close(merge_heads(s), x)
    for i in range(H):  # head i holds the contiguous feature slice i*Dh:(i+1)*Dh of every position
        torch.testing.assert_close(s[:, i], x[..., i * mha.d_head:(i + 1) * mha.d_head])


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 10), t=st.integers(0, 9), heads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_multihead_causality(T, t, heads, seed):
    t = min(t, T - 1)
    mha = seeded_mha(8, heads, seed=seed % 7)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, T, 8, generator=g)
    y = x.clone()
    y[:, t + 1:] = torch.randn(2, T - t - 1, 8, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(mha(x, mask=causal_mask(T))[:, :t + 1], mha(y, mask=causal_mask(T))[:, :t + 1],
                                   rtol=0, atol=0)


def test_fully_masked_rows_no_nan_both_paths():
    for fused in (False, True):
        mha = seeded_mha(16, 4, fused=fused)
        x = torch.randn(2, 5, 16, requires_grad=True)
        mask = combine_masks(causal_mask(5), make_padding_mask([5, 2], 5, side="left"))
        out = mha(x, mask=mask)
        assert torch.isfinite(out).all()
        # a query that sees nothing outputs W_O's bias only
        torch.testing.assert_close(out[1, :3], mha.out_proj.bias.expand(3, 16))
        out.sum().backward()
        assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("kwargs,error,text", [
    (dict(d_model=10, n_heads=4), ValueError, "d_model=10 is not divisible by n_heads=4"),
    (dict(d_model=12, n_heads=5), ValueError, "d_model=12 is not divisible by n_heads=5"),
    (dict(d_model=16, n_heads=0), ValueError, "n_heads=0"),
    (dict(d_model=0, n_heads=1), ValueError, "d_model=0"),
    (dict(d_model=16.0, n_heads=4), ValueError, "d_model=16.0"),
])
def test_bad_construction(kwargs, error, text):
    with pytest.raises(error) as err:
        MultiHeadAttention(**kwargs)
    assert text in str(err.value)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("make_call,error,text", [
    (lambda m, x: m(x[0]), ValueError, "got (5, 16)"),
    (lambda m, x: m(x[..., :8]), ValueError, "d_model=16"),
    (lambda m, x: m(x.unsqueeze(0)), ValueError, "got (1, 2, 5, 16)"),
    (lambda m, x: m(x.long()), TypeError, "torch.int64"),
    (lambda m, x: m(x.tolist()), TypeError, "list"),
    (lambda m, x: m(x, mask=causal_mask(5).int()), TypeError, "dtype torch.bool"),
    (lambda m, x: m(x, mask=causal_mask(5).float()), TypeError, "torch.float32"),
    (lambda m, x: m(x, mask=causal_mask(4)), ValueError, "mask of shape (4, 4) does not broadcast"),
    (lambda m, x: m(x, mask=make_padding_mask([5, 5, 5], 5)[:, None, None]), ValueError, "does not broadcast"),
    (lambda m, x: m(x, mask=[[True] * 5] * 5), TypeError, "mask must be a bool tensor (dtype torch.bool"),
])
def test_bad_forward_input(fused, make_call, error, text):
    mha = MultiHeadAttention(16, 4, fused=fused)
    with pytest.raises(error) as err:
        make_call(mha, torch.randn(2, 5, 16))
    assert text in str(err.value)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_is_causal_hint_gives_the_explicit_causal_masks_result(n_kv_heads):
    "is_causal=True (SDPA's own causal masking) = the explicit (T, T) causal mask, on the fused and the plain path."
    torch.manual_seed(0)
    x = torch.randn(3, 7, 32, dtype=torch.float64)
    for fused in (True, False):
        mha = MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads, fused=fused).double().eval()
        want = mha(x, mask=causal_mask(7, 7))
        torch.testing.assert_close(mha(x, context=AttentionContext(causal_mask(7, 7), is_causal=True)), want)


def test_gpt_uses_the_causal_hint_only_without_padding_or_cache():
    from transformerbook.lm_head import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, context_length=16, d_model=32, n_heads=4, n_layers=2, fused=True)).eval()
    seen = []
    model.blocks[0].attn.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs["context"].is_causal),
                                               with_kwargs=True)
    ids = torch.randint(0, 50, (2, 9))
    model(ids)
    model(ids, padding_mask=torch.ones(2, 9, dtype=torch.bool))
    assert seen == [True, False]
