"""Issue 27 on the CPU: no host read on the training step path or in generation's loop, evaluation's one read per
split, pinned non-blocking copies on CUDA, the best weights kept beside the latest state, early stopping, the warm-up
fitted inside any decay; and issue 22's first-hour items (a prepared folder's tokenizer, the band note, literal
end-of-text markers). Small models only: every test here runs in seconds."""
from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch

from transformerbook import recipes, training
from transformerbook.cli import main
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.sampling import generate
from transformerbook.scale import count_host_reads
from transformerbook.training import (BEST_CHECKPOINT_NAME, TrainConfig, estimate_loss, load_checkpoint, load_model,
                                      model_file, train)

V = 11
MODEL = dict(vocab_size=V, context_length=8, d_model=32, n_heads=2, n_layers=1)


def noisy(n: int, p: float, g: torch.Generator) -> torch.Tensor:
    "0, 1, ..., V-1, 0, 1, ... with a share p of the ids replaced by random ones: learnable, then overfitted."
    ids = torch.arange(n) % V
    return torch.where(torch.rand(n, generator=g) < p, torch.randint(0, V, (n,), generator=g), ids)


def data():
    g = torch.Generator().manual_seed(0)
    return noisy(200, 0.3, g), noisy(200, 0.3, g)


OVERFIT = dict(max_iters=50, batch_size=8, learning_rate=1e-2, min_lr=1e-2, warmup_iters=0, eval_interval=5,
               eval_iters=2, log_interval=4)


def test_the_counter_counts_a_read():
    "The counter is not blind: a loss read with .item() or `if tensor` inside the package is counted."
    model = GPT(GPTConfig(**MODEL))
    with count_host_reads() as reads:
        estimate_loss(model, {"val": data()[1]}, batch_size=2, eval_iters=3)
    assert reads == {"transformerbook.training:estimate_loss": 1}  # one read for the split, not one per batch
    loss = torch.tensor(2.0)
    with count_host_reads(prefix=__name__) as reads:
        values = [bool(loss > 1), float(loss), loss.item(), torch.arange(3.0).tolist(), torch.arange(3).tolist()]
    assert reads == {f"{__name__}:test_the_counter_counts_a_read": 4}, values  # all but the integer list
    assert torch.Tensor.item.__name__ == "item"  # the methods are restored afterwards


def test_at_most_one_host_read_per_log_interval():
    tr, va = data()
    train_cfg = TrainConfig(**{**OVERFIT, "max_iters": 12, "eval_interval": 12, "log_interval": 4})
    torch.manual_seed(0)
    with count_host_reads() as reads:
        history = train(GPT(GPTConfig(**MODEL)), tr, va, train_cfg, progress=False)
    evaluations = reads.pop("transformerbook.training:estimate_loss")
    assert len(history.steps) == 2 and evaluations == 2 * 2  # two evaluations, one read per split each
    assert sum(reads.values()) <= math.ceil(train_cfg.max_iters / train_cfg.log_interval), reads  # 3 for 12 steps
    assert len(history.iter_loss) == 12 and all(math.isfinite(x) for x in history.iter_loss)


STYLES = {"gpt2": {}, "qwen3": dict(normalization="rms", positional="rotary", activation="swiglu", bias=False,
                                     n_kv_heads=1, qk_norm=True, fused=True, dropout=0.1)}


@pytest.mark.parametrize("style", STYLES)
def test_the_model_compiles_to_one_graph_in_training_and_evaluation(style):
    """`torch.compile` replays the step as CUDA graphs (`--compile-mode reduce-overhead`) only where TorchDynamo
    captured the forward whole: a graph break (a host read, a Python branch on a tensor's value) would split the step
    and bring back a launch per kernel. TorchDynamo's `explain` (no code generation) is not blind: a read in a
    module's forward is a break."""
    class Reads(torch.nn.Module):
        def forward(self, x): return x * 2 if x.sum() > 0 else x
    torch._dynamo.reset()
    try:
        assert torch._dynamo.explain(Reads())(torch.ones(3)).graph_break_count == 1
        model = GPT(GPTConfig(**{**MODEL, **STYLES[style]}))
        ids = torch.randint(0, V, (2, MODEL["context_length"]))
        for mode, grad in (("train", True), ("eval", False)):
            getattr(model, mode)()
            with torch.set_grad_enabled(grad):
                found = torch._dynamo.explain(model)(ids)
            assert (found.graph_count, found.graph_break_count) == (1, 0), (mode, found.break_reasons)
    finally:
        torch._dynamo.reset()


def test_generation_reads_the_prompt_once_not_per_token():
    model = GPT(GPTConfig(**MODEL)).eval()
    counts = []
    for n in (2, 7):
        with count_host_reads() as reads:
            generate(model, [1, 2, 3], n, temperature=1.0, generator=torch.Generator().manual_seed(0))
        counts.append(sum(reads.values()))
    assert counts[0] == counts[1] <= 4, counts  # the prompt's checks and one NaN test after the loop; none per token


def test_generation_copies_its_random_numbers_without_waiting_for_the_device(monkeypatch):
    """Sampling draws its uniform numbers on the CPU (a seed gives the same numbers on every device) and hands each
    token's numbers to `sampling.host_to_device`, whose CUDA branch queues the copy from pinned memory (the next test)
    instead of `.to("cuda")`, which would make the host wait for the GPU at every token."""
    from transformerbook import sampling
    copies, real = [], sampling.host_to_device

    def recorded(t, device):
        copies.append((t.dtype, tuple(t.shape), t.device, device))
        return real(t, device)

    monkeypatch.setattr(sampling, "host_to_device", recorded)
    model = GPT(GPTConfig(**MODEL)).eval()
    out = generate(model, [[1, 2, 3], [4, 5, 6]], 5, temperature=1.0, generator=torch.Generator().manual_seed(0))
    cpu = torch.device("cpu")
    assert copies == [(torch.float64, (2,), cpu, cpu)] * 5  # one (B,) float64 copy per token, through the helper
    monkeypatch.setattr(sampling, "host_to_device", real)
    again = generate(model, [[1, 2, 3], [4, 5, 6]], 5, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)  # the recording changed nothing


def test_host_to_device_pins_and_queues_on_cuda(monkeypatch):
    "The CUDA branch of `host_to_device` (batches and sampling), reached on a CPU by recording the calls it makes."
    from transformerbook.sampling import host_to_device
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: calls.append((a, k)) or self)
    host_to_device(torch.zeros(3, dtype=torch.float64), "cuda")
    assert calls == ["pin", ((torch.device("cuda"),), {"non_blocking": True})]
    calls.clear()
    host_to_device(torch.zeros(3), torch.device("cpu"))
    assert calls == [((torch.device("cpu"),), {})]  # the CPU path: a plain .to, which copies nothing


def test_generation_still_refuses_nan_logits():
    model = GPT(GPTConfig(**MODEL)).eval()
    with torch.no_grad(): model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="logits hold NaN"):
        generate(model, [1, 2, 3], 3, temperature=1.0)


def test_generation_names_a_temperature_that_overflows_the_logits():
    "u / τ overflowing float32 left rows of +inf and NaN, and `generate` returned arbitrary ids; now it says why."
    model = GPT(GPTConfig(**MODEL)).eval()
    with pytest.raises(ValueError, match=r"temperature=1e-45 is too small .* temperature=0 is greedy decoding"):
        generate(model, [1, 2, 3], 3, temperature=1e-45)
    with torch.no_grad(): model.lm_head.weight.fill_(float("inf"))  # +inf logits are the model's flaw, named first
    with pytest.raises(ValueError, match="the model's logits hold NaN or \\+inf"):
        generate(model, [1, 2, 3], 3, temperature=1e-45)


def test_bad_ids_still_get_a_clear_error():
    tr, va = data()
    bad = tr.clone()
    bad[50] = V + 3
    with pytest.raises(ValueError, match=f"token id {V + 3} is outside \\[0, vocab_size={V}\\)"):
        train(GPT(GPTConfig(**MODEL)), bad.repeat(20), va, TrainConfig(max_iters=3, batch_size=64, eval_interval=5,
                                                                      eval_iters=1, warmup_iters=0), progress=False)
    with pytest.raises(ValueError, match="outside"):  # a public forward still checks by itself
        GPT(GPTConfig(**MODEL))(torch.tensor([[V]]))


def test_pinned_non_blocking_copies_on_cuda(monkeypatch):
    "The CUDA branch of `_to_device`, reached on a CPU by recording the calls it makes."
    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: calls.append((a, k)) or self)
    ids = torch.zeros(2, 3, dtype=torch.long)
    training._to_device(ids, ids, torch.device("cuda"))
    assert calls == ["pin", ((torch.device("cuda"),), {"non_blocking": True})] * 2
    calls.clear()
    training._to_device(ids, ids, torch.device("cpu"))
    assert "pin" not in calls and all(k == {} for _, k in calls)  # the CPU path: a plain .to


def test_the_best_weights_are_kept_and_loaded_by_default(tmp_path):
    tr, va = data()
    torch.manual_seed(0)
    history = train(GPT(GPTConfig(**MODEL)), tr, va, TrainConfig(**OVERFIT), out_dir=tmp_path, progress=False)
    best = history.val_loss.index(min(history.val_loss))
    assert 0 < best < len(history.val_loss) - 1 and history.val_loss[-1] > history.val_loss[best]  # it overfits
    assert model_file(tmp_path).name == BEST_CHECKPOINT_NAME and load_checkpoint(model_file(tmp_path))["step"] == \
        history.steps[best]
    model, _ = load_model(tmp_path)
    train_cfg = TrainConfig(**OVERFIT)
    sizes = (train_cfg.batch_size, train_cfg.eval_iters, train_cfg.seed + 1)  # what `train` evaluates with
    again = estimate_loss(model, {"train": tr, "val": va}, *sizes)
    assert again["val"] == history.val_loss[best]  # the same batches: exactly the run's best evaluation
    latest, _ = load_model(tmp_path, latest=True)
    assert estimate_loss(latest, {"val": va}, *sizes)["val"] == history.val_loss[-1]
    assert load_checkpoint(tmp_path)["optimizer"] is not None  # ckpt.pt still resumes
    assert load_checkpoint(tmp_path/BEST_CHECKPOINT_NAME)["optimizer"] is None  # best.pt: weights only


def test_patience_stops_early_and_resume_stays_exact(tmp_path):
    tr, va = data()
    torch.manual_seed(0)
    history = train(GPT(GPTConfig(**MODEL)), tr, va, TrainConfig(**OVERFIT, patience=2), progress=False)
    best = history.val_loss.index(min(history.val_loss))
    assert len(history.steps) - 1 - best == 2 and history.steps[-1] < OVERFIT["max_iters"]
    # resume across a log interval and an evaluation: bit for bit the uninterrupted run
    train_cfg = TrainConfig(**{**OVERFIT, "max_iters": 14})
    torch.manual_seed(0)
    full = train(GPT(GPTConfig(**MODEL)), tr, va, train_cfg, progress=False)
    torch.manual_seed(0)
    train(GPT(GPTConfig(**MODEL)), tr, va, TrainConfig(**{**OVERFIT, "max_iters": 7, "lr_decay_iters": 14}),
          out_dir=tmp_path, progress=False)
    resumed = train(GPT(GPTConfig(**MODEL)), tr, va, train_cfg, out_dir=tmp_path, resume=True, progress=False)
    assert resumed.iter_loss == full.iter_loss  # the interrupted run also evaluated at its end, step 7:
    assert dict(zip(resumed.steps, resumed.val_loss)).items() >= dict(zip(full.steps, full.val_loss)).items()


def test_a_new_run_does_not_keep_an_old_best(tmp_path):
    tr, va = data()
    (tmp_path/BEST_CHECKPOINT_NAME).write_bytes(b"an older run's best")
    train(GPT(GPTConfig(**MODEL)), tr, va, TrainConfig(max_iters=2, batch_size=4, eval_interval=2, eval_iters=1,
                                                      warmup_iters=0), out_dir=tmp_path, progress=False)
    assert load_checkpoint(tmp_path/BEST_CHECKPOINT_NAME)["step"] in (0, 2)


def test_fit_warmup_whichever_options_set_the_decay():
    base = TrainConfig().to_dict()
    for given, decay in (({"max_iters": 40}, 40), ({"max_iters": 2, "lr_decay_iters": 2}, 2),
                         ({"max_iters": 500, "lr_decay_iters": 50}, 50)):
        fitted, notes = training.fit_warmup({**base, **given})
        assert fitted["warmup_iters"] == decay // 10 and f"from 100 to {decay // 10} steps" in notes[0]
        TrainConfig.from_dict(fitted)  # valid
    assert training.fit_warmup(base) == (base, [])


# ------------------------------------------------------------------------------------------- the command line
def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()


SMALL = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--context-length", "16", "--eval-iters", "1",
         "--batch-size", "4", "--no-progress"]
POEM = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 20


def test_cli_gpu_preset_short_decay_and_sample_from_the_best(tmp_path):
    corpus = tmp_path/"poem.txt"
    corpus.write_text(POEM)
    status, out, err = run("train", "--data", corpus, "--out", tmp_path/"r", "--preset", "gpu-shakespeare-char",
                           "--max-iters", 2, "--lr-decay-iters", 2, "--eval-interval", 1, "--dropout", 0, *SMALL)
    assert status == 0, err
    assert "warm-up shortened from 100 to 0 steps" in err and "best val loss" in out
    status, out, err = run("sample", "--checkpoint", tmp_path/"r", "--prompt", "Thou", "--max-new-tokens", 3)
    assert status == 0 and "best.pt, step " in err and "lowest validation loss" in err, err
    status, out, err = run("sample", "--checkpoint", tmp_path/"r", "--latest", "--prompt", "Thou",
                           "--max-new-tokens", 3)
    assert status == 0 and "ckpt.pt, step 2" in err, err
    assert "lowest validation loss" in (tmp_path/"r"/"MODEL_CARD.md").read_text()


def test_cli_patience_option(tmp_path):
    corpus = tmp_path/"poem.txt"
    corpus.write_text(POEM)
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"r", "--max-iters", 2, "--patience", 3,
                         "--log-interval", 2, "--eval-interval", 2, *SMALL)
    assert status == 0, err
    train_cfg = load_checkpoint(tmp_path/"r")["train_config"]
    assert (train_cfg["patience"], train_cfg["log_interval"]) == (3, 2)


def test_cli_train_uses_the_prepared_folders_tokenizer(tmp_path):
    corpus = tmp_path/"poem.txt"
    corpus.write_text(POEM)
    assert run("prepare", "--data", corpus, "--out", tmp_path/"p", "--no-progress")[0] == 0
    # the bpe-gpt2 preset's tokenizer is gpt2; the folder's (char) wins
    status, _, err = run("train", "--data", tmp_path/"p", "--preset", "bpe-gpt2", "--out", tmp_path/"r",
                         "--max-iters", 2, "--eval-interval", 2, *SMALL)
    assert status == 0, err
    assert load_checkpoint(tmp_path/"r")["tokenizer"]["kind"] == "char"
    status, _, err = run("train", "--data", tmp_path/"p", "--tokenizer", "gpt2", "--out", tmp_path/"r2", *SMALL)
    assert status == 2 and "was prepared with --tokenizer char, not gpt2" in err


@pytest.mark.parametrize("named, expected", [(False, 1), (True, 3)])
def test_the_band_note_is_noted_once_for_settings_of_ones_own(tmp_path, monkeypatch, named, expected):
    monkeypatch.setattr(recipes, "reference_band",
                        lambda preset, step: {"median": 0.5, "low": 0.4, "high": 0.6, "n_seeds": 3})
    corpus = tmp_path/"poem.txt"
    corpus.write_text(POEM)
    status, _, err = run("train", "--data", corpus, "--out", tmp_path/"r", "--max-iters", 4, "--eval-interval", 2,
                         *(["--preset", "baby-gpt-char"] if named else []), *SMALL)
    assert status == 0, err
    notes = [line for line in err.splitlines() if "reference band" in line]
    assert len(notes) == expected, notes  # 3 evaluations (steps 0, 2, 4): each one for a named preset


def test_prepare_keeps_literal_end_of_text_markers(tmp_path):
    "A TinyStories-shaped file: ids equal tiktoken's with the special allowed, split by split."
    tiktoken = pytest.importorskip("tiktoken")
    from transformerbook.data import gpt2_encoding
    enc = gpt2_encoding()
    assert isinstance(enc, tiktoken.Encoding)
    stories = "".join(f"Once upon a time, a cat named Tom{i} found a red ball.\n<|endoftext|>" for i in range(40))
    (tmp_path/"stories.txt").write_text(stories)
    for flag, allowed in (([], False), (["--allowed-special"], True)):
        out = tmp_path/f"p{int(allowed)}"
        status, _, err = run("prepare", "--data", tmp_path/"stories.txt", "--tokenizer", "gpt2", "--out", out,
                             "--no-progress", *flag)
        assert status == 0, err
        meta = json.loads((out/"meta.json").read_text())
        raw = stories.encode()
        texts = raw[:meta["train_bytes"]].decode(), raw[meta["train_bytes"]:].decode()
        special = {"allowed_special": {"<|endoftext|>"}} if allowed else {}
        expected = [enc.encode(texts[0], **special) if allowed else enc.encode_ordinary(texts[0]),
                    (enc.encode(texts[1], **special) if allowed else enc.encode_ordinary(texts[1])) + [enc.eot_token]]
        for split, ids in zip(("train", "val"), expected):
            got = np.fromfile(out/f"{split}.bin", dtype=meta["dtype"]).tolist()
            assert got == ids, split
        n_eot = sum(np.fromfile(out/f"{s}.bin", dtype=meta["dtype"]).tolist().count(enc.eot_token) for s in ("train",
                                                                                                            "val"))
        assert n_eot == (40 + 1 if allowed else 1)  # every marker, plus the one that ends the file
    status, _, err = run("prepare", "--data", tmp_path/"stories.txt", "--out", tmp_path/"c", "--allowed-special",
                         "--no-progress")
    assert status == 2 and "allow_special needs the gpt2 tokenizer" in err


def test_side_by_side_reads_both_programs_evaluations():
    """bench/side_by_side.py (issue 27's comparison with nanoGPT) finds every evaluation in both programs' logs: the
    book's lines as its CLI writes them, and nanoGPT's as its train.py formats them (`step {iter_num}: train loss
    {:.4f}, val loss {:.4f}`); the book's closing summary repeats the last evaluation and is not counted twice."""
    import argparse
    import importlib.util
    from pathlib import Path

    from transformerbook.cli import _eval_logger
    path = Path(__file__).parents[1] / "bench" / "side_by_side.py"
    spec = importlib.util.spec_from_file_location("side_by_side", path)
    sbs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sbs)
    lines = []
    log = _eval_logger(lines.append, "baby-gpt-char", True, (1.0, 1.0))
    for step, (tr, va) in ((0, (4.19, 4.2)), (250, (1.9653, 2.0661)), (1750, (1.81, 1.9092))):
        log(step, {"train": tr, "val": va})
    lines.append("step 1750: train loss 1.8100, val loss 1.9092 (2.754 bits/byte); best val loss 1.9092 (step 1750)")
    assert sbs.evaluations("\n".join(lines)) == [(0, 4.19, 4.2), (250, 1.9653, 2.0661), (1750, 1.81, 1.9092)]
    nano = "iter 0: loss 4.2, time 10ms, mfu -100.00%\nstep 250: train loss 1.9653, val loss 2.0661\nsaving checkpoint"
    assert sbs.evaluations(nano) == [(250, 1.9653, 2.0661)]
    book_cmd, nano_cmd, _ = sbs.commands(argparse.Namespace(gpu=True, max_iters=None), Path("out"))
    assert " ".join(book_cmd).endswith("--preset gpu-shakespeare-char --device cuda --dtype bfloat16 --compile")
    assert nano_cmd[1:3] == ["train.py", "config/train_shakespeare_char.py"] and "--compile=True" in nano_cmd
    graphs = argparse.Namespace(gpu=True, max_iters=None, compile_mode="reduce-overhead")
    graphs_cmd, nano_again, _ = sbs.commands(graphs, Path("out"))
    assert graphs_cmd[-2:] == ["--compile-mode", "reduce-overhead"] and nano_again == nano_cmd  # the book's only
    book_cmd, nano_cmd, env = sbs.commands(argparse.Namespace(gpu=False, max_iters=20), Path("out"))
    assert env["OMP_NUM_THREADS"] == "1" and "--bias=True" in nano_cmd  # the baby GPT has GPT-2's biases
    assert book_cmd[-4:] == ["--max-iters", "20", "--lr-decay-iters", "20"] and nano_cmd[-2:] == ["--max_iters=20",
                                                                                                 "--lr_decay_iters=20"]
