#!/usr/bin/env python3
"""Mutation testing of the engine's formula modules with cosmic-ray (`make mutate`, issue 25).

    python mutation/run.py run [--modules allocation,idle] [--label after] [--ref REF]
        [--every N [--offset K]] [--timeout S] [--rerun-survivors-of LABEL]
    python mutation/run.py report        # rewrites the generated part of docs/testing.md

Each run works on a private copy of the tree under .mutation/<label>/tree (git-ignored), never
on the working tree: cosmic-ray writes each mutant into the module file, runs the focused tests
of that module in a subprocess (`pytest -x`, fastest files first), and puts the file back. With
--ref the copy is that commit (`git archive`), so the score of an earlier test suite can be
measured beside today's ("before" and "after" in docs/testing.md).

One mutant per site: operators that give many variants of one spot (`+` into eleven other
operators, a number into +1 and -1) keep one natural variant each (KEPT_OPERATORS). Timeouts
count as killed by cosmic-ray; they are counted apart here so a slow machine cannot hide a
survivor. --every N keeps every N-th mutant of a module (by a stable hash of its site) where
the machine cannot run all of them; the report says which runs were sampled.

Results are summarised into mutation/results/<label>.json (committed), from which `report`
writes the tables and the surviving mutants into docs/testing.md (the rounds `before`, `before2`,
... and `after`, `after2`, ... together, each module from the latest round that measured it); mutation/equivalent.toml
gives the reason of every survivor judged equivalent (it cannot change any output).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
RESULTS = ROOT / "mutation" / "results"
EQUIVALENT = ROOT / "mutation" / "equivalent.toml"
MANUAL = ROOT / "mutation" / "manual.toml"
DOC = ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- mutation:begin (written by mutation/run.py report) -->", "<!-- mutation:end -->"

# The formula modules, in the order a partial run should reach them.
MODULES = ["tariffs", "intervals", "ledger", "allocation", "idle", "tokens", "activity", "telemetry", "engine",
           "report", "rollup", "quarters", "quarter_activity", "quarter_store", "power_limits", "coverage",
           "token_sources", "future"]

# Fast, focused tests without a browser, a server or Spark; fastest files first so `-x` stops
# early on a killed mutant. Files missing from an older tree (--ref) are left out.
ENGINE_TESTS = ["tests/test_intervals.py", "tests/test_mutants.py", "tests/test_tariffs.py", "tests/test_engine_core.py",
                "tests/test_idle.py", "tests/test_interval_ledger.py", "tests/test_energy_tokens.py",
                "tests/test_telemetry_windows.py"]
TESTS = {m: ENGINE_TESTS for m in MODULES}
# The quarter-hour rollup (issue 16): its equivalence tests against the raw path, and the store's.
for _m in ("quarters", "quarter_activity", "quarter_store"):
    TESTS[_m] = ENGINE_TESTS + ["tests/test_quarter_rollup.py", "tests/test_quarter_spark.py"]
# Its Spark test is marked slow and left out (-m "not slow"); tests/test_mutants.py holds the
# hand-computed tests written against its survivors, so they are part of its focused set too.
TESTS["rollup"] = ["tests/test_rollup.py", "tests/test_mutants.py"]
# activity's raw_sums and the job index are reached by the rollup path too: its equivalence tests
# belong to activity's focused set (full8 left raw_sums' job test to a hand mutant for want of them).
TESTS["activity"] = ENGINE_TESTS + ["tests/test_quarter_rollup.py"]
# engine.compute chooses the rollup path and names its undecided quarters: full10 left eight of its
# survivors to hand mutants naming these files.
TESTS["engine"] = ENGINE_TESTS + ["tests/test_quarter_rollup.py", "tests/test_quarter_spark.py"]
# What an energy counter may claim (issue 38): its hand-computed cases on both paths.
TESTS["power_limits"] = ENGINE_TESTS + ["tests/test_energy_plausible.py"]
# Price coverage and future-dated rows (issue 38): their hand-computed gaps and partial figures.
TESTS["coverage"] = TESTS["future"] = ENGINE_TESTS + ["tests/test_future_coverage.py"]
# Two sources of the same tokens (issue 38): the sweep, the billing choice and the store's coverage.
TESTS["token_sources"] = ENGINE_TESTS + ["tests/test_token_sources.py"]

KEPT_OPERATORS = re.compile(
    r"core/(ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Div|Mod_FloorDiv|Pow_Mul|BitAnd_BitOr"
    r"|BitOr_BitAnd|BitXor_BitAnd|LShift_RShift|RShift_LShift)"
    r"|ReplaceComparisonOperator_(Eq_NotEq|NotEq_Eq|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is)"
    r"|ReplaceUnaryOperator_(USub_UAdd|Delete_Not|Delete_Invert)"
    r"|AddNot|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd"
    r"|ReplaceBreakWithContinue|ReplaceContinueWithBreak|ZeroIterationForLoop|NumberReplacer)$"
)


def bin_path(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def make_tree(label: str, ref: str | None) -> Path:
    """A fresh copy of the tree (the working tree's files, or commit `ref`) for this label."""
    tree = WORK / label / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    if ref:
        archive = subprocess.run(["git", "archive", ref, "cost_engine", "tests", "sample_data", "pyproject.toml"],
                                 cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    else:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "cost_engine", "tests", "sample_data",
                                 "pyproject.toml"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        for name in listed.splitlines():
            src = ROOT / name
            if src.is_file():
                (tree / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tree / name)
    # The editable install points at the working tree: the tests must import this copy instead.
    where = subprocess.run([sys.executable, "-c", "import cost_engine; print(cost_engine.__file__)"], cwd=tree,
                           check=True, capture_output=True, text=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the copy at {tree} imports cost_engine from {where}; mutants would not be tested")
    return tree


def check_kept_tree(label: str, tree: Path, modules: list[str]) -> None:
    """A run stopped while a mutant was written leaves that mutant in the copy: a kept tree must
    still hold each module as its run began (the hash in its meta file)."""
    for module in modules:
        meta_file = WORK / label / f"{module}.meta.json"
        if not meta_file.exists():
            continue
        expected = json.loads(meta_file.read_text()).get("source")
        if expected and source_hash(tree / f"cost_engine/{module}.py") != expected:
            raise SystemExit(f"{tree}/cost_engine/{module}.py is not the source its run began with (a stopped run "
                             "left a mutant in it?): run again without --keep-tree")


def test_args(module: str, tree: Path, tests: list[str] | None = None) -> list[str]:
    """The pytest command for one mutant of `module`: its focused tests (or `tests`), stopping
    at the first failure, niced so people sharing the machine keep their share."""
    files = tests or [f for f in TESTS[module] if (tree / f).is_file()]
    # The Spark tests are marked slow: left out of the focused runs (the coverage map leaves them
    # out too), run only when a hand mutant names one.
    marks = ["-m", "not slow"] if not tests else []
    return ["nice", "-n", "10", sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
            "--tb=line", "-o", "addopts=", *marks, *files]


def test_command(module: str, tree: Path, covmap: Path | None = None) -> str:
    """cosmic-ray's command for one mutant: with a coverage map, only the focused tests that
    execute the mutated statement (mutation/covered.py), else all of them."""
    if covmap is None:
        return shlex.join(test_args(module, tree))
    pytest_args = test_args(module, tree)[6:]  # after `nice -n 10 python -m pytest`
    return shlex.join(["nice", "-n", "10", sys.executable, str(ROOT / "mutation" / "covered.py"), "run", "--tree",
                       str(tree), "--map", str(covmap), "--module", module, "--", *pytest_args])


def build_covmap(label: str, tree: Path) -> Path:
    """One coverage run of the focused tests of the copy, once per label (kept when resuming)."""
    covmap = WORK / label / "covmap" / "map.json"
    if not covmap.exists():
        covmap.parent.mkdir(parents=True, exist_ok=True)
        print("coverage map: one run of the focused tests", flush=True)
        files = list(dict.fromkeys(f for m in MODULES for f in TESTS[m] if (tree / f).is_file()))
        # Every module's focused files in one run (each mutant keeps to its own module's files).
        args = [*test_args("engine", tree, files)[6:], "-m", "not slow"]
        subprocess.run([sys.executable, str(ROOT / "mutation" / "covered.py"), "map", "--tree", str(tree), "--out",
                        str(covmap), "--", *args], check=True)
    return covmap


def site_key(spec: dict) -> str:
    return f"{spec['module_path']}:{spec['start_pos'][0]}:{spec['start_pos'][1]}:{spec['operator_name']}"


def _dumped_key(m: dict) -> str:
    """A site and its occurrence as `cosmic-ray dump` writes a mutation: the key of --resume."""
    return f"{site_key(m)}:{m['occurrence']}"


def keep(spec: dict, every: int, offset: int = 0) -> bool:
    """One mutant per site, and every N-th site of the module when sampling (the sites whose hash
    leaves `offset` over N: another offset draws a disjoint sample, a holdout)."""
    if not KEPT_OPERATORS.match(spec["operator_name"]):
        return False
    if spec["operator_name"] == "core/NumberReplacer" and spec["occurrence"] % 2:
        return False  # the -1 twin of the +1 mutant at the same number
    digest = int(hashlib.sha1(site_key(spec).encode()).hexdigest(), 16)
    return digest % every == offset % every


def dump(session: Path, cwd: Path) -> list[dict]:
    out = subprocess.run([bin_path("cosmic-ray"), "dump", str(session)], cwd=cwd, check=True, capture_output=True,
                         text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def skip_filtered(session: Path, every: int, tree: Path, offset: int = 0) -> None:
    """Marks the mutants we do not run as skipped, the way cosmic-ray's own filters do."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        skipped = [item.job_id for item in db.pending_work_items
                   if not all(keep(_spec(m), every, offset) for m in item.mutations)]
        db.set_multiple_results(skipped, WorkResult(output="not in the kept set", worker_outcome=WorkerOutcome.SKIPPED))


def _spec(m) -> dict:
    return {"module_path": str(m.module_path), "operator_name": m.operator_name, "occurrence": m.occurrence,
            "start_pos": list(m.start_pos)}


def write_config(module: str, label: str, tree: Path, timeout: float, covmap: Path | None = None) -> Path:
    cfg = WORK / label / f"{module}.toml"
    cfg.write_text(
        "[cosmic-ray]\n"
        f'module-path = "cost_engine/{module}.py"\n'
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(test_command(module, tree, covmap))}\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n',
        encoding="utf-8",
    )
    return cfg


def source_hash(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def run_module(module: str, label: str, tree: Path, args, covmap: Path | None = None) -> None:
    session = WORK / label / f"{module}.sqlite"
    cfg = write_config(module, label, tree, args.timeout, covmap)
    fresh = not session.exists()
    if fresh and args.rerun_survivors_of:
        prior = WORK / args.rerun_survivors_of / f"{module}.sqlite"
        prior_tree = WORK / args.rerun_survivors_of / "tree"
        same_source = prior.exists() and source_hash(prior_tree / f"cost_engine/{module}.py") == source_hash(
            tree / f"cost_engine/{module}.py")
        if same_source:
            # Tests were only added: a mutant killed before stays killed. Run the survivors (and
            # whatever did not run) again.
            shutil.copy2(prior, session)
            prior_meta = WORK / args.rerun_survivors_of / f"{module}.meta.json"
            if prior_meta.exists():  # the same sampled sites, now against the working tree's tests
                meta = {**json.loads(prior_meta.read_text()), "ref": args.ref, "command": test_command(module, tree, covmap)}
                (WORK / label / f"{module}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
            con = sqlite3.connect(session)
            con.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED' OR worker_outcome IN ('EXCEPTION', 'ABNORMAL')")
            con.commit()
            con.close()
            fresh = False
        else:
            print(f"{module}: source changed since '{args.rerun_survivors_of}', every mutant runs again", flush=True)
    if fresh:
        subprocess.run([bin_path("cosmic-ray"), "init", str(cfg), str(session)], cwd=tree, check=True)
        skip_filtered(session, args.every, tree, args.offset)
        meta = {"every": args.every, "offset": args.offset, "ref": args.ref, "source": source_hash(tree / f"cost_engine/{module}.py"),
                "command": test_command(module, tree, covmap)}
        (WORK / label / f"{module}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
        if args.resume:
            resume_from_results(session, label, module, meta)
    started = time.monotonic()
    print(f"{module}: running mutants (timeout {args.timeout:.0f} s each)", flush=True)
    subprocess.run([bin_path("cosmic-ray"), "exec", str(cfg), str(session)], cwd=tree, check=False)
    summarise(label, module, tree)
    print(f"{module}: done in {time.monotonic() - started:.0f} s", flush=True)


def resume_from_results(session: Path, label: str, module: str, meta: dict) -> None:
    """Continue a stopped run where its session (under .mutation/, never committed) is gone: the
    sites its committed results (mutation/results/<label>.json) say were run are entered into the
    new session with their outcome, so only the others run. Only for the same source and sample:
    a changed module runs whole again."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    out_file = RESULTS / f"{label}.json"
    done = json.loads(out_file.read_text()).get(module, {}) if out_file.exists() else {}
    if not done.get("sites"):
        print(f"{module}: no site outcomes recorded for '{label}', every site runs", flush=True)
        return
    if (done.get("source"), done.get("every", 1), done.get("offset", 0)) != (meta["source"], meta["every"], meta["offset"]):
        raise SystemExit(f"{module}: '{label}' was run on another source or sample; run it under a new label")
    survivors = {s.get("site"): s for s in done.get("survivors", [])}
    outcomes = {
        "killed": WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.KILLED, output="resumed"),
        "timeout": WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.KILLED, output="timeout"),
        "incompetent": WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.INCOMPETENT,
                                  output="resumed"),
    }
    entered = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            spec = _spec(item.mutations[0])
            outcome = done["sites"].get(_dumped_key(spec))
            if outcome is None:
                continue
            if outcome == "survived":
                # Its diff as recorded (the changed lines), so the report shows the same change.
                s = survivors[_dumped_key(spec)]
                result = WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.SURVIVED,
                                    output="resumed", diff="\n".join(s["diff"]))
            else:
                result = outcomes[outcome]
            db.set_result(item.job_id, result)
            entered += 1
    print(f"{module}: {entered} sites taken from the committed results of '{label}'", flush=True)


def summarise(label: str, module: str, tree: Path) -> dict:
    session = WORK / label / f"{module}.sqlite"
    meta_file = WORK / label / f"{module}.meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    rows = dump(session, tree)
    counts = {"killed": 0, "timeout": 0, "survived": 0, "incompetent": 0, "pending": 0, "skipped": 0}
    survivors = []
    sites: dict[str, str] = {}  # the outcome of every site run: what --resume needs on another machine
    for item, result in rows:
        if result is None:
            counts["pending"] += 1
            continue
        if result["worker_outcome"] == "skipped":
            counts["skipped"] += 1
            continue
        if result["worker_outcome"] != "normal":
            outcome = "incompetent"  # no-test or an exception in the mutation machinery
        elif result["test_outcome"] == "survived":
            outcome = "survived"
            m = item["mutations"][0]
            survivors.append({"line": m["start_pos"][0], "operator": m["operator_name"].removeprefix("core/"),
                              "function": m.get("definition_name"), "diff": _short_diff(result.get("diff") or ""),
                              "site": _dumped_key(m)})
        elif result["test_outcome"] == "incompetent":
            outcome = "incompetent"
        elif (result.get("output") or "") == "timeout":
            outcome = "timeout"
        else:
            outcome = "killed"
        counts[outcome] += 1
        sites[_dumped_key(item["mutations"][0])] = outcome
    out_file = RESULTS / f"{label}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = json.loads(out_file.read_text()) if out_file.exists() else {}
    data[module] = {**counts, "every": meta.get("every", 1), "offset": meta.get("offset", 0), "ref": meta.get("ref"), "measured": _where_and_when(),
                    "source": meta.get("source"), "survivors": sorted(survivors, key=lambda s: (s["line"], s["operator"])),
                    "sites": dict(sorted(sites.items()))}
    out_file.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return data[module]


def _where_and_when() -> str:
    """The date and the machine of a measurement: a score says little without them."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} cores ({cpu or platform.machine()})"


def _short_diff(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def score(c: dict, equivalent: int = 0) -> str:
    """Killed (timeouts included) over the mutants run, less those judged equivalent."""
    ran = c["killed"] + c["timeout"] + c["survived"] - equivalent
    if not ran:
        return "—"
    return f"{100 * (c['killed'] + c['timeout']) / ran:.1f} % ({c['killed'] + c['timeout']}/{ran})"


def report() -> None:
    labels = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}
    equivalent = tomllib.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}
    before, after = _rounds(labels, "before"), _rounds(labels, "after")
    lines = [BEGIN, "", "| module | before: killed / run | after: killed / run | after, equivalents set apart | "
             "equivalent | timeouts | not run | measured (after) |", "|---|---|---|---|---|---|---|---|"]
    for m in MODULES:
        b, a = before.get(m), after.get(m)
        if not b and not a:
            lines.append(f"| {m} | not run | not run | | | | | |")
            continue
        sampled = "".join(f" (every {x['every']}th site)" for x in (a or b,) if x.get("every", 1) > 1)
        if a:
            same = sum(_reason(equivalent, m, s) is not None for s in a["survivors"])
            lines.append(f"| {m} | {score(b) if b else 'not run'} | {score(a)}{sampled} | {score(a, same)} | {same} | "
                         f"{a['timeout']} | {a['pending']} | {a.get('measured', '')} |")
        else:
            lines.append(f"| {m} | {score(b)}{sampled} | not run | | | | | {b.get('measured', '')} (before) |")
    lines += ["", "Surviving mutants after the new tests (line: operator in function, the change, and why it is",
              "equivalent, from mutation/equivalent.toml):", ""]
    for m in MODULES:
        a = after.get(m) or before.get(m)
        if not a or not a["survivors"]:
            continue
        lines.append(f"**{m}.py**")
        lines.append("")
        for s in a["survivors"]:
            change = " / ".join(x.strip() for x in s["diff"]) or "?"
            reason = _reason(equivalent, m, s) or "**not explained yet**"
            lines.append(f"- {s['line']}: {s['operator']} in `{s['function']}`: `{change[:160]}` — {reason}")
        lines.append("")
    for name in sorted((n for n in labels if re.fullmatch(r"holdout\d*", n)), key=lambda n: (len(n), n)):
        lines += _holdout_lines(labels[name], equivalent, name)
    full = _rounds(labels, "full")
    if full:
        lines += _holdout_lines(full, equivalent, "full")
    manual_file = RESULTS / "manual.json"
    if manual_file.exists():
        equivalent_manual = {m["name"]: m.get("equivalent") for m in tomllib.loads(MANUAL.read_text())["mutant"]}
        lines += ["Mutants made by hand (mutation/manual.toml), run with `python mutation/run.py manual --ref "
                  "<commit before the new tests>`: \"before\" is the focused engine tests of that commit, \"after\" the test "
                  "named for the mutant in tests/test_mutants.py.", "",
                  "| mutant | before | after: its test |", "|---|---|---|"]
        for m in json.loads(manual_file.read_text()):
            after = m.get("after", "not run")
            if after == "survived" and equivalent_manual.get(m["name"]):
                after += f" (equivalent: {equivalent_manual[m['name']]})"
            lines.append(f"| {m['name']} (`{m['file']}`) | {m.get('before', 'not run')} | {after} |")
        lines.append("")
    lines.append(END)
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else f"# Testing\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + "\n".join(lines) + tail, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")


def _holdout_lines(holdout: dict | None, equivalent: dict, label: str = "holdout") -> list[str]:
    """The holdout table of one sample of sites (run label `holdout`, `holdout2`, ...), disjoint
    from the ones tests were written against (--every N --offset K), scored as the suite stood
    when it was drawn; each survivor then either equivalent (mutation/equivalent.toml) or killed
    by a test named for it in mutation/manual.toml (`site = "module:line"` for the first
    holdout, `site = "holdout2/module:line"` for a later one; its result in manual.json)."""
    if not holdout:
        return []
    prefix = "" if label == "holdout" else f"{label}/"
    # Several hand mutants may name one line (one per survivor there): site -> [(name, new text)].
    sites: dict[str, list[tuple[str, str]]] = {}
    for m in tomllib.loads(MANUAL.read_text(encoding="utf-8"))["mutant"] if MANUAL.exists() else []:
        k = m.get("site") or ""
        if k.startswith(prefix) and (prefix or "/" not in k):
            sites.setdefault(k.removeprefix(prefix), []).append((m["name"], _change(m)))
    manual_file = RESULTS / "manual.json"
    outcome = {m["name"]: m.get("after") for m in json.loads(manual_file.read_text())} if manual_file.exists() else {}
    first = next(iter(holdout.values()))
    sample = f"--every {first.get('every', 1)} --offset {first.get('offset', 0)}"
    if label == "full":
        intro = ("Full run `full` (every site of the modules listed, runs `full`, `full2`, ... together), scored as "
                 "the suite stood when each module ran (\"killed / run\"); each survivor was then judged equivalent "
                 "or killed by a new test named for it.")
    else:
        # holdout is the second sample drawn (the first is the "after" rounds), holdoutN the (N+1)-th.
        n = int(label.removeprefix("holdout") or 1) + 1
        nth = {2: "second", 3: "third", 4: "fourth", 5: "fifth"}.get(n, f"{n}th")
        intro = (f"Holdout `{label}`: a {nth} sample of sites (`{sample}`), disjoint from the earlier samples "
                 "(those tests were written for), scored as the suite stood when it was drawn (\"killed / run\"); "
                 "each survivor was then judged equivalent or killed by a new test named for it.")
    lines = [intro, "",
             f"| module | {'run' if label == 'full' else 'holdout'}: killed / run | equivalent | "
             f"{'run' if label == 'full' else 'holdout'}, equivalents set apart | "
             "killed by a new test since | not explained | now, equivalents set apart | not run | measured |",
             "|---|---|---|---|---|---|---|---|---|"]
    total = {"killed": 0, "run": 0, "same": 0, "new": 0, "open": 0, "pending": 0}
    for m in MODULES:
        h = holdout.get(m)
        if not h:
            continue
        same = [s for s in h["survivors"] if _reason(equivalent, m, s) is not None]
        new = [s for s in h["survivors"] if _reason(equivalent, m, s) is None
               and outcome.get(_site_name(sites, f"{m}:{s['line']}", s)) == "killed"]
        left = len(h["survivors"]) - len(same) - len(new)
        ran = h["killed"] + h["timeout"] + h["survived"]
        total["killed"] += h["killed"] + h["timeout"]
        total["run"] += ran
        total["same"] += len(same)
        total["new"] += len(new)
        total["open"] += left
        now = ran - len(same)
        total["pending"] += h.get("pending", 0)
        lines.append(f"| {m} | {score(h)} | {len(same)} | {score(h, len(same))} | {len(new)} | {left} | "
                     f"{100 * (now - left) / now:.1f} % ({now - left}/{now}) | {h.get('pending', 0)} | "
                     f"{h.get('measured', '')} |" if now else
                     f"| {m} | {score(h)} | {len(same)} | — | {len(new)} | {left} | — | {h.get('pending', 0)} | "
                     f"{h.get('measured', '')} |")
    if total["run"]:
        now = total["run"] - total["same"]
        lines.append(f"| all | {100 * total['killed'] / total['run']:.1f} % ({total['killed']}/{total['run']}) | "
                     f"{total['same']} | {100 * total['killed'] / now:.1f} % ({total['killed']}/{now}) | "
                     f"{total['new']} | {total['open']} | "
                     f"{100 * (now - total['open']) / now:.1f} % ({now - total['open']}/{now}) | {total['pending']} | |")
    lines += ["", f"Survivors of `{label}` (line: operator in function, the change, and what became of it):", ""]
    for m in MODULES:
        h = holdout.get(m)
        if not h or not h["survivors"]:
            continue
        lines += [f"**{m}.py**", ""]
        for s in h["survivors"]:
            change = " / ".join(x.strip() for x in s["diff"]) or "?"
            name = _site_name(sites, f"{m}:{s['line']}", s)
            what = _reason(equivalent, m, s)
            if what is None and name and outcome.get(name) == "killed":
                what = f"killed by {next(x['test'] for x in tomllib.loads(MANUAL.read_text())['mutant'] if x['name'] == name).split('::')[-1]}"
            lines.append(f"- {s['line']}: {s['operator']} in `{s['function']}`: `{change[:160]}` — "
                         f"{what or '**not explained yet**'}")
        lines.append("")
    return lines


def _change(m: dict) -> str:
    """What a hand mutant changes, whitespace apart: its `stands_for` text where the source has
    changed since the survivor was found (the survivor's line as cosmic-ray wrote it), else the
    lines of its `new` text that its `old` text does not have (its context lines left out)."""
    if "stands_for" in m:
        return "".join(m["stands_for"].split())
    kept = {"".join(x.split()) for x in m["old"].splitlines()}
    return "".join("".join(x.split()) for x in m["new"].splitlines() if "".join(x.split()) not in kept)


def _site_name(sites: dict[str, list[tuple[str, str]]], key: str, s: dict) -> str | None:
    """The hand mutant written for survivor `s` at site `key`: where several name the line, the
    one whose change is the survivor's change."""
    named = sites.get(key, [])
    # Whitespace apart (cosmic-ray writes `( 1)` for `(1)`): a hand mutant stands for a survivor
    # only when it makes the same change. One written for another change of the same line does
    # not say this one is killed.
    changed = "".join("".join(x[1:].split()) for x in s["diff"] if x.startswith("+"))
    for name, change in named:
        if change and change in changed:
            return name
    return None


def _rounds(labels: dict, prefix: str) -> dict:
    """Per module, the results of the runs labelled `prefix`, `prefix`2, `prefix`3, ...: rounds of
    work that measured different modules share one table (a later round's module wins)."""
    merged: dict = {}
    for name in sorted((n for n in labels if re.fullmatch(rf"{prefix}\d*", n)), key=lambda n: (len(n), n)):
        merged.update(labels[name])
    return merged


def _reason(equivalent: dict, module: str, s: dict) -> str | None:
    """The recorded reason for a survivor, matched on its function, operator and the mutated line's text."""
    changed = " ".join(x[1:].strip() for x in s["diff"] if x.startswith("+"))
    # [[any]] entries hold in every module (a frozen dataclass, an annotation); they may leave
    # out the function.
    for entry in [*equivalent.get(module, []), *equivalent.get("any", [])]:
        # `line` pins an entry whose mutated text is not unique in its function (`.otherwise( 1.0)`).
        if entry.get("function", str(s["function"])) == str(s["function"]) and entry["operator"] == s["operator"] \
                and entry["match"] in changed and entry.get("line", s["line"]) == s["line"]:
            return entry["reason"]
    return None


def manual(ref: str | None, timeout: float, site_prefix: str | None = None) -> None:
    """Apply each hand-made mutant of mutation/manual.toml to a copy of the working tree and run
    the test named for it (it must fail); with `ref`, also run the focused engine tests of that
    commit on the same mutant (the suite as it was: did it catch the mutant then?)."""
    mutants = tomllib.loads(MANUAL.read_text(encoding="utf-8"))["mutant"]
    trees = {"after": make_tree("manual-after", None)}
    # A mutant skipped below keeps its last result: refuse to run while any no longer applies.
    stale = [f"{m['name']} ({n} times in {m['file']})" for m in mutants
             if (n := (trees["after"] / m["file"]).read_text(encoding="utf-8").count(m["old"])) != 1]
    if stale:
        raise SystemExit("hand mutants whose text to change is not in the source exactly once (update "
                         "mutation/manual.toml):\n  " + "\n  ".join(stale))
    if ref:
        trees["before"] = make_tree("manual-before", ref)
    results = []
    # Without --ref the "before" of each mutant is kept from the last run that measured it.
    manual_file = RESULTS / "manual.json"
    earlier = {r["name"]: r for r in json.loads(manual_file.read_text())} if manual_file.exists() else {}
    for m in mutants:
        if site_prefix and not m.get("site", "").startswith(site_prefix) and m["name"] in earlier:
            results.append(earlier[m["name"]])  # not run this time: its last result stands
            continue
        row = {"name": m["name"], "file": m["file"], "test": m["test"]}
        if not ref and "before" in earlier.get(m["name"], {}):
            row["before"] = earlier[m["name"]]["before"]
        for label, tree in trees.items():
            path = tree / m["file"]
            original = path.read_text(encoding="utf-8")
            if original.count(m["old"]) != 1:
                raise SystemExit(f"{m['name']}: the text to change occurs {original.count(m['old'])} times in {m['file']}")
            module = Path(m["file"]).stem
            cmd = test_args(module, tree, [m["test"]] if label == "after" else None)
            try:
                path.write_text(original.replace(m["old"], m["new"]), encoding="utf-8")
                try:
                    rc = subprocess.run(cmd, cwd=tree, capture_output=True, timeout=timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            finally:
                path.write_text(original, encoding="utf-8")
            row[label] = "survived" if rc == 0 else "killed"
            print(f"{m['name']} [{label}]: {row[label]}", flush=True)
        results.append(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "manual.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--modules", default=",".join(MODULES))
    run.add_argument("--label", default="after")
    run.add_argument("--ref", default=None, help="test this commit instead of the working tree")
    run.add_argument("--every", type=int, default=1)
    run.add_argument("--offset", type=int, default=0,
                     help="with --every N: the sites whose hash leaves this remainder (a disjoint holdout sample)")
    run.add_argument("--timeout", type=float, default=300.0)
    run.add_argument("--rerun-survivors-of", default=None)
    run.add_argument("--keep-tree", action="store_true", help="reuse .mutation/<label>/tree (resume a run)")
    run.add_argument("--resume", action="store_true",
                     help="on a machine without the run's session: take the sites mutation/results/<label>.json "
                          "says were run as run, and run the rest")
    run.add_argument("--all-tests", action="store_true",
                     help="run every focused test on each mutant, not only those that execute its statement")
    sub.add_parser("report")
    man = sub.add_parser("manual")
    man.add_argument("--ref", default=None, help="also run the engine tests of this commit on each mutant")
    man.add_argument("--timeout", type=float, default=600.0)
    man.add_argument("--site-prefix", default=None,
                     help="run only the mutants whose site starts with this (e.g. full/); the others keep their last result")
    args = parser.parse_args()
    if args.cmd == "report":
        report()
        return
    if args.cmd == "manual":
        manual(args.ref, args.timeout, args.site_prefix)
        report()
        return
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    unknown = set(modules) - set(MODULES)
    if unknown:
        raise SystemExit(f"unknown modules {sorted(unknown)}; choose from {MODULES}")
    tree = WORK / args.label / "tree"
    if args.keep_tree and tree.exists():
        check_kept_tree(args.label, tree, modules)
    else:
        tree = make_tree(args.label, args.ref)
        shutil.rmtree(WORK / args.label / "covmap", ignore_errors=True)
    covmap = None if args.all_tests else build_covmap(args.label, tree)
    for module in modules:
        run_module(module, args.label, tree, args, covmap)
    report()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
