"""The KV cache (`transformerbook.sampling.LayerKVCache`, `KVCache`) and the fast decode loop around it: appending
equals `torch.cat`, the buffers are allocated ahead and written in place, mismatched keys are refused, and `generate`
checks its arguments once, before the loop, so the loop makes no host syncs and no per-token checks."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformerbook.attention as attention_module
import transformerbook.embeddings as embeddings_module
import transformerbook.lm_head as lm_head_module
import transformerbook.multihead as multihead_module
from transformerbook.attention import attention_weights, masked_softmax
from transformerbook.embeddings import RotaryEmbedding
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.masking import causal_mask, make_padding_mask
from transformerbook.multihead import MultiHeadAttention
from transformerbook.sampling import KVCache, LayerKVCache, generate

SHAPES = [(8, 1, 1, 1), (8, 2, 5, 2), (12, 3, 7, 3), (16, 4, 6, 2), (32, 8, 9, 1), (24, 6, 4, 3)]  # (D, H, T, B)


def seeded_mha(d_model, n_heads, seed=0, **kwargs):
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads, **kwargs).eval()


# ---------------------------------------------------------------- where the classes live

def test_old_import_place_names_the_new_one():
    with pytest.raises(ImportError, match="KVCache moved to transformerbook.sampling"):
        from transformerbook.multihead import KVCache  # noqa: F401
    with pytest.raises(ImportError, match="from transformerbook.sampling import LayerKVCache"):
        multihead_module.LayerKVCache
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        multihead_module.nothing
    assert not hasattr(multihead_module, "__path__")  # other missing names stay AttributeErrors


# ---------------------------------------------------------------- the cache with one attention layer

@pytest.mark.parametrize("D,H,T,B", SHAPES)
def test_kv_cache_equals_full_pass(D, H, T, B):
    mha = seeded_mha(D, H, seed=5)
    x = torch.randn(B, T, D)
    full = mha(x, mask=causal_mask(T))
    cache = LayerKVCache()
    first = max(1, T // 2)  # a prompt of several tokens, then one token at a time
    outs = [mha(x[:, :first], mask=causal_mask(first), layer_cache=cache)]
    outs += [mha(x[:, t:t + 1], mask=causal_mask(1, t + 1), layer_cache=cache) for t in range(first, T)]
    torch.testing.assert_close(torch.cat(outs, 1), full)
    assert len(cache) == T


def test_kv_cache_counts_bytes():
    mha = MultiHeadAttention(16, 4)
    kv = KVCache(2)
    x = torch.randn(3, 4, 16)
    for layer in range(2):
        mha(x, mask=causal_mask(4), layer_cache=kv[layer])
    assert len(kv) == 4
    assert kv.n_bytes == 2 * 2 * 3 * 4 * 16 * 4  # (k, v) x layers x B x S x D x 4 bytes

def test_bad_mask_with_cache_leaves_cache_unchanged():
    mha = MultiHeadAttention(16, 4)
    cache = LayerKVCache()
    mha(torch.randn(1, 3, 16), mask=causal_mask(3), layer_cache=cache)
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(torch.randn(1, 1, 16), mask=causal_mask(1, 3), layer_cache=cache)  # should be causal_mask(1, 4)
    assert len(cache) == 3


def test_kv_cache_rejects_zero_layers():
    with pytest.raises(ValueError, match="n_layers=0"):
        KVCache(0)

# ---------------------------------------------------------------- KV-cache validation

@pytest.mark.parametrize("new_shape,dtype,text", [
    ((1, 4, 1, 4), torch.float32, "new keys are (1, 4, 1, 4)"),  # another batch size
    ((2, 2, 1, 8), torch.float32, "new keys are (2, 2, 1, 8)"),  # another number of heads
    ((2, 4, 1, 8), torch.float32, "new keys are (2, 4, 1, 8)"),  # another d_head
    ((2, 4, 1, 4), torch.float64, "torch.float64"),  # another dtype
])
def test_layer_cache_rejects_mismatched_keys_and_stays_unchanged(new_shape, dtype, text):
    cache = LayerKVCache()
    k0 = torch.randn(2, 4, 3, 4)
    cache.update(k0, k0 + 1)
    with pytest.raises(ValueError, match="cache holds \\(B, H, S, Dh\\) = \\(2, 4, 3, 4\\)") as err:
        cache.update(torch.zeros(new_shape, dtype=dtype), torch.zeros(new_shape, dtype=dtype))
    assert text in str(err.value)
    assert len(cache) == 3 and torch.equal(cache.k, k0) and torch.equal(cache.v, k0 + 1)


def test_layer_cache_rejects_bad_k_v_pairs():
    cache = LayerKVCache()
    with pytest.raises(TypeError, match="k must be a torch.Tensor.*got list"):
        cache.update([[0.0]], torch.zeros(1, 1, 1, 1))
    with pytest.raises(ValueError, match="k and v must both be"):
        cache.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 3, 4))
    with pytest.raises(ValueError, match="k and v must both be"):
        cache.update(torch.zeros(1, 2, 4), torch.zeros(1, 2, 4))  # 3-D: no head axis
    assert len(cache) == 0


def test_mha_with_cache_of_another_batch_names_shapes():
    mha = MultiHeadAttention(16, 4)
    cache = LayerKVCache()
    mha(torch.randn(2, 3, 16), layer_cache=cache)
    with pytest.raises(ValueError, match=r"\(2, 4, 3, 4\).*new keys are \(1, 4, 1, 4\)"):
        mha(torch.randn(1, 1, 16), layer_cache=cache)
    with pytest.raises(ValueError, match=r"new keys are \(2, 2, 1, 8\)"):
        MultiHeadAttention(16, 2)(torch.randn(2, 1, 16), layer_cache=cache)  # a cache filled by another layer shape
    assert len(cache) == 3


def test_layer_cache_rejects_bad_max_length():
    with pytest.raises(ValueError, match="max_length=0 must be a positive int"):
        LayerKVCache(max_length=0)
    with pytest.raises(ValueError, match="max_length=2.5"):
        KVCache(2, max_length=2.5)


# ---------------------------------------------------------------- buffers allocated ahead, written in place

@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(st.integers(1, 5), min_size=1, max_size=8), max_length=st.sampled_from([None, 1, 7, 40]),
       seed=st.integers(0, 2**16))
def test_update_equals_concatenation(chunks, max_length, seed):
    "Whatever the chunk sizes and the reserved length (too small, or enough), the cache holds what torch.cat gives."
    g = torch.Generator().manual_seed(seed)
    cache, ks, vs = LayerKVCache(max_length), [], []
    for T in chunks:
        k, v = torch.randn(2, 3, T, 4, generator=g), torch.randn(2, 3, T, 4, generator=g)
        ks.append(k)
        vs.append(v)
        k_all, v_all = cache.update(k, v)
        assert torch.equal(k_all, torch.cat(ks, dim=-2)) and torch.equal(v_all, torch.cat(vs, dim=-2))
    assert len(cache) == sum(chunks) <= cache.capacity
    assert torch.equal(cache.k, k_all) and torch.equal(cache.v, v_all)


def test_reserved_buffer_is_written_in_place():
    cache = LayerKVCache(max_length=6)
    k_all, v_all = cache.update(torch.randn(1, 2, 2, 4), torch.randn(1, 2, 2, 4))
    pointers = k_all.untyped_storage().data_ptr(), v_all.untyped_storage().data_ptr()
    for _ in range(4):
        k_all, v_all = cache.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
        assert (k_all.untyped_storage().data_ptr(), v_all.untyped_storage().data_ptr()) == pointers
    assert (len(cache), cache.capacity) == (6, 6)
    before = cache.k.clone()
    cache.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))  # one more than reserved: a new, doubled buffer
    assert (len(cache), cache.capacity) == (7, 12)
    assert cache.k.untyped_storage().data_ptr() != pointers[0] and torch.equal(cache.k[:, :, :6], before)


def test_bytes_held_and_reserved():
    kv = KVCache(2, max_length=10)
    mha = MultiHeadAttention(16, 4)
    for layer in range(2):
        mha(torch.randn(3, 4, 16), mask=causal_mask(4), layer_cache=kv[layer])
    assert kv.n_bytes == 2 * 2 * 3 * 4 * 16 * 4  # (k, v) x layers x B x S x D x 4 bytes
    assert kv.n_bytes_reserved == 2 * 2 * 3 * 10 * 16 * 4  # the same with S = max_length


# ---------------------------------------------------------------- checks once per model call, not per layer or token

def _counting(monkeypatch, module, name):
    "Replace module.name by a wrapper that counts its calls; return the list the calls are appended to."
    calls, original = [], getattr(module, name)
    def wrapper(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("fused", [False, True])
def test_mask_checked_once_per_model_call(monkeypatch, fused):
    "The GPT checks its mask once; its layers check neither the mask (multihead) nor q, k and the mask (attention)."
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, context_length=8, d_model=16, n_heads=2, n_layers=3, fused=fused)).eval()
    per_layer = _counting(monkeypatch, multihead_module, "check_mask")
    in_attention = _counting(monkeypatch, attention_module, "check_attention_inputs")
    ids = torch.randint(0, 20, (2, 6))
    with torch.no_grad():
        padded = model(ids, padding_mask=make_padding_mask(torch.tensor([6, 4]), 6, side="left"))
    assert per_layer == [] and in_attention == []
    assert torch.isfinite(padded).all()
    mha = MultiHeadAttention(16, 2)  # on its own, the layer still checks the mask it is given, once
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(torch.randn(1, 3, 16), mask=causal_mask(4))
    assert len(per_layer) == 1 and in_attention == []


def test_the_layers_unchecked_softmax_is_attention_weights():
    "What a layer computes after its one check (`masked_softmax` of the scaled scores) is chapter 1's checked function."
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 3, 7, 4, generator=g)
    mask = torch.rand(5, 7, generator=g) > 0.3
    torch.testing.assert_close(masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask), attention_weights(q, k, mask),
                               rtol=0, atol=0)


ROTARY = dict(positional="rotary", normalization="rms", activation="swiglu", bias=False, tie_weights=False,
              n_kv_heads=1)


@pytest.mark.parametrize("kw", [{}, ROTARY], ids=["learned", "rotary"])
def test_cached_calls_give_the_same_logits(kw):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=30, context_length=12, d_model=16, n_heads=2, n_layers=2, **kw)).eval()
    ids = torch.randint(0, 30, (2, 9))
    mask = make_padding_mask(torch.tensor([9, 5]), 9, side="left")
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        checked = model(ids, padding_mask=mask, position_ids=pos)
        cache, steps = KVCache(2), []
        for t in range(9):
            steps.append(model(ids[:, t:t + 1], padding_mask=mask[:, :t + 1], position_ids=pos[:, t:t + 1],
                               kv_cache=cache))
    torch.testing.assert_close(torch.cat(steps, 1)[mask], checked[mask], atol=1e-5, rtol=1e-5)


def test_rotary_angles_looked_up_once_per_call(monkeypatch):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=30, context_length=12, d_model=16, n_heads=2, n_layers=4, **ROTARY)).eval()
    lookups = _counting(monkeypatch, RotaryEmbedding, "cos_sin")
    per_layer = _counting(monkeypatch, RotaryEmbedding, "forward")
    with torch.no_grad(): model(torch.randint(0, 30, (1, 5)))
    assert (len(lookups), per_layer) == (1, [])


def test_generate_never_syncs_in_the_loop(monkeypatch):
    """Greedy generation: the number of host syncs does not grow with the tokens generated. The model checks every
    call's ids and positions (on the CPU, in numpy: no tensor is read back), so the checks run once per token."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, context_length=64, d_model=16, n_heads=2, n_layers=2, **ROTARY)).eval()
    checks = _counting(monkeypatch, embeddings_module, "_check_embedding_inputs")
    inputs = _counting(monkeypatch, lm_head_module, "_check_inputs")

    def syncs(n: int) -> int:
        "Calls of aten::_local_scalar_dense (what .item(), bool(tensor) and `if tensor` run) in one generate call."
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            generate(model, [[1, 2, 3], [4, 5]], n, temperature=0)
        return sum(e.count for e in prof.key_averages() if e.key == "aten::_local_scalar_dense")

    assert syncs(3) == syncs(30)
    assert len(checks) == len(inputs) > 30


@pytest.mark.parametrize("kw", [{}, ROTARY], ids=["learned", "rotary"])
def test_fast_loop_gives_the_tokens_of_the_plain_loop(kw):
    "Padded prompts, EOS, and a window that slides past the context: cached and uncached generation agree."
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=30, context_length=10, d_model=16, n_heads=2, n_layers=2, **kw)).eval()
    prompts = [[1, 2, 3, 4], [5], [6, 7]]
    for extra in ({}, {"eos_token_id": 3}):
        fast = generate(model, prompts, 15, temperature=0, **extra)
        assert torch.equal(fast, generate(model, prompts, 15, temperature=0, use_kv_cache=False, **extra))
        for b, p in enumerate(prompts):  # each row as if generated alone, up to its left padding
            alone = generate(model, p, 15, temperature=0, **extra)[0]
            assert torch.equal(fast[b, fast.shape[1] - len(alone):], alone) or "eos_token_id" in extra
