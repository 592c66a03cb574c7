"""Shared bits of the dashboard tests: the sample bundle, a store of it, and a small bundle whose
owner and model names carry HTML (to prove they are shown as text)."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
SAMPLE = ROOT / "sample_data" / "fleet-week"
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "test-output" / "screenshots"

EVIL_TENANT = "<script>alert(1)</script>"
EVIL_PROJECT = "<b>bold-project</b>"
EVIL_MODEL = "<img src=x onerror=alert(2)>"
PAGES = ("overview", "rankings", "idle", "energy", "unit_economics", "compare", "budgets", "data", "rules",
         "scenario")


def _csv(rows: list[list[object]]) -> str:
    out = []
    for r in rows:
        cells = []
        for v in r:
            s = "" if v is None else str(v)
            if any(ch in s for ch in ',"\n'):
                s = '"' + s.replace('"', '""') + '"'
            cells.append(s)
        out.append(",".join(cells))
    return "\n".join(out) + "\n"


def write_html_bundle(folder: Path) -> Path:
    """A one-day, two-card bundle whose tenant, project and model names are HTML."""
    folder.mkdir(parents=True, exist_ok=True)
    day = "2026-10-01T{:02d}:00:00Z".format
    files = {
        "inventory.csv": [["gpu_id", "pool", "node", "accelerator"],
                          ["GPU-evil-1", "pool-a", "node-1", "H100-SXM-80GB"],
                          ["GPU-evil-2", "pool-a", "node-1", "H100-SXM-80GB"]],
        "allocations.csv": [["allocation_id", "gpu_id", "start", "end", "owner", "source", "workload", "job_id", "model"],
                            ["a-1", "GPU-evil-1", day(0), day(12), "evil-key", "scheduler", "training", "job-1", ""],
                            ["a-2", "GPU-evil-2", day(0), day(18), "svc-key", "scheduler", "inference", "svc-1",
                             EVIL_MODEL],
                            ["a-3", "GPU-evil-2", day(18), day(20), "plain", "scheduler", "training", "job-2", ""]],
        "owners.csv": [["tenant", "project", "display_name"],
                       [EVIL_TENANT, EVIL_PROJECT, "<i>shown as text</i>"],
                       ["plain-tenant", "plain", "Plain project"]],
        "aliases.csv": [["source", "key", "project"],
                        ["scheduler", "evil-key", EVIL_PROJECT],
                        ["scheduler", "svc-key", EVIL_PROJECT],
                        ["gateway", "evil-gw", EVIL_PROJECT]],
        "costs.csv": [["cost_id", "category", "amount", "currency", "start", "end", "pool"],
                      ["c-1", "depreciation", "480", "USD", day(0), "2026-10-02T00:00:00Z", "pool-a"],
                      ["c-2", "software", "48", "USD", day(0), "2026-10-02T00:00:00Z", ""]],
        "requests.csv": [["request_id", "ts", "owner", "source", "model", "input_tokens", "cached_input_tokens",
                          "output_tokens", "status", "ttft_ms", "latency_ms"]]
        + [[f"r-{i}", f"2026-10-01T{1 + i % 16:02d}:{i % 60:02d}:00Z", "evil-gw", "gateway", EVIL_MODEL,
            1000, 200, 300, "ok", 150, 2500] for i in range(40)],
        "telemetry.csv": [["ts", "gpu_id", "util_pct", "power_w"]]
        + [[f"2026-10-01T{h:02d}:{m:02d}:00Z", g, 80.0 if (g == "GPU-evil-1" and h < 12) or
            (g == "GPU-evil-2" and h < 16) else 2.0, 500.0 if h < 12 else 90.0]
           for g in ("GPU-evil-1", "GPU-evil-2") for h in range(24) for m in range(0, 60, 5)],
    }
    for name, rows in files.items():
        (folder / name).write_text(_csv(rows), encoding="utf-8")
    (folder / "ailedger.toml").write_text(
        '[period]\nstart = 2026-10-01T00:00:00Z\nend = 2026-10-02T00:00:00Z\ntimezone = "UTC"\ncurrency = "USD"\n',
        encoding="utf-8",
    )
    return folder


def copy_sample(folder: Path) -> Path:
    """A writable copy of the sample bundle (for tests that save aliases or rules)."""
    shutil.copytree(SAMPLE, folder)
    return folder


def make_store(folder: Path, bundle_dir: Path = SAMPLE) -> Path:
    """An ailedger DuckDB store of a bundle, with its config beside it (as `ailedger ingest` does)."""
    from cost_engine import store
    from cost_engine.bundle import read_bundle
    from cost_engine.config import load_config

    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "ledger.duckdb"
    cfg = bundle_dir / "ailedger.toml"
    store.ingest(db, read_bundle(bundle_dir, load_config(cfg if cfg.exists() else None)), source=str(bundle_dir))
    if cfg.exists():
        db.with_suffix(".toml").write_text(cfg.read_text(encoding="utf-8"), encoding="utf-8")
    return db


def bound_url(proc, log_path: Path, timeout: float = 120) -> str:
    """The URL a Streamlit server started with port 0 prints once it has bound its port (the
    system picks a free one, so no port is chosen here and released before the server takes it);
    then its health check answers. Fails with the log's tail if the server exits or never binds."""
    import re
    import subprocess
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        found = re.search(r"URL: (http://127\.0\.0\.1:\d+)", Path(log_path).read_text())
        if found:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not start:\n" + Path(log_path).read_text()[-3000:])
        try:
            proc.wait(timeout=0.2)  # wait on the process itself: an exit ends the wait at once
        except subprocess.TimeoutExpired:
            pass
    url = found.group(1)
    while True:  # bound is not yet serving: ask its health check until it answers
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as r:
                if r.status == 200:
                    return url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not answer:\n" + Path(log_path).read_text()[-3000:])
        try:
            proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass


@contextlib.contextmanager
def streamlit_server(env_extra: dict[str, str], log_path: Path, cwd: Path | None = None):
    """`streamlit run app.py` on a loopback port the system picks; yields its URL, stops it after.

    `cwd`: the server's working folder (default: the repository), for tests of paths relative
    to it; the repository's .streamlit/config.toml is copied there so the app runs as shipped."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, **env_extra, PYTHONUNBUFFERED="1")
    if cwd is not None:
        (cwd / ".streamlit").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / ".streamlit" / "config.toml", cwd / ".streamlit" / "config.toml")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(APP), "--server.port", "0", "--server.headless",
             "true", "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=cwd or ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            yield bound_url(proc, log_path, timeout=90)
        finally:
            stop(proc)


def stop(proc) -> None:
    """Terminate a server process, killing it if it does not exit within 15 s."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# Counts the app's finished script runs in the page itself (a run has finished each time the
# app's script state leaves "running") and notes when the state last changed. Installed before any
# of the page's own scripts, so no run is missed; each document gets its own id, so a wait after
# a navigation counts that document's runs only.
RUN_COUNTER = """
window.__ailedgerDoc = Math.random();
window.__ailedgerRuns = 0;
window.__ailedgerChanged = performance.now();
new MutationObserver(records => {
  for (const r of records) if (r.oldValue === 'running') window.__ailedgerRuns += 1;
  window.__ailedgerChanged = performance.now();
}).observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                      attributeFilter: ['data-test-script-state']});
"""
# The app reruns itself after some runs (st.rerun, a widget reporting its first value): the page
# shows "notRunning" for a moment between the two. No element says that no rerun is coming, so a
# finished run counts as the last one once the state has stayed "notRunning" for `quiet` ms, as
# the page's own clock measures it (the browser evaluates this; the test never sleeps).
_SETTLED = """([doc, seen, title, quiet]) => {
  const app = document.querySelector('[data-testid="stApp"]');
  const before = window.__ailedgerDoc === doc ? seen : 0;
  return !!app && window.__ailedgerRuns > before && app.getAttribute('data-test-script-state') === 'notRunning'
    && (!title || document.querySelector('h1') !== null) && performance.now() - window.__ailedgerChanged >= quiet;
}"""


def new_page(browser, **context_options):
    """A browser context (1400 x 1000) whose pages count the app's script runs; (context, page)."""
    ctx = browser.new_context(**{"viewport": {"width": 1400, "height": 1000}, **context_options})
    ctx.add_init_script(RUN_COUNTER)
    return ctx, ctx.new_page()


def settle(pg, timeout: float = 90.0, title: bool = True, quiet: float = 1.2) -> None:
    """Wait until the app has finished a script run since the last settle of this document (or
    since it loaded), has not run again for `quiet` seconds (see _SETTLED) and (with `title`)
    shows its h1. Call it after each action that runs the script (a load, a click, a form); what
    a test then looks for, it waits for with Playwright's expect()."""
    if pg.evaluate("() => typeof window.__ailedgerRuns") == "undefined":
        # A page from a context without the run counter (browser.new_context, not new_page):
        # poll the run state instead.
        _settle_polling(pg, timeout, quiet, title)
        return
    doc, seen = getattr(pg, "_ailedger_settled", (None, 0))
    pg.wait_for_function(_SETTLED, arg=[doc, seen, title, quiet * 1000], timeout=timeout * 1000, polling=100)
    pg._ailedger_settled = tuple(pg.evaluate("() => [window.__ailedgerDoc, window.__ailedgerRuns]"))


def painted(pg) -> None:
    """Wait until the browser has painted what is on the page (two animation frames)."""
    pg.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))")


def _settle_polling(pg, timeout: float, quiet: float, title: bool) -> None:
    """Wait until Streamlit has finished running the script (and any rerun it triggered): the app
    reports `notRunning` continuously for `quiet` seconds and (with `title`) the page has its
    title; pages that stop before one (no access) pass title=False."""
    import time

    state = ("() => { const a = document.querySelector('[data-testid=\"stApp\"]');"
             " return a ? a.getAttribute('data-test-script-state') : null }")
    deadline = time.monotonic() + timeout
    calm_since = None
    while time.monotonic() < deadline:
        ok = pg.evaluate(state) == "notRunning" and (not title or pg.locator("h1").count() > 0)
        now = time.monotonic()
        if not ok:
            calm_since = None
        elif calm_since is None:
            calm_since = now
        elif now - calm_since >= quiet:
            return
        pg.wait_for_timeout(100)
    raise AssertionError("Streamlit did not finish running in time")
# ------------------------------------------------------------------------- browser helpers
# Every wait is for a state of the page (the script's run state, an element, a text), never a
# fixed time; the short polls below only re-check such a state.




def charts_drawn(pg, timeout: float = 90_000) -> None:
    """Wait until every Plotly chart on the page has drawn its SVG (the chart code loads lazily)."""
    pg.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
        ".every(c => c.querySelector('.main-svg'))",
        timeout=timeout,
    )


def open_url(pg, url: str) -> None:
    pg.goto(url)
    pg.wait_for_selector('[data-testid="stApp"]')
    settle(pg)


_PLACEHOLDERS = "[data-testid=\"stSkeleton\"], [data-testid=\"stSkeletonElement\"]"


def placeholders_gone(pg, timeout: float = 90_000) -> None:
    """Wait until no element shows a placeholder: a stSkeleton is the frontend loading the code of
    an element type (scrolled into view, drawn lazily), a stSkeletonElement one the server sent.
    If they stay, say which and where, and in what run state the app is (a browser run once timed
    out here after 30 s on Scenario, under load, with nothing to tell why)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        pg.wait_for_function(f"() => !document.querySelector('{_PLACEHOLDERS}')", timeout=timeout)
    except PlaywrightTimeout:
        left = pg.evaluate(
            "(sel) => [...document.querySelectorAll(sel)].map(e => {"
            " const box = e.closest('[data-testid=\"stElementContainer\"]');"
            " const prev = box && box.previousElementSibling;"
            " return `${e.getAttribute('data-testid')} in ${box ? box.className : 'no container'}`"
            " + ` after \"${prev ? prev.innerText.slice(0, 60) : ''}\"` })", _PLACEHOLDERS)
        state = pg.evaluate("() => document.querySelector('[data-testid=\"stApp\"]')"
                            "?.getAttribute('data-test-script-state')")
        raise AssertionError(f"placeholders still on the page after {timeout / 1000:g} s "
                             f"(script state {state}): {left}") from None


def shot(pg, name: str, folder: Path = SHOTS) -> Path:
    """A screenshot of the whole page at the page's width (the app scrolls inside its main
    block, so the viewport grows to its height, then goes back)."""
    folder.mkdir(parents=True, exist_ok=True)
    charts_drawn(pg)
    before = pg.viewport_size or {"width": 1400, "height": 1000}
    height = pg.evaluate("() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
                         " return m ? m.scrollHeight : 1000 }")
    pg.set_viewport_size({"width": before["width"], "height": min(max(1000, height + 40), 8000)})
    placeholders_gone(pg)
    charts_drawn(pg)
    painted(pg)
    charts_drawn(pg)
    path = folder / f"{name}.png"
    pg.screenshot(path=str(path), full_page=True)
    pg.set_viewport_size(before)
    return path


def no_exceptions(pg) -> None:
    """No traceback on the page, and no error that escaped a page (app.py turns those into a
    message: the test fails on it all the same)."""
    assert pg.locator('[data-testid="stException"]').count() == 0, pg.locator(
        '[data-testid="stException"]').first.inner_text()
    escaped = pg.get_by_text("Something went wrong on")
    assert escaped.count() == 0, escaped.first.inner_text()


def click_row(pg, table_index: int, row: int) -> None:
    """Select a data row of the n-th st.dataframe by its row-marker cell (the grid is a canvas)."""
    grid = pg.locator('[data-testid="stDataFrame"]').nth(table_index)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    pg.mouse.click(box["x"] + 16, box["y"] + 35 * (row + 1) + 17)


def grid_cells(pg, table_index: int) -> list[str]:
    """The cell texts of the n-th st.dataframe (its accessible table mirrors the visible rows).

    The grid draws its cells after the script has finished; on a busy machine that can be
    seconds later, so wait for the cells (a state), not for time."""
    grid = pg.locator('[data-testid="stDataFrame"]').nth(table_index)
    grid.locator("table[role=grid] td").first.wait_for(state="attached", timeout=60_000)
    return [t.strip() for t in grid.locator("table[role=grid] td").all_inner_texts()]


def grid_with(pg, table_index: int, texts: list[str], timeout: float = 60_000) -> list[str]:
    """The cell texts of the n-th st.dataframe once they hold every one of `texts`.

    The grid's accessible table fills in after the script has finished, and not all at once:
    reading it as soon as one cell is there can miss rows (issue 20 item 13). Wait for the
    cells the test is about, then read them all."""
    pg.wait_for_function(
        """([i, want]) => { const g = document.querySelectorAll('[data-testid="stDataFrame"]')[i];
            if (!g) return false;
            const cells = new Set([...g.querySelectorAll('table[role=grid] td')].map(c => c.innerText.trim()));
            return want.every(w => cells.has(w)); }""",
        arg=[table_index, texts], timeout=timeout,
    )
    return grid_cells(pg, table_index)


def chart_titled(pg, prefix: str, timeout: float = 90_000):
    """The Plotly chart whose title starts with `prefix` (SVG text is matched by its text
    content: Playwright's has_text does not see it)."""
    # The page draws its charts after the script has finished, and a rerun may redraw them
    # between a look-up and its use: mark the chart in the same evaluation that finds it, and
    # look again while the mark is gone (a state, not a sleep).
    find = """(p) => {
        const c = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
            .find(c => [...c.querySelectorAll('.gtitle')].some(t => (t.textContent || '').startsWith(p)));
        if (!c || !c.querySelector('.main-svg')) return false;
        c.setAttribute('data-test-title', p);
        return true;
    }"""
    deadline = time.monotonic() + timeout / 1000
    while True:
        left = max(1.0, (deadline - time.monotonic()) * 1000)
        pg.wait_for_function(find, arg=prefix, timeout=left)
        charts_drawn(pg, timeout=left)
        chart = pg.locator(f"[data-test-title={json.dumps(prefix)}]")
        if chart.count() == 1 and any((t or "").startswith(prefix) for t in svg_texts(chart, ".gtitle")):
            return chart
        if time.monotonic() > deadline:
            raise AssertionError(f"no chart titled {prefix!r}")


def svg_texts(locator, selector: str) -> list[str]:
    """The text content of the SVG elements matching `selector` (innerText is empty for SVG)."""
    return [t.text_content() or "" for t in locator.locator(selector).all()]


def pick(pg, box, option, tries: int = 3) -> None:
    """Pick `option` (its name, or a pattern) of the selectbox `box`: open its list until the option
    shows (a state), then click it. The app can rerun itself just after a first run; a click that
    lands while it redraws the box closes the list at once (a five-in-a-row run waited 30 s for
    an option that never showed), and a person would open it again."""
    from playwright.sync_api import expect

    item = pg.get_by_role("option", name=option)
    for _ in range(tries):
        _settle_polling(pg, 90.0, 1.2, False)
        box.click()
        try:
            expect(item).to_be_visible(timeout=20_000)
        except AssertionError:
            continue
        item.click()
        return
    raise AssertionError(f"the option {option!r} never showed in its list")


def download(pg, button, tries: int = 3):
    """Click a download button until the browser starts the download (a state). The file is made
    on the server when clicked; a rerun between the page's drawing and the click can replace the
    button's callback, and that click then downloads nothing (seen in CI on the PNG and SVG
    buttons). A person clicks again; so does this."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(tries):
        # The app idle for a while (no new run is awaited: the button may be clicked right after
        # the page settled, with nothing to run in between).
        _settle_polling(pg, 90.0, 1.2, False)
        try:
            with pg.expect_download(timeout=60_000) as info:
                button.click(timeout=90_000)
            return info.value
        except PlaywrightTimeout:
            continue
    raise AssertionError("the download never started")
