"""Chapter 11b: the `causal` switch of GPTConfig (bidirectional attention, unchanged cache keys, refused by the
decoders), BERT's corruption, the MLM batches and losses, the speaker task and the fine-tuning head, the exercise
checkers against known-wrong answers, and a slice of the fine-tuning experiment."""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest
import torch

from transformerbook.checks.finetune import META_CASES, check_freeze_body, check_mlm_corrupt
from transformerbook.data import load_result, load_tinyshakespeare, train_val_split
from transformerbook.finetune import (IGNORE_INDEX, SequenceClassifier, classify, fill_masks,
                                      finetune_classifier, freeze_body, masked_char_losses, mlm_batch_fn,
                                      mlm_corrupt, next_char_losses, speaker_chunks)
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.sampling import KVCache
from transformerbook.sampling import beam_search, generate
from transformerbook.tokenization import CharTokenizer
from transformerbook.training import PRESETS, TrainConfig, cached_run, model_key, preset_configs, train

from conftest import load_experiment


# ---- the causal switch ----

def _pair(seed: int = 0, **overrides) -> tuple[GPT, GPT]:
    "A causal GPT and a bidirectional one with the same weights."
    torch.manual_seed(seed)
    model_cfg = GPTConfig(**{**dict(vocab_size=13, context_length=12, d_model=24, n_heads=3, n_layers=2), **overrides})
    causal = GPT(model_cfg).eval()
    encoder = GPT(replace(model_cfg, causal=False)).eval()
    encoder.load_state_dict(causal.state_dict())
    return causal, encoder


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_bidirectional_positions_see_the_future_and_causal_ones_do_not(fused, positional):
    causal, encoder = _pair(fused=fused, positional=positional)
    x = torch.randint(0, 13, (2, 12), generator=torch.Generator().manual_seed(1))
    for j in range(1, 12):
        changed = x.clone()
        changed[:, j] = (changed[:, j] + 1) % 13
        with torch.no_grad():
            c_moved = (causal(x) - causal(changed)).abs().amax(-1) > 1e-6  # (B, T)
            e_moved = (encoder(x) - encoder(changed)).abs().amax(-1) > 1e-6
        assert not c_moved[:, :j].any(), f"a causal position before {j} saw position {j}"
        assert e_moved[:, :j].all(), f"a bidirectional position before {j} did not see position {j}"
        assert c_moved[:, j:].all() and e_moved[:, j:].all()


def test_bidirectional_attention_equals_unmasked_attention_of_the_same_blocks():
    causal, encoder = _pair(seed=3)
    x = torch.randint(0, 13, (2, 9))
    with torch.no_grad():
        h = encoder.embeddings(x, torch.arange(9))
        for block in encoder.blocks: h = block(h, mask=None)
        torch.testing.assert_close(encoder.lm_head(encoder.ln_f(h)), encoder(x))
        h = causal.embeddings(x, torch.arange(9))
        for block in causal.blocks: h = block(h, mask=torch.ones(9, 9, dtype=torch.bool).tril())
        torch.testing.assert_close(causal.lm_head(causal.ln_f(h)), causal(x))


def test_bidirectional_padding_mask_hides_the_pads_only():
    _, encoder = _pair(seed=4)
    x = torch.randint(0, 13, (1, 10))
    pad = torch.tensor([[True] * 7 + [False] * 3])
    other = x.clone()
    other[0, 8] = (other[0, 8] + 5) % 13  # a padding position's token changes: the real positions must not notice
    with torch.no_grad():
        torch.testing.assert_close(encoder(x, padding_mask=pad)[:, :7], encoder(other, padding_mask=pad)[:, :7])
        torch.testing.assert_close(encoder(x, padding_mask=pad)[:, :7], encoder(x[:, :7]))


def test_default_config_writes_the_same_dict_and_cache_key():
    for name in PRESETS:
        model_cfg, _ = preset_configs(name)
        d = model_cfg.to_dict()
        assert "causal" not in d  # left out at its default, like the chapter-12 switches
        assert GPTConfig.from_dict(d) == model_cfg and GPTConfig.from_dict(d).causal is True
        assert replace(model_cfg, causal=False).to_dict() == {**d, "causal": False}
    # the key of the cached character model, as it was before the switch existed (a frozen copy of its fields)
    before = {"vocab_size": 65, "context_length": 64, "d_model": 128, "n_heads": 4, "n_layers": 4, "d_ff": 512,
              "dropout": 0.0, "bias": True, "norm": "pre", "tie_weights": True, "activation": "gelu_tanh",
              "positional": "learned", "layer_norm_eps": 1e-05, "fused": True}
    key = json.dumps(model_key(preset_configs("baby-gpt-char")[0]), sort_keys=True)
    assert key == json.dumps(before, sort_keys=True)
    with pytest.raises(ValueError, match="causal='no'"): GPTConfig(causal="no")


def test_decoders_and_kv_cache_refuse_a_bidirectional_model():
    _, encoder = _pair()
    with pytest.raises(ValueError, match="causal=True"): encoder(torch.tensor([[1, 2]]), kv_cache=KVCache(2))
    with pytest.raises(ValueError, match="causal=False"): generate(encoder, [1, 2], 3)
    with pytest.raises(ValueError, match="causal=False"): generate(encoder, [1, 2], 3, use_kv_cache=False)
    with pytest.raises(ValueError, match="causal=False"): beam_search(encoder, [1, 2], 3, num_beams=2)


def test_cached_run_needs_vocab_plus_extra_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path))
    model_cfg, train_cfg = preset_configs("baby-gpt-char", max_iters=1)
    with pytest.raises(ValueError, match="65 \\+ extra_ids=1"):
        cached_run("t", model_cfg, train_cfg, "char", {}, progress=False, extra_ids=1)


# ---- BERT's corruption ----

def test_corruption_rates_and_targets():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 50, (200, 300), generator=g)
    corrupted, targets = mlm_corrupt(x, 50, 50, g)
    chosen = targets != IGNORE_INDEX
    n = chosen.sum().item()
    assert abs(n / x.numel() - 0.15) < 0.005  # 60,000 positions: 3 sigma is about 0.004
    assert abs((corrupted[chosen] == 50).sum().item() / n - 0.8) < 0.01
    replaced = (corrupted[chosen] != x[chosen]) & (corrupted[chosen] != 50)
    assert abs(replaced.sum().item() / n - 0.1 * 49 / 50) < 0.01  # a random draw can hit the original id
    assert torch.equal(corrupted[~chosen], x[~chosen]) and torch.equal(targets[chosen], x[chosen])
    assert (targets[~chosen] == IGNORE_INDEX).all() and targets.dtype == corrupted.dtype == torch.int64
    assert corrupted.max() <= 50 and (corrupted[chosen & (corrupted != 50)] < 50).all()


@pytest.mark.parametrize("rate", [0.0, 0.5, 1.0])
def test_corruption_never_chooses_padding(rate):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 10, (50, 40), generator=g)
    lengths = torch.randint(1, 41, (50,), generator=g)
    pad = torch.arange(40) < lengths[:, None]  # (50, 40) right padding
    corrupted, targets = mlm_corrupt(x, 10, 10, g, mask_rate=rate, padding_mask=pad)
    assert (targets[~pad] == IGNORE_INDEX).all() and torch.equal(corrupted[~pad], x[~pad])
    assert ((targets != IGNORE_INDEX).sum().item() == pad.sum().item()) == (rate == 1.0)


def test_corruption_is_seeded_and_rejects_bad_arguments():
    x = torch.randint(0, 10, (4, 30))
    a = mlm_corrupt(x, 10, 10, torch.Generator().manual_seed(5))
    b = mlm_corrupt(x, 10, 10, torch.Generator().manual_seed(5))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    with pytest.raises(ValueError, match="mask_id=4"): mlm_corrupt(x, 4, 10)
    with pytest.raises(ValueError, match="mask_rate=1.5"): mlm_corrupt(x, 10, 10, mask_rate=1.5)
    with pytest.raises(TypeError, match="int64"): mlm_corrupt(x.int(), 10, 10)
    with pytest.raises(ValueError, match="padding_mask"): mlm_corrupt(x, 10, 10, padding_mask=torch.ones(4, 29).bool())


def test_train_with_mlm_batches_minimises_the_mlm_loss():
    "`train`'s cross-entropy with ignore_index -100 is L_MLM: a small encoder learns to fill masks of a periodic text."
    tok = CharTokenizer(list("abcdefgh"))
    data = torch.tensor(tok.encode("abcdefgh" * 100))
    batch_fn = mlm_batch_fn(8, 8)
    ids, targets = batch_fn(data, 4, 16, torch.Generator().manual_seed(0))
    assert ids.shape == targets.shape == (4, 16) and (targets != IGNORE_INDEX).any()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=9, context_length=16, d_model=32, n_heads=2, n_layers=1, causal=False))
    train(model, data, data, TrainConfig(max_iters=400, batch_size=16, learning_rate=5e-3, eval_interval=400,
                                         eval_iters=1, warmup_iters=10), progress=False, batch_fn=batch_fn)
    model.eval()
    holes = data[None, :16].clone()
    holes[0, [3, 9, 12]] = 8
    assert torch.equal(fill_masks(model, holes, 8), data[None, :16])  # both neighbours pin the letter down
    positions = torch.arange(20, 60)
    assert masked_char_losses(model, data, positions, 8, 8, 7).mean() < 0.1


def test_losses_agree_with_a_forward_pass():
    causal, encoder = _pair(seed=2, vocab_size=14)
    data = torch.randint(0, 13, (200,))
    positions = torch.tensor([20, 50, 100])
    with torch.no_grad():
        logp = causal(data[None, 100 - 8:100])[0, -1].log_softmax(-1)
        window = data[100 - 4:100 + 3].clone()
        window[4] = 13
        logq = encoder(window[None])[0, 4].log_softmax(-1)
    assert next_char_losses(causal, data, positions, 8)[2].item() == pytest.approx(-logp[data[100]].item(), rel=1e-5)
    assert masked_char_losses(encoder, data, positions, 13, 4, 2)[2].item() == pytest.approx(-logq[data[100]].item(),
                                                                                              rel=1e-5)


# ---- fine-tuning ----

def test_speaker_chunks_keep_each_speech_on_one_side():
    _, val_text = train_val_split(load_tinyshakespeare())
    tok = CharTokenizer.train(load_tinyshakespeare())
    task = speaker_chunks(val_text, tok)
    assert task["names"] == ["PETRUCHIO", "TRANIO", "PROSPERO", "KATHARINA"]
    decode = lambda ids, mask: {tok.decode(r[m].tolist()) for r, m in zip(ids, mask)}
    train_pieces, test_pieces = decode(*task["train"][:2]), decode(*task["test"][:2])
    assert not train_pieces & test_pieces
    for ids, mask, labels in (task["train"], task["test"]):
        assert ids.shape[1] == 64 and mask.sum(1).min() >= 32 and (ids[~mask] == 0).all()
        assert set(labels.tolist()) == {0, 1, 2, 3}
    again = speaker_chunks(val_text, tok)
    assert torch.equal(again["test"][0], task["test"][0])


def test_classifier_pools_real_positions_and_freezing_moves_only_the_head():
    torch.manual_seed(0)
    clf = SequenceClassifier(GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_heads=2, n_layers=1)), 3)
    x = torch.randint(0, 10, (2, 8))
    pad = torch.tensor([[True] * 5 + [False] * 3, [True] * 8])
    with torch.no_grad():
        torch.testing.assert_close(clf(x, pad)[:1], clf(x[:1, :5]))  # pads change nothing
    freeze_body(clf)
    before = {k: v.clone() for k, v in clf.state_dict().items()}
    labels = torch.tensor([0, 2])
    losses = finetune_classifier(clf, x, pad, labels, max_iters=50, batch_size=2, learning_rate=1e-2,
                                 generator=torch.Generator().manual_seed(0))
    moved = {k for k, v in clf.state_dict().items() if not torch.equal(v, before[k])}
    assert moved == {"head.weight", "head.bias"} and losses[-1] < losses[0]
    assert torch.equal(classify(clf, x, pad), labels)  # two examples: the head alone can fit them


def test_whole_model_finetuning_moves_the_body():
    torch.manual_seed(0)
    clf = SequenceClassifier(GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_heads=2, n_layers=1)), 2)
    before = {k: v.clone() for k, v in clf.body.state_dict().items()}
    finetune_classifier(clf, torch.randint(0, 10, (4, 8)), torch.ones(4, 8, dtype=torch.bool),
                        torch.tensor([0, 1, 0, 1]), max_iters=3, batch_size=4)
    moved = {k for k, v in clf.body.state_dict().items() if not torch.equal(v, before[k])}
    assert {"embeddings.token.weight", "blocks.0.attn.q_proj.weight"} <= moved, sorted(moved)


# ---- checkers ----

@pytest.mark.parametrize("case", META_CASES, ids=lambda c: c.checker.__name__)
def test_checker_accepts_reference_and_names_each_mistake(case, capsys):
    assert case.checker(case.reference).passed is True
    assert capsys.readouterr().out.startswith("PASS")
    for name, wrong in case.wrong.items():
        with pytest.raises(AssertionError, match=re.escape(case.hints[name])): case.checker(wrong)


def test_checkers_say_not_yet_for_a_stub(capsys):
    def stub(*args, **kwargs): raise NotImplementedError
    assert check_mlm_corrupt(stub).passed is False and check_freeze_body(stub).passed is False
    assert capsys.readouterr().out.count("NOT YET") == 2


def test_corrupt_checker_catches_changes_outside_the_chosen_positions():
    def leaky(token_ids, mask_id, vocab_size, generator=None, mask_rate=0.15, padding_mask=None):
        corrupted, targets = mlm_corrupt(token_ids, mask_id, vocab_size, generator, mask_rate, padding_mask)
        return torch.where(padding_mask, corrupted, mask_id), targets  # masks the padding in the input too
    with pytest.raises(AssertionError, match="only the chosen positions may change"): check_mlm_corrupt(leaky)


# ---- the experiment ----

def _load_experiment():
    return load_experiment("finetune")


def test_finetune_result_is_complete():
    committed = load_result("finetune")
    assert {"command", "seeds", "created", "results"} <= set(committed)
    mlm, ft = committed["results"]["mlm"], committed["results"]["finetune"]
    assert len(mlm["masked_nats"]) == len(mlm["right"]) and set(mlm["causal_nats"]) == {"64", "32"}
    assert all(0 < v < math.log(66) for v in mlm["masked_nats"])
    seeds = committed["seeds"]
    assert len(ft["runs"]) == 4 * len(seeds) + 2  # and the whole model at lr 1e-3 for seed 0
    for run in ft["runs"]:
        assert run["low"] <= run["accuracy"] <= run["high"] and run["n"] == ft["n_test"]


@pytest.mark.slow
def test_finetune_experiment_slice_reproduces():
    "The head-only runs of seed 0 (the cheap ones) give the committed accuracies again."
    committed = load_result("finetune")["results"]["finetune"]
    torch.set_num_threads(1)
    head_only = (("pre-trained", "head only", 1e-3), ("random", "head only", 1e-3))
    again = _load_experiment().run_finetune(seeds=(0,), steps=committed["steps"], settings=head_only)
    for run in again["runs"]:
        saved = next(r for r in committed["runs"]
                     if (r["body"], r["train"], r["lr"], r["seed"]) == (run["body"], run["train"], run["lr"], 0))
        assert run["accuracy"] == pytest.approx(saved["accuracy"], abs=1 / saved["n"])  # at most one piece differs


# ---- early stopping and the selection experiment ----

def test_speaker_chunks_validation_split_leaves_the_test_split_alone():
    _, val_text = train_val_split(load_tinyshakespeare())
    tok = CharTokenizer.train(load_tinyshakespeare())
    plain, split = speaker_chunks(val_text, tok), speaker_chunks(val_text, tok, val_fraction=0.3)
    assert torch.equal(plain["test"][0], split["test"][0]) and len(plain["val"][2]) == 0
    decode = lambda ids, mask: {tok.decode(r[m].tolist()) for r, m in zip(ids, mask)}
    train, val = decode(*split["train"][:2]), decode(*split["val"][:2])
    assert not train & val and train | val == decode(*plain["train"][:2])  # the training half, divided
    assert set(split["val"][2].tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="val_fraction=1"): speaker_chunks(val_text, tok, val_fraction=1)


def test_early_stopping_keeps_the_best_evaluation():
    from transformerbook.finetune import EarlyStopping
    torch.manual_seed(0)
    clf = SequenceClassifier(GPT(GPTConfig(vocab_size=10, context_length=8, d_model=16, n_heads=2, n_layers=1)), 2)
    x, pad = torch.randint(0, 10, (8, 8)), torch.ones(8, 8, dtype=torch.bool)
    val = (torch.randint(0, 10, (8, 8)), pad, torch.randint(0, 2, (8,)))
    stopper = EarlyStopping(val, eval_interval=5, patience=3)
    losses = finetune_classifier(clf, x, pad, torch.tensor([0, 1] * 4), max_iters=500, learning_rate=1e-2,
                                 generator=torch.Generator().manual_seed(0), callback=stopper)
    assert len(losses) == stopper.steps[-1] < 500
    assert stopper.best_val_loss == min(stopper.val_loss)
    assert len(stopper.steps) - 1 - stopper.steps.index(stopper.best_step) == 3
    stopper.restore(clf)
    with torch.no_grad():
        got = torch.nn.functional.cross_entropy(clf(val[0], val[1]), val[2]).item()
    assert got == pytest.approx(stopper.best_val_loss, abs=1e-6)
    never = EarlyStopping(val, eval_interval=1000)
    finetune_classifier(clf, x, pad, torch.tensor([0, 1] * 4), max_iters=3, callback=never)
    assert never.steps == [] and never.best_step is None  # no evaluation: nothing stops it, nothing to restore
    with pytest.raises(ValueError, match="no evaluation yet"): never.restore(clf)


def _load_selection():
    return load_experiment("finetune_selection")


def test_finetune_selection_result_is_complete():
    committed = load_result("finetune_selection")
    assert {"command", "seeds", "created", "results"} <= set(committed)
    res = committed["results"]
    mod = _load_selection()
    assert set(res["chosen_lr"]) == set(mod.ARMS)
    for name, lr in res["chosen_lr"].items():
        grid = [r for r in res["selection"] if f"{r['body']}/{r['train']}" == name]
        assert lr == min(grid, key=lambda r: r["best_val_loss"])["lr"]  # chosen on validation, never on test
        seeds = sorted(r["seed"] for r in res["runs"] if f"{r['body']}/{r['train']}" == name)
        assert seeds == sorted(committed["seeds"]) and len(seeds) >= 3  # every seed of the record, once, per arm
        assert {r["lr"] for r in res["runs"] if f"{r['body']}/{r['train']}" == name} == {lr}
    for run in res["selection"] + res["runs"]:
        assert run["low"] <= run["accuracy"] <= run["high"] and run["n"] == res["n_test"]
        assert run["best_step"] <= run["steps_run"] <= res["max_steps"]


@pytest.mark.slow
def test_finetune_selection_slice_reproduces():
    "The head-only arm on the pre-trained body, seed 0, its whole rate grid (the cheap part): the committed numbers."
    res = load_result("finetune_selection")["results"]
    torch.set_num_threads(1)
    again = _load_selection().run(seeds=(0,), arms=("pre-trained/head only",), max_steps=res["max_steps"],
                                  val_fraction=res["val_fraction"])
    for run in again["selection"]:
        saved = next(r for r in res["selection"] if (r["body"], r["train"], r["lr"], r["seed"]) ==
                     (run["body"], run["train"], run["lr"], run["seed"]))
        assert run["best_step"] == saved["best_step"]
        assert run["best_val_loss"] == pytest.approx(saved["best_val_loss"], abs=1e-4)
        assert run["accuracy"] == pytest.approx(saved["accuracy"], abs=1 / saved["n"])
