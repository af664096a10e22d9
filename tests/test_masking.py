"""Masks (transformerbook.masking): polarity, shapes, equivalence with torch's SDPA, causality, padding, errors."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings, strategies as st

from transformerbook.attention import attention_weights, scaled_dot_product_attention
from transformerbook.masking import causal_mask, combine_masks, make_padding_mask


def reference_causal(T, S):
    "Query i (the (S-T+i)-th position overall) may attend key j iff j <= S - T + i."
    i = torch.arange(T)[:, None] + (S - T)
    return torch.arange(S)[None, :] <= i


@pytest.mark.parametrize("T,S", [(1, 1), (2, 2), (5, 5), (1, 7), (3, 7), (16, 16)])
def test_causal_mask_matches_index_rule(T, S):
    m = causal_mask(T, S)
    assert m.dtype == torch.bool and m.shape == (T, S)
    assert torch.equal(m, reference_causal(T, S))
    assert m[:, -1].tolist() == [False] * (T - 1) + [True]  # only the last query sees the last key
    assert bool(m[:, : S - T + 1].all())  # every query sees the cached prefix and its first new key


@pytest.mark.parametrize("B,H,T,d_k,d_v", [(1, 1, 1, 4, 4), (2, 3, 7, 8, 5), (3, 2, 16, 16, 16)])
def test_causal_attention_matches_torch_is_causal(B, H, T, d_k, d_v):
    g = torch.Generator().manual_seed(T)
    q, k = torch.randn(B, H, T, d_k, generator=g), torch.randn(B, H, T, d_k, generator=g)
    v = torch.randn(B, H, T, d_v, generator=g)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, causal_mask(T)),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("lengths,T", [([3, 5, 1], 5), ([4, 4], 4), ([2, 6, 5, 1], 6)])
def test_combined_mask_matches_torch_sdpa(lengths, T, side):
    B, H, d = len(lengths), 2, 8
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
    mask = combine_masks(causal_mask(T), make_padding_mask(lengths, T, side=side))
    ours = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert torch.isfinite(ours).all()


def test_fully_masked_rows_are_zero_not_nan_and_grads_finite():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 8, generator=g, requires_grad=True)
    k, v = torch.randn(2, 4, 6, 8, generator=g), torch.randn(2, 4, 6, 3, generator=g)
    mask = combine_masks(causal_mask(6), make_padding_mask([6, 2], 6, side="left"))  # seq 1: queries 0..3 see nothing
    out = scaled_dot_product_attention(q, k, v, mask)
    assert out[1, :, :4].abs().sum().item() == 0.0
    assert torch.isfinite(out).all()
    w = attention_weights(q, k, mask)
    assert w[1, :, :4].abs().sum().item() == 0.0
    torch.testing.assert_close(w[0].sum(-1), torch.ones(4, 6))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    # the naive -inf recipe is what produces NaN here
    naive = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf")), -1)
    assert torch.isnan(naive[1, :, :4]).all()


@pytest.mark.parametrize("T,n_masked", [(5, 2), (9, 0), (9, 8)])
def test_masked_keys_get_exactly_zero_weight(T, n_masked):
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, T, 4, generator=g), torch.randn(3, T, 4, generator=g)
    kp = make_padding_mask([T - n_masked] * 3, T)
    w = attention_weights(q, k, combine_masks(None, kp)[:, 0])  # (3, 1, T) broadcasts over queries
    assert w[..., T - n_masked:].abs().sum().item() == 0.0
    torch.testing.assert_close(w.sum(-1), torch.ones(3, T))


@settings(max_examples=60, deadline=None)
@given(T=st.integers(1, 16), t=st.integers(0, 15), d=st.sampled_from([1, 4, 8]), seed=st.integers(0, 2**16))
def test_causality_future_never_changes_past(T, t, d, seed):
    t = min(t, T - 1)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, T, d, generator=g)
    y = x.clone()
    y[:, t + 1:] = torch.randn(2, T - t - 1, d, generator=g) * 10
    out_x = scaled_dot_product_attention(x, x, x, causal_mask(T))
    out_y = scaled_dot_product_attention(y, y, y, causal_mask(T))
    torch.testing.assert_close(out_x[:, : t + 1], out_y[:, : t + 1], rtol=0, atol=0)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 12), min_size=1, max_size=6), extra=st.integers(0, 4))
def test_padding_mask_right_and_left(lengths, extra):
    T = max(lengths) + extra
    assume(T > 0)  # a 0-length batch is not an example: hypothesis draws another instead of passing vacuously
    right, left = make_padding_mask(lengths, T), make_padding_mask(lengths, T, side="left")
    assert right.shape == left.shape == (len(lengths), T) and right.dtype == left.dtype == torch.bool
    assert right.sum(-1).tolist() == lengths == left.sum(-1).tolist()
    assert torch.equal(left, right.flip(-1))
    for b, L in enumerate(lengths):  # real tokens are contiguous: first L on the right-padded side
        assert right[b].tolist() == [True] * L + [False] * (T - L)


def test_padding_mask_matches_pad_tokens_of_cs182_batch():
    sentences = ["Even miracles take a little time", "The important thing is to never stop questioning",
                 "It was the best of times it was the worst of times"]
    T, pad = 10, "<PAD>"
    words = [s.split()[:T] for s in sentences]
    padded = [w + [pad] * (T - len(w)) for w in words]
    m = make_padding_mask([len(w) for w in words], T)
    assert m.tolist() == [[w != pad for w in row] for row in padded]


def test_padding_mask_accepts_tensor_lengths_and_keeps_device():
    m = make_padding_mask(torch.tensor([2, 0]), 3)
    assert m.tolist() == [[True, True, False], [False, False, False]]


@pytest.mark.parametrize("call,error,text", [
    (lambda: causal_mask(0), ValueError, "T=0"),
    (lambda: causal_mask(3, 2), ValueError, "S=2 key positions cannot be fewer than T=3"),
    (lambda: causal_mask(3.0), ValueError, "T=3.0"),
    (lambda: causal_mask(True), ValueError, "T=True"),
    (lambda: make_padding_mask([4], 3), ValueError, "lengths=[4]"),
    (lambda: make_padding_mask([-1], 3), ValueError, "lengths=[-1]"),
    (lambda: make_padding_mask([1.5], 3), ValueError, "1-D sequence of ints"),
    (lambda: make_padding_mask([[1]], 3), ValueError, "1-D sequence of ints"),
    (lambda: make_padding_mask([1], 3, side="top"), ValueError, "side='top'"),
    (lambda: combine_masks(causal_mask(3).float(), None), TypeError, "causal must be a bool tensor"),
    (lambda: combine_masks(causal_mask(3), [[True] * 3]), TypeError,
     "must be a bool tensor (dtype torch.bool, True = may attend), got list"),
    (lambda: combine_masks(causal_mask(3), make_padding_mask([1], 4)), ValueError, "has S=3 keys but"),
    (lambda: combine_masks(causal_mask(3), torch.ones(1, 1, 3, dtype=torch.bool)), ValueError, "shape (B, S)"),
    (lambda: attention_weights(torch.randn(3, 4), torch.randn(3, 4), causal_mask(3).int()), TypeError,
     "dtype torch.bool"),
    (lambda: attention_weights(torch.randn(3, 4), torch.randn(3, 4), causal_mask(2)), ValueError, "does not broadcast"),
])
def test_bad_input_raises_naming_values(call, error, text):
    with pytest.raises(error, match=None) as err:
        call()
    assert text in str(err.value)


def test_combine_masks_shapes_and_none():
    assert combine_masks() is None
    assert combine_masks(causal_mask(4)).shape == (4, 4)
    assert combine_masks(None, make_padding_mask([1, 2], 4)).shape == (2, 1, 1, 4)
    m = combine_masks(causal_mask(2, 5), make_padding_mask([5, 3], 5, side="left"))
    assert m.shape == (2, 1, 2, 5)
    assert torch.equal(m[1, 0], causal_mask(2, 5) & torch.tensor([False, False, True, True, True]))
