"""The trained-model cache (`transformerbook.model_cache`): one rule names every cached run's folder, and the folders
of the models already cached on the book's machines and in CI never change (a change would retrain all of them)."""
import json

import pytest

import transformerbook
from transformerbook.data import cache_dir
from transformerbook.interpret import induction_run_dir
from transformerbook.model_cache import run_dir, run_key
from transformerbook.training import cached_run_dir, preset_configs

# Computed on main at 825b550, before the cache had its own module. The version is part of the key: when it is
# bumped every folder changes on purpose, and these pins move with it.
PINNED = {"0.1.0": {"shakespeare-char": "shakespeare-char-4644713ebf25",
                    "shakespeare-gpt2": "shakespeare-gpt2-7129ed738a05",
                    "induction": "induction-stages-37dcffc5c0f7",
                    "induction-every-50": "induction-stages-4ccc0f8f5fbc"}}


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
