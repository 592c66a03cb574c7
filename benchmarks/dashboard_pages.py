#!/usr/bin/env python3
"""The dashboard's speed as a person feels it (issue 20 item 12): real Chromium (Playwright)
against `streamlit run app.py` on a DuckDB store of the sample fleet.

    .venv/bin/python benchmarks/dashboard_pages.py [--repeat 3] [--out benchmarks/DASHBOARD.md]

Per run (a fresh server each time): the first page after the server answers its health
check (Overview), then every page opened from the sidebar for the first time, then every page
again (repeat visits), then a rule change (idle treatment beside the ranking) and a filter
change (one tenant in the sidebar). Each figure is the time from the action (navigation or
click) until the page stops changing: the script has finished (`data-test-script-state`
back to `notRunning`) and the last change of the main area's DOM (charts drawn, grids
filled) before it stays unchanged for QUIET_S. Both instants are recorded in the browser
(a MutationObserver), so the polling that waits for the quiet period does not count.
Medians of --repeat runs, with min and max. Never part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import platform
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
TARGETS = {"first page after start": 2.0, "first visit": 0.7, "repeat visit": 0.4, "rule change": 1.0,
           "filter change": 1.0}
TITLES = {"overview": "Overview", "rankings": "Rankings", "idle": "Idle", "energy": "Energy",
          "unit_economics": "Unit economics", "data": "Data", "rules": "Rules", "scenario": "Scenario"}

# Recorded in the page: the last time the script went back to notRunning, and the last DOM
# change in the app's main area (epoch ms, comparable with Python's clock on this machine).
WATCH = """
(() => {
  const now = () => performance.timeOrigin + performance.now();
  window.__bench = {idle: null, change: now(), state: null};
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
    if (records.some(r => r.target.closest && r.target.closest('[data-testid="stMain"]')))
      window.__bench.change = now();
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})();
"""


def _done(pg, since_ms: float, title: str) -> float:
    """Seconds from `since_ms` until the page stopped changing (see the module docstring)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        b = pg.evaluate("() => window.__bench")
        now_ms = time.time() * 1000
        heading = pg.locator("h1").first
        ok = (b and b["state"] == "notRunning" and b["idle"] and b["idle"] >= since_ms
              and heading.count() and title in heading.inner_text()
              and not pg.locator('[data-testid="stSkeleton"]').count()
              and pg.evaluate("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
                              ".every(c => c.querySelector('.main-svg'))"))
        if ok and now_ms - max(b["idle"], b["change"]) >= QUIET_S * 1000:
            return (max(b["idle"], b["change"]) - since_ms) / 1000
        pg.wait_for_timeout(50)
    raise RuntimeError(f"{title}: the page did not settle within {TIMEOUT_S:.0f} s")


def _nav(pg, page: str) -> float:
    link = pg.locator('[data-testid="stSidebarNav"]').get_by_text(TITLES[page], exact=True)
    t0 = time.time() * 1000
    link.click()
    return _done(pg, t0, TITLES[page])


def one_run(store: Path, work: Path) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {}
    env = {"AILEDGER_SOURCE": str(store), "AILEDGER_CHROMIUM": CHROMIUM}
    with streamlit_server(env, work / "streamlit.log") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
            ctx.add_init_script(WATCH)
            pg = ctx.new_page()
            t0 = time.time() * 1000
            pg.goto(url)
            out["first page after start"] = [_done(pg, t0, "Overview")]
            order = [p for p in PAGES if p != "overview"] + ["overview"]
            out["first visit"] = [_nav(pg, p) for p in order[:-1]]
            out["repeat visit"] = [_nav(pg, p) for p in order]
            _nav(pg, "rankings")
            group = pg.locator('[data-testid="stButtonGroup"]').filter(has_text="Idle charged to owners")
            t0 = time.time() * 1000
            group.get_by_text("Idle charged to owners").click()
            out["rule change"] = [_done(pg, t0, "Rankings")]
            box = pg.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').filter(has_text="Tenant")
            box.get_by_role("combobox").click()
            option = pg.get_by_role("option", name="research", exact=True)
            t0 = time.time() * 1000
            option.click()
            out["filter change"] = [_done(pg, t0, "Rankings")]
            for name, pages in (("first visit", order[:-1]), ("repeat visit", order)):
                for page, s in zip(pages, out[name]):
                    out[f"{name}: {page}"] = [s]
        finally:
            browser.close()
    return out


def render(runs: list[dict[str, list[float]]], load: tuple[float, float, float]) -> str:
    keys = list(runs[0])
    lines = [
        "# Dashboard speed in Chromium (issue 20)",
        "",
        f"`benchmarks/dashboard_pages.py`, {len(runs)} runs, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node() or 'this machine'}, {os.cpu_count()} CPUs, load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}. Sample fleet from a DuckDB store; seconds from the click "
        "(or the navigation) until the page stopped changing.",
        "",
        "| what | median s | min s | max s | n | target s | met |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for k in keys:
        vals = [v for r in runs for v in r.get(k, [])]
        if not vals:
            continue
        target = TARGETS.get(k)
        # a group figure is met when its slowest page meets it (every page must)
        met = "" if target is None else ("yes" if max(vals) < target else "**no**")
        lines.append(f"| {k} | {statistics.median(vals):.2f} | {min(vals):.2f} | {max(vals):.2f} | {len(vals)} | "
                     f"{'' if target is None else f'{target:.1f}'} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="fresh servers to measure (default 3)")
    ap.add_argument("--out", default="", help="write the results table here (Markdown)")
    args = ap.parse_args()
    if not Path(CHROMIUM).is_file():
        print(f"Chromium is missing at {CHROMIUM}", file=sys.stderr)
        return 2
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ailedger-bench-") as tmp:
        store = make_store(Path(tmp) / "store")
        runs = []
        for i in range(args.repeat):
            work = Path(tmp) / f"run{i}"
            work.mkdir()
            runs.append(one_run(store, work))
            print(f"run {i + 1}/{args.repeat} done", file=sys.stderr)
    text = render(runs, load)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
