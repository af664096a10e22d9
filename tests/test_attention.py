"Scaled dot-product attention: equivalence with PyTorch, properties (hypothesis), gradients and every error path."
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from transformerbook.attention import attention_weights, scaled_dot_product_attention
from transformerbook.masking import causal_mask

SETTINGS = settings(max_examples=40, deadline=None)


def _qkv(batch: tuple[int, ...], T: int, S: int, d_k: int, d_v: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*batch, T, d_k, generator=g, dtype=dtype),
            torch.randn(*batch, S, d_k, generator=g, dtype=dtype),
            torch.randn(*batch, S, d_v, generator=g, dtype=dtype))


def _random_mask(shape, seed: int = 1, p: float = 0.5) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < p


# ---------------------------------------------------------------- reference equivalence with torch SDPA

BATCHES = [(), (3,), (2, 4), (2, 1, 3)]
MASKS = ["none", "causal", "random_TS", "random_full", "broadcast_heads", "fully_masked_rows", "all_false"]


def _make_mask(kind: str, batch: tuple[int, ...], T: int, S: int):
    if kind == "none":
        return None
    if kind == "causal":
        return causal_mask(T, max(S, T))[:, -S:] if S < T else causal_mask(T, S)
    if kind == "random_TS":
        return _random_mask((T, S))
    if kind == "random_full":
        return _random_mask((*batch, T, S), seed=2)
    if kind == "broadcast_heads":  # (B, 1, T, S) style: size-1 everywhere but the first batch dim and T, S
        shape = (*batch[:1], *([1] * (len(batch) - 1)), T, S)
        return _random_mask(shape, seed=3)
    if kind == "fully_masked_rows":
        m = _random_mask((*batch, T, S), seed=4)
        m[..., 0, :] = False  # query 0 may attend nothing
        return m
    if kind == "all_false":
        return torch.zeros(T, S, dtype=torch.bool)
    raise ValueError(kind)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("T,S,d_k,d_v", [(1, 1, 1, 1), (5, 7, 8, 4), (6, 6, 16, 16), (7, 3, 4, 5)])
def test_matches_torch_sdpa(T, S, d_k, d_v, batch, kind, dtype):
    q, k, v = _qkv(batch, T, S, d_k, d_v, dtype)
    mask = _make_mask(kind, batch, T, S)
    ours = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert ours.shape == (*batch, T, d_v) and ours.dtype == dtype
    assert not torch.isnan(ours).any()
    torch.testing.assert_close(ours, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fully_masked_rows_are_zero(dtype):
    q, k, v = _qkv((2, 3), 4, 5, 8, 6, dtype)
    mask = _random_mask((2, 1, 4, 5), seed=5)
    mask[0, :, 2] = False
    mask[1, :, 0] = False
    w = attention_weights(q, k, mask)
    out = scaled_dot_product_attention(q, k, v, mask)
    assert not w[0, :, 2].any() and not w[1, :, 0].any()
    assert not out[0, :, 2].any() and not out[1, :, 0].any()
    assert not torch.isnan(out).any()


def test_weights_match_softmax_of_scaled_scores():
    q, k, _ = _qkv((2,), 5, 7, 8, 1)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(attention_weights(q, k), expected)
    # the scale is 1/sqrt(d_k), not 1/d_k nor 1: distinguishable on these inputs
    assert not torch.allclose(attention_weights(q, k), torch.softmax(q @ k.transpose(-2, -1), dim=-1), atol=1e-3)


def test_causal_mask_equals_jm_loop():
    "J&M eqs. 10.11-10.14 computed position by position equal the matrix form with a causal mask."
    torch.manual_seed(0)
    x, W_q, W_k, W_v = torch.randn(6, 10), torch.randn(10, 4), torch.randn(10, 4), torch.randn(10, 3)
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    rows = []
    for i in range(6):
        a = torch.softmax(torch.stack([q[i] @ k[j] / 2.0 for j in range(i + 1)]), dim=0)
        rows.append(sum(a[j] * v[j] for j in range(i + 1)))
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, causal_mask(6)), torch.stack(rows))


# ---------------------------------------------------------------- properties (hypothesis)

dims = st.integers(1, 6)
batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


@SETTINGS
@given(batch=batch_shapes, T=dims, S=dims, d_k=dims, seed=st.integers(0, 2**31 - 1), scale=st.floats(0.01, 30.0))
def test_rows_sum_to_one(batch, T, S, d_k, seed, scale):
    q, k, _ = _qkv(batch, T, S, d_k, 1, torch.float64, seed)
    w = attention_weights(scale * q, k)
    assert w.shape == (*batch, T, S)
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(*batch, T, dtype=torch.float64))


@SETTINGS
@given(batch=batch_shapes, T=dims, S=dims, d_k=dims, seed=st.integers(0, 2**31 - 1))
def test_masked_rows_sum_to_one_or_zero(batch, T, S, d_k, seed):
    q, k, _ = _qkv(batch, T, S, d_k, 1, torch.float64, seed)
    mask = _random_mask((*batch, T, S), seed=seed)
    w = attention_weights(q, k, mask)
    assert (w[~mask] == 0).all()
    expected = mask.any(-1).to(torch.float64)  # 1 where some key is allowed, 0 for a fully masked row
    torch.testing.assert_close(w.sum(-1), expected)


@SETTINGS
@given(T=st.integers(1, 8), d=dims, seed=st.integers(0, 2**31 - 1), data=st.data())
def test_permutation_equivariance(T, d, seed, data):
    "Without positions or a mask, attend(P x) = P attend(x) (notes 19.4(a))."
    perm = torch.tensor(data.draw(st.permutations(list(range(T)))))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, T, d, generator=g, dtype=torch.float64)
    W_q, W_k, W_v = (torch.randn(d, d, generator=g, dtype=torch.float64) for _ in range(3))
    attend = lambda x: scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)
    torch.testing.assert_close(attend(x[:, perm]), attend(x)[:, perm])


@SETTINGS
@given(T=st.integers(1, 6), S=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_key_permutation_invariance(T, S, seed):
    "Reordering the keys together with their values leaves every output unchanged (a set operation over keys)."
    q, k, v = _qkv((2,), T, S, 4, 3, torch.float64, seed)
    perm = torch.randperm(S, generator=torch.Generator().manual_seed(seed))
    mask = _random_mask((T, S), seed=seed)
    torch.testing.assert_close(scaled_dot_product_attention(q, k[:, perm], v[:, perm], mask[:, perm]),
                               scaled_dot_product_attention(q, k, v, mask))


@SETTINGS
@given(batch=batch_shapes, T=dims, S=dims, seed=st.integers(0, 2**31 - 1))
def test_masked_out_keys_and_values_never_matter(batch, T, S, seed):
    "Changing keys and values at masked-out positions (even to huge values) never changes the output."
    q, k, v = _qkv(batch, T, S, 4, 3, torch.float64, seed)
    mask = _random_mask((T, S), seed=seed + 1)
    blocked_for_all = ~mask.any(0)  # keys no query may attend: change those
    g = torch.Generator().manual_seed(seed + 2)
    k2, v2 = k.clone(), v.clone()
    k2[..., blocked_for_all, :] = 1e4 * torch.randn(k2[..., blocked_for_all, :].shape, generator=g, dtype=torch.float64)
    v2[..., blocked_for_all, :] = 1e4 * torch.randn(v2[..., blocked_for_all, :].shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(scaled_dot_product_attention(q, k2, v2, mask),
                               scaled_dot_product_attention(q, k, v, mask))


@SETTINGS
@given(T=dims, S=dims, seed=st.integers(0, 2**31 - 1))
def test_masked_scores_never_matter(T, S, seed):
    "Per query: changing one masked-out key changes nothing for queries that cannot see it."
    q, k, v = _qkv((), T, S, 4, 3, torch.float64, seed)
    mask = _random_mask((T, S), seed=seed + 1)
    j = seed % S
    k2, v2 = k.clone(), v.clone()
    k2[j], v2[j] = k[j] * -50 + 7, v[j] + 1e3
    blind = ~mask[:, j]  # queries that may not attend key j
    out, out2 = scaled_dot_product_attention(q, k, v, mask), scaled_dot_product_attention(q, k2, v2, mask)
    torch.testing.assert_close(out2[blind], out[blind])


@SETTINGS
@given(T=dims, seed=st.integers(0, 2**31 - 1))
def test_causal_future_never_changes_past(T, seed):
    q, k, v = _qkv((2,), T + 2, T + 2, 4, 3, torch.float64, seed)
    full = scaled_dot_product_attention(q, k, v, causal_mask(T + 2))
    prefix = scaled_dot_product_attention(q[:, :T], k[:, :T], v[:, :T], causal_mask(T))
    torch.testing.assert_close(full[:, :T], prefix)


# ---------------------------------------------------------------- gradients

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_finite_with_fully_masked_rows(dtype):
    q, k, v = (t.requires_grad_() for t in _qkv((2, 3), 4, 5, 8, 6, dtype))
    mask = causal_mask(4, 5).clone()
    mask[1] = False  # a fully masked query row
    out = scaled_dot_product_attention(q, k, v, mask)
    (out.square().sum() + attention_weights(q, k, mask).sum()).backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None and torch.isfinite(t.grad).all(), name
    assert torch.equal(q.grad[:, :, 1], torch.zeros_like(q.grad[:, :, 1]))  # the blind query gets no gradient


def test_gradients_match_torch_sdpa():
    q, k, v = (t.requires_grad_() for t in _qkv((2,), 4, 6, 8, 5, torch.float64))
    mask = _random_mask((4, 6), seed=9)
    mask[:, 0] = True
    ours = torch.autograd.grad(scaled_dot_product_attention(q, k, v, mask).sum(), (q, k, v))
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum(), (q, k, v))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)


def test_gradcheck():
    q, k, v = (t.requires_grad_() for t in _qkv((), 3, 4, 2, 2, torch.float64))
    mask = torch.tensor([[True, False, True, True], [False, False, False, False], [True, True, True, True]])
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v))


# ---------------------------------------------------------------- error paths

Q, K, V = _qkv((2, 3), 5, 7, 8, 4)


@pytest.mark.parametrize("args,err,message", [
    ((Q.tolist(), K, V), TypeError, "q must be a torch.Tensor, got list"),
    ((Q, 3.0, V), TypeError, "k must be a torch.Tensor, got float"),
    ((Q, K, None), TypeError, "v must be a torch.Tensor, got NoneType"),
    ((Q.long(), K, V), TypeError, "q must be a floating-point tensor, got dtype torch.int64"),
    ((Q, K.bool(), V), TypeError, "k must be a floating-point tensor, got dtype torch.bool"),
    ((Q, K.double(), V), TypeError, "k=torch.float64"),
    ((Q, K, V.half()), TypeError, "v=torch.float16"),
    ((torch.ones(3), K, V), ValueError, "q must have shape (..., length, features), got shape (3,)"),
    ((Q, torch.ones(8), V), ValueError, "got shape (8,)"),
    ((Q, K, torch.tensor(1.0)), ValueError, "v must have shape (..., length, features), got shape ()"),
    ((Q, K[..., :6], V), ValueError, "q has shape (2, 3, 5, 8) (d_k=8), k has shape (2, 3, 7, 6) (d_k=6)"),
    ((Q, K, V[..., :6, :]), ValueError, "k has shape (2, 3, 7, 8), v has shape (2, 3, 6, 4)"),
    ((Q, torch.randn(4, 3, 7, 8), V), ValueError, "q (2, 3, 5, 8), k (4, 3, 7, 8), v (2, 3, 7, 4)"),
])
def test_sdpa_errors(args, err, message):
    with pytest.raises(err) as e:
        scaled_dot_product_attention(*args)
    assert message in str(e.value)


@pytest.mark.parametrize("mask,err,message", [
    ([[True] * 7] * 5, TypeError, "mask must be a bool tensor (dtype torch.bool, True = may attend), got list"),
    (torch.ones(5, 7), TypeError,
     "mask must be a bool tensor (dtype torch.bool, True = may attend), got torch.float32"),
    (torch.ones(5, 7, dtype=torch.int64), TypeError, "got torch.int64"),
    (torch.ones(5, 7, dtype=torch.uint8), TypeError, "got torch.uint8"),
    (torch.ones(7, 5, dtype=torch.bool), ValueError,
     "mask of shape (7, 5) does not broadcast to the scores' shape (2, 3, 5, 7)"),
    (torch.ones(4, 7, dtype=torch.bool), ValueError, "mask of shape (4, 7)"),
    (torch.ones(3, 3, 5, 7, dtype=torch.bool), ValueError, "mask of shape (3, 3, 5, 7)"),
    # would enlarge the output
    (torch.ones(4, 2, 3, 5, 7, dtype=torch.bool), ValueError, "mask of shape (4, 2, 3, 5, 7)"),
])
@pytest.mark.parametrize("fn", ["attention_weights", "scaled_dot_product_attention"])
def test_mask_errors(mask, err, message, fn):
    call = (lambda: attention_weights(Q, K, mask)) if fn == "attention_weights" else \
           (lambda: scaled_dot_product_attention(Q, K, V, mask))
    with pytest.raises(err) as e:
        call()
    assert message in str(e.value)


def test_attention_weights_errors():
    with pytest.raises(ValueError, match=r"d_k=8.*d_k=3"):
        attention_weights(Q, K[..., :3])
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got ndarray"):
        attention_weights(Q.numpy(), K)


def test_valid_masks_accepted():
    "Every broadcastable bool mask shape that does not enlarge the scores is accepted."
    for shape in [(7,), (5, 7), (1, 7), (5, 1), (3, 5, 7), (2, 1, 5, 7), (2, 3, 5, 7), (1, 1, 1, 1)]:
        out = scaled_dot_product_attention(Q, K, V, torch.ones(shape, dtype=torch.bool))
        torch.testing.assert_close(out, scaled_dot_product_attention(Q, K, V))
