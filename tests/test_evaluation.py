"""Tests for `transformerbook.evaluation` (chapter 11a): the likelihood scorer against Hugging Face, the classifier,
Wilson intervals, GPT-3's data mix, MinHash against datasketch, the 13-gram test, memorisation, the model card (and
the CLI writing it), the exercise checkers against known-wrong answers, and a slice of the memorisation experiment."""
from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pytest
import torch

from transformerbook.checks import evaluation as checks
from transformerbook.data import load_result, load_tinyshakespeare, train_val_split
from transformerbook.cli import MODEL_CARD_NAME, model_card, write_model_card
from transformerbook.evaluation import (GPT3_DATA_MIX, MinHasher, accuracy_with_ci, candidate_batch,
                                        candidate_log_likelihoods, classify_by_likelihood, cloze_task, contaminated,
                                        epochs_elapsed, estimate_jaccard, exact_duplicates, extraction_matches,
                                        jaccard, near_duplicate_pairs, next_line_task, normalize_words,
                                        score_candidates, sequence_log_likelihood, shingles, speaker_task, speeches,
                                        verbatim_fraction, wilson_interval, word_ngrams)
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.tokenization import CharTokenizer
from transformerbook.training import CHECKPOINT_NAME, TrainConfig, save_checkpoint, train

from conftest import load_experiment


@pytest.fixture(scope="module")
def text():
    return load_tinyshakespeare()


def _tiny_gpt(vocab_size=11, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab_size, context_length=16, d_model=16, n_heads=2, n_layers=1)).eval()


# ---- the scorer and the classifier ----

def test_scorer_equals_hugging_face_loss():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_layer=2, n_head=2, n_embd=32,
                                                              n_positions=32)).eval()
    ids = torch.randint(0, 50, (3, 12))
    with torch.no_grad():
        for b in range(3):
            loss = hf(ids[b:b + 1], labels=ids[b:b + 1]).loss
            torch.testing.assert_close(-sequence_log_likelihood(hf, ids[b:b + 1], reduction="mean"), loss[None])
    # a mask on the last 5 tokens: HF's loss with the other labels set to -100 (ignored)
    labels = ids.clone()
    labels[:, :7] = -100
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 7:] = True
    with torch.no_grad(): loss = hf(ids, labels=labels).loss  # mean over the 3 x 5 scored tokens
    torch.testing.assert_close(-sequence_log_likelihood(hf, ids, mask).sum() / 15, loss)


def test_right_padding_changes_nothing():
    model = _tiny_gpt()
    ids = torch.randint(0, 11, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 7, dtype=torch.bool), torch.zeros(1, 5, dtype=torch.bool)], 1)
    torch.testing.assert_close(sequence_log_likelihood(model, padded, mask), sequence_log_likelihood(model, ids))


def test_classifier_is_batch_independent_and_matches_single_scoring():
    model, tok = _tiny_gpt(9, seed=3), CharTokenizer("abcdefgh ")
    prompts = ["abc", "h", "gge", "a b c d e f g h"]
    cands = [["d", "e", "f"], ["ab", "dd"], ["a", "b", "c", "d"], ["hh", "gg", "a"]]
    expected = [int(score_candidates(model, tok, p, c).argmax()) for p, c in zip(prompts, cands)]
    for batch_size in (1, 3, 256):
        assert classify_by_likelihood(model, tok, prompts, cands, batch_size=batch_size).tolist() == expected
    mean_pred = classify_by_likelihood(model, tok, prompts, cands, reduction="mean")
    assert mean_pred.tolist() == [int(score_candidates(model, tok, p, c, "mean").argmax())
                                  for p, c in zip(prompts, cands)]


@pytest.mark.parametrize("call, message", [
    (lambda m, t: candidate_batch(t, ["a"], [["b"], ["c"]], 16), "1 prompts but 2 candidate lists"),
    (lambda m, t: candidate_batch(t, [""], [["b"]], 16), "encodes to no tokens"),
    (lambda m, t: sequence_log_likelihood(m, torch.zeros(2, 1, dtype=torch.long)), "T >= 2"),
    (lambda m, t: sequence_log_likelihood(m, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)), "must be bool"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message): call(_tiny_gpt(9), CharTokenizer("abcdefgh "))


def test_wilson_interval_solves_its_equation():
    z = 1.959963984540054
    for k, n in [(0, 10), (3, 10), (50, 100), (199, 200), (200, 200)]:
        p_hat = k / n
        for p in wilson_interval(k, n):
            if 0 < p < 1:  # an endpoint p solves (p_hat - p)^2 = z^2 p (1 - p) / n
                assert math.isclose((p_hat - p) ** 2, z * z * p * (1 - p) / n, rel_tol=1e-9, abs_tol=1e-12)
    assert accuracy_with_ci([0, 1, 1, 1], [0, 1, 1, 0]) == {"accuracy": 0.75, "low": wilson_interval(3, 4)[0],
                                                           "high": wilson_interval(3, 4)[1], "n": 4}
    with pytest.raises(ValueError, match="n=0"): wilson_interval(0, 0)


def test_tasks_are_built_from_the_given_text_only(text):
    _, val = train_val_split(text)
    for build in (next_line_task, speaker_task, cloze_task):
        items = build(val, n_examples=50, seed=1)
        assert items == build(val, n_examples=50, seed=1)  # seeded
        for it in items:
            assert len(it["candidates"]) == 4 and len(set(it["candidates"])) == 4
            assert it["prompt"] in val
    for it in cloze_task(val, n_examples=50):  # same-length words: equal-length candidates
        assert len({len(c) for c in it["candidates"]}) == 1
    assert [len(speeches(t)) for t in (val, text)] == [920, 7097]


def test_length_matched_next_line_items(text):
    _, val = train_val_split(text)
    items = next_line_task(val, n_examples=100, seed=2, candidate_chars=16, previous_line_within=47)
    for it in items:
        assert {len(c) for c in it["candidates"]} == {16} and len(set(it["candidates"])) == 4
        assert len(it["prompt"].split("\n")[-2]) + 1 <= 47  # the previous line fits
        assert it["prompt"] + it["candidates"][it["answer"]] in val
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, context_length=32, d_model=16, n_heads=2, n_layers=1)).eval()
    tok = CharTokenizer.train(text)
    got = candidate_log_likelihoods(model, tok, [i["prompt"] for i in items[:5]], [i["candidates"] for i in items[:5]],
                                    batch_size=7)
    for g, it in zip(got, items[:5]):
        torch.testing.assert_close(g, score_candidates(model, tok, it["prompt"], it["candidates"]))


# ---- data ----

def test_gpt3_epochs_from_tokens_and_weights():
    epochs = {k: epochs_elapsed(n, w) for k, (n, w, _) in GPT3_DATA_MIX.items()}
    assert round(epochs["Common Crawl (filtered)"], 2) == 0.44 and round(epochs["Books2"], 2) == 0.44
    assert math.isclose(epochs["Wikipedia"], 3.0) and math.isclose(epochs["Books1"], 2.0)
    assert round(sum(n for n, _, _ in GPT3_DATA_MIX.values()) / 1e9) == 499
    with pytest.raises(ValueError, match="weight=1.5"): epochs_elapsed(1e9, 1.5)


def test_minhash_estimates_jaccard_like_datasketch():
    datasketch = pytest.importorskip("datasketch")
    mh = MinHasher(256, seed=7)
    for overlap in (0, 20, 50, 80, 100):
        a = {f"w{i}" for i in range(100)}
        b = {f"w{i}" for i in range(100 - overlap, 200 - overlap)}
        true = jaccard(a, b)
        ours = estimate_jaccard(mh.signature(a), mh.signature(b))
        ma, mb = datasketch.MinHash(num_perm=256, seed=7), datasketch.MinHash(num_perm=256, seed=7)
        ma.update_batch([s.encode() for s in a])
        mb.update_batch([s.encode() for s in b])
        sd = math.sqrt(max(true * (1 - true), 1e-3) / 256)
        assert abs(ours - true) < 4 * sd and abs(ma.jaccard(mb) - true) < 4 * sd and abs(ours - ma.jaccard(mb)) < 5 * sd


def test_dedup_counts_on_tinyshakespeare(text):
    datasketch = pytest.importorskip("datasketch")
    bodies = [b for _, _, b in speeches(text)]
    groups = exact_duplicates(bodies)
    assert (len(groups), sum(map(len, groups))) == (55, 137)
    idx = [i for i, s in enumerate(bodies) if len(normalize_words(s)) >= 8]
    assert len(idx) == 5275
    passages = [bodies[i] for i in idx]
    near = near_duplicate_pairs(passages)
    assert len(near) == 5 and near[0][2] == 1.0
    # the peer: datasketch's LSH with the same bands finds the same pairs
    sets = [shingles(p) for p in passages]
    lsh = datasketch.MinHashLSH(num_perm=128, params=(64, 2))
    mins = datasketch.MinHash.bulk([[x.encode() for x in s] for s in sets], num_perm=128, seed=1)
    for n, m in enumerate(mins): lsh.insert(n, m)
    theirs = {(min(n, c), max(n, c)) for n, m in enumerate(mins) for c in lsh.query(m) if c != n}
    assert sorted(p for p in theirs if jaccard(sets[p[0]], sets[p[1]]) >= 0.5) == sorted((i, j) for i, j, _ in near)


def test_thirteen_gram_contamination_counts(text):
    train_text, val_text = train_val_split(text)
    val_speeches = [b for _, _, b in speeches(val_text)]
    counts = {n: sum(contaminated(train_text, val_speeches, n)) for n in (4, 5, 6, 7, 13)}
    assert counts == {4: 163, 5: 24, 6: 5, 7: 0, 13: 0}
    assert contaminated(train_text, [train_text[1000:1200], val_speeches[0]]) == [True, False]
    assert word_ngrams("A, b; C d", 2) == {("a", "b"), ("b", "c"), ("c", "d")}


# ---- memorisation ----

def test_extraction_finds_a_memorised_passage():
    passage = "to be or not to be that is the question whether tis nobler"
    tok = CharTokenizer(sorted(set(passage + "xyzq")))
    data = torch.tensor(tok.encode(passage * 40))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=32, d_model=32, n_heads=2, n_layers=1))
    train(model, data, data, TrainConfig(max_iters=300, batch_size=8, learning_rate=3e-3, eval_interval=300,
                                         eval_iters=1, warmup_iters=5), progress=False)
    model.eval()
    other = "xyzq xyzq xyzq xyzq xyzq xyzq xyzq xyzq xyzq xyzq xyz"
    assert extraction_matches(model, tok, [passage, other], 16, 16) == [True, False]
    assert verbatim_fraction([passage], passage * 2, span=20) == 1.0
    with pytest.raises(ValueError, match="shorter than"): extraction_matches(model, tok, ["short"], 16, 16)


def _load_experiment():
    return load_experiment("memorisation")


def test_memorisation_counts_and_intervals_the_chapter_states():
    """Chapter 11a turns the committed fractions into counts (64 samples of 500 characters: 1,600 pieces of 20
    characters and 640 of 50 per temperature) and Wilson intervals; each snapshot measures its own weights."""
    res = load_result("memorisation")["results"]
    settings = res["settings"]
    assert (settings["n_samples"], settings["sample_chars"]) == (64, 500)
    n20, n50 = 64 * 25, 64 * 10
    full, tiny = res["full"]["snapshots"][-1], res["tiny"]["snapshots"][-1]
    count = lambda frac, n: round(frac * n)
    assert count(full["verbatim"]["0.5"]["train_50"], n50) == 0 and count(full["extraction_train"], 100) == 0
    assert wilson_interval(0, n50)[1] == pytest.approx(0.006, abs=5e-4)  # "below 0.6%"
    assert count(tiny["verbatim"]["0.5"]["train_50"], n50) == 14 and count(tiny["extraction_train"], 16) == 14
    counts = [count(tiny["verbatim"][t]["train_20"], n20) for t in ("0.5", "0.8", "1.0")]
    assert counts == [105, 47, 27]
    assert wilson_interval(105, n20)[0] > wilson_interval(47, n20)[1]  # T = 0.5 and 0.8: apart
    assert wilson_interval(47, n20)[0] < wilson_interval(27, n20)[1]  # T = 0.8 and 1.0: not apart
    # the tiny run memorises late: its last snapshot extracts far more than its earlier ones (the snapshot's own
    # weights, not the run's best evaluation, which is its earliest)
    assert [s["extraction_train"] for s in res["tiny"]["snapshots"]][:-1] == [0.0, 0.0, 0.0]


@pytest.mark.slow
def test_memorisation_experiment_slice_reproduces():
    committed = load_result("memorisation")
    assert {"command", "seeds", "created", "results"} <= set(committed)
    small = committed["results"]["small"]
    first = small["snapshots"][0]
    torch.set_num_threads(1)
    again = _load_experiment().run([first["step"]], [1.0], train_chars=small["train_chars"], n_passages=10,
                                   schedule_end=small["snapshots"][-1]["step"])["snapshots"][0]
    assert math.isclose(again["val_loss"], first["val_loss"], rel_tol=1e-4)
    assert math.isclose(again["train_loss"], first["train_loss"], rel_tol=1e-4)
    assert again["verbatim"]["1.0"] == pytest.approx(first["verbatim"]["1.0"], abs=0.01)


# ---- the model card and the CLI ----

def _tiny_checkpoint(folder: Path) -> Path:
    model = _tiny_gpt()
    train_cfg = TrainConfig(max_iters=3, eval_interval=3)
    from transformerbook.training import TrainHistory
    hist = TrainHistory(steps=[3], train_loss=[2.25], val_loss=[2.5], iter_loss=[], lr=[])
    return save_checkpoint(folder, model, None, 3, train_cfg, CharTokenizer("abcdefghij "), hist)


def test_model_card_from_a_checkpoint(tmp_path):
    path = _tiny_checkpoint(tmp_path/"run")
    card = model_card(path)
    assert "n_layers 1, n_heads 2, d_model 16, context_length 16 tokens, vocab_size 11 (char tokenizer)" in card
    assert f"{_tiny_gpt().n_params():,} parameters" in card
    assert "validation loss 2.5000" in card and f"perplexity {math.exp(2.5):.2f}" in card
    assert "| max_iters | 3 |" in card and "## Intended use" in card and "toxicity" in card
    dest = write_model_card(tmp_path/"run", data="poem.txt")
    assert dest == tmp_path/"run"/MODEL_CARD_NAME and "`poem.txt`" in dest.read_text()
    assert sorted(p.name for p in (tmp_path/"run").iterdir()) == sorted([CHECKPOINT_NAME, MODEL_CARD_NAME])


def test_cli_train_writes_the_model_card(tmp_path):
    from transformerbook.cli import main
    corpus = tmp_path/"poem.txt"
    corpus.write_text("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 20)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["train", "--data", str(corpus), "--out", str(tmp_path/"run"), "--max-iters", "4", "--n-layers",
                       "1", "--d-model", "32", "--n-heads", "2", "--context-length", "16", "--eval-interval", "2",
                       "--eval-iters", "1", "--batch-size", "4", "--warmup-iters", "1", "--no-progress"])
    assert status == 0, err.getvalue()
    card = (tmp_path/"run"/MODEL_CARD_NAME).read_text()
    assert f"`{corpus}`" in card and "Trained for 4 steps" in card and "validation loss" in card


# ---- the exercise checkers ----

CASES = [(case, mistake, wrong) for case in checks.META_CASES for mistake, wrong in case.wrong.items()]


@pytest.mark.parametrize("case", checks.META_CASES, ids=lambda c: c.checker.__name__)
def test_checker_accepts_reference(case, capsys):
    assert case.checker(case.reference).passed is True
    assert capsys.readouterr().out.startswith("PASS")
    assert len(case.wrong) >= 2


@pytest.mark.parametrize("case, mistake, wrong", CASES, ids=[f"{c.checker.__name__}-{m}" for c, m, _ in CASES])
def test_checker_rejects_wrong_answer(case, mistake, wrong):
    with pytest.raises(AssertionError, match=None) as info:
        case.checker(wrong)
    assert case.hints[mistake] in str(info.value), str(info.value)


def test_checker_says_not_yet(capsys):
    def stub(*args): raise NotImplementedError
    assert checks.check_classify_by_likelihood(stub).passed is False and checks.check_contaminated(stub).passed is False
    assert capsys.readouterr().out.count("NOT YET") == 2
