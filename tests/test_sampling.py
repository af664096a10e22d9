"""Decoding filters against Hugging Face's logits warpers, the sampler's statistics, and `generate`: KV cache vs
recomputation (also past the context window), batches of different lengths vs one prompt at a time, EOS, seeds and
bad input; the KV cache's memory formula; scoring continuations and perplexity."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.pretrained import config_from_gpt2, load_gpt2_state_dict
from transformerbook.sampling import (KVCache, apply_temperature, generate, kv_cache_bytes, perplexity,
                                      repeated_ngram_fraction, sample_from_logits, score_continuations, top_k_filter,
                                      top_p_filter, warp_logits)
from transformerbook.tokenization import CharTokenizer


def random_logits(seed: int) -> tuple[torch.Tensor, float, int, float]:
    "Seeded logits of a random shape and scale (every other seed rounded, so ties occur) and random τ, k, p."
    g = torch.Generator().manual_seed(seed)
    shape = [int(torch.randint(1, 4, (1,), generator=g)) for _ in range(int(torch.randint(0, 3, (1,), generator=g)))]
    V = int(torch.randint(1, 400, (1,), generator=g))
    logits = 5 * float(torch.rand(1, generator=g)) * torch.randn(*shape, V, generator=g)
    if seed % 2: logits = logits.round()
    tau = 0.05 + 3 * float(torch.rand(1, generator=g))
    k = int(torch.randint(1, V + 5, (1,), generator=g))
    p = float(torch.rand(1, generator=g)) if seed % 5 else float([1.0, 1e-6, 0.5, 0.999, 0.9][seed // 5 % 5])
    return logits, tau, k, p


def hf(warper, logits):
    "Apply a Hugging Face warper, which expects (B, V) scores, to logits of any leading shape."
    return warper(None, logits.reshape(-1, logits.shape[-1])).reshape(logits.shape)


# ---------------------------------------------------------------- filters vs Hugging Face

@pytest.mark.parametrize("seed", range(0, 400, 8))
def test_filters_keep_the_same_tokens_as_hugging_face(seed):
    for s in range(seed, seed + 8):
        logits, tau, k, p = random_logits(s)
        torch.testing.assert_close(apply_temperature(logits, tau), hf(TemperatureLogitsWarper(tau), logits))
        assert torch.equal(top_k_filter(logits, k).isinf(), hf(TopKLogitsWarper(k), logits).isinf()), (s, k)
        assert torch.equal(top_p_filter(logits, p).isinf(), hf(TopPLogitsWarper(p), logits).isinf()), (s, p)
        ref = hf(TopPLogitsWarper(p), hf(TopKLogitsWarper(k), hf(TemperatureLogitsWarper(tau), logits)))
        ours = warp_logits(logits, tau, k, p)
        assert torch.equal(ours.isinf(), ref.isinf()), s
        torch.testing.assert_close(ours[ours.isfinite()], ref[ref.isfinite()])


@given(st.lists(st.floats(-20, 20, allow_nan=False), min_size=1, max_size=30), st.floats(1e-6, 1.0),
       st.integers(1, 40))
@settings(max_examples=200, deadline=None)
def test_filters_properties(values, p, k):
    logits = torch.tensor(values)
    kept_p = top_p_filter(logits, p).isfinite()
    kept_k = top_k_filter(logits, k).isfinite()
    assert logits[kept_p].max() == logits.max() and kept_k[logits.argmax()]  # a most probable token always survives
    assert kept_k.sum() >= min(k, len(values))  # at least k (more only at ties)
    assert torch.equal(kept_p, hf(TopPLogitsWarper(p), logits[None])[0].isfinite())
    probs = torch.softmax(logits.double(), -1)
    assert probs[kept_p].sum() >= p - 1e-6  # the nucleus reaches p (J&M eq. 10.47) ...
    if kept_p.sum() > 1:  # ... and is the smallest such set: without its least probable token it falls below p
        assert probs[kept_p].sum() - probs[kept_p].min() < p + 1e-6


def test_filters_leave_kept_logits_and_input_unchanged():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    copy = logits.clone()
    for out in (top_k_filter(logits, 7), top_p_filter(logits, 0.6)):
        assert torch.equal(out[out.isfinite()], logits[out.isfinite()])
    assert torch.equal(logits, copy)


@pytest.mark.parametrize("call,msg", [
    (lambda x: apply_temperature(x, 0), "temperature=0"), (lambda x: apply_temperature(x, -2.0), "temperature=-2.0"),
    (lambda x: apply_temperature(x, float("nan")), "temperature=nan"), (lambda x: top_k_filter(x, 0), "top_k=0"),
    (lambda x: top_k_filter(x, 2.5), "top_k=2.5"), (lambda x: top_p_filter(x, 0.0), "top_p=0.0"),
    (lambda x: top_p_filter(x, 1.01), "top_p=1.01"), (lambda x: top_p_filter(x, -0.1), "top_p=-0.1")])
def test_filter_errors_name_the_value(call, msg):
    with pytest.raises(ValueError, match=msg.replace(".", r"\.")):
        call(torch.randn(4))


# ---------------------------------------------------------------- the sampler

def assert_frequencies_match(draws: torch.Tensor, probs: torch.Tensor, n_std: float = 5.0):
    "Every empirical frequency within n_std binomial standard deviations of its probability."
    N = draws.numel()
    freq = torch.bincount(draws, minlength=probs.numel()).double() / N
    bound = n_std * (probs * (1 - probs) / N).sqrt() + 1e-12
    assert ((freq - probs).abs() <= bound).all(), (freq, probs)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.5, None, None), (2.0, None, None),
                                                     (1.0, 4, None), (1.0, None, 0.7), (0.8, 6, 0.9)])
def test_sampler_frequencies_match_the_warped_distribution(temperature, top_k, top_p):
    logits = 2 * torch.randn(10, generator=torch.Generator().manual_seed(42))
    warped = warp_logits(logits, temperature, top_k, top_p)
    probs = torch.softmax(warped.double(), -1)
    draws = sample_from_logits(warped.expand(40_000, -1), torch.Generator().manual_seed(7))
    assert_frequencies_match(draws, probs)
    assert probs[draws].min() > 0  # never a removed token


def test_sampler_chi_square():
    "Pearson's chi-square over 8 categories stays below the 0.999 quantile of chi2(7) = 24.32."
    probs = torch.tensor([0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02], dtype=torch.float64)
    N = 20_000
    draws = sample_from_logits(probs.log().expand(N, -1), torch.Generator().manual_seed(3))
    counts = torch.bincount(draws, minlength=8).double()
    chi2 = ((counts - N * probs) ** 2 / (N * probs)).sum()
    assert chi2 < 24.32, chi2


def test_sampler_per_row_generators_and_errors():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0))
    gens = lambda: [torch.Generator().manual_seed(s) for s in (5, 6, 7)]
    batch = sample_from_logits(logits, gens())
    for b in range(3):
        assert batch[b] == sample_from_logits(logits[b:b + 1], gens()[b])[0]
    with pytest.raises(ValueError, match="got 2 generators for a batch of B=3"):
        sample_from_logits(logits, gens()[:2])
    with pytest.raises(ValueError, match=r"shape \(B, V\)"):
        sample_from_logits(logits[0])


# ---------------------------------------------------------------- generate

def tiny_gpt(seed=0, dtype=torch.float64, **overrides) -> GPT:
    "A small random GPT in float64 (so that near-tied logits cannot flip between equivalent computations)."
    torch.manual_seed(seed)
    small = dict(vocab_size=40, context_length=12, d_model=32, n_heads=4, n_layers=2)
    return GPT(GPTConfig(**{**small, **overrides})).to(dtype).eval()


@given(seed=st.integers(0, 10_000), context=st.integers(2, 12), n_layers=st.integers(1, 3),
       prompt_len=st.integers(1, 14), new=st.integers(0, 25), norm_placement=st.sampled_from(["pre", "post"]),
       positional=st.sampled_from(["learned", "sinusoidal"]))
@settings(max_examples=40, deadline=None)
def test_greedy_with_and_without_cache_identical(seed, context, n_layers, prompt_len, new, norm_placement, positional):
    model = tiny_gpt(seed, context_length=context, n_layers=n_layers, norm_placement=norm_placement,
                     positional=positional)
    prompt = torch.randint(0, 40, (2, prompt_len), generator=torch.Generator().manual_seed(seed))
    cached = generate(model, prompt, new, temperature=0, use_kv_cache=True)
    assert cached.shape == (2, prompt_len + new) and cached.dtype == torch.int64
    assert torch.equal(cached, generate(model, prompt, new, temperature=0, use_kv_cache=False))


def test_generation_past_the_context_equals_cropping_by_hand():
    "Each new token is the argmax given the last context_length tokens (the definition, computed naively)."
    model = tiny_gpt(1, context_length=6)
    out = generate(model, [3, 1, 4], 15, temperature=0)
    seq = [3, 1, 4]
    with torch.no_grad():
        for _ in range(15):
            seq.append(int(model(torch.tensor([seq[-6:]]))[0, -1].argmax()))
    assert out[0].tolist() == seq


@pytest.mark.parametrize("use_kv_cache", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_batch_of_different_lengths_equals_each_prompt_alone(seed, use_kv_cache):
    model = tiny_gpt(seed, context_length=10)
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, 40, (int(n),), generator=g).tolist() for n in torch.randint(1, 13, (4,), generator=g)]
    kw = dict(temperature=0.9, top_k=15, top_p=0.95, use_kv_cache=use_kv_cache)
    gens = lambda: [torch.Generator().manual_seed(1000 * seed + b) for b in range(4)]
    greedy = generate(model, prompts, 14, temperature=0, use_kv_cache=use_kv_cache)
    sampled = generate(model, prompts, 14, generator=gens(), **kw)
    P = max(map(len, prompts))
    assert greedy.shape == sampled.shape == (4, P + 14)
    for b, prompt in enumerate(prompts):
        alone = generate(model, prompt, 14, temperature=0, use_kv_cache=use_kv_cache)[0]
        assert torch.equal(greedy[b, P - len(prompt):], alone)
        assert torch.equal(sampled[b, P - len(prompt):], generate(model, prompt, 14, generator=gens()[b], **kw)[0])
        assert (greedy[b, :P - len(prompt)] == 0).all()  # left padding holds pad_token_id (default 0)


def test_padded_tensor_with_lengths_equals_list_of_prompts():
    model = tiny_gpt(2)
    prompts = [[5, 6, 7, 8], [9, 10], [11]]
    padded = torch.tensor([[5, 6, 7, 8], [39, 39, 9, 10], [39, 39, 39, 11]])  # left-padded with junk
    a = generate(model, prompts, 8, temperature=0)
    b = generate(model, padded, 8, temperature=0, lengths=[4, 2, 1])
    assert torch.equal(a, b)
    wide = torch.cat([torch.full((3, 2), 7), padded], 1)  # extra all-pad columns on the left are trimmed
    assert torch.equal(generate(model, wide, 8, temperature=0, lengths=torch.tensor([4, 2, 1])), a)


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    model = tiny_gpt(3)
    run = lambda s: generate(model, [[1, 2, 3], [4]], 20, generator=torch.Generator().manual_seed(s))
    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


def test_top_k_one_and_tiny_top_p_are_greedy():
    model = tiny_gpt(4)
    greedy = generate(model, [1, 2, 3], 20, temperature=0)
    assert torch.equal(generate(model, [1, 2, 3], 20, top_k=1), greedy)
    assert torch.equal(generate(model, [1, 2, 3], 20, top_p=1e-9), greedy)
    assert torch.equal(generate(model, [1, 2, 3], 20, temperature=1e-4), greedy)  # τ → 0


def test_eos_stops_rows_and_pads_finished_ones():
    model = tiny_gpt(5)
    prompts = [[1, 2, 3], [4, 5], [6]]
    free = generate(model, prompts, 15, temperature=0)
    eos = int(free[0, 3 + 2])  # the 3rd new token of row 0
    out = generate(model, prompts, 15, temperature=0, eos_token_id=eos, pad_token_id=0)
    for b in range(3):
        new = out[b, 3:].tolist()
        ref = free[b, 3:3 + len(new)].tolist()
        stop = ref.index(eos) if eos in ref else len(new) - 1
        assert new[:stop + 1] == ref[:stop + 1]  # identical up to and including EOS
        assert all(t == 0 for t in new[stop + 1:])  # then padding
    assert out.shape[1] == 3 + 15 or (out[:, 3:] == eos).any(-1).all()  # stops early only when every row ended
    alone = generate(model, prompts[0], 15, temperature=0, eos_token_id=eos)
    first = free[0, 3:].tolist().index(eos)
    assert alone.shape == (1, 3 + first + 1) and alone[0, -1] == eos  # a single row stops right after its EOS


def test_generate_edge_cases():
    model = tiny_gpt(6).train()
    assert torch.equal(generate(model, [1, 2], 0), torch.tensor([[1, 2]]))
    generate(model, [1, 2], 2)
    assert model.training  # restored
    assert generate(model, torch.tensor([1, 2, 3], dtype=torch.int32), 2).dtype == torch.int64


@pytest.mark.parametrize("kwargs,msg", [
    (dict(max_new_tokens=-1), "max_new_tokens=-1"), (dict(max_new_tokens=2.0), "max_new_tokens=2.0"),
    (dict(temperature=-0.1), "temperature=-0.1"), (dict(top_k=0), "top_k=0"), (dict(top_p=0.0), "top_p=0.0"),
    (dict(top_p=2), "top_p=2"), (dict(token_ids=[]), "empty prompt"), (dict(token_ids=[[1], []]), r"rows \[1\]"),
    (dict(token_ids=[1, 40, 99]), r"token ids \[40, 99\] are outside \[0, vocab_size=40\)"),
    (dict(token_ids=[-3]), r"token ids \[-3\]"), (dict(eos_token_id=40), "eos_token_id=40"),
    (dict(token_ids=torch.tensor([[1, 2]]), lengths=[3]), "every length must be in"),
    (dict(token_ids=torch.tensor([[1, 2]]), lengths=[0]), "empty prompt"),
    (dict(generator=[torch.Generator()] * 2), "got 2 generators for a batch of B=1")])
def test_generate_errors_name_the_values(kwargs, msg):
    args = dict(token_ids=[1, 2], max_new_tokens=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        generate(tiny_gpt(0), **args)


def test_generate_rejects_float_token_ids():
    with pytest.raises(TypeError, match="integer tensor"):
        generate(tiny_gpt(0), torch.tensor([[1.0, 2.0]]), 3)
    assert "`TypeError`" in generate.__doc__ and "non-integer dtype" in generate.__doc__  # documented


# ---------------------------------------------------------------- KV cache memory

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("n_layers,d_model,B,T", [(1, 8, 1, 1), (2, 32, 3, 11), (3, 48, 2, 20)])
def test_kv_cache_bytes_matches_the_tensors_held(dtype, n_layers, d_model, B, T):
    model = tiny_gpt(0, dtype=dtype, n_layers=n_layers, d_model=d_model, context_length=32)
    cache = KVCache(n_layers)
    with torch.no_grad():
        model(torch.randint(0, 40, (B, T - 1)) if T > 1 else torch.randint(0, 40, (B, 1)), kv_cache=cache)
        if T > 1: model(torch.randint(0, 40, (B, 1)), kv_cache=cache)  # one more decoding step
    assert len(cache) == T
    assert cache.n_bytes == kv_cache_bytes(model.config, T, B, dtype)
    assert cache.n_bytes == 2 * n_layers * B * T * d_model * torch.empty((), dtype=dtype).element_size()


def test_kv_cache_bytes_gpt2_small_and_errors():
    assert kv_cache_bytes(GPTConfig.gpt2_small(), 1024) == 2 * 12 * 1024 * 768 * 4 == 75_497_472
    assert kv_cache_bytes(GPTConfig.gpt2_small(), 1024, 8, torch.float16) == 8 * 75_497_472 // 2
    with pytest.raises(ValueError, match="n_tokens=-1"):
        kv_cache_bytes(GPTConfig.gpt2_small(), -1)


# ---------------------------------------------------------------- scoring and text statistics

@pytest.fixture
def char_lm():
    tok = CharTokenizer().train("abcdefgh ")
    return tiny_gpt(7, dtype=torch.float32, vocab_size=tok.vocab_size, context_length=8), tok


def test_score_continuations_is_the_chain_rule(char_lm):
    model, tok = char_lm
    scores = score_continuations(model, tok, "ab ", ["c", "cd", "hgf", "a"])
    assert scores.shape == (4,)
    with torch.no_grad():
        def lp(text, nxt):
            return torch.log_softmax(model(torch.tensor([tok.encode(text)[-8:]]))[0, -1], -1)[tok.encode(nxt)[0]]
        for score, c in zip(scores, ["c", "cd", "hgf", "a"]):
            want = sum(lp("ab " + c[:j], c[j]) for j in range(len(c)))
            torch.testing.assert_close(score, want, atol=1e-5, rtol=1e-5)
    all_chars = score_continuations(model, tok, "ab ", list(tok.chars)).exp().sum()
    torch.testing.assert_close(all_chars, torch.tensor(1.0), atol=1e-5, rtol=0)
    long = score_continuations(model, tok, "abcdefgh" * 3, ["ab"])  # the prompt is cropped to fit the context
    torch.testing.assert_close(long, score_continuations(model, tok, "cdefgh", ["ab"]))


def test_score_continuations_errors(char_lm):
    model, tok = char_lm
    with pytest.raises(ValueError, match="prompt=''"):
        score_continuations(model, tok, "", ["a"])
    with pytest.raises(ValueError, match="continuation ''"):
        score_continuations(model, tok, "a", [""])
    with pytest.raises(ValueError, match="continuation 'abcdefgh' has 8 tokens"):
        score_continuations(model, tok, "a", ["abcdefgh"])
    with pytest.raises(TypeError, match="single string"):
        score_continuations(model, tok, "a", "b")


def test_perplexity_matches_cross_entropy_and_strided_windows():
    model = tiny_gpt(8, context_length=8)
    ids = torch.randint(0, 40, (30,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ce = torch.nn.functional.cross_entropy(model(ids[None, 2:10])[0, :-1], ids[3:10])
    assert math.isclose(perplexity(model, ids[2:10]), ce.exp().item(), rel_tol=1e-9)  # 9 tokens: 8 inputs, one pass
    # long text: the first window feeds 8 inputs (targets 1..8), later ones advance by 4 and feed the 8 tokens before
    # the chunk's end; token t is scored from the window that ends at its chunk's end
    nll = []
    with torch.no_grad():
        for t in range(1, 30):
            end = 9 if t < 9 else min(30, 9 + 4 * ((t - 9) // 4 + 1))
            start = max(0, end - 1 - 8)
            nll.append(-torch.log_softmax(model(ids[None, start:end - 1])[0, t - start - 1], -1)[ids[t]])
    assert math.isclose(perplexity(model, ids, 5), math.exp(torch.stack(nll[4:]).mean().item()), rel_tol=1e-9)
    with pytest.raises(ValueError, match="prompt_length=0"):
        perplexity(model, ids, 0)


@pytest.mark.parametrize("C", [1, 3])
def test_perplexity_is_the_chain_rule_with_a_short_context(C):
    "With C <= 3 the stride is 1, so token t is scored given exactly its C predecessors (all of them while t < C)."
    model = tiny_gpt(9, context_length=C)
    ids = torch.randint(0, 40, (11,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        nll = [-torch.log_softmax(model(ids[None, max(0, t - C):t])[0, -1], -1)[ids[t]] for t in range(1, 11)]
    for prompt_length in (1, 4):
        by_hand = math.exp(torch.stack(nll[prompt_length - 1:]).mean().item())
        assert math.isclose(perplexity(model, ids, prompt_length), by_hand, rel_tol=1e-9)
        assert math.isclose(perplexity(model, ids.tolist(), prompt_length), by_hand, rel_tol=1e-9)  # a list works too


def test_perplexity_rejects_batches_and_non_integer_ids():
    model = tiny_gpt(8, context_length=8)
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"shape \(T,\), got shape \(2, 6\)"):
        perplexity(model, ids)
    with pytest.raises(ValueError, match=r"got shape \(2, 6\)"):
        perplexity(model, ids.tolist())
    with pytest.raises(TypeError, match="got dtype torch.float32"):
        perplexity(model, ids[0].float())
    with pytest.raises(TypeError, match="got dtype torch.float32"):
        perplexity(model, [1.5, 2.7, 3.2])
    with pytest.raises(TypeError, match="got dtype torch.bool"):
        perplexity(model, ids[0] > 3)
    with pytest.raises(ValueError, match=r"prompt_length=1 must be an int in \[1, T=0\)"):
        perplexity(model, [])
    assert perplexity(model, ids[0].int()) == perplexity(model, ids[0])  # any integer dtype


def test_repeated_ngram_fraction():
    assert repeated_ngram_fraction("abab", 2) == pytest.approx(1 / 3)
    assert repeated_ngram_fraction([1] * 10, 1) == pytest.approx(0.9)
    assert repeated_ngram_fraction(list(range(10)), 3) == 0.0
    assert repeated_ngram_fraction("the cat the cat the cat".split(), 2) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="n=0"):
        repeated_ngram_fraction("abc", 0)


# --- beam search against Hugging Face ---------------------------------------------------------------------------

def _hf_pair(seed: int):
    "A random small HF GPT-2 (sharpened embeddings, so EOS = 1 is often chosen) and the book's GPT with its weights."
    import random

    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    rng = random.Random(seed)
    torch.manual_seed(seed)
    hf_config = GPT2Config(vocab_size=rng.choice([6, 9, 12, 40, 97]), n_positions=64, n_embd=rng.choice([16, 32]),
                     n_head=rng.choice([2, 4]), n_layer=rng.choice([1, 2]), bos_token_id=0, eos_token_id=1)
    hf = GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad(): hf.transformer.wte.weight.mul_(rng.choice([3.0, 6.0]))
    return rng, hf, load_gpt2_state_dict(GPT(config_from_gpt2(hf.config)), hf.state_dict()).eval()


@pytest.mark.parametrize("seed", range(16))
def test_beam_search_equals_hugging_face(seed):
    "Same tokens as generate(num_beams=K) for random prompts, K, α, early_stopping; deterministic and stochastic."
    import transformers

    from transformerbook.sampling import _HF_SAMPLED_BEAM_CHECKED, beam_search
    rng, hf, ours = _hf_pair(seed)
    for trial in range(5):
        prompt = [rng.randrange(2, hf.config.vocab_size) for _ in range(rng.randint(1, 8))]
        kw = dict(max_new_tokens=rng.randint(1, 30), num_beams=rng.choice([2, 3, 4]),
                  length_penalty=rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0]),
                  early_stopping=rng.choice([False, True, "never"]))
        hf_kw = dict(attention_mask=torch.ones(1, len(prompt), dtype=torch.long), eos_token_id=1, pad_token_id=1, **kw)
        expected = hf.generate(torch.tensor([prompt]), do_sample=False, **hf_kw)[0]
        assert beam_search(ours, prompt, eos_token_id=1, **kw)[0].tolist() == expected.tolist(), (trial, kw)
        torch.manual_seed(seed * 100 + trial)
        expected = hf.generate(torch.tensor([prompt]), do_sample=True, top_k=0, **hf_kw)[0]
        got, _ = beam_search(ours, prompt, eos_token_id=1,
                             generator=torch.Generator().manual_seed(seed * 100 + trial), **kw)
        # Holds only where Hugging Face ranks the drawn candidates as the book does (see _HF_SAMPLED_BEAM_CHECKED)
        assert got.tolist() == expected.tolist(), (f"checked on transformers {'–'.join(_HF_SAMPLED_BEAM_CHECKED)}; "
                                                   f"this is {transformers.__version__}", "stochastic", trial, kw)


def test_beam_search_sweep_is_not_vacuous():
    "The sweep above meets hypotheses that stop at EOS, and α changes which hypothesis wins on some of them."
    from transformerbook.sampling import beam_search
    n_short, n_alpha_matters = 0, 0
    for seed in range(16):
        rng, hf, ours = _hf_pair(seed)
        for _ in range(5):
            prompt = [rng.randrange(2, hf.config.vocab_size) for _ in range(rng.randint(1, 8))]
            outs = {a: beam_search(ours, prompt, 20, 3, length_penalty=a, eos_token_id=1)[0].tolist()
                    for a in (-1.0, 2.0)}
            n_short += any(len(o) < len(prompt) + 20 for o in outs.values())
            n_alpha_matters += outs[-1.0] != outs[2.0]
    assert n_short >= 10 and n_alpha_matters >= 3, (n_short, n_alpha_matters)


def test_beam_search_properties():
    "One beam without EOS is greedy; the score is log P / n^α; the search never returns a less probable text than K=1."
    from transformerbook.sampling import beam_search
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=30, context_length=8, d_model=16, n_heads=2, n_layers=1)).eval()
    for seed in range(5):
        prompt = torch.randint(0, 30, (3,), generator=torch.Generator().manual_seed(seed)).tolist()
        greedy = generate(model, prompt, 12, temperature=0)[0]  # 3 + 12 > context 8: the window slides
        assert beam_search(model, prompt, 12, 1)[0].tolist() == greedy.tolist()
        seq, score = beam_search(model, prompt, 12, 4, length_penalty=0.7)
        with torch.no_grad():
            logp = sum(model(seq[None, max(0, t - 8):t])[0, -1].double().log_softmax(-1)[seq[t]].item()
                       for t in range(3, 15))
        assert math.isclose(score, logp / 12 ** 0.7, rel_tol=1e-4)
    with pytest.raises(ValueError, match="max_new_tokens=0"): beam_search(model, [1], 0, 2)
    with pytest.raises(ValueError, match="eos_token_id=30"): beam_search(model, [1], 3, 2, eos_token_id=30)
    with pytest.raises(ValueError, match="outside"): beam_search(model, [31], 3, 2)
    with pytest.raises(ValueError, match="early_stopping=1"): beam_search(model, [1], 3, 2, early_stopping=1)


def test_self_bleu():
    from transformerbook.sampling import self_bleu
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    texts = ["the cat sat on the mat".split(), "the cat sat on a hat".split(), "a dog ran in the park".split()]
    smooth = SmoothingFunction().method1
    expected = sum(sentence_bleu([u for j, u in enumerate(texts) if j != i], t, smoothing_function=smooth)
                   for i, t in enumerate(texts)) / 3
    assert math.isclose(self_bleu(texts), expected)
    assert self_bleu([texts[0]] * 4) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least two"): self_bleu(texts[:1])
    with pytest.raises(ValueError, match="n=0"): self_bleu(texts, 0)


# --- beam search with a KV cache ------------------------------------------------------------------------------------

_BEAM_STYLES = {"gpt2": dict(),
                "llama-gqa": dict(positional="rotary", normalization="rms", activation="swiglu", n_kv_heads=2,
                                  bias=False),
                "qwen3-mqa-qknorm": dict(positional="rotary", normalization="rms", activation="swiglu", n_kv_heads=1,
                                         qk_norm=True, bias=False)}


@pytest.mark.parametrize("style", list(_BEAM_STYLES))
def test_cached_beam_search_equals_uncached(style):
    "Same sequence and score with and without the cache: EOS, α, every early_stopping, windows that slide past C."
    from transformerbook.sampling import beam_search
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=12, context_length=8, d_model=32, n_heads=4, n_layers=2,
                          **_BEAM_STYLES[style])).double().eval()
    g, lengths = torch.Generator().manual_seed(1), set()
    for trial in range(12):
        prompt = torch.randint(2, 12, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
        kw = dict(max_new_tokens=[3, 9, 14][trial % 3], num_beams=[2, 3, 4][trial % 3 - 1],
                  length_penalty=[0.0, 1.0, 2.0, -1.0][trial % 4], early_stopping=[False, True, "never"][trial % 3],
                  eos_token_id=None)
        if trial % 4 != 3:  # EOS: a token the model likes here, greedy decoding's third
            kw["eos_token_id"] = beam_search(model, prompt, 3, 1, use_kv_cache=False)[0][-1].item()
        seq, score = beam_search(model, prompt, **kw)
        seq0, score0 = beam_search(model, prompt, use_kv_cache=False, **kw)
        assert seq.tolist() == seq0.tolist(), (trial, kw)
        assert math.isclose(score, score0, rel_tol=1e-12, abs_tol=1e-12), (trial, score, score0)
        lengths.add((len(seq) - len(prompt) < kw["max_new_tokens"], len(seq) > 8))
    assert (True, False) in lengths or (True, True) in lengths  # some beams ended at EOS
    assert (False, True) in lengths or (True, True) in lengths  # some windows slid past context_length


def test_kv_cache_reorder_follows_the_rows():
    "reorder(rows) keeps row rows[i] of every layer as row i, repeats allowed; later updates append after it."
    cache = KVCache(2, max_length=4)
    ks = [torch.randn(3, 2, 2, 4) for _ in range(2)]
    for layer, k in zip(cache.layers, ks): layer.update(k, -k)
    cache.reorder(torch.tensor([2, 0, 2]))
    for layer, k in zip(cache.layers, ks):
        torch.testing.assert_close(layer.k, k[[2, 0, 2]], rtol=0, atol=0)
        torch.testing.assert_close(layer.v, -k[[2, 0, 2]], rtol=0, atol=0)
    new = torch.randn(3, 2, 1, 4)
    k_all, _ = cache[0].update(new, new)
    torch.testing.assert_close(k_all, torch.cat([ks[0][[2, 0, 2]], new], dim=2), rtol=0, atol=0)


@pytest.mark.parametrize("n_kv_heads", [2, 4])
def test_cached_beam_search_equals_hugging_face_llama(n_kv_heads):
    "Same tokens as LlamaForCausalLM.generate(num_beams=K, do_sample=False) on a random float64 Llama, with the cache."
    import random

    import transformers
    from transformers.utils import logging as hf_logging

    from transformerbook.pretrained import config_from_llama, load_llama_state_dict
    from transformerbook.sampling import beam_search
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=24, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=n_kv_heads, max_position_embeddings=64, rms_norm_eps=1e-5, attn_implementation="eager",
        bos_token_id=0, eos_token_id=1, pad_token_id=1)).double().eval()
    with torch.no_grad(): hf.model.embed_tokens.weight.mul_(30.0)  # sharper: EOS is picked in some trials
    ours = load_llama_state_dict(GPT(config_from_llama(hf.config)).double(), hf.state_dict()).eval()
    rng, ended = random.Random(n_kv_heads), 0
    for trial in range(10):
        prompt = [rng.randrange(2, 24) for _ in range(rng.randint(1, 6))]
        kw = dict(max_new_tokens=rng.randint(4, 16), num_beams=rng.choice([2, 3, 4]),
                  length_penalty=rng.choice([0.0, 1.0, 2.0]), early_stopping=rng.choice([False, True, "never"]))
        expected = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               do_sample=False, eos_token_id=1, pad_token_id=1, **kw)[0]
        got, _ = beam_search(ours, prompt, eos_token_id=1, **kw)
        assert got.tolist() == expected.tolist(), (trial, kw)
        ended += len(got) < len(prompt) + kw["max_new_tokens"]
    assert ended, "no trial ended at EOS: the comparison never exercised finished hypotheses"
