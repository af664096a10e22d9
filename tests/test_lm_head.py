"""The complete GPT: Hugging Face GPT-2 parity (offline, random weights), config and weight mapping errors,
parameter counts, input validation, KV-cache equivalence and the logit lens."""
from __future__ import annotations

import json

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging as hf_logging

from transformerbook.lm_head import GPT, GPTConfig, approx_non_embedding_params, logit_lens
from transformerbook.masking import make_padding_mask
from transformerbook.pretrained import config_from_gpt2, from_pretrained, load_gpt2_state_dict
from transformerbook.sampling import KVCache

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()

HF_CONFIGS = {  # small GPT-2 variants: depth, heads, width, context, n_inner, activation, tying
    "base": dict(n_layer=2, n_head=4, n_embd=32, n_positions=32),
    "deep-narrow": dict(n_layer=4, n_head=2, n_embd=16, n_positions=24),
    "one-head": dict(n_layer=1, n_head=1, n_embd=24, n_positions=16),
    "n_inner": dict(n_layer=2, n_head=4, n_embd=32, n_positions=32, n_inner=40),
    "relu": dict(n_layer=2, n_head=2, n_embd=32, n_positions=20, activation_function="relu"),
    "gelu-exact-untied": dict(n_layer=2, n_head=8, n_embd=64, n_positions=48, activation_function="gelu",
                              tie_word_embeddings=False),
    "eps": dict(n_layer=1, n_head=4, n_embd=32, n_positions=8, layer_norm_epsilon=1e-3),
}


def make_hf(seed: int = 0, vocab_size: int = 97, **kw) -> GPT2LMHeadModel:
    "A random GPT2LMHeadModel in eval mode; biases and LayerNorms randomised too so that every tensor matters."
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, **kw)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module", params=sorted(HF_CONFIGS))
def pair(request, tmp_path_factory):
    "(hf_model, our_model) loaded through save_pretrained -> pretrained.from_pretrained."
    hf = make_hf(**HF_CONFIGS[request.param])
    folder = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(folder)
    return hf, from_pretrained(folder)


def test_logits_match_hf(pair):
    hf, ours = pair
    ids = torch.randint(0, hf.config.vocab_size, (3, hf.config.n_positions), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours(ids[:1, :5]), hf(ids[:1, :5]).logits, atol=1e-4, rtol=1e-4)


def test_right_padded_batch_matches_hf_attention_mask(pair):
    hf, ours = pair
    T = min(12, hf.config.n_positions)
    lengths = [T, T - 3, 1]
    ids = torch.randint(0, hf.config.vocab_size, (3, T), generator=torch.Generator().manual_seed(2))
    mask = make_padding_mask(lengths, T)  # (B, T) bool, True = real token
    with torch.no_grad():
        ours_logits = ours(ids, padding_mask=mask)
        hf_logits = hf(ids, attention_mask=mask.long()).logits
    for b, n in enumerate(lengths):  # compare on the real positions only
        torch.testing.assert_close(ours_logits[b, :n], hf_logits[b, :n], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours_logits[b, :n], ours(ids[b:b + 1, :n])[0], atol=1e-5, rtol=1e-5)


def test_param_counts_match_hf(pair):
    hf, ours = pair
    assert ours.n_params() == hf.num_parameters()
    assert ours.config.tie_weights == hf.config.tie_word_embeddings
    assert (ours.lm_head.weight is ours.embeddings.token.weight) == ours.config.tie_weights


def test_config_mapping():
    hf = GPT2Config(vocab_size=500, n_positions=64, n_embd=48, n_head=6, n_layer=3, n_inner=None,
                    layer_norm_epsilon=1e-6, activation_function="gelu_new", tie_word_embeddings=False, resid_pdrop=0.3)
    assert config_from_gpt2(hf) == GPTConfig(vocab_size=500, context_length=64, d_model=48, n_heads=6, n_layers=3,
                                              d_ff=192, norm_eps=1e-6, activation="gelu_tanh",
                                              tie_weights=False, dropout=0.0)
    assert config_from_gpt2(hf.to_dict()) == config_from_gpt2(hf)
    assert config_from_gpt2(GPT2Config(n_inner=7)).d_ff == 7
    assert config_from_gpt2(GPT2Config(activation_function="relu")).activation == "relu"
    assert config_from_gpt2(GPT2Config(activation_function="gelu")).activation == "gelu"


@pytest.mark.parametrize("kw,message", [
    (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx=True"),
    (dict(reorder_and_upcast_attn=True), "reorder_and_upcast_attn=True"),
    (dict(add_cross_attention=True), "add_cross_attention=True"),
    (dict(scale_attn_weights=False), "scale_attn_weights=False"),
    (dict(activation_function="silu"), "activation_function='silu'"),
    (dict(n_embd=100, n_head=12), "d_model=100 is not divisible by n_heads=12"),
])
def test_config_mapping_errors(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        config_from_gpt2(GPT2Config(**kw))


def test_config_mapping_rejects_other_models():
    with pytest.raises(ValueError, match="model_type='llama'"):
        config_from_gpt2({"model_type": "llama", "hidden_size": 64})
    with pytest.raises(ValueError, match="lacks the fields"):
        config_from_gpt2({"model_type": "gpt2", "n_embd": 64})


def test_from_pretrained_refuses_unsupported_saved_config(tmp_path):
    make_hf(**HF_CONFIGS["base"], scale_attn_by_inverse_layer_idx=True).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_pretrained(tmp_path)


@pytest.mark.parametrize("name,shape", [
    ("transformer.h.0.attn.c_attn.weight", (32, 32)),
    ("transformer.h.1.mlp.c_fc.weight", (128, 32)),  # nn.Linear's (out, in) orientation: wrong for Conv1D
    ("transformer.wpe.weight", (16, 32)),
    ("transformer.ln_f.bias", (31,)),
])
def test_weight_shape_mismatch_names_the_tensor(name, shape):
    hf = make_hf(**HF_CONFIGS["base"])
    sd = hf.state_dict() | {name: torch.zeros(shape)}
    short = name.removeprefix("transformer.")
    with pytest.raises(ValueError, match=rf"{short} has shape \({shape[0]},"):
        load_gpt2_state_dict(GPT(config_from_gpt2(hf.config)), sd)


def test_missing_and_surplus_tensors():
    hf = make_hf(**HF_CONFIGS["base"])
    model = GPT(config_from_gpt2(hf.config))
    sd = hf.state_dict()
    with pytest.raises(ValueError, match="no tensor 'h.1.ln_2.bias'"):
        load_gpt2_state_dict(model, {k: v for k, v in sd.items() if k != "transformer.h.1.ln_2.bias"})
    with pytest.raises(ValueError, match="does not use: \\['h.9.mlp.c_fc.weight'\\]"):
        load_gpt2_state_dict(model, sd | {"transformer.h.9.mlp.c_fc.weight": torch.zeros(1)})
    untied = sd | {"lm_head.weight": torch.zeros_like(sd["lm_head.weight"])}
    with pytest.raises(ValueError, match="lm_head.weight differs from wte.weight"):
        load_gpt2_state_dict(model, untied)
    with pytest.raises(ValueError, match="norm_placement='pre'"):
        load_gpt2_state_dict(GPT(GPTConfig(**{**config_from_gpt2(hf.config).to_dict(), "norm_placement": "post"})), sd)


def test_state_dict_without_prefix_and_with_old_buffers():
    "The Hub's 'gpt2' checkpoint has keys without 'transformer.', no lm_head, and causal-mask buffers."
    hf = make_hf(**HF_CONFIGS["base"])
    sd = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    sd |= {f"h.{i}.attn.bias": torch.ones(1, 1, 32, 32) for i in range(2)}
    sd |= {f"h.{i}.attn.masked_bias": torch.tensor(-1e4) for i in range(2)}
    model = load_gpt2_state_dict(GPT(config_from_gpt2(hf.config)), sd).eval()
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


def test_from_pretrained_sharded_and_bin(tmp_path):
    hf = make_hf(**HF_CONFIGS["base"])
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    ids = torch.randint(0, 97, (1, 10))
    with torch.no_grad():
        torch.testing.assert_close(from_pretrained(tmp_path / "sharded")(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text(json.dumps(hf.config.to_dict()))
    torch.save(hf.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    with torch.no_grad():
        torch.testing.assert_close(from_pretrained(tmp_path / "bin")(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)


def test_from_pretrained_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(GPT2Config(n_layer=1, n_embd=8, n_head=2).to_dict()))
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        from_pretrained(tmp_path)
    with pytest.raises(OSError, match="is not a local folder"):
        from_pretrained(tmp_path / "absent", local_files_only=True)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        from_pretrained(tmp_path / "file.txt")


# --- the model itself ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, context_length=16, d_model=32, n_heads=4, n_layers=3)).eval()


def test_token_ids_out_of_range(small):
    for bad in (50, -1):
        with pytest.raises(ValueError, match=f"token id {bad} is outside \\[0, vocab_size=50\\)"):
            small(torch.tensor([[1, 2, bad]]))


def test_sequence_longer_than_context(small):
    with pytest.raises(ValueError, match="sequence length 17 .* exceeds context_length=16"):
        small(torch.zeros(1, 17, dtype=torch.long))
    cache = KVCache(3)
    small(torch.zeros(1, 10, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="sequence length 17 \\(cached 10 \\+ new 7\\) exceeds context_length=16"):
        small(torch.zeros(1, 7, dtype=torch.long), kv_cache=cache)


def test_bad_masks_and_caches(small):
    ids = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="padding_mask must have shape"):
        small(ids, padding_mask=torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        small(ids, padding_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="kv_cache has 2 layers but the model has n_layers=3"):
        small(ids, kv_cache=KVCache(2))
    with pytest.raises(ValueError, match="token_ids must be a \\(B, T\\) tensor"):
        small(torch.zeros(5, dtype=torch.long))


@pytest.mark.parametrize("kw,message", [
    (dict(d_model=100, n_heads=12), "d_model=100 is not divisible by n_heads=12"),
    (dict(n_layers=0), "n_layers=0 must be a positive int"),
    (dict(vocab_size=10.0), "vocab_size=10.0 must be a positive int"),
    (dict(dropout=1.0), "dropout=1.0 must be in"),
    (dict(norm_placement="sandwich"), "norm_placement='sandwich'"),
    (dict(activation="swish"), "activation='swish' must be one of"),
    (dict(positional="rope"), "positional='rope'"),
    (dict(norm_eps=0.0), "norm_eps=0.0 must be a positive finite number"),
    (dict(tie_weights="yes"), "tie_weights='yes' must be True or False"),
])
def test_config_validation(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        GPTConfig(**kw)


@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 1, 3], [9], [2, 7]])
def test_kv_cache_matches_full_forward(small, chunks):
    ids = torch.randint(0, 50, (2, sum(chunks)), generator=torch.Generator().manual_seed(3))
    cache, out, t = KVCache(3), [], 0
    with torch.no_grad():
        for n in chunks:
            out.append(small(ids[:, t:t + n], kv_cache=cache))
            t += n
        torch.testing.assert_close(torch.cat(out, dim=1), small(ids), atol=1e-5, rtol=1e-5)
    assert len(cache) == sum(chunks)


def test_kv_cache_with_left_padding(small):
    "Left-padded prompts, then cached decoding: the real tokens see the same logits as unpadded runs."
    lengths, T = [6, 3], 6
    ids = torch.randint(0, 50, (2, T + 2), generator=torch.Generator().manual_seed(4))
    # (B, T+2)
    mask = torch.cat([make_padding_mask(lengths, T, side="left"), torch.ones(2, 2, dtype=torch.bool)], dim=1)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # real tokens numbered from 0
    cache = KVCache(3)
    with torch.no_grad():
        first = small(ids[:, :T], padding_mask=mask[:, :T], position_ids=positions[:, :T], kv_cache=cache)
        steps = [small(ids[:, T + i:T + i + 1], padding_mask=mask[:, :T + i + 1],
                       position_ids=positions[:, T + i:T + i + 1],
                       kv_cache=cache) for i in range(2)]
        logits = torch.cat([first] + steps, dim=1)
        for b, n in enumerate(lengths):
            alone = small(ids[b:b + 1, T - n:])[0]  # the same real tokens without padding
            torch.testing.assert_close(logits[b, T - n:], alone, atol=1e-5, rtol=1e-5)


def test_tied_weights_share_one_parameter():
    model = GPT(GPTConfig(vocab_size=30, context_length=8, d_model=16, n_heads=2, n_layers=1))
    assert model.lm_head.weight is model.embeddings.token.weight
    model(torch.randint(0, 30, (2, 8))).logsumexp(-1).sum().backward()
    assert model.lm_head.weight.grad is model.embeddings.token.weight.grad
    untied = GPT(GPTConfig(vocab_size=30, context_length=8, d_model=16, n_heads=2, n_layers=1, tie_weights=False))
    assert untied.n_params() - model.n_params() == 30 * 16


def test_gpt2_small_count_and_estimate():
    with torch.device("meta"):
        gpt2 = GPT(GPTConfig.gpt2_small())
    assert gpt2.n_params() == 124_439_808
    assert gpt2.n_params(non_embedding=True) == 124_439_808 - (50257 + 1024) * 768
    assert approx_non_embedding_params(12, 768) == 12 * 12 * 768 ** 2
    with pytest.raises(ValueError, match="d_model=0"):
        approx_non_embedding_params(12, 0)


@settings(max_examples=25, deadline=None)
@given(n_layers=st.integers(1, 6), n_heads=st.sampled_from([1, 2, 4]), d_head=st.sampled_from([4, 8, 16]),
       bias=st.booleans(), tie=st.booleans(), norm_placement=st.sampled_from(["pre", "post"]), d_ff=st.integers(1, 64))
def test_non_embedding_count_formula(n_layers, n_heads, d_head, bias, tie, norm_placement, d_ff):
    "Exact count n_layers·(4D² + 2DF + biases + LayerNorms) + ln_f, next to eq. 10.55's 12·L·D² when F = 4D."
    D = n_heads * d_head
    c = GPTConfig(vocab_size=37, context_length=11, d_model=D, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff,
                  bias=bias, tie_weights=tie, norm_placement=norm_placement)
    with torch.device("meta"):
        model = GPT(c)
    ln = D * (1 + bias)
    block = 4 * D * D + 2 * D * d_ff + bias * (4 * D + d_ff + D) + 2 * ln
    expected = n_layers * block + (ln if norm_placement == "pre" else 0) + (0 if tie else 37 * D)
    assert model.n_params(non_embedding=True) == expected
    assert model.n_params() == expected + 37 * D + 11 * D


def test_logit_lens(small):
    ids = torch.randint(0, 50, (2, 7))
    lens = logit_lens(small, ids)
    assert lens.shape == (4, 2, 7, 50)
    torch.testing.assert_close(lens[-1], small(ids))
    stream = small.residual_stream(ids)
    torch.testing.assert_close(lens[0], small.lm_head(small.ln_f(stream[0])))
    assert not torch.allclose(lens[0], small.lm_head(stream[0]))  # ln_f is applied to intermediate layers


@pytest.mark.parametrize("was_training", [True, False])
def test_logit_lens_runs_in_eval_mode_and_restores_it(was_training):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, context_length=8, d_model=16, n_heads=2, n_layers=2, dropout=0.5))
    model.train(was_training)
    ids = torch.randint(0, 50, (2, 8))
    first, second = logit_lens(model, ids), logit_lens(model, ids)
    torch.testing.assert_close(first, second)  # dropout would make the two calls differ
    torch.testing.assert_close(first[-1], model.eval()(ids))
    model.train(was_training)
    with pytest.raises(ValueError):  # the mode is restored even when the call fails
        logit_lens(model, ids[0])
    assert model.training is was_training
    assert all(m.training is was_training for m in model.modules())


def test_token_and_position_id_types(small):
    ids = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(TypeError, match="token_ids must be a \\(B, T\\) torch.Tensor.*got list"):
        small(ids.tolist())
    with pytest.raises(TypeError, match="got dtype torch.float32"):
        small(ids.float())
    with pytest.raises(TypeError, match="position_ids must have an integer dtype.*torch.float32"):
        small(ids, position_ids=torch.arange(5).float())
    with pytest.raises(TypeError, match="position_ids must be a torch.Tensor.*got list"):
        small(ids, position_ids=list(range(5)))
    with pytest.raises(ValueError, match=r"B=2, T=5, got \(3, 5\)"):
        small(ids, position_ids=torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"B=2, T=5, got \(2, 4\)"):
        small(ids, position_ids=torch.zeros(2, 4, dtype=torch.long))
    torch.testing.assert_close(small(ids, position_ids=torch.arange(5)[None]), small(ids))  # (1, T) broadcasts


def test_cache_of_another_batch_is_rejected_and_left_unchanged(small):
    cache = KVCache(3)
    small(torch.zeros(2, 4, dtype=torch.long), kv_cache=cache)
    keys = [layer.k.clone() for layer in cache.layers]
    with pytest.raises(ValueError, match="kv_cache holds a batch of B=2 sequences but token_ids has B=3"):
        small(torch.zeros(3, 1, dtype=torch.long), kv_cache=cache)
    assert len(cache) == 4 and all(torch.equal(k, layer.k) for k, layer in zip(keys, cache.layers))


# ---- renamed fields: norm -> norm_placement, layer_norm_eps -> norm_eps (old names warn once) ----
@pytest.fixture
def fresh_warnings(monkeypatch):
    "Forget which deprecated names already warned in this process, so each test sees its first warning."
    from transformerbook import validation
    monkeypatch.setattr(validation, "_WARNED", set())


def test_old_gptconfig_names_still_work_and_warn_once(fresh_warnings):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = GPTConfig(norm="post", layer_norm_eps=1e-6)
        b = GPTConfig(norm="post", layer_norm_eps=1e-6)
        assert a == b == GPTConfig(norm_placement="post", norm_eps=1e-6)
        assert (a.norm, a.layer_norm_eps, b.norm) == ("post", 1e-6, "post")
        a.norm = "pre"
        assert a.norm_placement == "pre"
    messages = [str(w.message) for w in caught]
    assert all(w.category is DeprecationWarning for w in caught)
    assert messages == ["GPTConfig(norm=...) is deprecated: use norm_placement=",
                        "GPTConfig(layer_norm_eps=...) is deprecated: use norm_eps=",
                        "GPTConfig.norm is deprecated: use GPTConfig.norm_placement",
                        "GPTConfig.layer_norm_eps is deprecated: use GPTConfig.norm_eps"]  # each once
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with pytest.raises(TypeError, match="got both norm= \\(deprecated\\) and norm_placement="):
        GPTConfig(norm="post", norm_placement="pre")


def test_old_dicts_load_and_dataclass_tools_see_only_the_new_fields(fresh_warnings):
    import dataclasses
    new = GPTConfig(vocab_size=11, context_length=8, d_model=16, n_heads=2, n_layers=1, norm_placement="post",
                    norm_eps=1e-6)
    old = {("norm" if k == "norm_placement" else "layer_norm_eps" if k == "norm_eps" else k): v
           for k, v in new.to_dict().items()}  # what every checkpoint saved before the rename holds
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checkpoint saved before the rename loads without a warning
        assert GPTConfig.from_dict(old) == new
    with pytest.raises(ValueError, match="both 'norm' and its new name 'norm_placement'"):
        GPTConfig.from_dict({**old, "norm_placement": "pre"})
    names = [f.name for f in dataclasses.fields(GPTConfig)]
    assert "norm_placement" in names and "norm_eps" in names and not {"norm", "layer_norm_eps"} & set(names)
    assert set(dataclasses.asdict(new)) == set(names)
    assert dataclasses.replace(new, norm_placement="pre").norm_placement == "pre"
    assert "norm_placement" in str(__import__("inspect").signature(GPTConfig))  # the docs show the new names
    with pytest.raises(ValueError, match=r"unknown GPTConfig fields \['n_embd'\]"):
        GPTConfig.from_dict({**old, "n_embd": 16})
