"Tests for the `transformerbook` command line: train, resume, sample, and one-line errors for bad input."
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from transformerbook.cli import build_parser, main
from transformerbook.training import TrainConfig, load_checkpoint, lr_at

TINY = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--context-length", "16", "--eval-interval", "5",
        "--eval-iters", "2", "--batch-size", "4", "--warmup-iters", "2", "--no-progress"]
POEM = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 20


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def corpus(tmp_path):
    p = tmp_path/"poem.txt"
    p.write_text(POEM)
    return p


@pytest.fixture
def trained(tmp_path, corpus):
    status, out, err = run("train", "--data", corpus, "--out", tmp_path/"run", "--max-iters", 10, *TINY)
    assert status == 0, err
    return tmp_path/"run"


def test_help_documents_every_option(capsys):
    assert main(["--help"]) == 0
    assert main(["train", "--help"]) == 0
    assert main(["sample", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--data", "--tokenizer", "--out", "--resume", "--force", "--max-iters", "--n-layers", "--n-heads",
                   "--d-model",
                   "--context-length", "--batch-size", "--learning-rate", "--dropout", "--seed", "--eval-interval",
                   "--checkpoint", "--prompt", "--max-new-tokens", "--temperature", "--top-k", "--top-p"):
        assert option in text, option
    for action in build_parser()._subparsers._group_actions[0].choices["train"]._actions:
        assert action.help, action.option_strings


def test_train_writes_checkpoint_and_reports(trained):
    ckpt = load_checkpoint(trained)
    assert ckpt["step"] == 10 and ckpt["model_config"]["d_model"] == 32 and ckpt["tokenizer"]["kind"] == "char"
    assert ckpt["model_config"]["fused"] is True


def test_resume_matches_uninterrupted(tmp_path, corpus, trained):
    status, _, err = run("train", "--data", corpus, "--out", trained, "--resume", "--max-iters", 20, "--no-progress")
    assert status == 0, err
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"full", "--max-iters", 20, *TINY,
                         "--lr-decay-iters", 20)
    assert status == 0, err
    # the first run's schedule decayed over 10 steps (lr_decay_iters = max_iters = 10): set it explicitly to compare
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"a", "--max-iters", 10, *TINY,
                         "--lr-decay-iters", 20)
    assert status == 0, err
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"a", "--resume", "--max-iters", 20,
                         "--no-progress")
    assert status == 0, err
    resumed, full = load_checkpoint(tmp_path/"a"), load_checkpoint(tmp_path/"full")
    assert resumed["history"]["iter_loss"] == full["history"]["iter_loss"] and len(full["history"]["iter_loss"]) == 20


def test_resume_with_more_iters_keeps_the_learning_rate_schedule(corpus, trained):
    original = TrainConfig.from_dict(load_checkpoint(trained)["train_config"])
    assert original.lr_decay_iters == 10  # the new run stored its max_iters, not None
    status, _, err = run("train", "--data", corpus, "--out", trained, "--resume", "--max-iters", 16, "--no-progress")
    assert status == 0, err
    ckpt = load_checkpoint(trained)
    lrs = ckpt["history"]["lr"]
    assert len(lrs) == 16 and ckpt["train_config"]["lr_decay_iters"] == 10
    assert lrs == [lr_at(s, original) for s in range(16)]  # step 10 on: min_lr, as the first run's schedule says
    assert lrs[10] == original.min_lr < lrs[9]


def test_new_run_refuses_to_overwrite_a_checkpoint(tmp_path, corpus, trained):
    before = load_checkpoint(trained)
    status, out, err = run("train", "--data", corpus, "--out", trained, "--max-iters", 5, *TINY)
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err == (f"error: {trained/'ckpt.pt'} already exists: continue it with --resume, "
                   "or overwrite it with --force\n")
    after = load_checkpoint(trained)
    assert after["step"] == before["step"] == 10 and after["history"] == before["history"]
    status, _, err = run("train", "--data", corpus, "--out", trained, "--resume", "--force", *TINY)
    assert status == 2 and "contradict" in err
    status, _, err = run("train", "--data", corpus, "--out", trained, "--max-iters", 5, *TINY, "--force")
    assert status == 0, err
    assert load_checkpoint(trained)["step"] == 5  # overwritten, as asked


def test_reported_checkpoint_path_is_the_written_one(tmp_path, corpus):
    out = tmp_path/"run.pt"  # a folder whose name ends in .pt: the checkpoint is run.pt/ckpt.pt
    status, stdout, err = run("train", "--data", corpus, "--out", out, "--max-iters", 5, *TINY)
    assert status == 0, err
    assert f"writing {out/'ckpt.pt'}" in err and stdout.rstrip().endswith(f"checkpoint {out/'ckpt.pt'}")
    assert (out/"ckpt.pt").is_file()
    status, _, err = run("train", "--data", corpus, "--out", out, "--resume", "--max-iters", 6, "--no-progress")
    assert status == 0 and f"resuming {out/'ckpt.pt'}" in err, err
    (tmp_path/"file").write_text("x")
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"file", *TINY)
    assert status == 2 and "is a file" in err and err.count("\n") == 1


def test_sample_is_reproducible(trained):
    args = ["sample", "--checkpoint", trained, "--prompt", "Shall", "--max-new-tokens", 30]
    a, b = run(*args, "--seed", 1), run(*args, "--seed", 1)
    assert a[0] == 0 and a == b and a[1].startswith("Shall") and len(a[1]) == len("Shall") + 30 + 1
    assert run(*args, "--temperature", 0.8, "--top-k", 5, "--top-p", 0.9, "--seed", 2)[0] == 0
    # greedy ignores the seed
    assert run(*args, "--temperature", 0)[1] == run(*args, "--temperature", 0, "--seed", 9)[1]


@pytest.mark.parametrize("argv, message", [
    (["train", "--data", "wikitext"], "unknown data set 'wikitext'"),
    (["train", "--batch-size", "0"], "batch_size=0 must be an int >= 1"),
    (["train", "--learning-rate", "0"], "learning_rate=0.0 must be > 0"),
    (["train", "--learning-rate=-1e-3"], "learning_rate=-0.001 must be > 0"),
    (["train", "--lr", "0"], "learning_rate=0.0 must be > 0"),  # finetune's spelling; argparse took it for --lr-d...
    (["train", "--max", "5"], "unrecognized arguments: --max 5"),  # options are spelled in full
    (["train", "--max-iters", "-3"], "max_iters=-3 must be an int >= 1"),  # and no warm-up note before it
    (["train", "--tokenizer", "word"], "invalid choice: 'word'"),
    (["train", "--max-iters", "ten"], "invalid int value: 'ten'"),
    (["train", "--resume"], "no checkpoint at"),
    (["train", "--compile-mode", "reduce-overhead"], "compile_mode='reduce-overhead' needs compile=True (--compile)"),
    (["train", "--compile", "--compile-mode", "fast"], "invalid choice: 'fast'"),
    (["train", "--compile", "--compile-mode", "reduce-overhead", "--grad-accum-steps", "2"],
     "replays CUDA graphs, which cannot add up the gradients of grad_accum_steps=2 slices"),
    (["sample", "--checkpoint", "nowhere"], "no checkpoint at"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_is_one_line_error(tmp_path, argv, message):
    if "--out" not in argv and argv[0] == "train": argv = [*argv, "--out", str(tmp_path/"out")]
    status, out, err = run(*argv)
    assert status == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_corpus_errors(tmp_path):
    empty = tmp_path/"empty.txt"
    empty.write_text("")
    status, _, err = run("train", "--data", empty, "--out", tmp_path/"o", *TINY)
    assert status == 2 and "is empty" in err
    short = tmp_path/"short.txt"
    short.write_text("too short for a 16-token context")
    status, _, err = run("train", "--data", short, "--out", tmp_path/"o", *TINY)
    assert status == 2 and "needs more than context_length=16" in err and err.count("\n") == 1


def test_missing_data_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("TRANSFORMERBOOK_DATA", raising=False)
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path/"cache"))
    import transformerbook.data as data
    def offline(*a, **k): raise ConnectionError("no network")
    monkeypatch.setattr(data.pooch, "retrieve", offline)
    status, _, err = run("train", "--out", tmp_path/"o", *TINY)
    assert status == 2 and err.startswith("error: could not download tinyshakespeare.txt") and err.count("\n") == 1


def test_bad_checkpoints(tmp_path, corpus, trained):
    (tmp_path/"bad").mkdir()
    (tmp_path/"bad"/"ckpt.pt").write_bytes(b"\x00garbage")
    for argv in (["sample", "--checkpoint", tmp_path/"bad"],
                 ["train", "--data", corpus, "--out", tmp_path/"bad", "--resume"]):
        status, _, err = run(*argv)
        assert status == 2 and "corrupt or truncated" in err and err.count("\n") == 1
    status, _, err = run("train", "--data", corpus, "--out", trained, "--resume", "--d-model", 64)
    assert status == 2 and "cannot resume" in err and "'d_model': (32, 64)" in err
    status, _, err = run("train", "--data", corpus, "--out", trained, "--resume", "--tokenizer", "gpt2")
    assert status == 2 and "cannot resume" in err


def test_console_script(tmp_path, trained):
    exe = Path(sys.executable).parent/"transformerbook"
    assert exe.exists(), "run `pip install -e .` so the console script exists"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([exe, "sample", "--checkpoint", trained, "--prompt", "Thou", "--max-new-tokens", "10"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0 and res.stdout.startswith("Thou"), res.stderr
    res = subprocess.run([exe, "train", "--out", tmp_path/"o", "--batch-size", "0"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 2 and res.stderr == "error: batch_size=0 must be an int >= 1\n"


# ------------------------------------------------------------- issue 12: short runs, checkpoint files, execution, data
_W = TINY.index("--warmup-iters")
SHORT_TINY = TINY[:_W] + TINY[_W + 2:]  # keep the default 100-step warm-up


def test_max_iters_40_shortens_the_warmup(tmp_path, corpus):
    status, out, err = run("train", "--data", corpus, "--out", tmp_path/"quick", "--max-iters", 40, *SHORT_TINY)
    assert status == 0, err
    assert "warm-up shortened from 100 to 4 steps" in err and "lr_decay_iters" not in err
    assert load_checkpoint(tmp_path/"quick")["train_config"]["warmup_iters"] == 4


def test_sample_from_a_checkpoint_file_with_any_name(tmp_path, trained):
    (tmp_path/"model.ckpt").write_bytes((trained/"ckpt.pt").read_bytes())
    status, out, err = run("sample", "--checkpoint", tmp_path/"model.ckpt", "--prompt", "Thou", "--max-new-tokens", 5)
    assert status == 0 and out.startswith("Thou"), err


def test_execution_options_train_and_resume(tmp_path, corpus):
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"x", "--max-iters", 4, *TINY, "--device", "cpu",
                         "--dtype", "bfloat16", "--grad-accum-steps", 2)
    assert status == 0, err
    train_cfg = load_checkpoint(tmp_path/"x")["train_config"]
    assert (train_cfg["dtype"], train_cfg["grad_accum_steps"]) == ("bfloat16", 2)
    # execution settings may change on resume
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"x", "--resume", "--max-iters", 6,
                         "--no-progress", "--dtype", "float32", "--grad-accum-steps", 1)
    assert status == 0, err
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"y", *TINY, "--grad-accum-steps", 3)
    assert status == 2 and err.startswith("error: batch_size=4 is not divisible into 1 process(es) "
                                          "x grad_accum_steps=3")
    assert err.count("\n") == 1
    status, _, err = run("train", "--out", tmp_path/"z", "--device", "tpu")
    assert status == 2 and "device='tpu' must be auto, cpu, cuda or mps" in err


def test_prepare_then_train_from_the_folder(tmp_path, corpus):
    status, out, err = run("prepare", "--data", corpus, "--out", tmp_path/"prepared", "--no-progress")
    assert status == 0 and "transformerbook train --data" in out, err
    status, out, err = run("train", "--data", tmp_path/"prepared", "--out", tmp_path/"run", "--max-iters", 4, *TINY)
    assert status == 0, err
    assert "bits/byte" in out and "bits/byte" in err
    status, _, err = run("train", "--data", tmp_path/"prepared", "--tokenizer", "gpt2", "--out", tmp_path/"r2", *TINY)
    assert status == 2 and "was prepared with --tokenizer char" in err


def test_each_evaluation_is_compared_with_the_reference_band(tmp_path, corpus, monkeypatch):
    import transformerbook.recipes as recipes  # where `outside_reference` looks the band up
    monkeypatch.setattr(recipes, "reference_band",
                        lambda preset, step: {"median": 0.5, "low": 0.4, "high": 0.6, "n_seeds": 3})
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"run", "--max-iters", 5, *TINY)
    assert status == 0, err
    notes = [line for line in err.splitlines() if "reference band" in line]
    assert notes and all(line.startswith("note: step ") for line in notes)
    assert "above the baby-gpt-char reference band [0.400, 0.600]" in notes[0] and "settings differ" in notes[0]


def test_a_shorter_run_is_not_the_preset(tmp_path, monkeypatch):
    "--max-iters changes the schedule, so leaving the band is expected and the note says so."
    import transformerbook.recipes as recipes  # where `outside_reference` looks the band up
    monkeypatch.setattr(recipes, "reference_band",
                        lambda preset, step: {"median": 9.5, "low": 9.4, "high": 9.6, "n_seeds": 3})
    status, _, err = run("train", "--out", tmp_path/"run", "--max-iters", 2, "--eval-interval", 2, "--eval-iters", 1,
                         "--no-progress")
    assert status == 0, err
    assert "below the baby-gpt-char reference band" in err and "settings differ" in err


def test_the_bpe_preset_is_compared_with_its_measured_band(tmp_path, corpus, monkeypatch):
    "`--preset bpe-gpt2` looks up the bpe-gpt2 band that experiments/reference_curves.py measured, and finds it."
    import transformerbook.recipes as recipes  # where `outside_reference` looks the band up
    from transformerbook.data import load_result
    curves = load_result("reference_curves")["results"]["bpe-gpt2"]
    assert len(curves["runs"]) >= 3 and curves["steps"][-1] == 600
    looked_up, real = [], recipes.reference_band
    monkeypatch.setattr(recipes, "reference_band", lambda preset, step: looked_up.append(
        (preset, step, real(preset, step))) or looked_up[-1][2])
    status, out, err = run("train", "--preset", "bpe-gpt2", "--data", corpus, "--out", tmp_path/"run",
                           "--max-iters", 2, *TINY)
    assert status == 0, err
    assert [(preset, step) for preset, step, _ in looked_up] == [("bpe-gpt2", 0), ("bpe-gpt2", 2)]
    band = looked_up[0][2]
    assert band is not None and band["n_seeds"] >= 3 and band["low"] <= band["median"] <= band["high"]
    assert band["median"] == pytest.approx(curves["median"][0])


def test_the_log_line_names_torch_compile_mode():
    "The run's first line says ', compiled' and, when it is not the default, torch.compile's mode."
    from transformerbook.cli import _compiled
    assert _compiled(TrainConfig()) == ""
    assert _compiled(TrainConfig(compile=True)) == ", compiled"
    assert _compiled(TrainConfig(compile=True, compile_mode="reduce-overhead")) == ", compiled (reduce-overhead)"


def test_an_out_under_or_at_a_file_is_a_one_line_error(tmp_path, corpus):
    status, _, err = run("prepare", "--data", corpus, "--out", corpus, "--no-progress")
    assert status == 2 and "is a file" in err and err.count("\n") == 1 and "Traceback" not in err, err
    status, _, err = run("train", "--data", corpus, "--out", corpus/"run", "--max-iters", 2, *TINY)
    assert status == 2 and f"{corpus} is a file" in err and err.count("\n") == 1, err  # before any training
    assert "Traceback" not in err


def test_the_model_card_gives_the_prepared_split(tmp_path, corpus):
    status, _, err = run("prepare", "--data", corpus, "--out", tmp_path/"prepared", "--val-fraction", 0.3,
                         "--no-progress")
    assert status == 0, err
    status, _, err = run("train", "--data", tmp_path/"prepared", "--out", tmp_path/"run", "--max-iters", 4, *TINY)
    assert status == 0, err
    card = (tmp_path/"run"/"MODEL_CARD.md").read_text()
    assert "first 70% train, last 30% validation" in card and "first 90%" not in card
