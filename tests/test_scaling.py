"""Scaling laws: parameter counts against real modules (ours and Hugging Face's), FLOP counts against
`torch.utils.flop_counter`, the power laws, the compute-optimal closed form against a brute-force search, both fits
recovering known parameters, and bad inputs."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformerbook.lm_head import GPT, GPTConfig, approx_non_embedding_params
from transformerbook.scaling import (BESIROGLU_2024, HOFFMANN_2022, KAPLAN_2020, PF_DAY_FLOPS, ChinchillaLaw,
                                     count_params, fit_chinchilla, fit_power_law, flops_per_token, power_law,
                                     scaling_run, training_flops)
from transformerbook.pretrained import config_from_gpt2
from transformerbook.scale import model_flops_per_token
from transformerbook.training import TrainConfig

BASE = dict(vocab_size=50, context_length=16, d_model=24, n_heads=4, n_layers=2)
VARIANTS = {
    "default": {}, "untied": {"tie_weights": False}, "no-bias": {"bias": False},
    "sinusoidal": {"positional": "sinusoidal"}, "d_ff": {"d_ff": 37}, "post-norm": {"norm_placement": "post"},
    "post-untied-no-bias": {"norm_placement": "post", "tie_weights": False, "bias": False},
    "deep-narrow": {"n_layers": 5, "d_model": 8, "n_heads": 2},
    "sinusoidal-untied-d_ff": {"positional": "sinusoidal", "tie_weights": False, "d_ff": 10},
}


def meta_model(config: GPTConfig) -> GPT:
    with torch.device("meta"):
        return GPT(config)


@pytest.mark.parametrize("non_embedding", [False, True])
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_count_params_equals_the_real_module(variant, non_embedding):
    config = GPTConfig(**{**BASE, **VARIANTS[variant]})
    model = meta_model(config)
    assert count_params(config, non_embedding) == model.n_params(non_embedding=non_embedding)
    if not non_embedding:
        assert count_params(config) == sum(p.numel() for p in model.parameters())


@settings(max_examples=25, deadline=None)
@given(n_layers=st.integers(1, 4), n_heads=st.integers(1, 4), d_head=st.integers(1, 8), d_ff=st.integers(1, 64),
       vocab_size=st.integers(2, 100), context_length=st.integers(1, 32), bias=st.booleans(), tie=st.booleans(),
       positional=st.sampled_from(["learned", "sinusoidal"]), norm_placement=st.sampled_from(["pre", "post"]))
def test_count_params_property(n_layers, n_heads, d_head, d_ff, vocab_size, context_length, bias, tie, positional,
                               norm_placement):
    d_model = n_heads * d_head * (2 if positional == "sinusoidal" else 1)  # sinusoidal needs an even d_model
    config = GPTConfig(vocab_size=vocab_size, context_length=context_length, d_model=d_model, n_heads=n_heads,
                       n_layers=n_layers, d_ff=d_ff, bias=bias, tie_weights=tie, positional=positional,
                       norm_placement=norm_placement)
    model = meta_model(config)
    assert count_params(config) == sum(p.numel() for p in model.parameters())
    embeddings = vocab_size * d_model + (context_length * d_model if positional == "learned" else 0)
    assert count_params(config) - count_params(config, non_embedding=True) == embeddings


@settings(max_examples=40, deadline=None)
@given(n_heads=st.sampled_from([2, 4]), kv=st.sampled_from([None, 1, 2]), d_head=st.sampled_from([None, 4, 8]),
       bias=st.booleans(), tie=st.booleans(), norm_placement=st.sampled_from(["pre", "post"]),
       normalization=st.sampled_from(["layer", "rms"]), positional=st.sampled_from(["learned", "sinusoidal", "rotary"]),
       activation=st.sampled_from(["gelu", "swiglu"]), qk_norm=st.booleans(), non_embedding=st.booleans())
def test_count_params_covers_the_modern_switches(n_heads, kv, d_head, bias, tie, norm_placement, normalization,
                                                 positional, activation, qk_norm, non_embedding):
    """Chapter 12's switches (grouped-query heads, an explicit d_head, QK-norm, RMSNorm, SwiGLU, rotary positions)
    change the count; the formula must follow them exactly."""
    config = GPTConfig(vocab_size=37, context_length=12, d_model=16, n_heads=n_heads, n_layers=2, d_ff=24, bias=bias,
                       tie_weights=tie, norm_placement=norm_placement, normalization=normalization,
                       positional=positional, activation=activation, n_kv_heads=kv, d_head=d_head, qk_norm=qk_norm)
    assert count_params(config, non_embedding) == GPT(config).n_params(non_embedding)


@pytest.mark.parametrize("tie", [True, False])
def test_count_params_matches_hugging_face_gpt2_small(tie):
    from transformers import GPT2Config, GPT2LMHeadModel
    hf_config = GPT2Config(tie_word_embeddings=tie)
    with torch.device("meta"):
        hf = GPT2LMHeadModel(hf_config)
    n_hf = sum(p.numel() for p in hf.parameters())
    assert count_params(config_from_gpt2(hf_config)) == n_hf
    assert n_hf == 124_439_808 + (0 if tie else 50257 * 768)


def test_twelve_l_d_squared_is_close_for_published_configs():
    for L, D, H, T in [(12, 768, 12, 1024), (24, 1024, 16, 1024), (36, 1280, 20, 1024), (48, 1600, 25, 1024),
                       (96, 12288, 96, 2048)]:
        n = count_params(GPTConfig(vocab_size=50257, context_length=T, d_model=D, n_heads=H, n_layers=L), True)
        assert 0.998 < approx_non_embedding_params(L, D) / n < 1.0


def test_exact_flops_per_token_is_a_deprecated_alias_of_the_one_count():
    "The count itself is tested in test_scale.py against FlopCounterMode for every switch; its old name still works."
    from transformerbook.scaling import exact_flops_per_token
    config = GPTConfig(**{**BASE, "activation": "swiglu", "n_kv_heads": 2})
    with pytest.warns(DeprecationWarning, match="model_flops_per_token"):
        assert exact_flops_per_token(config, 5) == model_flops_per_token(config, 5, training=False)
    with pytest.warns(DeprecationWarning):
        assert exact_flops_per_token(config, training=True) == model_flops_per_token(config)


def test_kaplan_flops_formula():
    N, L, T, D = 85_056_000, 12, 1024, 768
    assert flops_per_token(N, L, T, D) == 2 * N + 2 * L * T * D
    assert flops_per_token(N, L, T, D, training=True) == 3 * (2 * N + 2 * L * T * D)
    # the exact count differs from Kaplan's by the second attention product, the LM head, and the 2 FLOPs that 2N
    # charges for every bias and LayerNorm parameter (not matrix-multiply weights), nothing else
    config = GPTConfig.gpt2_small()
    N = count_params(config, True)
    not_matmul = N - L * (4 * D * D + 2 * D * config.d_ff)
    extra = 2 * L * T * D + 2 * D * config.vocab_size - 2 * not_matmul
    assert model_flops_per_token(config, training=False) - flops_per_token(N, L, T, D) == extra


def test_training_flops_gpt3():
    assert training_flops(175e9, 300e9) == pytest.approx(3.15e23, rel=1e-12)
    assert training_flops(175e9, 300e9) / PF_DAY_FLOPS == pytest.approx(3646, abs=1)


def test_power_law_kaplan_constants():
    x_c, alpha = KAPLAN_2020["N"]
    assert (x_c, alpha) == (8.8e13, 0.076)
    assert power_law(x_c, x_c, alpha) == pytest.approx(1.0)
    assert power_law(2e9, x_c, alpha) / power_law(1e9, x_c, alpha) == pytest.approx(2 ** -alpha)
    t = power_law(torch.tensor([1e6, 1e9]), x_c, alpha)
    assert isinstance(t, torch.Tensor) and t.shape == (2,) and bool(t[0] > t[1])


def test_chinchilla_constants_and_loss():
    assert (HOFFMANN_2022.E, HOFFMANN_2022.A, HOFFMANN_2022.B, HOFFMANN_2022.alpha, HOFFMANN_2022.beta) == \
        (1.69, 406.4, 410.7, 0.34, 0.28)
    assert HOFFMANN_2022.loss(70e9, 1.4e12) == pytest.approx(1.69 + 406.4 / 70e9 ** 0.34 + 410.7 / 1.4e12 ** 0.28)
    assert HOFFMANN_2022.loss(1e40, 1e40) == pytest.approx(1.69, abs=1e-7)  # the floor E


def brute_force_optimum(law: ChinchillaLaw, flops: float) -> float:
    N = torch.logspace(0, math.log10(flops / 6), 400_001, dtype=torch.float64)
    return N[law.loss(N, flops / (6 * N)).argmin()].item()


@pytest.mark.parametrize("law", [HOFFMANN_2022, BESIROGLU_2024,
                                 ChinchillaLaw(E=0.0, A=50.0, B=5000.0, alpha=0.6, beta=0.2)],
                         ids=["hoffmann", "besiroglu", "skewed"])
@pytest.mark.parametrize("flops", [1e15, 1e20, 5.76e23, 1e27])
def test_compute_optimal_matches_brute_force(law, flops):
    n_opt, d_opt = law.compute_optimal(flops)
    assert 6 * n_opt * d_opt == pytest.approx(flops, rel=1e-12)
    assert n_opt == pytest.approx(brute_force_optimum(law, flops), rel=2e-4)
    for factor in (0.9, 1.1):  # any other split of the same budget is worse
        assert law.loss(n_opt * factor, d_opt / factor) > law.loss(n_opt, d_opt)


def test_besiroglu_refit_gives_about_twenty_tokens_per_parameter():
    n_opt, d_opt = BESIROGLU_2024.compute_optimal(5.76e23)
    assert 15 < d_opt / n_opt < 25
    n_opt, d_opt = HOFFMANN_2022.compute_optimal(5.76e23)
    assert d_opt / n_opt > 50  # the published approach-3 constants disagree with the 20N rule


@pytest.mark.parametrize("seed", range(5))
def test_fit_power_law_recovers_parameters(seed):
    gen = torch.Generator().manual_seed(seed)
    x_c = 10 ** (8 + 6 * torch.rand(1, generator=gen).item())
    alpha = 0.03 + 0.5 * torch.rand(1, generator=gen).item()
    x = torch.logspace(4, 9, 10, dtype=torch.float64)
    clean = power_law(x, x_c, alpha)
    got_x_c, got_alpha = fit_power_law(x, clean)
    assert got_alpha == pytest.approx(alpha, rel=1e-9) and got_x_c == pytest.approx(x_c, rel=1e-6)
    noisy = clean * torch.exp(0.005 * torch.randn(10, generator=gen, dtype=torch.float64))
    assert fit_power_law(x, noisy)[1] == pytest.approx(alpha, abs=0.01)
    assert fit_power_law(x.tolist(), noisy.tolist())[1] == pytest.approx(fit_power_law(x, noisy)[1])


@pytest.mark.parametrize("seed", range(3))
def test_fit_chinchilla_recovers_parameters(seed):
    gen = torch.Generator().manual_seed(seed)
    law = ChinchillaLaw(E=1.5 + 0.5 * torch.rand(1, generator=gen).item(),
                        A=float(200 + 400 * torch.rand(1, generator=gen).item()),
                        B=float(200 + 1000 * torch.rand(1, generator=gen).item()),
                        alpha=0.25 + 0.15 * torch.rand(1, generator=gen).item(),
                        beta=0.25 + 0.15 * torch.rand(1, generator=gen).item())
    N, D = torch.meshgrid(torch.logspace(6, 10, 7, dtype=torch.float64), torch.logspace(8, 12, 7, dtype=torch.float64),
                          indexing="ij")
    N, D = N.flatten(), D.flatten()
    fit = fit_chinchilla(N, D, law.loss(N, D))
    for name in ("E", "A", "B", "alpha", "beta"):
        assert getattr(fit, name) == pytest.approx(getattr(law, name), rel=1e-3), name
    noisy = law.loss(N, D) * torch.exp(0.005 * torch.randn(len(N), generator=gen, dtype=torch.float64))
    fit = fit_chinchilla(N, D, noisy)
    assert fit.alpha == pytest.approx(law.alpha, abs=0.03) and fit.beta == pytest.approx(law.beta, abs=0.03)


BAD_CALLS = {
    "training_flops zero N": (lambda: training_flops(0, 1e9), "n_params=0"),
    "training_flops negative D": (lambda: training_flops(1e9, -3), "n_tokens=-3"),
    "training_flops NaN": (lambda: training_flops(float("nan"), 1e9), "n_params=nan"),
    "flops_per_token bad N": (lambda: flops_per_token(-1, 2, 64, 32), "n_params=-1"),
    "flops_per_token bad layers": (lambda: flops_per_token(1e6, 0, 64, 32), "n_layers=0"),
    "model_flops bad seq_len": (lambda: model_flops_per_token(GPTConfig(**BASE), 0), "seq_len=0"),
    "power_law zero x": (lambda: power_law(0.0, 8.8e13, 0.076), "x must be positive and finite; got 0.0"),
    "power_law NaN alpha": (lambda: power_law(1e6, 8.8e13, float("nan")), "alpha=nan"),
    "law negative A": (lambda: ChinchillaLaw(E=1.0, A=-4.0, B=1.0, alpha=0.3, beta=0.3), "A=-4.0"),
    "law negative E": (lambda: ChinchillaLaw(E=-1.0, A=4.0, B=1.0, alpha=0.3, beta=0.3), "E=-1.0"),
    "loss NaN D": (lambda: HOFFMANN_2022.loss(1e9, float("nan")), "n_tokens must be positive and finite; got nan"),
    "compute_optimal zero C": (lambda: HOFFMANN_2022.compute_optimal(0), "flops=0"),
    "fit lengths": (lambda: fit_power_law([1.0, 2.0, 3.0], [3.0, 2.0]), "different lengths: {'x': 3, 'losses': 2}"),
    "fit negative loss": (lambda: fit_power_law([1.0, 2.0], [3.0, -2.0]),
                          "losses must be positive and finite; got -2.0"),
    "fit NaN x": (lambda: fit_power_law([1.0, float("nan")], [3.0, 2.0]), "x must be positive and finite; got nan"),
    "fit one x": (lambda: fit_power_law([5.0, 5.0], [3.0, 2.0]), "at least 2 distinct x"),
    "fit rising loss": (lambda: fit_power_law([1.0, 10.0], [2.0, 3.0]), "does not fall with x"),
    "fit 2-D": (lambda: fit_power_law([[1.0, 2.0]], [[3.0, 2.0]]), "must be 1-D"),
    "chinchilla few runs": (lambda: fit_chinchilla([1e6] * 4, [1e9] * 4, [3.0] * 4), "at least 5 runs"),
    "chinchilla lengths": (lambda: fit_chinchilla([1e6] * 5, [1e9] * 6, [3.0] * 5), "different lengths"),
    "chinchilla zero loss": (lambda: fit_chinchilla([1e6] * 5, [1e9] * 5, [3.0, 2.0, 0.0, 1.0, 1.0]), "got 0.0"),
    "chinchilla zero delta": (lambda: fit_chinchilla([1e6] * 5, [1e9] * 5, [3.0] * 5, delta=0), "delta=0"),
    "chinchilla zero max_iter": (lambda: fit_chinchilla([1e6] * 5, [1e9] * 5, [3.0] * 5, max_iter=0), "max_iter=0"),
    "power_law negative alpha": (lambda: power_law(1e6, 8.8e13, -0.076), "alpha=-0.076"),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_inputs_raise_value_error_naming_the_value(name):
    call, message = BAD_CALLS[name]
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value)


def test_type_errors():
    with pytest.raises(TypeError, match="model_cfg must be a GPTConfig"):
        count_params({"d_model": 8})
    with pytest.raises(TypeError, match="model_cfg must be a GPTConfig"):
        scaling_run(None, TrainConfig())


def test_scaling_run_trains_once_then_loads(tmp_path, monkeypatch):
    from transformerbook.data import DataUnavailableError
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path))
    model_cfg = GPTConfig(vocab_size=65, context_length=16, d_model=16, n_heads=2, n_layers=1)
    train_cfg = TrainConfig(max_iters=6, batch_size=2, warmup_iters=1, eval_interval=6, eval_iters=1)
    try:
        first = scaling_run(model_cfg, train_cfg)
    except DataUnavailableError as e:
        pytest.skip(f"TinyShakespeare not available offline: {e}")
    assert first["n_params"] == count_params(model_cfg, non_embedding=True)
    assert first["n_tokens"] == 6 * 2 * 16 and first["flops"] == model_flops_per_token(model_cfg) * first["n_tokens"]
    assert math.isfinite(first["val_loss"])
    checkpoints = list(tmp_path.rglob("ckpt.pt"))
    assert len(checkpoints) == 1 and checkpoints[0].parent.name.startswith("scaling-")
    mtime = checkpoints[0].stat().st_mtime_ns
    assert scaling_run(model_cfg, train_cfg) == first  # loaded, not retrained
    assert checkpoints[0].stat().st_mtime_ns == mtime
    with pytest.raises(ValueError, match="vocab_size=50 must be the character vocabulary's 65"):
        scaling_run(GPTConfig(**{**model_cfg.to_dict(), "vocab_size": 50}), train_cfg)


def test_scaling_run_stopped_by_patience_is_finished_and_counts_its_tokens(tmp_path, monkeypatch):
    from transformerbook.data import DataUnavailableError
    from transformerbook.training import load_checkpoint
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path))
    model_cfg = GPTConfig(vocab_size=65, context_length=16, d_model=16, n_heads=2, n_layers=1)
    # a learning rate too small to move the weights: the validation loss never falls, patience=1 stops at step 2
    train_cfg = TrainConfig(max_iters=8, batch_size=2, warmup_iters=0, eval_interval=2, eval_iters=1,
                            learning_rate=1e-30, min_lr=0.0, weight_decay=0.0, patience=1)
    try:
        first = scaling_run(model_cfg, train_cfg)
    except DataUnavailableError as e:
        pytest.skip(f"TinyShakespeare not available offline: {e}")
    (checkpoint,) = tmp_path.rglob("ckpt.pt")
    step = load_checkpoint(checkpoint)["step"]
    assert step < train_cfg.max_iters and first["n_tokens"] == step * 2 * 16
    mtime = checkpoint.stat().st_mtime_ns
    assert scaling_run(model_cfg, train_cfg) == first  # finished: loaded, not resumed
    assert checkpoint.stat().st_mtime_ns == mtime


def test_scaling_sweep_slice_reproduces(tmp_path, monkeypatch):
    """experiments/scaling_sweep.py's slice (the smallest model of chapter 9's sweep, 300 steps), trained afresh in an
    empty cache, gives the committed numbers; and the committed sweep is the one the chapter defines."""
    from conftest import load_experiment
    from transformerbook.data import load_result
    from transformerbook.scaling import SWEEP, sweep_train_cfg
    sweep = load_experiment("scaling_sweep")
    record = load_result("scaling_sweep")
    res = record["results"]
    assert record["command"].startswith("python experiments/scaling_sweep.py") and record["seeds"] == [1337]
    assert [r["shape"] for r in res["runs"]] == [list(shape) for shape in SWEEP]
    assert res["train_config"] == sweep_train_cfg.to_dict() == {**res["train_config"], "seed": 1337}
    assert res["slice"]["train_config"] == sweep.slice_train_cfg().to_dict()
    monkeypatch.setenv("TRANSFORMERBOOK_CACHE", str(tmp_path))  # trained here, not read from a cached run
    got = sweep.run_one(tuple(res["slice"]["shape"]), sweep.slice_train_cfg())
    assert list(tmp_path.rglob("ckpt.pt")), "the slice was not trained in the empty cache"
    for key in ("shape", "model", "n_params", "n_tokens", "flops"):
        assert got[key] == res["slice"][key], key
    for key in ("train_loss", "val_loss"):  # seeded, one thread: float order alone separates two machines
        assert got[key] == pytest.approx(res["slice"][key], abs=0.01), key
    assert all(a["val_loss"] > b["val_loss"] for a, b in zip(res["runs"], res["runs"][1:]))  # the chapter's L(N)
