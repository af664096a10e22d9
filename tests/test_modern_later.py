"""Issue 23: the chapters after the model work on the modern one. On Llama- and Qwen3-shaped models (random Hugging
Face checkpoints loaded into the book's GPT, float64), the logit lens reads through the final RMSNorm as Hugging Face's
own hidden states give it, chapter 11a's likelihoods equal Hugging Face's, chapter 11b's classifier fine-tunes, and
chapter 7's `generate` with a KV cache gives the tokens of the uncached loop."""
from __future__ import annotations

import pytest
import torch
import transformers
from transformers import logging as hf_logging

from transformerbook.evaluation import sequence_log_likelihood
from transformerbook.finetune import SequenceClassifier, finetune_classifier
from transformerbook.lm_head import GPT, logit_lens
from transformerbook.pretrained import config_from_llama, load_llama_state_dict
from transformerbook.sampling import generate

hf_logging.set_verbosity_error()


def _pair(kind: str, n_kv_heads: int = 2):
    torch.manual_seed(0)
    common = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=n_kv_heads, max_position_embeddings=32)
    hf = (transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, rms_norm_eps=1e-5)) if kind == "llama"
          else transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common, head_dim=16, rms_norm_eps=1e-6)))
    hf = hf.double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name: p.uniform_(0.5, 1.5)
    return hf, load_llama_state_dict(GPT(config_from_llama(hf.config)).double(), hf.state_dict()).eval()


KINDS = [("llama", 2), ("llama", 1), ("qwen3", 2)]
IDS = torch.randint(0, 61, (3, 12), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("kind,kv", KINDS)
def test_logit_lens_reads_through_the_final_rms_norm(kind, kv):
    hf, ours = _pair(kind, kv)
    lens = logit_lens(ours, IDS)  # (L+1, B, T, V)
    with torch.no_grad():
        out = hf(IDS, output_hidden_states=True)
        states = out.hidden_states  # L + 1; Hugging Face's last one is already normalised
        theirs = [hf.lm_head(hf.model.norm(h)) for h in states[:-1]] + [out.logits]
    assert isinstance(ours.ln_f, torch.nn.Module) and type(ours.ln_f).__name__ == "RMSNorm"
    torch.testing.assert_close(lens, torch.stack(theirs), rtol=0, atol=1e-6)  # rotary tables are float32


@pytest.mark.parametrize("kind,kv", KINDS)
def test_sequence_log_likelihood_equals_hugging_faces(kind, kv):
    hf, ours = _pair(kind, kv)
    mask = torch.ones_like(IDS, dtype=torch.bool)
    mask[:, :5] = False  # score only the continuation after a 5-token prompt
    with torch.no_grad():
        lp = hf(IDS).logits[:, :-1].log_softmax(-1).gather(-1, IDS[:, 1:, None])[..., 0]  # (B, T-1)
    torch.testing.assert_close(sequence_log_likelihood(ours, IDS, mask), (lp * mask[:, 1:]).sum(-1).float())


def test_a_classifier_on_a_llama_body_fine_tunes():
    _, body = _pair("llama", 2)
    torch.manual_seed(0)
    clf = SequenceClassifier(body.float(), n_classes=2)
    ids = torch.randint(0, 61, (32, 10), generator=torch.Generator().manual_seed(4))
    labels = (ids[:, 0] < 30).long()  # the class is readable from the first token
    pad = torch.ones_like(ids, dtype=torch.bool)
    losses = finetune_classifier(clf, ids, pad, labels, max_iters=60, batch_size=16, learning_rate=3e-3,
                                 generator=torch.Generator().manual_seed(5))
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10


@pytest.mark.parametrize("kind,kv", KINDS)
def test_generate_with_a_kv_cache_equals_the_uncached_loop_and_hugging_face(kind, kv):
    hf, ours = _pair(kind, kv)
    prompts = [[5, 7, 9], [11, 3]]
    cached = generate(ours, prompts, 25, temperature=0)  # (2, 3 + 25), the shorter prompt left-padded
    assert torch.equal(cached, generate(ours, prompts, 25, temperature=0, use_kv_cache=False))
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompts[0]]), max_new_tokens=25, do_sample=False, pad_token_id=0)
    assert cached[0, -28:].tolist() == theirs[0].tolist()
