#!/usr/bin/env python3
"""Runs only the tests that execute a mutant's statement (issue 25): a full run is affordable.

Running every focused test for every mutant costs about 29 s a mutant here (75 s for one that
survives), so a full run of ~1,300 mutants took half a day. Coverage says which tests execute
each line of a module; a mutant can only change what a test sees through a statement that test
executes, so its outcome under those tests is its outcome under the whole focused set.

    python mutation/covered.py map --tree T --out MAP -- <pytest args>
        one coverage run of the focused tests in tree T, each line's tests into MAP (JSON), with a
        pristine copy of the measured modules beside it
    python mutation/covered.py run --tree T --map MAP --module M -- <pytest args>
        cosmic-ray's test command: finds the lines the mutant changed in cost_engine/M.py, runs
        the tests of the smallest statement around them (-x), or all of <pytest args> where the
        statement also runs at import, or where a fixture set up by one test may carry it to the
        next (then the whole test file); exits 0 at once when no test executes the statement

Conservative where it cannot tell: never fewer tests than could kill the mutant.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

PLUGIN = Path(__file__).with_name("covmap_plugin.py")


def single_threaded() -> dict[str, str]:
    """One Polars thread: the tests' frames are tiny, so a thread pool only adds overhead (a
    third less time here), and two runs side by side do not fight over the cores."""
    return {**os.environ, "POLARS_MAX_THREADS": "1"}


def build_map(tree: Path, out: Path, pytest_args: list[str]) -> None:
    """One coverage run of the focused tests, every line's tests recorded with the phase that ran
    it (`nodeid|setup`, `nodeid|call`, `nodeid|teardown`; "" for import time)."""
    data_file = out.with_suffix(".coverage")
    data_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "coverage", "run", f"--data-file={data_file}", "--source=cost_engine",
           "-m", "pytest", "-p", "covmap_plugin", *pytest_args]
    durations = out.with_suffix(".durations.json")
    env = {**os.environ, "PYTHONPATH": str(PLUGIN.parent), "COVMAP_DURATIONS": str(durations)}
    rc = subprocess.run(cmd, cwd=tree, env={**env, **single_threaded()}).returncode
    if rc != 0:
        raise SystemExit(f"the focused tests fail on the unmutated tree ({rc}): no map, no mutation run")
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    lines: dict[str, dict[str, list[int]]] = {}
    contexts: dict[str, int] = {}
    pristine = out.parent / "pristine"
    pristine.mkdir(parents=True, exist_ok=True)
    for measured in data.measured_files():
        path = Path(measured)
        if path.parent.name != "cost_engine":
            continue
        by_line = data.contexts_by_lineno(measured)
        # Each context once, lines pointing at it by number: the map stays a few MB.
        lines[path.stem] = {str(n): sorted({contexts.setdefault(x, len(contexts)) for x in c}) for n, c in by_line.items()}
        (pristine / path.name).write_bytes(path.read_bytes())
    tests = json.loads(durations.read_text(encoding="utf-8"))
    durations.unlink()
    out.write_text(json.dumps({"tests": tests, "contexts": list(contexts), "lines": lines}), encoding="utf-8")
    data_file.unlink(missing_ok=True)


def changed_lines(before: str, after: str) -> list[int]:
    """1-based lines of `before` that the mutant changed (an insertion counts at the line it follows)."""
    a, b = before.splitlines(), after.splitlines()
    out: list[int] = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        out.extend(range(i1 + 1, i2 + 1) if i2 > i1 else [max(i1, 1)])
    return out


def statement_span(source: str, line: int) -> tuple[int, int]:
    """The lines of the smallest statement holding `line` (a compound statement's header takes in
    its body: a superset of the lines the mutant can reach through)."""
    best: tuple[int, int] | None = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            span = (node.lineno, node.end_lineno or node.lineno)
            if best is None or span[1] - span[0] < best[1] - best[0]:
                best = span
    return best or (line, line)


def _without_function_annotations(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    arg.annotation = None
    return ast.dump(tree)


def only_annotations(before: str, after: str) -> bool:
    """Whether the mutant changed nothing but a function's parameter or return annotations in a
    module with `from __future__ import annotations`: those are strings never evaluated (no
    engine function is inspected for its type hints), so no test can see the change."""
    a, b = ast.parse(before), ast.parse(after)
    postponed = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                    any(x.name == "annotations" for x in n.names) for n in a.body)
    return postponed and ast.dump(a) != ast.dump(b) and _without_function_annotations(a) == _without_function_annotations(b)


def select(source: str, lines: dict[str, list[str]], changed: list[int]) -> list[str] | None:
    """The tests to run for a mutant on `changed` lines: node ids or test files, in no particular
    order; None for every focused test (the statement also runs at import); [] when no test
    executes it."""
    picked: set[str] = set()
    for line in changed:
        first, last = statement_span(source, line)
        for n in range(first, last + 1):
            for ctx in lines.get(str(n), []):
                if not ctx:
                    return None
                node, _, phase = ctx.rpartition("|")
                # A fixture computed in one test's setup may serve later tests of its file.
                picked.add(node.split("::")[0] if phase != "call" else node)
    return sorted(picked)


def order(selected: list[str], tests: dict[str, float]) -> list[str]:
    """Node ids fastest first, so -x stops early on a killed mutant; a whole file stands for all
    its tests, and each file's tests stay together (a module fixture is set up once)."""
    wanted = set(selected)
    chosen = {t for t in tests if t in wanted or t.split("::")[0] in wanted}
    files: dict[str, list[str]] = {}
    for t in sorted(chosen, key=lambda t: (tests[t], t)):
        files.setdefault(t.split("::")[0], []).append(t)
    return [t for f in sorted(files, key=lambda f: sum(tests[t] for t in files[f]) / len(files[f])) for t in files[f]]


def run(tree: Path, map_file: Path, module: str, pytest_args: list[str]) -> int:
    pristine = (map_file.parent / "pristine" / f"{module}.py").read_text(encoding="utf-8")
    current = (tree / "cost_engine" / f"{module}.py").read_text(encoding="utf-8")
    mapped = json.loads(map_file.read_text(encoding="utf-8"))
    names = mapped["contexts"]
    lines = {n: [names[i] for i in ids] for n, ids in mapped["lines"].get(module, {}).items()}
    changed = changed_lines(pristine, current)
    if only_annotations(pristine, current):
        print(f"{module}.py lines {changed}: only a function annotation changed, never evaluated")
        return 0
    chosen = select(pristine, lines, changed) if changed else None
    if chosen == []:
        print(f"no focused test executes {module}.py lines {changed}: the mutant cannot be killed by them")
        return 0
    options = [a for a in pytest_args if not a.endswith(".py")]
    files = [a for a in pytest_args if a.endswith(".py")]
    # The map covers every module's focused files; this module's mutants run only its own.
    chosen = files if chosen is None else [c for c in chosen if c.split("::")[0] in files]
    if not chosen:
        print(f"none of this module's focused tests executes {module}.py lines {changed}")
        return 0
    targets = order(chosen, mapped["tests"])
    return subprocess.run([sys.executable, "-m", "pytest", *options, *targets], cwd=tree, env=single_threaded()).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("map", "run"):
        p = sub.add_parser(name)
        p.add_argument("--tree", type=Path, required=True)
        p.add_argument("pytest_args", nargs=argparse.REMAINDER)
    sub.choices["map"].add_argument("--out", type=Path, required=True)
    sub.choices["run"].add_argument("--map", type=Path, required=True)
    sub.choices["run"].add_argument("--module", required=True)
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    if args.cmd == "map":
        build_map(args.tree, args.out, pytest_args)
    else:
        sys.exit(run(args.tree, args.map, args.module, pytest_args))


if __name__ == "__main__":
    main()
