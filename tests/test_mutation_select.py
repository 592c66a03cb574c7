"""The mutation harness picks the tests of a mutant's statement (mutation/covered.py): never fewer
than could kill it, so a faster run cannot report a survivor the whole focused set would kill."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("covered", Path(__file__).parents[1] / "mutation" / "covered.py")
covered = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(covered)

SOURCE = '''LIMIT = 3


def f(x,
      y=2):
    if x > LIMIT:
        return (x
                + y)
    return x
'''


def test_changed_lines_name_the_mutated_line_of_the_original():
    mutated = SOURCE.replace("+ y)", "- y)")
    assert covered.changed_lines(SOURCE, mutated) == [8]
    assert covered.changed_lines(SOURCE, SOURCE) == []


def test_a_line_inside_an_expression_takes_in_its_whole_statement():
    # line 8 is the tail of the `return (x + y)` that starts on line 7
    assert covered.statement_span(SOURCE, 8) == (7, 8)
    # an `if` test takes in its body: a superset of what the mutant reaches
    assert covered.statement_span(SOURCE, 6) == (6, 8)
    assert covered.statement_span(SOURCE, 9) == (9, 9)


def test_tests_of_every_line_of_the_statement_are_picked():
    lines = {"7": ["t.py::a|call"], "8": ["t.py::b|call"]}
    assert covered.select(SOURCE, lines, [8]) == ["t.py::a", "t.py::b"]


def test_a_statement_run_at_import_runs_every_focused_test():
    # a default value (line 5) is evaluated when the module is imported: context ""
    lines = {"4": [""], "5": [""], "9": ["t.py::a|call"]}
    assert covered.select(SOURCE, lines, [5]) is None


def test_a_statement_no_test_executes_selects_nothing():
    assert covered.select(SOURCE, {"9": ["t.py::a|call"]}, [8]) == []


def test_a_fixture_set_up_by_one_test_brings_in_its_whole_file():
    lines = {"7": ["t.py::a|setup"], "8": ["u.py::b|call"]}
    assert covered.select(SOURCE, lines, [8]) == ["t.py", "u.py::b"]


def test_order_runs_fast_tests_first_and_keeps_a_file_together():
    tests = {"t.py::slow": 3.0, "t.py::fast": 0.1, "u.py::mid": 0.5, "u.py::other": 9.0}
    # t.py averages 1.55 s a test, u.py (only u.py::mid chosen) 0.5 s: u.py first
    assert covered.order(["t.py", "u.py::mid"], tests) == ["u.py::mid", "t.py::fast", "t.py::slow"]


@pytest.mark.parametrize("missing", [[], ["t.py::gone"]])
def test_order_leaves_out_tests_the_map_does_not_know(missing):
    assert covered.order(missing, {"t.py::a": 1.0}) == []


FUTURE = "from __future__ import annotations\n\n\ndef g(x: int | None = None) -> str | None:\n    return x | 1\n"


def test_a_mutant_of_a_function_annotation_alone_is_told_apart():
    # `int | None` made `int & None`: a postponed annotation, never evaluated
    assert covered.only_annotations(FUTURE, FUTURE.replace("int | None", "int & None"))
    assert covered.only_annotations(FUTURE, FUTURE.replace("str | None", "str & None"))
    # the body's `x | 1` is code, and without the __future__ import annotations are evaluated
    assert not covered.only_annotations(FUTURE, FUTURE.replace("x | 1", "x & 1"))
    eager = FUTURE.split("\n", 3)[3]
    assert not covered.only_annotations(eager, eager.replace("int | None", "int & None"))
    # a changed default value is code too
    assert not covered.only_annotations(FUTURE, FUTURE.replace("= None", "= 1"))
    assert not covered.only_annotations(FUTURE, FUTURE)


def test_every_hand_mutant_still_applies_to_the_source_once():
    """Each hand-made mutant of mutation/manual.toml changes a text that occurs exactly once in its
    file. When the engine changes under it, the mutant can no longer be applied, and a run of
    `mutation/run.py manual --site-prefix ...` that skips it would keep its old "killed" result:
    this names the stale ones at once (five had gone stale unnoticed before this test)."""
    import tomllib

    root = Path(__file__).parents[1]
    mutants = tomllib.loads((root / "mutation" / "manual.toml").read_text(encoding="utf-8"))["mutant"]
    stale = [f"{m['name']}: {(root / m['file']).read_text(encoding='utf-8').count(m['old'])} times in {m['file']}"
             for m in mutants if (root / m["file"]).read_text(encoding="utf-8").count(m["old"]) != 1]
    assert stale == []
    assert len({m["name"] for m in mutants}) == len(mutants)
