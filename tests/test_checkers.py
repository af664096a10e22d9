"""Every exercise checker must accept the book's solution and reject known-wrong answers.

The cases live beside the checkers, in each `transformerbook.checks.<topic>.META_CASES` (generated from
`nbs/checks/*.ipynb`); this file collects them all, so a new checker module is covered by adding its cases.
"""
import importlib
import inspect
import pkgutil

import pytest
import torch

import transformerbook.checks as checks_pkg
from transformerbook.checks.core import MetaCase, check_against_reference, checker, known_wrong, meta_cases

MODULES = [importlib.import_module(f"transformerbook.checks.{m.name}")
           for m in pkgutil.iter_modules(checks_pkg.__path__) if m.name != "core"]
CASES = [(mod.__name__.rsplit(".", 1)[-1], case) for mod in MODULES for case in getattr(mod, "META_CASES", [])]


def test_there_are_checker_modules():
    assert MODULES, "no checker modules found under transformerbook.checks"


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__)
def test_every_checker_has_meta_cases(mod):
    checkers = {name for name, obj in inspect.getmembers(mod, inspect.isfunction)
                if name.startswith("check_") and obj.__module__ == mod.__name__}
    covered = {case.checker.__name__ for case in getattr(mod, "META_CASES", [])}
    assert checkers, f"{mod.__name__} defines no check_* functions"
    assert checkers <= covered, f"checkers without META_CASES in {mod.__name__}: {sorted(checkers - covered)}"
    for case in mod.META_CASES:
        assert isinstance(case, MetaCase)
        assert len(case.wrong) >= 2, f"{case.checker.__name__} is tested against only {len(case.wrong)} wrong answer(s)"


@pytest.mark.parametrize("topic,case", CASES, ids=[f"{t}-{c.checker.__name__}" for t, c in CASES])
def test_checker_accepts_reference(topic, case, capsys):
    assert case.checker(case.reference).passed is True  # a Verdict (true; displays as nothing in a notebook)
    assert capsys.readouterr().out.startswith("PASS")


WRONG = [(t, c, name, bad) for t, c in CASES for name, bad in c.wrong.items()]


@pytest.mark.parametrize("topic,case,mistake,wrong", WRONG,
                         ids=[f"{t}-{c.checker.__name__}-{m}" for t, c, m, _ in WRONG])
def test_checker_rejects_wrong_answer(topic, case, mistake, wrong):
    "Rejected, and for the right reason: the message contains the hint recorded for this mistake."
    with pytest.raises(AssertionError) as err:
        case.checker(wrong)
    assert str(err.value).strip(), f"{case.checker.__name__} rejected '{mistake}' without saying why"
    assert mistake in case.hints, f"META_CASES of {case.checker.__name__} records no expected hint for '{mistake}'"
    assert case.hints[mistake] in str(err.value), (
        f"{case.checker.__name__} rejected '{mistake}' with the wrong explanation: {err.value}")


@pytest.mark.parametrize("topic,case", CASES, ids=[f"{t}-{c.checker.__name__}" for t, c in CASES])
def test_checker_says_not_yet_for_a_stub(topic, case, capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError
    stub_obj = type("Stub", (), {"__init__": stub}) if inspect.isclass(case.reference) else stub
    assert case.checker(stub_obj).passed is False
    assert capsys.readouterr().out.startswith("NOT YET")


# --- the shared tools in `checks.core` (issue 23): the loop every checker runs, and the known-wrong answers' record ---

def _row_means(x): return x.mean(-1)
def _row_mean_mistakes(x): return {"you averaged the columns (dim=0); average each row (dim=-1)": x.mean(0)}


@checker("Test — row means")
def _check_row_means(fn):
    "A checker built on `check_against_reference`, on square inputs so that a column mean has the right shape."
    check_against_reference(fn, _row_means, [(torch.ones(3, 3),), (torch.arange(9.).view(3, 3),)],
                            what=lambda x: f"fn(x {tuple(x.shape)})", name=lambda x: f"row means of x {tuple(x.shape)}",
                            mistakes=_row_mean_mistakes, hint="mean over the last axis",
                            shape_hint="return one number per row")


def test_check_against_reference_accepts_a_right_answer_written_differently(capsys):
    assert _check_row_means(lambda x: x.sum(-1) / x.shape[-1]).passed
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("wrong,expected", [
    # a known mistake: named by its diagnosis. The first case (all ones) cannot tell it apart; in the second,
    # x = [[0, 1, 2], [3, 4, 5], [6, 7, 8]], the column means [3, 4, 5] differ from the row means [1, 4, 7] by 2, 0, 2
    (lambda x: x.mean(0), "row means of x (3, 3): largest |difference| is 2 at index (0,) (yours 3, expected 1); "
                          "2 of 3 entries are off. Hint: you averaged the columns (dim=0); average each row (dim=-1)"),
    # not a known mistake, same shape: the general hint
    (lambda x: x.amax(-1), "Hint: mean over the last axis"),
    # another shape: the shape hint
    (lambda x: x.mean(), "row means of x (3, 3): shape (), expected (3,). Hint: return one number per row"),
    (lambda x: x.mean(-1, keepdim=True), "shape (3, 1), expected (3,). Hint: return one number per row"),
    # not a tensor
    (lambda x: x.mean(-1).tolist(), "row means of x (3, 3): expected a torch.Tensor, got list"),
    # NaN where the reference has none
    (lambda x: x.mean(-1) * torch.tensor([1.0, float("nan"), 1.0]),
     "row means of x (3, 3): contains NaN (first at index (1,)); the reference has none."),
    # a crash in the learner's code: one line naming the call, not a traceback from the checker
    (lambda x: x[3], "fn(x (3, 3)) raised IndexError"),
], ids=["columns", "max", "scalar", "keepdim", "list", "nan", "raises"])  # ids of our own: pytest 8 and 9 name these
# lambdas and long strings differently, and `make test-oldest` compares test ids with the locked run's
def test_check_against_reference_rejects_each_kind_of_mistake(wrong, expected):
    with pytest.raises(AssertionError) as err:
        _check_row_means(wrong)
    assert expected in str(err.value)


def test_check_against_reference_refuses_an_answer_that_changes_its_input():
    """A learner that changes its input in place fails, even with the right values, and says so; the reference and
    the caller still see the original x."""
    seen = []
    def reference(x):
        seen.append(x.clone())
        return x.mean(-1)
    x = torch.arange(4.).view(2, 2)
    with pytest.raises(AssertionError, match="changed its argument 1 .* in place"):
        check_against_reference(lambda y: y.mul_(2).mean(-1) / 2, reference, [(x,)], what="fn(x)")
    check_against_reference(lambda y: (y * 2).mean(-1) / 2, reference, [(x,)], what="fn(x)")  # the same, not in place
    assert torch.equal(seen[0], torch.arange(4.).view(2, 2)) and torch.equal(x, torch.arange(4.).view(2, 2))


def test_known_wrong_and_meta_cases_build_the_cases_tests_run():
    @checker("Test — doubling")
    def check_double(fn):
        check_against_reference(fn, lambda x: 2 * x, [(torch.arange(3.),)], what="fn(x)", hint="multiply by 2")

    @known_wrong(check_double, "adds", hint="multiply by 2")
    def adds_two(x): return x + 2
    assert adds_two(torch.zeros(1)).item() == 2  # the decorator returns the function itself
    known_wrong(check_double, "identity", hint="largest |difference| is 2", answer=lambda x: x)
    (case,) = meta_cases({check_double: lambda x: 2 * x})
    assert case.checker is check_double and list(case.wrong) == ["adds", "identity"] and case.wrong["adds"] is adds_two
    assert case.hints == {"adds": "multiply by 2", "identity": "largest |difference| is 2"}
    known_wrong(check_double, "adds", hint="changed", answer=adds_two)  # re-running a notebook cell replaces
    assert meta_cases({check_double: None})[0].hints["adds"] == "changed"


def test_known_wrong_and_meta_cases_refuse_what_they_cannot_record():
    with pytest.raises(TypeError, match="made with @checker"):
        known_wrong(lambda fn: None, "sums", hint="do not sum")

    @checker("Test — nothing recorded")
    def check_nothing(fn): pass
    with pytest.raises(ValueError, match="'check_nothing' has no known-wrong answers"):
        meta_cases({check_nothing: None})


@pytest.mark.parametrize("topic,case", CASES, ids=[f"{t}-{c.checker.__name__}" for t, c in CASES])
def test_meta_cases_are_what_the_checker_recorded(topic, case):
    "META_CASES holds exactly the known-wrong answers recorded beside their code (none lost between the two)."
    assert case.checker.known_wrong_answers == {n: (case.wrong[n], case.hints[n]) for n in case.wrong}


@pytest.mark.parametrize("topic,case", CASES, ids=[f"{t}-{c.checker.__name__}" for t, c in CASES])
def test_checker_is_annotated_as_returning_a_bool(topic, case):
    "A checker returns a `Verdict` (true on PASS, false on NOT YET); its signature, shown in the docs, says bool."
    assert case.checker.__annotations__.get("return") in ("bool", bool), (
        f"{case.checker.__name__} is annotated -> {case.checker.__annotations__.get('return')!r}, not -> bool")
