#!/usr/bin/env python3
"""The dashboard's speed as a person feels it (issue 20 item 12): real Chromium (Playwright)
against `streamlit run app.py` on a DuckDB store of the sample fleet.

    .venv/bin/python benchmarks/dashboard_pages.py [--repeat 3] [--out benchmarks/DASHBOARD.md]

Per run (a fresh server and a new browser profile each time): the first page after the server
answers its health check (Overview), then every page opened from the sidebar for the first time, then every page
again (repeat visits), then a rule change (idle treatment beside the ranking) and a filter
change (one tenant in the sidebar); then the first page after a second fresh server starts,
in the same browser profile reopened (a person who has opened the dashboard before: Streamlit's
scripts come from the browser's cache, compiled). Each figure is the time from the action (navigation or
click) until the page stops changing: the script has finished (`data-test-script-state`
back to `notRunning`) and the last change of the main area's DOM (charts drawn, grids
filled; not the fallback content inside a <canvas>, which is never painted) before it stays
unchanged for QUIET_S. Both instants are recorded in the browser
(a MutationObserver), so the polling that waits for the quiet period does not count.
Medians of --repeat runs, with min and max. Beside each figure, the CPU seconds the server
process (and its threads) spent on it, read from /proc: on a shared machine the wall time is
inflated by other work, the CPU time much less so. The load average is noted at each run's
start. Beside them, the browser's own busy time over the same span: the sum of its main
thread's long tasks (over 50 ms each, Chromium's Long Tasks API), a lower bound of the time
it spent running the frontend's JavaScript and drawing. Never part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402 - the flags the tests use
from tests.dashboard_support import PAGES, make_store, streamlit_server  # noqa: E402

QUIET_S = 1.5  # no DOM change in the main area and the script idle for this long: done
TIMEOUT_S = 180.0
# Targets of issue 20 (sample fleet, a quiet machine).
TARGETS = {"first page after start": 2.0, "first page after start, returning browser": 2.0, "first visit": 0.7, "repeat visit": 0.4, "rule change": 1.0,
           "filter change": 1.0}
TITLES = {"overview": "Overview", "rankings": "Rankings", "idle": "Idle", "energy": "Energy",
          "unit_economics": "Unit economics", "compare": "Compare", "budgets": "Budgets", "data": "Data",
          "rules": "Rules", "scenario": "Scenario"}
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _server_pid() -> int | None:
    """The `streamlit run` child of this process (Linux /proc), or None where there is no /proc."""
    me = str(os.getpid())
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if (d / "stat").read_text().split(") ", 1)[1].split()[1] == me and \
                    b"streamlit" in (d / "cmdline").read_bytes():
                return int(d.name)
        except (OSError, IndexError):
            continue
    return None


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (all its threads), 0 without /proc."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK

# Recorded in the page: the last time the script went back to notRunning, and the last DOM
# change in the app's main area (epoch ms, comparable with Python's clock on this machine).
WATCH = """
(() => {
  const now = () => performance.timeOrigin + performance.now();
  window.__bench = {idle: null, change: now(), state: null, tasks: []};
  // The main thread's long tasks (> 50 ms): where the browser's own time goes.
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__bench.tasks.push([performance.timeOrigin + e.startTime, e.duration]);
  }).observe({type: 'longtask', buffered: true});
  const look = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app) return;
    const s = app.getAttribute('data-test-script-state');
    if (s !== window.__bench.state) {
      window.__bench.state = s;
      if (s === 'notRunning') window.__bench.idle = now();
    }
  };
  new MutationObserver((records) => {
    look();
    // A change inside a <canvas> is its fallback content (the data grid's accessibility table,
    // updated a few hundred ms after the grid is drawn): never painted, so not what a person waits for.
    if (records.some(r => r.target.closest && r.target.closest('[data-testid="stMain"]') && !r.target.closest('canvas')))
      window.__bench.change = now();
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})();
"""


# One look at the page, taken in the browser at one instant (separate look-ups race a rerun
# that replaces the heading between them).
LOOK = """() => {
  const h1 = document.querySelector('h1');
  return {bench: window.__bench, heading: h1 ? h1.innerText : '',
          skeleton: !!document.querySelector('[data-testid="stSkeleton"]'),
          drawn: [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(c => c.querySelector('.main-svg'))};
}"""


def _done(pg, since_ms: float, title: str) -> tuple[float, float]:
    """Seconds from `since_ms` until the page stopped changing (see the module docstring), and the
    browser's long-task seconds in that span."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        look = pg.evaluate(LOOK)
        b = look["bench"]
        now_ms = time.time() * 1000
        ok = (b and b["state"] == "notRunning" and b["idle"] and b["idle"] >= since_ms
              and title in look["heading"] and not look["skeleton"] and look["drawn"])
        if ok and now_ms - max(b["idle"], b["change"]) >= QUIET_S * 1000:
            end = max(b["idle"], b["change"])
            busy = sum(min(t + d, end) - max(t, since_ms) for t, d in b["tasks"] if t < end and t + d > since_ms)
            return (end - since_ms) / 1000, busy / 1000
        pg.wait_for_timeout(50)
    raise RuntimeError(f"{title}: the page did not settle within {TIMEOUT_S:.0f} s")


def _timed(pg, pid: int | None, title: str, action) -> tuple[float, float, float]:
    """(wall s until quiet, server CPU s meanwhile, browser long-task s meanwhile) of one action.
    The CPU is read once the page is quiet, minus the CPU of the quiet period itself (an idle
    server spends ~0)."""
    c0 = _cpu_s(pid)
    t0 = time.time() * 1000
    action()
    wall, busy = _done(pg, t0, title)
    return wall, _cpu_s(pid) - c0, busy


def _nav(pg, pid: int | None, page: str) -> tuple[float, float, float]:
    link = pg.locator('[data-testid="stSidebarNav"]').get_by_text(TITLES[page], exact=True)
    return _timed(pg, pid, TITLES[page], link.click)


def _browser(p, profile: Path):
    """Chromium on a browser profile (its disk cache and compiled-script cache), watched by WATCH:
    (context, page)."""
    ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                               viewport={"width": 1440, "height": 1000})
    ctx.add_init_script(WATCH)
    return ctx, (ctx.pages[0] if ctx.pages else ctx.new_page())


def one_run(store: Path, work: Path) -> tuple[dict[str, list[tuple[float, float, float]]], tuple[float, float, float]]:
    """One fresh server and a new browser profile: {figure: [(wall s, server CPU s, browser s)]},
    and the load average at its start. Then a second fresh server, opened by the same browser
    profile after a restart of the browser: "first page after start, returning browser"."""
    from playwright.sync_api import sync_playwright

    out: dict[str, list[tuple[float, float, float]]] = {}
    env = {"AILEDGER_SOURCE": str(store), "AILEDGER_CHROMIUM": CHROMIUM}
    load = os.getloadavg()
    profile = work / "profile"  # the browser's disk cache and compiled-script cache live here
    with sync_playwright() as p:
        with streamlit_server(env, work / "streamlit.log") as url:
            pid = _server_pid()
            ctx, pg = _browser(p, profile)
            try:
                out["first page after start"] = [_timed(pg, pid, "Overview", lambda: pg.goto(url))]
                order = [p for p in PAGES if p != "overview"] + ["overview"]
                out["first visit"] = [_nav(pg, pid, p) for p in order[:-1]]
                out["repeat visit"] = [_nav(pg, pid, p) for p in order]
                _nav(pg, pid, "rankings")
                group = pg.locator('[data-testid="stButtonGroup"]').filter(has_text="Idle charged to owners")
                out["rule change"] = [_timed(pg, pid, "Rankings", group.get_by_text("Idle charged to owners").click)]
                box = pg.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').filter(has_text="Tenant")
                box.get_by_role("combobox").focus()  # as tests/test_browser_access.py opens it
                pg.keyboard.press("ArrowDown")
                option = pg.locator('[role="listbox"] [role="option"]').filter(
                    has_text=re.compile(r"^\s*research\s*$"))
                option.wait_for(timeout=TIMEOUT_S * 1000)
                out["filter change"] = [_timed(pg, pid, "Rankings", option.click)]
                for name, pages in (("first visit", order[:-1]), ("repeat visit", order)):
                    for page, v in zip(pages, out[name]):
                        out[f"{name}: {page}"] = [v]
            finally:
                ctx.close()
            # The browser again, on this server: its scripts now come from the disk cache, and
            # Chromium compiles them once more and keeps the compiled code (it does so on a
            # script's second load from its cache), as for a dashboard a person opens every day.
            ctx, pg = _browser(p, profile)
            try:
                _timed(pg, pid, "Overview", lambda: pg.goto(url))
            finally:
                ctx.close()
        with streamlit_server(env, work / "streamlit-again.log") as url:
            pid = _server_pid()
            ctx, pg = _browser(p, profile)
            try:
                out["first page after start, returning browser"] = [
                    _timed(pg, pid, "Overview", lambda: pg.goto(url))]
            finally:
                ctx.close()
    return out, load


def render(runs: list[dict[str, list[tuple[float, float, float]]]], loads: list[tuple[float, float, float]],
           label: str = "") -> str:
    keys = list(runs[0])
    load_text = "; ".join(f"run {i + 1}: {a:.2f} / {b:.2f} / {c:.2f}" for i, (a, b, c) in enumerate(loads))
    lines = [
        f"## {label or 'Dashboard speed in Chromium'}",
        "",
        f"`benchmarks/dashboard_pages.py`, {len(runs)} runs, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node() or 'this machine'}, {os.cpu_count()} CPUs, load average (1 / 5 / 15 min) at each "
        f"run's start: {load_text}. Sample fleet from a DuckDB store; wall: seconds from the click (or the "
        "navigation) until the page stopped changing, in the browser; CPU: the server process's CPU seconds "
        "over the same span; browser: the browser main thread's long tasks (> 50 ms) over the same span. A "
        "group figure meets its target when its slowest page does.",
        "",
        "| what | wall median s | wall min s | wall max s | CPU median s | CPU max s | browser median s | "
        "browser max s | n | target s | met (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k in keys:
        vals = [v for r in runs for v in r.get(k, [])]
        if not vals:
            continue
        wall = [v[0] for v in vals]
        cpu = [v[1] for v in vals]
        busy = [v[2] for v in vals]
        target = TARGETS.get(k)
        met = "" if target is None else ("yes" if max(wall) < target else "**no**")
        lines.append(f"| {k} | {statistics.median(wall):.2f} | {min(wall):.2f} | {max(wall):.2f} | "
                     f"{statistics.median(cpu):.2f} | {max(cpu):.2f} | {statistics.median(busy):.2f} | "
                     f"{max(busy):.2f} | {len(vals)} | "
                     f"{'' if target is None else f'{target:.1f}'} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="fresh servers to measure (default 3)")
    ap.add_argument("--out", default="", help="write the results table here (Markdown)")
    ap.add_argument("--label", default="", help="the table's heading (e.g. before / after a change)")
    ap.add_argument("--append", action="store_true", help="add the table to --out instead of replacing it")
    args = ap.parse_args()
    if not Path(CHROMIUM).is_file():
        print(f"Chromium is missing at {CHROMIUM}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ailedger-bench-") as tmp:
        store = make_store(Path(tmp) / "store")
        runs, loads = [], []
        for i in range(args.repeat):
            work = Path(tmp) / f"run{i}"
            work.mkdir()
            run, load = one_run(store, work)
            runs.append(run)
            loads.append(load)
            print(f"run {i + 1}/{args.repeat} done", file=sys.stderr)
    text = render(runs, loads, args.label)
    print(text)
    if args.out:
        out = Path(args.out)
        if args.append and out.exists():
            text = out.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + text
        out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
