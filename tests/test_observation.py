"""Issue 23: attention owns what it computes. Each `MultiHeadAttention` shows the weights it multiplies its values by at
its observation point `attn.pattern` (and the scaled scores they came from at `attn.scores`), for every switch (rotary
positions, QK-norm, GQA/MQA, a wider d_head, post-norm, the fused kernel, a KV cache); `interpret.attention_patterns`
reads them there, and they equal Hugging Face's own eager `output_attentions` for GPT-2, Llama (GQA and MQA) and Qwen3
models (float64, 1e-6)."""
from __future__ import annotations

import itertools

import pytest
import torch
import transformers
from transformers import logging as hf_logging

from transformerbook.interpret import attention_patterns
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.multihead import merge_heads, repeat_kv, split_heads
from transformerbook.pretrained import config_from_gpt2, config_from_llama, load_gpt2_state_dict, load_llama_state_dict
from transformerbook.sampling import KVCache

hf_logging.set_verbosity_error()
MODERN = dict(positional="rotary", normalization="rms", activation="swiglu", bias=False)


def _switches():
    "Every combination of the switches that change how the weights are formed: 48 small configurations."
    for rotary, qk_norm, kv, wide, post, fused in itertools.product((False, True), (False, True), (4, 2, 1),
                                                                     (False, True), (False, True), (False, True)):
        if post and (rotary or wide): continue  # keep the count down: post-norm with the GPT-2 parts only
        yield dict(vocab_size=23, context_length=16, d_model=16, n_heads=4, n_layers=2, n_kv_heads=kv,
                   d_head=8 if wide else None, qk_norm=qk_norm, norm_placement="post" if post else "pre", fused=fused,
                   **(MODERN if rotary else {}))


SHOWN = ("positional", "qk_norm", "n_kv_heads", "d_head", "norm_placement", "fused")


@pytest.mark.parametrize("kw", list(_switches()), ids=lambda kw: "-".join(f"{k}={kw[k]}" for k in SHOWN if k in kw))
def test_the_observed_weights_are_the_ones_the_values_were_multiplied_by(kw):
    "Recompute each layer's output from the observed α and the layer's own values: it is the layer's output."
    torch.manual_seed(0)
    model = GPT(GPTConfig(**kw)).double().eval()
    ids = torch.randint(0, 23, (2, 9))
    weights = attention_patterns(model, ids)  # (L, B, H, T, T)
    assert weights.shape == (2, 2, 4, 9, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 4, 9, dtype=torch.float64))
    assert weights.triu(1).abs().max() == 0  # causal
    seen = []  # each attention layer's input and output
    hooks = [b.attn.register_forward_hook(lambda m, args, kwargs, out: seen.append((args[0], out)), with_kwargs=True)
             for b in model.blocks]
    with torch.no_grad(): model(ids)
    for h in hooks: h.remove()
    for layer, (x, out) in enumerate(seen):
        a = model.blocks[layer].attn
        v = split_heads(a.v_proj(x), a.d_head)  # (B, KV, T, Dh): values need no rotation and no norm
        _, v = repeat_kv(v, v, a.n_heads // a.n_kv_heads)  # (B, H, T, Dh)
        torch.testing.assert_close(a.out_proj(merge_heads(weights[layer] @ v)), out, rtol=1e-12, atol=1e-12)
    assert not any(b.attn.pattern.observed for b in model.blocks)  # the hooks are gone afterwards


@pytest.mark.parametrize("kw", [kw for kw in _switches() if kw["norm_placement"] == "pre" and kw["d_head"] is None],
                         ids=lambda kw: "-".join(f"{k}={kw[k]}" for k in SHOWN if k in kw))
def test_the_observed_scores_are_the_ones_the_softmax_turned_into_weights(kw):
    """`attn.scores` shows q·k/√d_head for every pair, before the causal mask; the masked softmax of what it shows is
    the observed α, and observing it leaves the layer's output as it was (the fused kernel computes the same)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**kw)).double().eval()
    ids = torch.randint(0, 23, (2, 9))
    with torch.no_grad(): plain = model(ids)
    seen, inputs = [], []
    hooks = [h for b in model.blocks for h in (b.attn.scores.register_forward_hook(lambda m, a, s: seen.append(s)),
                                                b.attn.register_forward_pre_hook(lambda m, a: inputs.append(a[0])))]
    with torch.no_grad(): observed = model(ids)
    for h in hooks: h.remove()
    torch.testing.assert_close(observed, plain, rtol=1e-10, atol=1e-10)
    scores = torch.stack(seen)  # (L, B, H, T, T)
    assert scores.shape == (2, 2, 4, 9, 9) and scores.isfinite().all()  # the future's scores too: not yet masked
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    weights = attention_patterns(model, ids)
    torch.testing.assert_close(scores.masked_fill(~causal, float("-inf")).softmax(-1), weights, rtol=0, atol=1e-12)
    if kw.get("positional") != "rotary" and not kw["qk_norm"]:  # by hand: chapter 1's q·k/√d_k, eq. 10.12
        a, x = model.blocks[0].attn, inputs[0]
        q, k = split_heads(a.q_proj(x), a.d_head), split_heads(a.k_proj(x), a.d_head)  # (B, H|KV, T, Dh)
        k, _ = repeat_kv(k, k, a.n_heads // a.n_kv_heads)
        torch.testing.assert_close(scores[0], q @ k.transpose(-2, -1) / a.d_head ** 0.5, rtol=1e-12, atol=1e-12)
    assert not any(b.attn.scores.observed or b.attn.pattern.observed for b in model.blocks)


def test_a_hook_on_the_scores_intervenes():
    "A hook that returns new scores replaces them: a large score on key 0 sends every query's weight there."
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=23, context_length=16, d_model=16, n_heads=4, n_layers=1)).double().eval()
    hook = model.blocks[0].attn.scores.register_forward_hook(lambda m, args, s: s + 100.0 * (torch.arange(9) == 0))
    try: weights = attention_patterns(model, torch.randint(0, 23, (1, 9)))
    finally: hook.remove()
    torch.testing.assert_close(weights[0, 0, :, :, 0], torch.ones(4, 9, dtype=torch.float64))


@pytest.mark.parametrize("kw", [{}, dict(MODERN, n_kv_heads=2, qk_norm=True), dict(MODERN, n_kv_heads=1, fused=True)],
                         ids=["gpt2", "qwen3-like", "mqa-fused"])
def test_with_a_kv_cache_each_step_sees_the_row_of_the_full_pattern(kw):
    "Generation's cached steps form (B, H, 1, S) weights: row t of the whole sequence's pattern, for every layer."
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=23, context_length=16, d_model=16, n_heads=4, n_layers=2, **kw)).double().eval()
    ids = torch.randint(0, 23, (2, 8))
    full = attention_patterns(model, ids)  # (L, B, H, T, T)
    rows = []
    hooks = [b.attn.pattern.register_forward_hook(lambda m, args, w: rows.append(w)) for b in model.blocks]
    cache = KVCache(2)
    with torch.no_grad():
        for t in range(8): model(ids[:, t:t + 1], kv_cache=cache)
    for h in hooks: h.remove()
    for t in range(8):
        for layer in range(2):
            torch.testing.assert_close(rows[2 * t + layer][:, :, 0], full[layer, :, :, t, :t + 1], rtol=1e-12,
                                       atol=1e-12)


def _hf_gpt2():
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(vocab_size=101, n_positions=32, n_embd=48, n_head=6, n_layer=2,
                                  attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(hf_config).double().eval()
    return hf, load_gpt2_state_dict(GPT(config_from_gpt2(hf.config)).double(), hf.state_dict()).eval()


def _hf_llama(kind: str, n_kv_heads: int):
    torch.manual_seed(0)
    common = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=n_kv_heads, max_position_embeddings=64, attn_implementation="eager")
    hf = (transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, rms_norm_eps=1e-5)) if kind == "llama"
          else transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common, head_dim=32, rms_norm_eps=1e-6)))
    hf = hf.double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name: p.uniform_(0.5, 1.5)  # QK-norm gains that are not 1 change the pattern
    return hf, load_llama_state_dict(GPT(config_from_llama(hf.config)).double(), hf.state_dict()).eval()


@pytest.mark.parametrize("make", [_hf_gpt2, lambda: _hf_llama("llama", 2), lambda: _hf_llama("llama", 1),
                                  lambda: _hf_llama("llama", 4), lambda: _hf_llama("qwen3", 1),
                                  lambda: _hf_llama("qwen3", 2)],
                         ids=["gpt2", "llama-gqa", "llama-mqa", "llama-mha", "qwen3-mqa", "qwen3-gqa"])
def test_attention_patterns_equal_hugging_faces_eager_attentions(make):
    hf, ours = make()
    ids = torch.randint(0, 101, (2, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = torch.stack(hf(ids, output_attentions=True).attentions)  # (L, B, H, T, T)
    mine = attention_patterns(ours, ids)
    assert mine.shape == theirs.shape
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)
