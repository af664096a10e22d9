"""In-context learning on chapter 11b's speaker task (experiments/icl.py): its prompts and scores, the committed result
file, and a slice of the experiment re-run (3 training steps, 4 test pieces, k = 0 and 1)."""
from __future__ import annotations


import pytest
import torch

from transformerbook.data import load_result
from transformerbook.evaluation import score_candidates, wilson_interval
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.tokenization import CharTokenizer

from conftest import load_experiment


def _icl():
    return load_experiment("icl")


def test_prompts_are_in_the_training_texts_format_and_seeded():
    icl = _icl()
    names = ["ANNE", "BOB"]
    assert icl.prompt_text([], names) == "\n\n"
    assert icl.prompt_text([("to be", 1), ("or not", 0)], names) == "\n\nBOB:\nto be\n\nANNE:\nor not\n\n"
    pool = [(f"piece {i}", i % 2) for i in range(30)]
    demos = icl.demonstrations(pool, 8, seed=3)
    assert demos == icl.demonstrations(pool, 8, seed=3) != icl.demonstrations(pool, 8, seed=4)
    assert len(set(demos)) == 8 and set(demos) <= set(pool)  # eight different training pieces, with their labels


def test_candidate_scores_are_the_chain_rule_of_chapter_11a():
    "joint = log P(NAME:\\n<piece> | prompt), channel = joint - log P(NAME:\\n | prompt): 11a's scorer agrees."
    icl = _icl()
    tok = CharTokenizer.train("ANNE:BOB\nto be or not, that is the question")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, context_length=64, d_model=16, n_heads=2, n_layers=1)).eval()
    names, prompt, piece = ["ANNE", "BOB"], "\n\nBOB:\nto be\n\n", "or not"
    joint, channel = icl.candidate_scores(model, tok, prompt, piece, names)
    torch.testing.assert_close(joint, score_candidates(model, tok, prompt, [f"{n}:\n{piece}" for n in names]))
    torch.testing.assert_close(joint - channel, score_candidates(model, tok, prompt, [f"{n}:\n" for n in names]))
    with pytest.raises(ValueError, match="exceeds the context 64"):
        icl.candidate_scores(model, tok, prompt * 10, piece, names)


def test_icl_result_is_complete():
    committed = load_result("icl")
    assert {"command", "seeds", "created", "results"} <= set(committed)
    res = committed["results"]
    selection = load_result("finetune_selection")["results"]
    assert res["n_test"] == len(res["answers"]) == len(set(res["test_indices"])) == selection["n_test"]  # all of them
    assert res["names"] == selection["names"] and res["uniform"] == 1 / len(res["names"])
    counts = torch.bincount(torch.tensor(res["answers"]), minlength=len(res["names"]))
    assert res["majority"] == pytest.approx(counts.max().item() / res["n_test"]) == selection["majority"]
    assert [r["k"] for r in res["by_k"]] == list(range(9))
    cells = [(str(r["k"]), r) for r in res["by_k"]] + [(f"{res['shuffled_labels']['k']}/shuffled",
                                                        res["shuffled_labels"])]
    for key, r in cells:
        for score in ("joint", "channel"):
            preds = res["predictions"][key][score]
            hits = sum(p == a for p, a in zip(preds, res["answers"]))
            assert r[score]["n"] == len(preds) == res["n_test"]
            assert r[score]["accuracy"] == pytest.approx(hits / len(preds))  # the accuracy of the saved predictions
            assert (r[score]["low"], r[score]["high"]) == pytest.approx(wilson_interval(hits, len(preds)))
    assert res["train_characters"] >= res["baby_gpt_train_characters"]
    assert 0 < res["val_loss"] < 4.2 and 0 < res["baby_gpt_val_loss"] < 4.2  # below a uniform guess, ln 65


@pytest.mark.slow
def test_icl_slice_reproduces():
    "3 training steps, 4 test pieces, k = 0 and 1 (about 5 s): the scores the experiment saved."
    saved = load_result("icl")["results"]["slice"]
    torch.set_num_threads(1)
    again = _icl().slice_run(saved["n_steps"], saved["n_test"], tuple(saved["ks"]))
    assert [(r["piece"], r["k"]) for r in again["scores"]] == [(r["piece"], r["k"]) for r in saved["scores"]]
    for new, old in zip(again["scores"], saved["scores"]):
        for score in ("joint", "channel"):
            assert new[score] == pytest.approx(old[score], abs=2e-3)
