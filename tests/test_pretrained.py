"""Hugging Face loading, one module (`transformerbook.pretrained`): the pairs of maps with matching names, one
`from_pretrained` that picks the pair by `model_type`, and the old names as deprecated aliases (GPT-2's maps were
`config_from_hf` / `load_hf_state_dict`; Llama's lived in `transformerbook.modern`). The maps themselves are tested
against Hugging Face's models in test_lm_head.py (GPT-2) and test_modern.py (Llama, Qwen3)."""
from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, Qwen3Config
from transformers import Qwen3ForCausalLM
from transformers.utils import logging as hf_logging

from transformerbook import pretrained
from transformerbook.lm_head import GPT
from transformerbook.pretrained import (LLAMA_FAMILY, config_from_gpt2, config_from_llama, from_pretrained,
                                        load_gpt2_state_dict, load_llama_state_dict)

hf_logging.set_verbosity_error()
SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32)


def random_hf(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2": return GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4))
    if kind == "llama": return LlamaForCausalLM(LlamaConfig(**SMALL, tie_word_embeddings=False))
    return Qwen3ForCausalLM(Qwen3Config(**SMALL, head_dim=16, tie_word_embeddings=True))


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen3"])
def test_one_from_pretrained_reads_every_kind(kind, tmp_path):
    "The pair of maps is chosen by the checkpoint's model_type; the logits are Hugging Face's."
    hf = random_hf(kind).eval()
    hf.save_pretrained(tmp_path)
    ours = from_pretrained(tmp_path, local_files_only=True)
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad(): torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-5, rtol=1e-5)
    assert not ours.training and ours.config.positional == ("learned" if kind == "gpt2" else "rotary")


def test_the_pairs_have_matching_names_and_refuse_each_others_configs():
    assert LLAMA_FAMILY == ("llama", "qwen3")
    for kind in ("gpt2", "llama"):
        hf = random_hf(kind)
        config_from = config_from_gpt2 if kind == "gpt2" else config_from_llama
        load = load_gpt2_state_dict if kind == "gpt2" else load_llama_state_dict
        assert load(GPT(config_from(hf.config)), hf.state_dict()) is not None
    with pytest.raises(ValueError, match="model_type='llama': config_from_gpt2 maps GPT-2"):
        config_from_gpt2(random_hf("llama").config)
    with pytest.raises(ValueError, match="model_type='gpt2' must be 'llama' or 'qwen3'"):
        config_from_llama(random_hf("gpt2").config)
    with pytest.raises(ValueError, match="Llama weights need"):
        load_llama_state_dict(GPT(config_from_gpt2(random_hf("gpt2").config)), {})
    with pytest.raises(ValueError, match="GPT-2 weights need"):
        load_gpt2_state_dict(GPT(config_from_llama(random_hf("llama").config)), {})


def test_from_pretrained_refuses_other_model_types_and_a_context_length_for_gpt2(tmp_path):
    MistralConfig(**SMALL).save_pretrained(tmp_path / "mistral")
    with pytest.raises(ValueError, match="model_type='mistral' must be"):
        from_pretrained(tmp_path / "mistral")
    random_hf("gpt2").save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="context_length=8 is for rotary models"):
        from_pretrained(tmp_path / "gpt2", context_length=8)
    random_hf("qwen3").save_pretrained(tmp_path / "qwen3")
    assert from_pretrained(tmp_path / "qwen3", context_length=8).config.context_length == 8


def test_old_names_are_deprecated_aliases(tmp_path):
    hf = random_hf("gpt2")
    with pytest.warns(DeprecationWarning, match="config_from_gpt2"):
        assert pretrained.config_from_hf(hf.config) == config_from_gpt2(hf.config)
    with pytest.warns(DeprecationWarning, match="load_gpt2_state_dict"):
        old = pretrained.load_hf_state_dict(GPT(config_from_gpt2(hf.config)), hf.state_dict())
    new = load_gpt2_state_dict(GPT(config_from_gpt2(hf.config)), hf.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(old.state_dict().values(), new.state_dict().values()))
    modern = importlib.import_module("transformerbook.modern")
    moved = {"config_from_llama": config_from_llama, "load_llama_state_dict": load_llama_state_dict,
             "from_pretrained_llama": from_pretrained, "LLAMA_FAMILY": LLAMA_FAMILY}
    for name, new_object in moved.items():
        with pytest.warns(DeprecationWarning, match=f"transformerbook.modern.{name} is deprecated"):
            assert getattr(modern, name) is new_object
    with warnings.catch_warnings(), pytest.raises(ImportError):
        warnings.simplefilter("error")
        from transformerbook.modern import no_such_loader  # noqa: F401
