"""Every exercise checker must accept the book's solution and reject known-wrong answers.

The cases live beside the checkers, in each `transformerbook.checks.<topic>.META_CASES` (generated from
`nbs/checks/*.ipynb`); this file collects them all, so a new checker module is covered by adding its cases.
"""
import importlib
import inspect
import pkgutil

import pytest

import transformerbook.checks as checks_pkg
from transformerbook.checks.core import MetaCase

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
