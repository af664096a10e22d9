"""Training at scale: memory-mapped data (a ~200 MB token file), streaming preparation (a ~50 MB corpus), streaming
tokenization, the FLOP and memory counts of chapter 08b, its checkers, and a cheap slice of the reference curves."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from transformerbook.lm_head import GPT, GPTConfig
from transformerbook.scale import (ZERO_STAGES, checkpoint_blocks, gpt_n_params, mfu, model_flops_per_token,
                                   saved_activation_bytes, sharded_memory)
from transformerbook.tokenization import BPETokenizer, CharTokenizer, TiktokenGPT2

MB = 1 << 20
# Peak anonymous resident memory (the process's own allocations), sampled every 5 ms: reading a token file whole, or
# a corpus's ids, would show there. File pages of the page cache are left out: the kernel maps cached pages of a file
# lazily and reclaims them freely, and how many it counts for a process depends on what else the machine cached.
RSS_SCRIPT = textwrap.dedent('''
    import json, sys, threading, time
    import torch
    from transformerbook.cli import main
    torch.set_num_threads(1)
    def anon_kib():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"): return int(line.split()[1])
    peak, done = [anon_kib()], threading.Event()
    def sample():
        while not done.is_set():
            peak.append(anon_kib())
            time.sleep(0.005)
    base = peak[0]  # torch and the package imported
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    status = main(sys.argv[1:])
    done.set(); t.join()
    print(json.dumps({"status": status, "base_kib": base, "peak_kib": max(peak)}))
''')


def _rss_of(tmp_path, *argv) -> dict:
    "Run `transformerbook *argv` in a fresh process; its peak resident memory before and after the command."
    script = tmp_path/"rss.py"
    script.write_text(RSS_SCRIPT)
    res = subprocess.run([sys.executable, script, *map(str, argv)], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["status"] == 0, res.stderr[-2000:]
    return out


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc (Linux)")
def test_training_from_a_200_mb_token_file_stays_small(tmp_path):
    "The same short run on a 200 MB token file and on a 2 MB one: the memory it needs must not grow with the file."
    chars = [chr(c) for c in range(32, 97)]
    rng = np.random.default_rng(0)
    grew = {}
    for name, n_train in (("small", 1_000_000), ("big", 100_000_000)):  # uint16: 2 MB and 200 MB
        data = tmp_path/name
        data.mkdir()
        with open(data/"train.bin", "wb") as f:
            for _ in range(max(1, n_train // 10_000_000)):
                f.write(rng.integers(0, 65, min(n_train, 10_000_000), dtype=np.uint16).tobytes())
        rng.integers(0, 65, 1_000_000, dtype=np.uint16).tofile(data/"val.bin")
        (data/"meta.json").write_text(json.dumps({"tokenizer": CharTokenizer(chars).to_dict(), "dtype": "uint16",
                                                  "train_tokens": n_train, "val_tokens": 1_000_000,
                                                  "train_bytes": n_train, "val_bytes": 1_000_000}))
        out = _rss_of(tmp_path, "train", "--data", data, "--out", tmp_path/f"run-{name}", "--max-iters", 5,
                      "--n-layers", 1, "--d-model", 32, "--n-heads", 2, "--context-length", 32, "--eval-interval", 5,
                      "--eval-iters", 2, "--no-progress", "--device", "cpu")
        grew[name] = (out["peak_kib"] - out["base_kib"]) / 1024
    file_mb = (tmp_path/"big"/"train.bin").stat().st_size / MB
    # loading the file would add 200 MB (800 MB as int64 ids); the run itself (model, autograd) is the same for both
    assert file_mb > 190 and grew["big"] - grew["small"] < file_mb / 10, (file_mb, grew)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc (Linux)")
def test_preparing_a_50_mb_corpus_keeps_memory_bounded(tmp_path):
    rng = np.random.default_rng(0)
    words = np.array("the of and to in a is that for it as was with be by on not he I this are or his from at which "
                     "but have an they you were her she there been one all we their has would when if no will more "
                     "Shakespeare naïve café".split())
    corpus = tmp_path/"corpus.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        while f.tell() < 50 * MB:
            f.write(" ".join(rng.choice(words, 200_000)) + ".\n")
    out = _rss_of(tmp_path, "prepare", "--data", corpus, "--tokenizer", "gpt2", "--out", tmp_path/"prepared",
                  "--no-progress")
    grew_mb = (out["peak_kib"] - out["base_kib"]) / 1024
    assert grew_mb < 64, grew_mb  # stated bound: 64 MB for a 50 MB corpus (its ids alone are ~12M Python ints)
    meta = json.loads((tmp_path/"prepared"/"meta.json").read_text())
    assert meta["train_bytes"] + meta["val_bytes"] == corpus.stat().st_size
    head = corpus.read_text(encoding="utf-8")[:5000]
    ids = np.memmap(tmp_path/"prepared"/"train.bin", dtype=np.uint16, mode="r")[:200].tolist()
    assert ids == TiktokenGPT2().encode(head)[:200]


# ---------------------------------------------------------------- streaming tokenization
@pytest.mark.parametrize("make", [TiktokenGPT2, lambda: BPETokenizer().train("the cat sat on the mat. " * 20, 280),
                                  lambda: CharTokenizer().train("abc ")])
def test_encode_iterable_is_lazy(make):
    tok = make()
    endless = itertools.repeat("abc cab bca ")  # never ends: only a lazy encoder can return
    first = list(itertools.islice(tok.encode_iterable(endless), 50))
    assert first == tok.encode("abc cab bca " * 30)[:50]


def test_encode_iterable_equals_encode_on_random_cuts():
    from transformerbook.data import load_tinyshakespeare
    text = load_tinyshakespeare()[:30_000] + "  naïve\n\n\t東京  12,345.67 don't  it's <|endoftext|> x  \n"
    rng = np.random.default_rng(1)
    gpt2 = TiktokenGPT2()
    bpe = BPETokenizer().train(text[:5000], 400)
    for tok, encode in ((gpt2, gpt2.encode), (bpe, bpe.encode_ordinary)):
        expected = encode(text)
        for _ in range(5):
            cuts = sorted(rng.choice(len(text), 300, replace=False).tolist())
            pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
            assert list(tok.encode_iterable(pieces)) == expected


def test_special_tokens_are_split_out_before_bpe_training():
    docs = "Hello world.<|endoftext|>Another document.<|endoftext|>" * 50
    learned = lambda tok: [tok.vocab[i] for i in tok.merges.values()]
    naive = BPETokenizer().train(docs, 256 + 30)  # without declaring it, the marker is just text ...
    assert any(b"<|" in t or b"|>" in t for t in learned(naive))  # ... and merges such as "<|" are learned from it
    tok = BPETokenizer().train(docs, 256 + 30 + 1, special_tokens=["<|endoftext|>"])
    assert not any(b"<" in t or b"|" in t or b">" in t for t in learned(tok)), learned(tok)
    assert tok.encode("Hello<|endoftext|>", allow_special=True)[-1] == tok.special_tokens["<|endoftext|>"]


# ---------------------------------------------------------------- FLOPs, MFU, memory
# torch's own formulas for the fused attention kernels apply to the CPU's kernel too (FlopCounterMode knows only the
# GPU ones and would count the CPU's as zero): the forward is QKᵀ and weights·V; the backward of a flash kernel
# recomputes QKᵀ besides its four gradient products (5 products, 2.5 forwards, where the explicit code takes 4)
ATEN = torch.ops.aten
SDPA_ON_CPU = {
    ATEN._scaled_dot_product_flash_attention_for_cpu:
        lambda q, k, v, *_, out_shape=None, **__: sdpa_flop_count(q, k, v),
    ATEN._scaled_dot_product_flash_attention_for_cpu_backward:
        lambda grad, q, k, v, *_, out_shape=None, **__: sdpa_backward_flop_count(grad, q, k, v)}
# every combination of the switches that change a matrix product's size
SWITCHES = list(itertools.product(("gelu_tanh", "relu", "swiglu"), ("mha", "gqa", "mqa"), (False, True), (False, True)))


def random_config(activation: str, heads: str, wide_head: bool, qk_norm: bool, seed: int, **overrides) -> GPTConfig:
    "A small random GPTConfig with these switches, and random choices of those that change no product's size."
    rng = np.random.default_rng(seed)
    H = int(rng.choice([2, 4]))
    KV = {"mha": H, "gqa": H // 2, "mqa": 1}[heads]
    Dh = 2 * int(rng.integers(2, 5))  # even, for rotary positions
    D = 2 * int(rng.integers(3, 9)) if wide_head else H * Dh  # d_head ≠ d_model / n_heads, wider or narrower
    return GPTConfig(vocab_size=int(rng.integers(11, 40)), context_length=int(rng.integers(6, 13)), d_model=D,
                     n_heads=H, n_kv_heads=KV, d_head=Dh, n_layers=int(rng.integers(1, 3)),
                     d_ff=int(rng.integers(5, 40)), activation=activation, qk_norm=qk_norm,
                     positional=str(rng.choice(["learned", "sinusoidal", "rotary"])),
                     normalization=str(rng.choice(["layer", "rms"])), norm_placement=str(rng.choice(["pre", "post"])),
                     bias=bool(rng.integers(2)), tie_weights=bool(rng.integers(2)), causal=bool(rng.integers(2)),
                     **overrides)


def counted(config: GPTConfig, seq_len: int, training: bool, batch_size: int = 2, kernels: set | None = None) -> float:
    """FLOPs per token that FlopCounterMode records for the real forward (and backward) of a random GPT(config); the
    names of the operators it counted are added to `kernels` if given."""
    torch.manual_seed(0)
    model = GPT(config)
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len))
    with FlopCounterMode(display=False, custom_mapping=SDPA_ON_CPU) as counter:
        logits = model(ids)
        if training: torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    if kernels is not None: kernels.update(str(op) for op in counter.get_flop_counts()["Global"])
    return counter.get_total_flops() / ids.numel()


@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: "-".join(map(str, s)))
def test_model_flops_per_token_is_exact_for_every_switch(switches):
    "Forward and training, full and shorter sequences, two random configs of each combination of switches."
    for seed in range(2):
        config = random_config(*switches, seed=seed)
        for seq_len, training in ((config.context_length, True), (config.context_length - 3, False)):
            assert counted(config, seq_len, training) == model_flops_per_token(config, seq_len, training), config


@pytest.mark.parametrize("switches", SWITCHES[::5], ids=lambda s: "-".join(map(str, s)))
def test_model_flops_per_token_counts_the_fused_kernel(switches):
    """With `fused=True` (torch's kernel, counted by torch's own formula) the forward is the same count; training
    adds exactly the QKᵀ product that a flash kernel's backward recomputes, which model FLOPs leave out (PaLM), when
    torch runs its flash kernel (torch 2.6 falls back to its math path for grouped K/V heads: no recomputation)."""
    config = random_config(*switches, seed=7, fused=True)
    T, L, H, Dh = config.context_length, config.n_layers, config.n_heads, config.d_head
    assert counted(config, T, False) == model_flops_per_token(config, T, training=False)
    kernels = set()
    training = counted(config, T, True, kernels=kernels)
    flash = any("flash" in k for k in kernels)
    assert training == model_flops_per_token(config, T) + (L * 2 * T * H * Dh if flash else 0), sorted(kernels)


def test_model_flops_per_token_reduces_to_gpt2s_formula_and_refuses_bad_input():
    "GPT-2's count, 2L(4d² + 2d·d_ff) + 4LTd + 2dV, is the special case; a config and a length are checked."
    model_cfg = GPTConfig.gpt2_small()
    L, D, F, T, V = (getattr(model_cfg, k) for k in ("n_layers", "d_model", "d_ff", "context_length", "vocab_size"))
    assert model_flops_per_token(model_cfg, training=False) == \
        2 * L * (4 * D * D + 2 * D * F) + 4 * L * T * D + 2 * D * V
    assert model_flops_per_token(model_cfg) == 3 * model_flops_per_token(model_cfg, training=False)
    with pytest.raises(ValueError, match="seq_len=0"):
        model_flops_per_token(model_cfg, seq_len=0)
    with pytest.raises(TypeError, match="model_cfg"):
        model_flops_per_token({"d_model": 768})


def test_sharded_memory_matches_the_zero_paper():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters on 64 GPUs
    expected_gb = {"ddp": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    for stage in ZERO_STAGES:
        assert sharded_memory(7.5e9, 64, stage) / 1e9 == pytest.approx(expected_gb[stage], rel=0.02)
    assert sharded_memory(10, 1, "zero3") == sharded_memory(10, 1, "ddp") == 160
    with pytest.raises(ValueError, match="stage='zero4'"):
        sharded_memory(10, 2, "zero4")
    for bad in (float("nan"), float("inf"), 0):
        with pytest.raises(ValueError, match="n_params="):
            sharded_memory(bad, 2)


@pytest.mark.parametrize("args, name", [((-1000, 6e6, 12e9), "tokens_per_s=-1000"),
                                        ((1000, float("inf"), 12e9), "flops_per_token=inf"),
                                        ((1000, 6e6, -12e9), "peak_flops=-12")])
def test_mfu_rejects_negative_or_infinite_inputs(args, name):
    with pytest.raises(ValueError, match=name):
        mfu(*args)


def test_gpt_n_params_without_allocating():
    model_cfg = GPTConfig(vocab_size=50257, context_length=1024, d_model=768, n_heads=12, n_layers=12)
    with pytest.warns(DeprecationWarning, match="gpt_n_params is deprecated"):  # a deprecated alias of GPT.n_params
        assert gpt_n_params(model_cfg) == 124_439_808  # GPT-2 small, tied embeddings
    assert mfu(1000, 6e6, 12e9) == pytest.approx(0.5)


def test_checkers_pass_the_reference_and_fail_known_mistakes(capsys):
    from transformerbook.checks.scale import META_CASES
    assert len(META_CASES) == 3
    for case in META_CASES:
        assert case.checker(case.reference).passed is True
        for name, wrong in case.wrong.items():
            with pytest.raises(AssertionError, match=case.hints[name].replace("(", r"\(").replace(")", r"\)")):
                case.checker(wrong)


# ---------------------------------------------------------------- the committed results reproduce
def test_reference_curves_slice_reproduces():
    "Seed 1337's first evaluations of the baby GPT, re-run (125 steps of the full 2,000-step schedule)."
    from transformerbook.data import load_result
    from transformerbook.training import load_dataset, preset_configs, train
    result = load_result("reference_curves")["results"]["baby-gpt-char"]
    run = result["runs"]["1337"]
    assert run["steps"][:2] == [0, 125] and len(result["runs"]) >= 1
    model_cfg, train_cfg = preset_configs("baby-gpt-char", max_iters=125, eval_interval=125)
    assert train_cfg.lr_decay_iters == 2000  # the same schedule as the full run
    _, train_ids, val_ids = load_dataset("tinyshakespeare", "char")
    torch.manual_seed(1337)
    history = train(GPT(model_cfg), train_ids, val_ids, train_cfg, progress=False)
    assert history.val_loss == pytest.approx(run["val_loss"][:2], rel=1e-4)


@pytest.mark.parametrize("n_layers,fused", [(1, True), (3, True), (2, False)])
def test_activation_checkpointing_keeps_one_block_input_per_block_and_the_same_gradients(n_layers, fused):
    "Chapter 08b: saved-tensor bytes with and without checkpointing, counted by hooks (deterministic), on the CPU."
    B, T, D = 3, 16, 32
    token_ids = torch.randint(0, 50, (B, T), generator=torch.Generator().manual_seed(0))
    def step(L: int, checkpointed: bool):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=50, context_length=T, d_model=D, n_heads=4, n_layers=L, fused=fused))
        kept = saved_activation_bytes(checkpoint_blocks(model, checkpointed), token_ids, token_ids.roll(-1, 1))
        return kept, [p.grad for p in model.parameters()], model
    (plain, plain_grads, _), (ckpt, ckpt_grads, model) = step(n_layers, False), step(n_layers, True)
    for a, b in zip(plain_grads, ckpt_grads): torch.testing.assert_close(b, a)
    (plain_more, _, _), (ckpt_more, _, _) = step(n_layers + 1, False), step(n_layers + 1, True)
    assert ckpt_more - ckpt == B * T * D * 4  # a checkpointed block keeps only its (B, T, D) float32 input
    assert plain_more - plain > 8 * B * T * D * 4 and ckpt < plain  # an ordinary block keeps many such tensors
    assert set(model.state_dict()) == set(step(n_layers, False)[2].state_dict())  # names unchanged
    checkpoint_blocks(model, enabled=False)
    assert all("forward" not in vars(block) for block in model.blocks)
    with pytest.raises(TypeError, match="model"): checkpoint_blocks(torch.nn.Linear(2, 2))


def test_throughput_table_is_complete():
    from transformerbook.data import load_result
    machines = load_result("scale_throughput")["results"]["machines"]
    assert {m["machine"]["bf16_instructions"] for m in machines} == {False, True}  # 08b sets one of each apart
    for m in machines:
        settings = [row["setting"] for row in m["rows"]]
        assert settings[0] == "float32, 1 process"  # the row the others are divided by
        assert any("bfloat16" in s for s in settings) and any("compiled" in s for s in settings)
        assert any("2 processes" in s for s in settings)
        assert any("bare step" in s for s in settings)  # the control: the live cell's way of timing
        machine = m["machine"]  # data.machine_record(): the bfloat16 row depends on it (10x slower without)
        assert machine["cpu_model"] and isinstance(machine["bf16_instructions"], bool) and machine["instruction_sets"]
        assert machine["torch"] and machine["cpu_count"] >= 1 and m["threads_per_process"] == 1
        assert m["command"].startswith("python experiments/scale_throughput.py")
        for row in m["rows"]:
            assert row["tokens_per_s"] > 0 and 0 < row["mfu"] < 1 and row["load_average"] >= 0
            assert len(row["tokens_per_s_repeats"]) == m["repeats"]
            assert row["tokens_per_s"] == sorted(row["tokens_per_s_repeats"])[m["repeats"] // 2]  # the median


def test_throughput_runs_keep_one_entry_per_kind_of_machine():
    "A new run replaces the earlier run on the same CPU and torch, in its place, and is added after the others."
    exp = _experiment("scale_throughput")
    def run(model, sets, torch_version="2.13.0+cpu", tag=""):
        return {"machine": {"cpu_model": model, "instruction_sets": sets, "torch": torch_version}, "tag": tag}
    a, b, c = run("EPYC", ["avx2"]), run("EPYC", ["avx2", "avx512_bf16"]), run("Xeon", ["avx2", "amx_bf16"])
    assert exp.merge_run([], a) == [a]
    assert exp.merge_run([a, b], c) == [a, b, c]
    b2 = run("EPYC", ["avx2", "avx512_bf16"], tag="again")
    assert exp.merge_run([a, b, c], b2) == [a, b2, c]
    a_newer_torch = run("EPYC", ["avx2"], "2.14.0+cpu")
    assert exp.merge_run([a, b], a_newer_torch) == [a, b, a_newer_torch]
    for argv in (["--repeats", "0"], ["--steps", "10", "--skip", "10"]):  # nothing to time: a clear error first
        with pytest.raises(SystemExit):
            exp.main(argv)


def _experiment(name: str):
    "Import `experiments/<name>.py` (not a package) as a module."
    import importlib.util
    path = Path(__file__).parent.parent/"experiments"/f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_curves_measure_again_when_the_preset_model_changed(tmp_path, monkeypatch):
    """A finished (run, seed) is skipped, unless the entry's recorded model is not the preset's model now: then its
    curves are stale (the GPU preset lost its biases on 2026-11-27) and are measured again. No training here."""
    import json
    exp = _experiment("reference_curves")
    calls = []
    fake = {"steps": [0, 20], "val_loss": [4.0, 3.0], "train_loss": [4.0, 3.0], "seconds": 0.1}
    monkeypatch.setattr(exp, "run_one", lambda name, seed, ev=None: calls.append((name, seed)) or fake)
    monkeypatch.setattr(exp, "RESULTS_DIR", tmp_path)
    argv = ["--presets", "gpu-shakespeare-char-cpu", "--seeds", "1337"]
    exp.main(argv)
    exp.main(argv)  # finished, same model: skipped
    assert calls == [("gpu-shakespeare-char-cpu", 1337)]
    path = tmp_path/"reference_curves.json"
    data = json.loads(path.read_text())
    assert data["results"]["gpu-shakespeare-char-cpu"]["model"]["bias"] is False
    data["results"]["gpu-shakespeare-char-cpu"]["model"]["bias"] = True  # as measured before the change
    path.write_text(json.dumps(data))
    exp.main(argv)
    assert len(calls) == 2
    assert json.loads(path.read_text())["results"]["gpu-shakespeare-char-cpu"]["model"]["bias"] is False


def test_every_default_run_of_the_reference_curves_is_a_known_preset():
    "Each name the experiment runs by default is a preset of `training.PRESETS` with overrides `TrainConfig` accepts."
    from transformerbook.training import PRESETS, preset_configs
    exp = _experiment("reference_curves")
    defaults = exp.build_parser().get_default("presets")
    assert defaults == list(exp.RUNS) and "gpu-shakespeare-char-cpu" in defaults
    for name in defaults:
        preset, overrides = exp.RUNS[name]
        assert preset in PRESETS, name
        model_cfg, train_cfg, tokenizer = exp.run_configs(name, seed=1)
        assert model_cfg == preset_configs(preset)[0]  # the preset's model, unchanged
        assert tokenizer == ("gpt2" if preset == "bpe-gpt2" else "char")
        assert train_cfg.seed == 1 and all(getattr(train_cfg, k) == v for k, v in overrides.items())
    gpu_model, gpu_train, _ = exp.run_configs("gpu-shakespeare-char-cpu", seed=1337)
    assert (gpu_model.n_layers, gpu_model.d_model, gpu_model.context_length, gpu_model.dropout) == (6, 384, 256, 0.2)
    assert (gpu_model.bias, gpu_model.activation) == (False, "gelu")  # nanoGPT's train.py: bias = False, nn.GELU()
    assert gpu_train.max_iters < 5000 and gpu_train.batch_size < 64  # reduced work, same model
    with pytest.raises(ValueError, match="unknown run 'nope'"):
        exp.run_configs("nope", seed=1)
