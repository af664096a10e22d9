"""The trained-model cache (`transformerbook.model_cache`): one rule names every cached run's folder, and the folders
of the models already cached on the book's machines and in CI never change (a change would retrain all of them)."""
import json
from dataclasses import replace

import pytest

import transformerbook
from transformerbook.data import cache_dir
from transformerbook.interpret import induction_run_dir
from transformerbook.model_cache import run_dir, run_key
from transformerbook.finetune import MASK_ID
from transformerbook.lm_head import GPTConfig
from transformerbook.training import TrainConfig, baby_gpt_configs, cached_run_dir, model_key, preset_configs

# Computed on main at 825b550, before the cache had its own module. The version is part of the key: when it is
# bumped every folder changes on purpose, and these pins move with it.
# The rest computed on main at 8d92951, before GPTConfig's `norm` and `layer_norm_eps` were renamed (`model_key` keeps
# the old names in the key): every folder in the book's cache of trained models.
PINNED = {"0.1.0": {"shakespeare-char": "shakespeare-char-4644713ebf25",
                    "shakespeare-gpt2": "shakespeare-gpt2-7129ed738a05",
                    "induction": "induction-stages-37dcffc5c0f7",
                    "induction-every-50": "induction-stages-4ccc0f8f5fbc",
                    "induction-llama": "induction-stages-decee35cd9d6",
                    "induction-baby-lr": "induction-stages-9ab258b1aa68",
                    "shakespeare-mlm": "shakespeare-mlm-f8abd9f4469e",
                    "scaling": ["scaling-2e0570e33127", "scaling-016f0ab58ca4", "scaling-632d06fea033",
                                "scaling-88dc3f1d6ff7", "scaling-5b1e048bf410"],
                    "chat-sft": {(0, "assistant"): "chat-sft-15a6b3cae48e", (0, "all"): "chat-sft-9ee79ba10c38",
                                 (1, "assistant"): "chat-sft-2ef848b8dbdb", (1, "all"): "chat-sft-430ac079a44f",
                                 (2, "assistant"): "chat-sft-445ffc276bd5", (2, "all"): "chat-sft-a112ffde99bf"}}}


@pytest.fixture
def pinned():
    if transformerbook.__version__ not in PINNED:
        pytest.skip(f"folders pinned for versions {list(PINNED)}, not {transformerbook.__version__}")
    return PINNED[transformerbook.__version__]


@pytest.mark.parametrize("tokenizer,preset", [("char", "baby-gpt-char"), ("gpt2", "bpe-gpt2")])
def test_shakespeare_model_folders_are_unchanged(pinned, tokenizer, preset):
    "`shakespeare_model(tokenizer)` trains `preset_configs(preset)` into this folder (`training.shakespeare_model`)."
    folder = cached_run_dir(f"shakespeare-{tokenizer}", *preset_configs(preset), {"tokenizer": tokenizer})
    assert folder == cache_dir()/"models"/pinned[f"shakespeare-{tokenizer}"]


def test_induction_folders_are_unchanged(pinned):
    assert induction_run_dir().name == pinned["induction"]
    assert induction_run_dir(every=50).name == pinned["induction-every-50"]
    assert induction_run_dir(style="llama").name == pinned["induction-llama"]  # experiments/induction.py's arms
    assert induction_run_dir(learning_rate=1e-3, min_lr=1e-4).name == pinned["induction-baby-lr"]


def test_renamed_fields_keep_their_old_names_in_every_key(pinned):
    """Chapter 11b's masked model, chapter 9's sweep and chapter 13's SFT models (their arguments copied from
    `finetune.masked_char_model`, nbs/09_scaling.ipynb's SWEEP and `posttraining.chat_sft_model`)."""
    model_cfg, train_cfg = baby_gpt_configs(MASK_ID + 1)
    key = {"tokenizer": "char", "objective": "mlm", "mask_rate": 0.15, "mask_split": [0.8, 0.1, 0.1]}
    assert cached_run_dir("shakespeare-mlm", replace(model_cfg, causal=False), train_cfg, key).name == \
        pinned["shakespeare-mlm"]
    sweep_train_cfg = TrainConfig(max_iters=1500, batch_size=12, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100,
                                  lr_decay_iters=1500, eval_interval=1500, eval_iters=50)
    sweep = [GPTConfig(vocab_size=65, context_length=64, d_model=d, n_heads=h, n_layers=n, dropout=0.0, fused=True)
             for n, d, h in [(1, 32, 2), (2, 48, 4), (3, 64, 4), (4, 96, 4), (4, 128, 4)]]
    assert [cached_run_dir("scaling", m, sweep_train_cfg, {"data": "tinyshakespeare-char"}).name
            for m in sweep] == pinned["scaling"]
    base = model_key(preset_configs("baby-gpt-char")[0])
    for (seed, supervise), name in pinned["chat-sft"].items():
        assert run_dir("chat-sft", base=base, seed=seed, steps=300, lr=3e-4, batch_size=32, supervise=supervise,
                       tasks=["who", "line"]).name == name
    assert {"norm", "layer_norm_eps"} <= set(base) and not {"norm_placement", "norm_eps"} & set(base)


def test_chat_sft_and_induction_key_the_model_by_model_key():
    import inspect

    from transformerbook import interpret, posttraining
    assert 'key = {"base": model_key(base.config), "seed": seed,' in inspect.getsource(posttraining.chat_sft_model)
    assert 'model=model_key(model_cfg)' in inspect.getsource(interpret.induction_run_dir)


def test_shakespeare_model_uses_those_recipes():
    import inspect

    from transformerbook import training
    source = inspect.getsource(training)
    assert 'preset_configs("baby-gpt-char" if tokenizer == "char" else "bpe-gpt2")' in source
    assert 'cached_run(f"shakespeare-{tokenizer}", model_cfg, train_cfg, tokenizer, {"tokenizer": tokenizer}' in source


def test_run_dir_is_order_free_and_value_sensitive():
    a = run_dir("demo", model={"d_model": 8, "n_layers": 2}, train={"max_iters": 100})
    assert a == run_dir("demo", train={"max_iters": 100}, model={"n_layers": 2, "d_model": 8})
    assert a != run_dir("demo", model={"d_model": 8, "n_layers": 2}, train={"max_iters": 101})
    assert a != run_dir("other", model={"d_model": 8, "n_layers": 2}, train={"max_iters": 100})
    assert json.loads(run_key(every=5)) == {"every": 5, "version": transformerbook.__version__}


@pytest.mark.parametrize("prefix,error", [("", ValueError), ("a/b", ValueError), ("..\\x", ValueError), (3, TypeError)])
def test_run_dir_rejects_bad_prefixes(prefix, error):
    with pytest.raises(error, match="prefix"):
        run_dir(prefix, model={})
