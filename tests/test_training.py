"Tests for transformerbook.training: loss, batching, packing, schedule, optimizer, the loop, checkpoints and resume."
from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from transformerbook.data import END_OF_TEXT_ID
from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.tokenization import CharTokenizer
from transformerbook.training import (
    CheckpointError, TrainConfig, TrainHistory, TrainingDivergedError, autocast_notes, baby_gpt_configs,
    configure_optimizer, cross_entropy_loss, estimate_loss, get_batch, load_checkpoint, load_dataset, load_model, lr_at,
    pack_documents, save_checkpoint, train)

TINY = dict(vocab_size=11, context_length=8, d_model=16, n_heads=2, n_layers=2)


def tiny_model(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY, **kw}))


def tiny_data(n=400, seed=0):
    "A learnable corpus: counting modulo V, with one token in ten replaced by noise."
    g = torch.Generator().manual_seed(seed)
    def make(n):
        ids = torch.arange(n) % TINY["vocab_size"]
        noise = torch.rand(n, generator=g) < 0.1
        return torch.where(noise, torch.randint(0, TINY["vocab_size"], (n,), generator=g), ids)
    return make(n), make(n // 2)


TINY_TRAIN = dict(max_iters=6, batch_size=4, learning_rate=3e-3, min_lr=3e-4, warmup_iters=2, lr_decay_iters=6,
                  eval_interval=3, eval_iters=2, seed=7)


# ---------------------------------------------------------------- the loss
@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 5), V=st.integers(2, 9), seed=st.integers(0, 10_000),
       use_ignore=st.booleans())
def test_cross_entropy_matches_torch(B, T, V, seed, use_ignore):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64) * 3
    targets = torch.randint(0, V, (B, T), generator=g)
    if use_ignore:
        targets[torch.rand(B, T, generator=g) < 0.3] = -100
        targets[0, 0] = 0  # at least one kept position
    ours = cross_entropy_loss(logits, targets, ignore_index=-100 if use_ignore else None)
    ref = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    torch.testing.assert_close(ours, ref)


def test_cross_entropy_is_minus_log_prob_of_target():
    logits = torch.tensor([[2.0, 1.0, 0.1]])
    expected = -torch.log_softmax(logits, -1)[0, 0]
    torch.testing.assert_close(cross_entropy_loss(logits, torch.tensor([0])), expected)


def test_cross_entropy_bad_input():
    with pytest.raises(ValueError, match=r"logits shape \(2, 3, 5\)"):
        cross_entropy_loss(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, V=5\)"):
        cross_entropy_loss(torch.zeros(2, 5), torch.tensor([1, 5]))
    with pytest.raises(TypeError, match="got dtype torch.float32"):
        cross_entropy_loss(torch.zeros(2, 5), torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="got dtype torch.bool"):
        cross_entropy_loss(torch.zeros(2, 5), torch.tensor([True, False]))
    logits = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))  # int32 targets are fine
    torch.testing.assert_close(cross_entropy_loss(logits, torch.tensor([1, 4, 0], dtype=torch.int32)),
                               F.cross_entropy(logits, torch.tensor([1, 4, 0])))


# ---------------------------------------------------------------- batches and packing
def test_get_batch_shift_and_determinism():
    data = torch.arange(100)
    token_ids, targets = get_batch(data, 5, 8, torch.Generator().manual_seed(0))
    assert token_ids.shape == targets.shape == (5, 8) and token_ids.dtype == targets.dtype == torch.int64
    torch.testing.assert_close(targets[:, :-1], token_ids[:, 1:])
    torch.testing.assert_close(targets[:, -1], token_ids[:, -1] + 1)
    token_ids2, _ = get_batch(data, 5, 8, torch.Generator().manual_seed(0))
    torch.testing.assert_close(token_ids, token_ids2)


def test_get_batch_errors():
    with pytest.raises(ValueError, match="batch_size=0"):
        get_batch(torch.arange(100), 0, 8)
    with pytest.raises(ValueError, match="has 8 tokens.*context_length=8"):
        get_batch(torch.arange(8), 2, 8)
    get_batch(torch.arange(9), 2, 8)  # exactly one window fits
    with pytest.raises(TypeError, match="got torch.float32"):  # float ids would be silently truncated by .long()
        get_batch(torch.arange(100) + 0.7, 2, 8)
    with pytest.raises(TypeError, match="got list"):
        get_batch(list(range(100)), 2, 8)


def test_pack_documents():
    out = pack_documents([[1, 2, 3], [4, 5], [6]], context_length=3, eos_token_id=0)
    # stream 1 2 3 0 4 5 0 6 0 -> three full windows, nothing left over
    torch.testing.assert_close(out, torch.tensor([[1, 2, 3], [0, 4, 5], [0, 6, 0]]))
    out = pack_documents([[1, 2, 3], [4]], context_length=4)
    torch.testing.assert_close(out, torch.tensor([[1, 2, 3, END_OF_TEXT_ID]]))  # "4 <eot>" is dropped
    assert pack_documents([], 4).shape == (0, 4)
    with pytest.raises(ValueError, match="context_length=0"):
        pack_documents([[1]], 0)


# ---------------------------------------------------------------- configuration and schedule
@pytest.mark.parametrize("kw, msg", [
    (dict(batch_size=0), "batch_size=0"), (dict(learning_rate=0.0), "learning_rate=0.0"),
    (dict(learning_rate=-1e-3), "learning_rate=-0.001"), (dict(max_iters=0), "max_iters=0"),
    (dict(min_lr=1.0), "min_lr=1.0"), (dict(warmup_iters=10, lr_decay_iters=5), "lr_decay_iters=5"),
    (dict(grad_clip=-1.0), "grad_clip=-1.0"), (dict(beta2=1.0), "beta2=1.0"), (dict(eval_iters=0), "eval_iters=0")])
def test_train_config_validation(kw, msg):
    with pytest.raises(ValueError, match=msg):
        TrainConfig(**kw)


@pytest.mark.parametrize("kw, msg", [
    (dict(learning_rate="1e-3"), "learning_rate='1e-3' must be a number, not str"),
    (dict(grad_clip=None), "grad_clip=None must be a number, not NoneType"),
    (dict(min_lr=True), "min_lr=True must be a number, not bool"),
    (dict(max_iters=10.0), "max_iters=10.0 must be an int, not float"),
    (dict(lr_decay_iters="2000"), "lr_decay_iters='2000' must be an int or None, not str"),
    (dict(seed=None), "seed=None must be an int")])
def test_train_config_type_errors_name_field_and_value(kw, msg):
    with pytest.raises(TypeError, match=msg):
        TrainConfig(**kw)
    with pytest.raises(ValueError, match="learning_rate=nan must be finite"):
        TrainConfig(learning_rate=float("nan"))


def test_train_config_round_trip():
    train_cfg = TrainConfig(max_iters=10, warmup_iters=2, lr_decay_iters=8)
    assert TrainConfig.from_dict(train_cfg.to_dict()) == train_cfg
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({"lr": 1.0})


def test_lr_schedule_shape():
    train_cfg = TrainConfig(max_iters=2000, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, lr_decay_iters=2000)
    lrs = [lr_at(s, train_cfg) for s in range(2100)]
    assert lrs[0] == pytest.approx(1e-3 / 101) and lrs[0] > 0
    assert all(a < b for a, b in zip(lrs[:100], lrs[1:101]))  # warm-up rises
    assert lrs[100] == pytest.approx(1e-3)  # peak at the warm-up boundary
    assert all(a >= b for a, b in zip(lrs[100:2000], lrs[101:2001]))  # cosine falls
    assert lrs[1050] == pytest.approx(1e-4 + 0.5 * 0.9e-3)  # half-way: the mid-point of the cosine
    assert lrs[2000] == lrs[2099] == 1e-4  # then flat at min_lr


def test_optimizer_groups():
    model = tiny_model()
    opt = configure_optimizer(model, TrainConfig(weight_decay=0.1))
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() < 2 for p in plain["params"])
    n = sum(p.numel() for g in opt.param_groups for p in g["params"])
    assert n == model.n_params()  # every parameter exactly once (the tied matrix too)
    assert any(p is model.embeddings.token.weight for p in decayed["params"])


# ---------------------------------------------------------------- fused attention == the book's attention
def test_fused_kernels_match_book_code():
    book = tiny_model(fused=False)
    fused = tiny_model(fused=True)
    fused.load_state_dict(book.state_dict())
    token_ids = torch.randint(0, TINY["vocab_size"], (3, 8))
    targets = torch.randint(0, TINY["vocab_size"], (3, 8))
    losses = []
    for m in (book, fused):
        loss = F.cross_entropy(m(token_ids).flatten(0, 1), targets.flatten())
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1])
    for (n, p), q in zip(book.named_parameters(), fused.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=n, atol=1e-6, rtol=1e-4)


def test_training_path_uses_fused_kernels():
    model_cfg, train_cfg = baby_gpt_configs()
    assert model_cfg.fused and (model_cfg.n_layers, model_cfg.n_heads, model_cfg.d_model) == (4, 4, 128)
    assert (train_cfg.max_iters, train_cfg.batch_size, model_cfg.context_length) == (2000, 12, 64)


# ---------------------------------------------------------------- the loop
def test_train_lowers_loss_and_is_deterministic():
    tr, va = tiny_data()
    train_cfg = TrainConfig(**{**TINY_TRAIN, "max_iters": 30, "eval_interval": 10, "learning_rate": 1e-2,
                               "min_lr": 1e-3, "lr_decay_iters": 30})
    h1 = train(tiny_model(), tr, va, train_cfg, progress=False)
    h2 = train(tiny_model(), tr, va, train_cfg, progress=False)
    assert h1.iter_loss == h2.iter_loss and h1.val_loss == h2.val_loss
    assert h1.steps == [0, 10, 20, 30] and len(h1.iter_loss) == len(h1.lr) == 30
    assert h1.train_loss[-1] < h1.train_loss[0] - 0.5
    assert h1.lr == [lr_at(s, train_cfg) for s in range(30)]


def test_estimate_loss_restores_mode_and_is_repeatable():
    model, (tr, va) = tiny_model(dropout=0.1), tiny_data()
    model.train()
    a = estimate_loss(model, {"train": tr, "val": va}, 4, 3, seed=1)
    b = estimate_loss(model, {"train": tr, "val": va}, 4, 3, seed=1)
    assert model.training and a == b and set(a) == {"train", "val"}
    assert abs(a["val"] - math.log(TINY["vocab_size"])) < 0.5  # untrained: about log V


def test_train_rejects_short_corpus():
    with pytest.raises(ValueError, match="validation split has 5 tokens"):
        train(tiny_model(), torch.arange(100) % 11, torch.arange(5), TrainConfig(**TINY_TRAIN), progress=False)



def test_train_names_a_model_or_settings_of_the_wrong_type(tmp_path):
    """A module without a GPT's config, or settings given as a dict, get a TypeError naming them (they raised
    AttributeError from inside the loop), before a checkpoint is touched: a run's best.pt stays."""
    tr, va = tiny_data()
    with pytest.raises(TypeError, match="model.config must be a GPTConfig, got NoneType"):
        train(torch.nn.Linear(2, 2), tr, va, TrainConfig(**TINY_TRAIN), progress=False)
    (tmp_path/"best.pt").write_bytes(b"an earlier run's best")
    with pytest.raises(TypeError, match="train_cfg must be a TrainConfig, got dict"):
        train(tiny_model(), tr, va, TINY_TRAIN, out_dir=tmp_path, progress=False)
    assert (tmp_path/"best.pt").read_bytes() == b"an earlier run's best"


# ---------------------------------------------------------------- checkpoints and exact resume
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_resume_reproduces_uninterrupted_run(tmp_path, dropout):
    tr, va = tiny_data()
    train_cfg = TrainConfig(**TINY_TRAIN)
    full = train(tiny_model(dropout=dropout), tr, va, train_cfg, out_dir=tmp_path/"full", progress=False)
    part_cfg = TrainConfig(**{**TINY_TRAIN, "max_iters": 3})  # same schedule (lr_decay_iters=6), stops at step 3
    train(tiny_model(dropout=dropout), tr, va, part_cfg, out_dir=tmp_path/"part", progress=False)
    assert load_checkpoint(tmp_path/"part")["step"] == 3
    torch.manual_seed(12345)  # the resumed run must not depend on the global RNG state at call time
    resumed = train(tiny_model(seed=99, dropout=dropout), tr, va, train_cfg, out_dir=tmp_path/"part", resume=True,
                    progress=False)
    assert resumed.iter_loss == full.iter_loss
    assert resumed.steps == full.steps and resumed.val_loss == full.val_loss


def test_resume_with_more_iters_keeps_the_schedule(tmp_path):
    """lr_decay_iters=None is fixed to the first run's max_iters and stored, so raising max_iters on resume cannot make
    lr jump."""
    tr, va = tiny_data()
    train_cfg = TrainConfig(**{**TINY_TRAIN, "lr_decay_iters": None})  # decay over max_iters = 6
    first = train(tiny_model(), tr, va, train_cfg, out_dir=tmp_path, progress=False)
    assert load_checkpoint(tmp_path)["train_config"]["lr_decay_iters"] == 6
    longer = TrainConfig(**{**train_cfg.to_dict(), "max_iters": 10})
    resumed = train(tiny_model(), tr, va, longer, out_dir=tmp_path, resume=True, progress=False)
    assert resumed.lr[:6] == first.lr
    assert resumed.lr[6:] == [lr_at(s, train_cfg) for s in range(6, 10)] == [train_cfg.min_lr] * 4  # as first planned
    assert resumed.lr[6] < resumed.lr[5]  # no jump back up the cosine
    assert load_checkpoint(tmp_path)["train_config"]["lr_decay_iters"] == 6
    # a checkpoint written before the fix (lr_decay_iters=None stored) resumes on its own max_iters' schedule too
    ckpt = load_checkpoint(tmp_path)
    ckpt["train_config"]["lr_decay_iters"] = None
    ckpt["train_config"]["max_iters"] = 10
    torch.save(ckpt, tmp_path/"ckpt.pt")
    resumed = train(tiny_model(), tr, va, TrainConfig(**{**train_cfg.to_dict(), "max_iters": 12}), out_dir=tmp_path,
                    resume=True, progress=False)
    assert resumed.lr[10:] == [train_cfg.min_lr] * 2
    with pytest.raises(CheckpointError, match=r"'lr_decay_iters': \(10, 12\)"):  # an explicit new decay is refused
        train(tiny_model(), tr, va, TrainConfig(**{**train_cfg.to_dict(), "max_iters": 14, "lr_decay_iters": 12}),
              out_dir=tmp_path, resume=True, progress=False)


def test_checkpoint_round_trip(tmp_path):
    tr, va = tiny_data()
    tok = CharTokenizer(list("abcdefghijk"))
    model = tiny_model()
    train(model, tr, va, TrainConfig(**TINY_TRAIN), out_dir=tmp_path, tokenizer=tok, progress=False)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["step"] == 6 and ckpt["model_config"] == model.config.to_dict()
    assert TrainConfig.from_dict(ckpt["train_config"]) == TrainConfig(**TINY_TRAIN)
    assert TrainHistory.from_dict(ckpt["history"]).steps == [0, 3, 6]
    loaded, tok2 = load_model(tmp_path)
    assert tok2.chars == tok.chars and not loaded.training
    token_ids = torch.randint(0, 11, (2, 8))
    torch.testing.assert_close(loaded(token_ids), model.eval()(token_ids))


def test_interrupted_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model = tiny_model()
    save_checkpoint(tmp_path, model, None, step=1)
    real_save = torch.save

    def crash(obj, f, *a, **k):
        f.write(b"PK\x03\x04 partial bytes")  # half a file, then the power goes out
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", crash)
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, model, None, step=2)
    monkeypatch.setattr(torch, "save", real_save)
    assert load_checkpoint(tmp_path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no temporary file left behind


class NaNAfter(GPT):
    "A GPT whose logits become NaN from the `n`-th forward pass in training mode on."
    def __init__(self, config, n):
        super().__init__(config)
        self.n, self.calls = n, 0

    def forward(self, *args, **kwargs):
        logits = super().forward(*args, **kwargs)
        if self.training:
            self.calls += 1
            if self.calls > self.n: return logits * float("nan")
        return logits


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    tr, va = tiny_data()
    torch.manual_seed(0)
    model = NaNAfter(GPTConfig(**TINY), n=4)
    with pytest.raises(TrainingDivergedError, match=r"became nan at step 4.*last good checkpoint \(step 3\)"):
        train(model, tr, va, TrainConfig(**TINY_TRAIN), out_dir=tmp_path, progress=False)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["step"] == 3
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())


def test_corrupt_and_incompatible_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path)
    (tmp_path/"ckpt.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_model(tmp_path)
    torch.save({"something": torch.zeros(1)}, tmp_path/"ckpt.pt")
    with pytest.raises(CheckpointError, match="not a transformerbook checkpoint"):
        load_checkpoint(tmp_path)
    tr, va = tiny_data()
    train(tiny_model(), tr, va, TrainConfig(**TINY_TRAIN), out_dir=tmp_path, progress=False)
    with pytest.raises(CheckpointError, match=r"model config differs.*'d_model': \(16, 32\)"):
        train(tiny_model(d_model=32), tr, va, TrainConfig(**TINY_TRAIN), out_dir=tmp_path, resume=True, progress=False)
    with pytest.raises(CheckpointError, match=r"training settings differ.*'batch_size': \(4, 8\)"):
        train(tiny_model(), tr, va, TrainConfig(**{**TINY_TRAIN, "batch_size": 8}), out_dir=tmp_path, resume=True,
              progress=False)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        train(tiny_model(), tr, va, TrainConfig(**TINY_TRAIN), out_dir=tmp_path/"empty", resume=True, progress=False)


class _GPT2Stub:
    "Anything with `to_dict()`: makes the checkpoint record a GPT-2 tokenizer."
    def to_dict(self): return {"kind": "gpt2"}


def test_load_model_lets_data_errors_through(tmp_path, monkeypatch):
    import transformerbook.tokenization as tokenization
    from transformerbook.data import ChecksumError, DataUnavailableError
    save_checkpoint(tmp_path, tiny_model(), None, step=0, tokenizer=_GPT2Stub())
    for error in (DataUnavailableError("gpt2 vocab.bpe is not available offline"), ChecksumError("sha256 mismatch")):
        def missing(*a, error=error, **k): raise error
        monkeypatch.setattr(tokenization, "gpt2_encoding", missing)
        with pytest.raises(type(error), match=str(error)):  # not a CheckpointError: the checkpoint is fine
            load_model(tmp_path)
    save_checkpoint(tmp_path, tiny_model(), None, step=0, tokenizer=None)
    ckpt = load_checkpoint(tmp_path)
    ckpt["tokenizer"] = {"kind": "word"}
    torch.save(ckpt, tmp_path/"ckpt.pt")
    with pytest.raises(CheckpointError, match="cannot rebuild: ValueError: unknown tokenizer kind 'word'"):
        load_model(tmp_path)


def test_load_model_error_with_empty_message(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, tiny_model(), None, step=0)
    def fail(self, *a, **k): raise RuntimeError("")
    monkeypatch.setattr(GPT, "load_state_dict", fail)
    with pytest.raises(CheckpointError, match=r"does not match this code's model: RuntimeError$"):
        load_model(tmp_path)


def test_checkpoint_stores_cuda_rng_only_when_cuda_is_used(tmp_path):
    save_checkpoint(tmp_path, tiny_model(), None, step=0)
    state = load_checkpoint(tmp_path)["rng"]["cuda"]
    if torch.cuda.is_initialized():
        assert len(state) == torch.cuda.device_count()
    else:
        assert state is None


# ---------------------------------------------------------------- data
def test_tinyshakespeare_split_sizes():
    tok, tr, va = load_dataset("tinyshakespeare", "char")
    assert (len(tr), len(va), tok.vocab_size) == (1_003_854, 111_540, 65)
    assert tr.dtype == torch.int64
    tok, tr, va = load_dataset("tinyshakespeare", "gpt2")
    assert (len(tr), len(va)) == (301_966, 36_059)
    with pytest.raises(ValueError, match="unknown data set 'wikitext'"):
        load_dataset("wikitext")


def test_lr_at_rejects_a_negative_step():
    with pytest.raises(ValueError, match="step=-1 must be a non-negative int"):
        lr_at(-1, TrainConfig())


# ---------------------------------------------------------------- checkpoint paths, resume rules, short runs
def test_checkpoint_path_names_a_file_or_a_folder(tmp_path):
    from transformerbook.training import checkpoint_file
    model = tiny_model()
    written = save_checkpoint(tmp_path/"weights.pth", model, None, step=0)  # a name with a suffix: that file
    assert written == tmp_path/"weights.pth" and written.is_file()
    written = save_checkpoint(tmp_path/"model.ckpt", model, None, step=0)
    assert written.is_file() and load_checkpoint(tmp_path/"model.ckpt")["step"] == 0
    written = save_checkpoint(tmp_path/"run", model, None, step=0)  # a name without a suffix: a run folder
    assert written == tmp_path/"run"/"ckpt.pt" and written.is_file()
    (tmp_path/"plain").write_bytes(written.read_bytes())  # an existing file without a suffix is that file
    assert checkpoint_file(tmp_path/"plain") == tmp_path/"plain" and load_checkpoint(tmp_path/"plain")["step"] == 0
    (tmp_path/"run.v2").mkdir()  # an existing folder with a suffix is a folder
    assert save_checkpoint(tmp_path/"run.v2", model, None, step=0) == tmp_path/"run.v2"/"ckpt.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ckpt", "plain", "run", "run.v2", "weights.pth"]


def test_resume_config_is_the_one_rule():
    from transformerbook.training import RESUMABLE, resume_config
    saved = TrainConfig(max_iters=100, warmup_iters=10).to_dict()
    assert resume_config(saved, {"max_iters": 300}).decay_iters == 100
    assert resume_config(saved, {"lr_decay_iters": None}).lr_decay_iters == 100
    train_cfg = resume_config(saved, {"grad_accum_steps": 3, "dtype": "bfloat16", "compile": True, "eval_iters": 5})
    assert (train_cfg.grad_accum_steps, train_cfg.dtype, train_cfg.compile, train_cfg.eval_iters) == \
        (3, "bfloat16", True, 5)
    with pytest.raises(CheckpointError, match=r"'learning_rate': \(0.001, 0.002\)"):
        resume_config(saved, {"learning_rate": 2e-3})
    assert set(RESUMABLE) >= {"max_iters", "eval_interval", "eval_iters"}


def test_cli_uses_the_training_resume_rule():
    import inspect
    import transformerbook.cli as cli
    src = inspect.getsource(cli)
    assert "resume_config(" in src and "_RESUMABLE" not in src and 'lr_decay_iters") is None' not in src


def test_a_run_shorter_than_its_warmup_shortens_it(capsys):
    tr, va = tiny_data()
    history = train(tiny_model(), tr, va, TrainConfig(max_iters=5, batch_size=4, warmup_iters=100, eval_interval=5,
                                                      eval_iters=1), progress=False)
    err = capsys.readouterr().err
    assert len(history.lr) == 5 and "warm-up shortened from 100 to 0 steps" in err and "lr_decay_iters" not in err


def test_estimate_loss_restores_mode_after_an_error():
    model = tiny_model()
    model.train()
    with pytest.raises(ValueError):
        estimate_loss(model, {"val": torch.arange(4)}, 2, 1)  # shorter than the context: get_batch raises
    assert model.training


# ---------------------------------------------------------------- execution: accumulation, precision, compile, device
def _run(cfg_kw, tmp=None, resume=False, model_seed=0, **kw):
    tr, va = tiny_data()
    train_cfg = TrainConfig(**{**TINY_TRAIN, "batch_size": 8, **cfg_kw})
    return train(tiny_model(seed=model_seed, **kw), tr, va, train_cfg, out_dir=tmp, resume=resume, progress=False)


def _weights(path):
    return load_checkpoint(path)["model"]


@pytest.mark.parametrize("accum", [2, 4])
def test_gradient_accumulation_equals_the_large_batch(tmp_path, accum):
    big = _run({}, tmp_path/"big")
    sliced = _run({"grad_accum_steps": accum}, tmp_path/"sliced")
    torch.testing.assert_close(torch.tensor(sliced.iter_loss), torch.tensor(big.iter_loss), rtol=1e-5, atol=0)
    # atol: k_proj.bias has a zero gradient in exact arithmetic (softmax ignores a constant per row), so float noise of
    # either summation order is all AdamW sees there; 1e-5 is still 300x below one step's size (lr = 3e-3)
    torch.testing.assert_close(_weights(tmp_path/"sliced"), _weights(tmp_path/"big"), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"batch_size=8 is not divisible into 1 process\(es\) x grad_accum_steps=3"):
        _run({"grad_accum_steps": 3})


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_on_cpu_trains_and_resumes_exactly(tmp_path, dtype):
    full = _run({"dtype": dtype})
    assert full.iter_loss[-1] < full.iter_loss[0] and all(math.isfinite(x) for x in full.iter_loss)
    assert full.iter_loss != _run({}).iter_loss  # lower precision really ran
    _run({"dtype": dtype, "max_iters": 3}, tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert (ckpt["scaler"] is not None) == (dtype == "float16")  # float16's loss scale is saved with the run
    resumed = _run({"dtype": dtype}, tmp_path, resume=True, model_seed=5)
    assert resumed.iter_loss == full.iter_loss


@pytest.mark.parametrize("supported", [False, True])
def test_autocast_on_a_cpu_without_its_instructions_is_noted(capsys, monkeypatch, supported):
    """A new run in bfloat16 on a CPU for which torch reports no bfloat16 instructions says it will be slow (chapter
    08b measured 10x on a CPU without them); with them, or in float32, it says nothing; float16 asks torch's float16
    check."""
    asked = []
    def check(name):
        return lambda: asked.append(name) or supported
    for name in ("bf16", "fp16"):
        monkeypatch.setattr(torch.ops.mkldnn, f"_is_mkldnn_{name}_supported", check(name))
    _run({"dtype": "bfloat16", "max_iters": 1})
    note = [line for line in capsys.readouterr().err.splitlines() if "instructions" in line]
    assert note == ([] if supported else [
        "note: torch reports no bfloat16 instructions on this CPU, so autocast's bfloat16 matrix products take a slow "
        "path: expect this run to be slower than in float32 (on CPUs without them, the book measured bfloat16 about "
        "10x and float16 about 12x slower)"])
    _run({"dtype": "float32", "max_iters": 1})
    assert "instructions" not in capsys.readouterr().err and asked == ["bf16"]
    assert len(autocast_notes("cpu", "float16")) == (not supported) and asked == ["bf16", "fp16"]


def test_float16_scaler_skips_an_overflowing_step():
    "The scaler's other half: a scaled gradient that overflows makes it skip the step and halve the scale."
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    before = model.weight.detach().clone()
    scaler.scale(model(torch.full((1, 2), 1e35)).sum()).backward()  # 1e35 * 2^16 overflows: an inf gradient
    scaler.step(opt)
    scaler.update()
    assert torch.equal(model.weight.detach(), before) and scaler.get_scale() == 2.0 ** 15


def test_compiled_step_matches_eager(tmp_path, monkeypatch):
    """compile=True sends the step through torch.compile and still saves plain weights. Dynamo's "eager" backend keeps
    the test fast (inductor's C++ build takes over a minute on two cores; bench/bench_training.py times the real
    one)."""
    from transformerbook import training
    calls, real_compile = [], torch.compile
    def compile_eager(model, **kw):
        calls.append(model)
        return real_compile(model, backend="eager", **kw)
    monkeypatch.setattr(training.torch, "compile", compile_eager)
    eager = _run({"max_iters": 2, "eval_interval": 2})
    compiled = _run({"max_iters": 2, "eval_interval": 2, "compile": True}, tmp_path)
    monkeypatch.undo()
    assert len(calls) == 1
    torch.testing.assert_close(torch.tensor(compiled.iter_loss), torch.tensor(eager.iter_loss), rtol=1e-5, atol=0)
    assert not any(k.startswith("_orig_mod") for k in load_checkpoint(tmp_path)["model"])


def test_compile_mode_reaches_torch_compile_and_marks_every_forward(tmp_path, monkeypatch):
    """compile_mode is torch.compile's `mode` ("reduce-overhead" replays CUDA graphs on a GPU). CUDA graphs may reuse
    a call's output memory at the next call, so every forward of training and evaluation starts a new step first:
    `torch.compiler.cudagraph_mark_step_begin()` is called once per forward (a no-op without CUDA graphs). On a CPU
    the run is the eager one; the mode is recorded and may change on resume; a mode without compile is refused."""
    from transformerbook import training
    from transformerbook.checkpoints import resume_config
    modes, marks, real_compile = [], [], torch.compile
    def compile_eager(model, mode=None, **kw):  # Dynamo refuses a backend and a mode together: record the mode
        modes.append(mode)
        return real_compile(model, backend="eager", **kw)
    real_mark = torch.compiler.cudagraph_mark_step_begin
    monkeypatch.setattr(training.torch, "compile", compile_eager)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1) or real_mark())
    settings = {"max_iters": 3, "eval_interval": 3, "eval_iters": 2}
    graphs = _run({**settings, "compile": True, "compile_mode": "reduce-overhead"}, tmp_path)
    n_marks = len(marks)
    monkeypatch.undo()
    eager = _run(settings)
    assert modes == ["reduce-overhead"]
    assert n_marks == 3 + 2 * 2 * 2  # one per training forward, one per evaluation batch (2 evaluations, 2 splits)
    torch.testing.assert_close(torch.tensor(graphs.iter_loss), torch.tensor(eager.iter_loss), rtol=1e-5, atol=0)
    saved = load_checkpoint(tmp_path)["train_config"]
    assert saved["compile_mode"] == "reduce-overhead"
    assert resume_config(saved, {"compile_mode": "default"}).compile_mode == "default"
    with pytest.raises(ValueError, match="compile_mode='reduce-overhead' needs compile=True"):
        TrainConfig(compile_mode="reduce-overhead")
    with pytest.raises(ValueError, match="compile_mode='fast' must be one of 'default', 'reduce-overhead'"):
        TrainConfig(compile=True, compile_mode="fast")
    # CUDA graphs lose the gradient of one slice to the next (pytorch/pytorch#169545): both modes that replay them
    for mode in ("reduce-overhead", "max-autotune"):
        with pytest.raises(ValueError, match=f"compile_mode='{mode}' replays CUDA graphs.*grad_accum_steps=2 slices"):
            TrainConfig(compile=True, compile_mode=mode, grad_accum_steps=2)
        TrainConfig(compile=True, compile_mode=mode, grad_accum_steps=1)
    TrainConfig(compile=True, compile_mode="max-autotune-no-cudagraphs", grad_accum_steps=2)
    with pytest.raises(ValueError, match="replays CUDA graphs"):  # nor may a resumed run start accumulating
        resume_config(saved, {"grad_accum_steps": 2})


def test_resolve_device():
    from transformerbook.training import resolve_device
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(ValueError, match="must be auto, cpu, cuda or mps"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda': no CUDA GPU is available"):
            resolve_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: trains on cuda, then loads on cpu")
def test_checkpoint_from_cuda_loads_on_cpu(tmp_path):
    tr, va = tiny_data()
    model = tiny_model().cuda()
    train(model, tr, va, TrainConfig(**TINY_TRAIN), out_dir=tmp_path, progress=False)
    cpu_model, _ = load_model(tmp_path, "cpu")
    assert next(cpu_model.parameters()).device.type == "cpu"
    train(tiny_model(), tr, va, TrainConfig(**{**TINY_TRAIN, "max_iters": 8}), out_dir=tmp_path, resume=True,
          progress=False)  # and the run resumes on the CPU


def test_checkpoint_tensors_are_stored_for_any_device(tmp_path):
    "A checkpoint is loaded onto the CPU first (map_location) and moved after: no device is baked into it."
    _run({"max_iters": 3}, tmp_path)
    ckpt = torch.load(tmp_path/"ckpt.pt", map_location="meta", weights_only=True)  # would fail on a device-bound file?
    assert ckpt["model"]["lm_head.weight"].device.type == "meta"
    model, _ = load_model(tmp_path, "cpu")
    assert next(model.parameters()).device.type == "cpu"


# ---------------------------------------------------------------- data at scale
def test_prepare_data_char_and_gpt2(tmp_path):
    from transformerbook.tokenization import TiktokenGPT2
    from transformerbook.training import load_prepared, prepare_data
    (tmp_path/"docs").mkdir()
    texts = ["First document.\nIt has two lines.\n" * 30, "Zweites Dokument: naïve café.\n" * 30]
    for i, t in enumerate(texts): (tmp_path/"docs"/f"{i}.txt").write_text(t, encoding="utf-8")
    meta = prepare_data(tmp_path/"docs", tmp_path/"gpt2", "gpt2", progress=False)
    tok, train_ids, val_ids, _ = load_prepared(tmp_path/"gpt2")
    gpt2 = TiktokenGPT2()
    expected = gpt2.encode(texts[0]) + [50256] + gpt2.encode(texts[1]) + [50256]  # each file ends with <|endoftext|>
    joined = train_ids.tolist() + val_ids.tolist()
    assert meta["dtype"] == "uint16" and meta["files"] == 2 and meta["train_bytes"] + meta["val_bytes"] == sum(
        len(t.encode()) for t in texts)
    # the split cuts the text once (at 90% of the bytes): away from the cut, the ids are the whole text's
    assert joined[:len(train_ids) - 5] == expected[:len(train_ids) - 5] and joined[-20:] == expected[-20:]
    meta = prepare_data(tmp_path/"docs"/"0.txt", tmp_path/"char", "char", val_fraction=0.25, progress=False)
    tok, train_ids, val_ids, _ = load_prepared(tmp_path/"char")
    assert tok.decode(train_ids.tolist()) + tok.decode(val_ids.tolist()) == texts[0]
    assert len(val_ids) == len(texts[0]) - int(len(texts[0]) * 0.75)
    with pytest.raises(ValueError, match="no such text file"):
        prepare_data(tmp_path/"nowhere", tmp_path/"x", progress=False)
    with pytest.raises(ValueError, match="holds no prepared data"):
        load_prepared(tmp_path)


def test_get_batch_from_a_memmap_equals_the_tensor(tmp_path):
    import numpy as np
    ids = (torch.arange(1000) * 7 % 50).to(torch.int64)
    ids.numpy().astype(np.uint16).tofile(tmp_path/"t.bin")
    mm = np.memmap(tmp_path/"t.bin", dtype=np.uint16, mode="r")
    a = get_batch(mm, 4, 8, torch.Generator().manual_seed(3))
    b = get_batch(ids, 4, 8, torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) and x.dtype == torch.int64 for x, y in zip(a, b))
    with pytest.raises(TypeError, match="integer"):
        get_batch(np.zeros(100, dtype=np.float32), 2, 4)


def test_outside_reference_says_one_line(monkeypatch):
    import transformerbook.recipes as recipes
    from transformerbook.training import outside_reference, reference_band
    fake = {"results": {"baby-gpt-char": {"steps": [0, 100], "median": [4.0, 2.0], "low": [3.9, 1.9],
                                          "high": [4.1, 2.1], "runs": {"1": {}, "2": {}, "3": {}}}}}
    monkeypatch.setattr(recipes, "load_result", lambda name: fake)  # where `reference_band` looks it up
    assert reference_band("baby-gpt-char", 50) == pytest.approx({"median": 3.0, "low": 2.9, "high": 3.1, "n_seeds": 3})
    assert outside_reference("baby-gpt-char", 50, 3.0) is None
    note = outside_reference("baby-gpt-char", 50, 3.5, same_settings=False)
    assert "above the baby-gpt-char reference band [2.900, 3.100]" in note and "settings differ" in note
    assert "\n" not in note and reference_band("baby-gpt-char", 500) is None and reference_band("bpe-gpt2", 5) is None


def test_bits_per_byte():
    from transformerbook.training import bits_per_byte
    assert bits_per_byte(math.log(2), 10, 10) == pytest.approx(1.0)
    assert bits_per_byte(math.log(2), 10, 40) == pytest.approx(0.25)  # 4 bytes per token


def test_cached_run_key_ignores_execution_settings_at_their_defaults():
    """Models cached before grad_accum_steps / dtype / compile / compile_mode / log_interval / patience existed must
    still be found; the induction runs of chapter 11 share the one list of fields added since (`train_key`)."""
    import inspect
    from dataclasses import fields, replace
    from transformerbook import interpret, training
    assert set(training.ADDED_TRAIN_FIELDS) == {"compile_mode", "log_interval", "patience"}
    assert set(training.ADDED_TRAIN_FIELDS) <= {f.name for f in fields(TrainConfig)}
    model_cfg, train_cfg = training.baby_gpt_configs(65)
    assert set(train_cfg.to_dict()) - set(training.train_key(train_cfg)) == set(training.ADDED_TRAIN_FIELDS)
    assert set(train_cfg.to_dict()) - set(training.train_key(train_cfg, also=("dtype",))) == \
        {*training.ADDED_TRAIN_FIELDS, "dtype"}
    assert training.train_key(replace(train_cfg, patience=3))["patience"] == 3  # not at its default: kept
    assert "train_key(train_cfg)" in inspect.getsource(interpret.induction_run_dir)
    assert "train_key(train_cfg, also=" in inspect.getsource(training.cached_run_dir)
    assert "cached_run_dir(" in inspect.getsource(training.cached_run)
    base = training.cached_run_dir("x", model_cfg, train_cfg, {})
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, compile=False), {}) == base
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, grad_accum_steps=2), {}) != base
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, log_interval=10, patience=None), {}) == base
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, patience=3), {}) != base
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, compile_mode="max-autotune", compile=True),
                                   {}) != base
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, dtype="bfloat16"), {}) != base
    assert training.cached_run_dir("x", model_cfg, replace(train_cfg, dtype="float32", grad_accum_steps=1), {}) == base


def test_cached_shakespeare_model_never_trains(tmp_path, monkeypatch):
    "An empty cache gives None at once (no training, nothing written); a finished cached run is loaded."
    from transformerbook.training import cached_shakespeare_model
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path))
    assert cached_shakespeare_model("gpt2") is None and cached_shakespeare_model("char") is None
    assert not any(tmp_path.rglob("*.pt"))
    with pytest.raises(ValueError, match="tokenizer='bpe'"): cached_shakespeare_model("bpe")


def test_checkpoint_with_the_old_field_names_loads_and_resumes(tmp_path, monkeypatch):
    """Every checkpoint saved before GPTConfig's `norm` and `layer_norm_eps` became `norm_placement` and `norm_eps`
    holds the old keys: it loads (one `DeprecationWarning`) and resumes, and the resumed run writes the new keys."""
    from transformerbook import validation
    monkeypatch.setattr(validation, "_WARNED", set())
    tr, va = tiny_data()
    train_cfg = TrainConfig(**TINY_TRAIN)
    full = train(tiny_model(norm_placement="post", norm_eps=1e-6), tr, va, train_cfg, out_dir=tmp_path/"full",
                 progress=False)
    train(tiny_model(norm_placement="post", norm_eps=1e-6), tr, va, TrainConfig(**{**TINY_TRAIN, "max_iters": 3}),
          out_dir=tmp_path/"old", progress=False)
    ckpt = load_checkpoint(tmp_path/"old")
    saved = ckpt["model_config"]
    saved["norm"], saved["layer_norm_eps"] = saved.pop("norm_placement"), saved.pop("norm_eps")
    torch.save(ckpt, tmp_path/"old"/"ckpt.pt")  # as the book's cached runs were written
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a saved file is read under the new names without a warning
        loaded, _ = load_model(tmp_path/"old"/"ckpt.pt")
    assert loaded.config == GPTConfig(**TINY, norm_placement="post", norm_eps=1e-6)
    resumed = train(tiny_model(seed=99, norm_placement="post", norm_eps=1e-6), tr, va, train_cfg,
                    out_dir=tmp_path/"old", resume=True, progress=False)
    assert resumed.iter_loss == full.iter_loss
    assert {"norm_placement", "norm_eps"} <= set(load_checkpoint(tmp_path/"old")["model_config"])


_ASK_FOR_A_RUN = """
import sys, time
import transformerbook.training as training
from transformerbook.lm_head import GPTConfig
from transformerbook.recipes import TrainConfig
real = training.train
def counted(*args, **kwargs):
    with open(sys.argv[2], "a") as f: f.write(sys.argv[1] + "\\n")
    time.sleep(2)  # the other process has looked for the run by now, and found none finished
    return real(*args, **kwargs)
training.train = counted
model_cfg = GPTConfig(vocab_size=65, context_length=8, d_model=16, n_heads=2, n_layers=1)
train_cfg = TrainConfig(max_iters=4, batch_size=2, warmup_iters=1, lr_decay_iters=4, eval_interval=2, eval_iters=1)
print(training.cached_run("lock-test", model_cfg, train_cfg, "char", {}, progress=False))
"""


def test_two_processes_asking_for_one_cached_run_train_it_once(tmp_path):
    """`cached_run` in two processes at once (as two notebooks of `make book` that need the same model): one trains,
    the other waits on the run folder's lock and then finds the run finished. Without the lock both trained."""
    env = {**os.environ, "TRANSFORMERBOOK_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    log = tmp_path / "trained.txt"
    procs = [subprocess.Popen([sys.executable, "-c", _ASK_FOR_A_RUN, name, str(log)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in "ab"]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0] and outs[0][0].strip().endswith("ckpt.pt"), outs  # one checkpoint for both
    assert len(log.read_text().splitlines()) == 1, log.read_text()
