"""Input validation: the shared checks of `transformerbook.validation` and their use by the masking, embedding and
attention helpers. Bad types raise TypeError and bad values or shapes raise ValueError, each naming what was passed."""
import ast
import json
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

import transformerbook
from transformerbook import validation as V
from transformerbook.attention import attention_weights, masked_softmax
from transformerbook.blocks import FeedForward, LayerNorm
from transformerbook.embeddings import POSITIONALS, Embeddings, RotaryEmbedding, cosine_similarity, rotary_frequencies
from transformerbook.lm_head import gpt2_init
from transformerbook.masking import causal_mask, combine_masks, make_padding_mask
from transformerbook.multihead import MultiHeadAttention
from transformerbook.training import resolve_device

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- make_padding_mask(lengths, T)

@pytest.mark.parametrize("T", [2.5, 3.0, -1, "3", None, True])
def test_padding_mask_rejects_bad_T(T):
    with pytest.raises(ValueError, match=f"T={T!r} must be a non-negative int"):
        make_padding_mask([1, 2], T)


def test_padding_mask_accepts_zero_length_batches():
    assert make_padding_mask([0, 0], 0).shape == (2, 0)
    assert make_padding_mask(torch.tensor([0]), 3).tolist() == [[False, False, False]]


# ---------------------------------------------------------------- combine_masks(causal, padding_mask)

def test_combine_masks_parameter_is_named_padding_mask():
    pm = make_padding_mask([2, 3], 3)
    torch.testing.assert_close(combine_masks(causal=causal_mask(3), padding_mask=pm),
                               combine_masks(causal_mask(3), pm))
    with pytest.raises(TypeError):
        combine_masks(causal_mask(3), key_padding=pm)  # the old name is gone


@pytest.mark.parametrize("call,error,text", [
    (lambda: combine_masks(causal_mask(3), [[True] * 3]), TypeError, "padding_mask must be a bool tensor"),
    (lambda: combine_masks(causal_mask(3), make_padding_mask([1], 3).int()), TypeError, "padding_mask must be a bool"),
    (lambda: combine_masks(causal_mask(3), make_padding_mask([1], 4)), ValueError, "S=3 keys but padding_mask has S=4"),
    (lambda: combine_masks(None, torch.ones(3, dtype=torch.bool)), ValueError, "padding_mask must have shape (B, S)"),
])
def test_combine_masks_errors_use_the_parameter_name(call, error, text):
    with pytest.raises(error) as err:
        call()
    assert text in str(err.value)


# ---------------------------------------------------------------- Embeddings.forward(token_ids, position_ids)

@pytest.fixture
def emb():
    torch.manual_seed(0)
    return Embeddings(vocab_size=10, context_length=8, d_model=4)


@pytest.mark.parametrize("token_ids,text", [
    ([[1, 2]], "token_ids must be a torch.Tensor of integer ids, got list"),
    ((1, 2), "got tuple"),
    (torch.tensor([[1.0, 2.0]]), "got dtype torch.float32"),
    (torch.tensor([[True, False]]), "got dtype torch.bool"),
    (torch.tensor([[1, 2]], dtype=torch.uint8), "got dtype torch.uint8"),
])
def test_embeddings_type_errors_for_token_ids(emb, token_ids, text):
    with pytest.raises(TypeError) as err:
        emb(token_ids)
    assert text in str(err.value)


@pytest.mark.parametrize("position_ids,text", [
    ([0, 1], "position_ids must be a torch.Tensor of integer ids, got list"),
    (torch.tensor([0.0, 1.0]), "position_ids must have an integer dtype (torch.int64 or torch.int32), got dtype "
                               "torch.float32"),
])
def test_embeddings_type_errors_for_position_ids(emb, position_ids, text):
    with pytest.raises(TypeError) as err:
        emb(torch.tensor([[1, 2]]), position_ids=position_ids)
    assert text in str(err.value)


@pytest.mark.parametrize("shape", [(3, 2), (2, 3), (3,), (2, 2, 2), ()])
def test_embeddings_position_ids_shape_must_match(emb, shape):
    ids = torch.tensor([[1, 2], [3, 4]])  # B = 2, T = 2
    with pytest.raises(ValueError) as err:
        emb(ids, position_ids=torch.zeros(shape, dtype=torch.long))
    assert f"(T,), (1, T) or (B, T) with B=2, T=2, got {tuple(shape)}" in str(err.value)


@pytest.mark.parametrize("shape", [(2,), (1, 2), (2, 2)])
def test_embeddings_accepts_valid_position_shapes(emb, shape):
    ids = torch.tensor([[1, 2], [3, 4]])
    pos = torch.arange(2).expand(shape) if len(shape) == 2 else torch.arange(2)
    torch.testing.assert_close(emb(ids, position_ids=pos), emb(ids))
    torch.testing.assert_close(emb(ids.int(), position_ids=pos.int()), emb(ids))  # int32 works too


def test_embeddings_token_ids_shape_is_a_value_error(emb):
    with pytest.raises(ValueError, match=r"token_ids must be a \(B, T\) integer tensor, got shape \(3,\)"):
        emb(torch.tensor([1, 2, 3]))


# ---------------------------------------------------------------- transformerbook.validation: one rule, one spelling

@pytest.mark.parametrize("value,note", [(0, ""), (-3, ""), (True, ", not a bool"), (False, ", not a bool"),
                                        (2.0, ", not a float"), ("2", ", not a str"), (None, ", not None")])
def test_positive_int_rejects_bools_floats_and_non_positive(value, note):
    with pytest.raises(ValueError, match=f"^n_heads={re.escape(repr(value))} must be a positive int{note}$"):
        V.check_positive_int("n_heads", value)


@pytest.mark.parametrize("value", [1, 7, 2**40])
def test_positive_int_accepts_ints(value):
    assert V.check_positive_int("n_heads", value) is None


def test_nonnegative_int_allows_zero_and_appends_the_hint():
    V.check_nonnegative_int("T", 0)
    with pytest.raises(ValueError, match=r"^T=-1 must be a non-negative int \(the padded length\)$"):
        V.check_nonnegative_int("T", -1, "the padded length")
    with pytest.raises(ValueError, match="T=True"):
        V.check_nonnegative_int("T", True)


def test_positive_ints_names_the_first_bad_keyword():
    V.check_positive_ints(d_model=8, n_heads=2)
    with pytest.raises(ValueError, match="^n_heads=0 must be a positive int$"):
        V.check_positive_ints(d_model=8, n_heads=0, d_ff=-1)


@pytest.mark.parametrize("value", [0, -2, 3, 2.0, True])
def test_positive_even_int(value):
    with pytest.raises(ValueError, match=f"d_model={value!r} must be a positive even int"):
        V.check_positive_even_int("d_model", value)
    V.check_positive_even_int("d_model", 2)


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), True, "1"])
def test_positive_number(value):
    with pytest.raises(ValueError, match="must be a positive finite number"):
        V.check_positive_number("temperature", value)
    V.check_positive_number("temperature", 0.5)


@pytest.mark.parametrize("interval,inside,outside", [
    ("(0, 1]", [1, 0.5, 1e-9], [0, 0.0, 1.0001, -1, True, None]),
    ("[0, 1)", [0, 0.5], [1, 1.0, -0.1]),
    ("[0, inf)", [0, 1e30], [-1e-9, float("nan")]),
])
def test_in_interval(interval, inside, outside):
    for value in inside:
        V.check_in_interval("p", value, interval)
    for value in outside:
        with pytest.raises(ValueError, match=rf"p={value!r} must be in {__import__('re').escape(interval)}"):
            V.check_in_interval("p", value, interval)


def test_choice_messages_list_the_named_set():
    V.check_choice("positional", "learned", POSITIONALS)
    with pytest.raises(ValueError, match="^positional='rope' must be one of 'learned', 'sinusoidal' or 'rotary'$"):
        V.check_choice("positional", "rope", POSITIONALS)
    with pytest.raises(ValueError, match="^norm='x' must be one of 'a', 'b' or 'c'$"):
        V.check_choice("norm", "x", ("a", "b", "c"))
    with pytest.raises(ValueError, match="^side=\\['left'\\] must be"):
        V.check_choice("side", ["left"], ("right", "left"))  # unhashable: still a ValueError naming it


def test_instance_is_a_type_error():
    with pytest.raises(TypeError, match="^config must be a dict, got list$"):
        V.check_instance("config", [], dict)


@pytest.mark.parametrize("mask,text", [
    ([[True]], "mask must be a bool tensor (dtype torch.bool, True = may attend), got list"),
    (torch.ones(2, 2), "got torch.float32"),
    (torch.ones(2, 2, dtype=torch.int64), "got torch.int64"),
])
def test_bool_mask(mask, text):
    with pytest.raises(TypeError) as err:
        V.check_bool_mask("mask", mask)
    assert text in str(err.value)


def test_ids_below_names_the_first_bad_id_and_the_hint():
    V.check_ids_below(torch.tensor([0, 9]), "vocab_size", 10)
    V.check_ids_below(torch.zeros(0, dtype=torch.long), "vocab_size", 10)
    with pytest.raises(ValueError, match=r"^position 8 is outside \[0, context_length=8\): crop it$"):
        V.check_ids_below(torch.tensor([7, 8, 9]), "context_length", 8, what="position", hint="crop it")


def test_attention_inputs_mask_shape_comes_from_q_and_k_only():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(3, 2, 7, 4)  # v adds a batch dim
    V.check_attention_inputs(q, k, v, causal_mask(5, 7))
    with pytest.raises(ValueError, match="does not broadcast"):
        V.check_attention_inputs(q, k, v, causal_mask(5, 7).expand(3, 2, 5, 7))  # would enlarge the scores
    with pytest.raises(TypeError, match="v must be a torch.Tensor, got NoneType"):
        V.check_attention_inputs(q, k, None)


# ---------------------------------------------------------------- one vocabulary across the package

PACKAGE = ROOT / "transformerbook"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("transformerbook")):
            yield node


ALL_MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("_modidx", "__init__", "__main__"))


@pytest.mark.parametrize("module", ALL_MODULES)
def test_no_module_imports_a_private_name_from_another_module(module):
    private = [a.name for n in _imports(PACKAGE / f"{module}.py") for a in n.names if a.name.startswith("_")]
    assert not private, f"{module}.py imports private names {private}"


def test_validation_depends_on_nothing_in_the_package():
    assert not list(_imports(PACKAGE / "validation.py"))


# Modules allowed to spell an int rule by hand (none since `generate`'s checks moved to the shared ones).
HAND_SPELLED_INT_CHECKS_LEFT: dict[str, int] = {}


@pytest.mark.parametrize("module", [m for m in ALL_MODULES if m != "validation"])
def test_int_rules_are_spelled_once(module):
    "No module re-implements an int rule (isinstance(..., int), with or without the bool exclusion): validation does."
    text = (PACKAGE / f"{module}.py").read_text()
    found = re.findall(r"isinstance\([\w.]+, (?:int|\(int, float\))\)", text)
    assert len(found) == HAND_SPELLED_INT_CHECKS_LEFT.get(module, 0), f"{module}.py spells int checks by hand: {found}"


@pytest.mark.parametrize("value,low,high,high_name,text", [
    (5, 1, 5, "T", "period=5 must be an int in [1, T=5)"),
    (0, 1, 5, "", "period=0 must be an int in [1, 5)"),
    (True, 0, 3, "", "period=True must be an int in [0, 3)"),
    (2.0, 1, None, "", "period=2.0 must be an int >= 1"),
    (7, 8, None, "", "period=7 must be an int >= 8"),
])
def test_int_in_range_rejects_and_names_the_bound(value, low, high, high_name, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        V.check_int_in_range("period", value, low, high, high_name)


@pytest.mark.parametrize("value,low,high", [(1, 1, 5), (4, 1, 5), (8, 8, None), (2**40, 0, None)])
def test_int_in_range_accepts(value, low, high):
    V.check_int_in_range("period", value, low, high)


def test_int_in_range_hint():
    with pytest.raises(ValueError, match=re.escape("vocab_size=256 must be an int >= 257 (256 bytes + 1 special)")):
        V.check_int_in_range("vocab_size", 256, 257, hint="256 bytes + 1 special")


def test_input_dtype_names_both_dtypes_and_allows_autocast():
    x, w = torch.ones(2, 3, dtype=torch.float64), torch.ones(4, 3)
    V.check_input_dtype(x.float(), w)
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the weights have torch.float32"):
        V.check_input_dtype(x, w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        V.check_input_dtype(x, w)  # autocast mixes dtypes itself


def test_package_has_no_semicolon_joins_or_unused_notebook_imports():
    "The leaks the tidy-up removed stay removed (ruff enforces it in make test; this is a fast guard)."
    assert "import torch.nn.functional as F" not in (PACKAGE / "embeddings.py").read_text()
    embeddings = (PACKAGE / "embeddings.py").read_text()
    assert "import math" not in embeddings or "math.pi" in embeddings  # chapter 12's rotary frequencies use it
    assert "GPT," not in (PACKAGE / "scaling.py").read_text().split("__all__")[0]


# ---------------------------------------------------------------- the padding-mask builder's old name

def test_padding_mask_alias_warns_and_builds_the_same_mask():
    from transformerbook.masking import padding_mask
    with pytest.warns(DeprecationWarning, match="make_padding_mask"):
        old = padding_mask([2, 1], 3, side="left")
    torch.testing.assert_close(old, make_padding_mask([2, 1], 3, side="left"))


def test_make_padding_mask_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_padding_mask([1], 2)


def test_the_alias_is_not_exported_by_star_import():
    import transformerbook.masking as masking
    assert "make_padding_mask" in masking.__all__ and "padding_mask" not in masking.__all__


# ---------------------------------------------------------------- guards are folded on the site

@pytest.mark.parametrize("nb,name", [("02_masking", "_check_padding_args"), ("02_masking", "_check_mask_pair"),
                                     ("05_embeddings", "_check_embedding_inputs"), ("07_sampling", "_check_top_k")])
def test_guard_cells_are_folded_on_the_site(nb, name):
    sys.path.insert(0, str(ROOT / "tools"))
    import nb2myst
    cells = json.loads((ROOT / "nbs" / f"{nb}.ipynb").read_text())["cells"]
    guard = next(c for c in cells if f"def {name}(" in "".join(c["source"]))
    guard = {**guard, "source": "".join(guard["source"])}
    out = nb2myst.translate({"cells": [guard], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    cell = next(c for c in out.cells if c.cell_type == "code")
    assert cell.metadata.get("tags") == ["hide-input"] and "#|" not in cell.source


def test_attention_chapter_has_no_guard_cell_between_equation_and_code():
    cells = json.loads((ROOT / "nbs" / "01_attention.ipynb").read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    first_export = next(i for i, s in enumerate(sources) if s.startswith("#| export") and "def attention_weights" in s)
    assert not any("def _check" in s for s in sources[:first_export])
    assert "transformerbook.validation" in transformerbook.__doc__


# ---------------------------------------------------------------- the core layers' checks (session 15's audit)

def test_a_masked_key_gets_no_weight_even_when_an_allowed_score_overflows():
    "float16 q·kᵀ can overflow to -inf on an allowed key; the masked key must still get weight 0, not 1."
    weights = masked_softmax(torch.tensor([[float("-inf"), 3.0]]), torch.tensor([[True, False]]))
    assert weights.tolist() == [[0.0, 0.0]]
    q, k = torch.full((1, 2, 4), -200.0).half(), torch.tensor([[[200.0] * 4, [1.0] * 4]]).half()
    assert attention_weights(q, k, causal_mask(2))[0, 0, 1] == 0  # the future key of query 0
    ordinary = torch.randn(3, 5, 5)
    torch.testing.assert_close(masked_softmax(ordinary, causal_mask(5)),
                               torch.softmax(ordinary.masked_fill(~causal_mask(5), float("-inf")), -1))


@pytest.mark.parametrize("make, text", [
    (lambda: MultiHeadAttention(8, 2, d_head=0), "d_head=0"),
    (lambda: rotary_frequencies(8, theta=0), "theta=0"),
    (lambda: rotary_frequencies(8, scaling={"rope_type": "llama3", "factor": 8}), "missing"),
    (lambda: combine_masks(torch.ones(2, 3, 3, dtype=torch.bool), make_padding_mask([2, 3], 3)), "(T, S)"),
    (lambda: LayerNorm(8, eps="1e-5"), "eps="),
    (lambda: gpt2_init(torch.nn.Linear(2, 2), 0), "n_layers=0"),
    (lambda: MultiHeadAttention(8, 2, rotary=RotaryEmbedding(8, 16))(torch.randn(2, 3, 8)), "does not fit"),
    (lambda: MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4, 2))(torch.randn(2, 3, 8)), "does not fit 3 positions"),
    (lambda: FeedForward(8, 32)(torch.ones(2, 7)), "d_model=8"),
    (lambda: cosine_similarity(torch.randn(2, 3), torch.randn(3, 3)), "do not broadcast"),
    (lambda: resolve_device("cuda:x"), "must be a GPU number"),
], ids=["d_head", "rope theta", "rope scaling keys", "3-D causal", "string eps", "gpt2_init n_layers",
        "rotary width", "rotary length", "ffn width", "cosine shapes", "device index"])
def test_core_layers_name_the_bad_argument(make, text):
    with pytest.raises(ValueError, match=re.escape(text)):
        make()


def test_cosine_similarity_and_resolve_device_name_the_type():
    with pytest.raises(TypeError, match="u must be a float tensor"):
        cosine_similarity(torch.tensor([1, 2, 3]), torch.tensor([1.0, 2.0, 3.0]))
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


# ---------------------------------------------------------------- a scalar of the wrong type says so

@pytest.mark.parametrize("check,value,text", [
    (V.check_positive_int, __import__("numpy").int64(3), "n=np.int64(3) must be a positive int, not a numpy.int64 "
                                                          "(convert it with int())"),
    (V.check_positive_int, torch.tensor(3), "must be a positive int, not a torch.Tensor (convert it with .item())"),
    (V.check_nonnegative_int, 2.0, "n=2.0 must be a non-negative int, not a float"),
    (V.check_positive_even_int, True, "n=True must be a positive even int, not a bool"),
    (lambda name, value: V.check_int_in_range(name, value, 0, 5), __import__("numpy").int32(1),
     "must be an int in [0, 5), not a numpy.int32 (convert it with int())"),
    (V.check_positive_number, __import__("numpy").float32(0.5), "must be a positive finite number, not a "
                                                                "numpy.float32 (convert it with float())"),
    (lambda name, value: V.check_in_interval(name, value, "(0, 1]"), torch.tensor(0.5),
     "must be in (0, 1], not a torch.Tensor (convert it with .item())"),
    (V.check_positive_number, "2", "n='2' must be a positive finite number, not a str"),
])
def test_a_scalar_of_another_type_is_named_with_its_conversion(check, value, text):
    """A numpy or torch scalar that holds an allowed value (what `np.arange(4)[3]` or `t.sum()` give) was refused with
    "n=np.int64(3) must be a positive int", which reads as a contradiction; the message now names the type."""
    with pytest.raises(ValueError) as err:
        check("n", value)
    assert text in str(err.value)


def test_a_wrong_value_of_the_right_type_gets_no_type_note():
    with pytest.raises(ValueError) as err:
        V.check_positive_int("n_heads", 0, "heads split d_model")
    assert str(err.value) == "n_heads=0 must be a positive int (heads split d_model)"
    V.check_positive_number("lr", 3)  # an int is a number
