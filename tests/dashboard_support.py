"""Shared bits of the dashboard tests: the sample bundle, a store of it, and a small bundle whose
owner and model names carry HTML (to prove they are shown as text)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
SAMPLE = ROOT / "sample_data" / "fleet-week"
CHROMIUM = "/usr/bin/chromium"

EVIL_TENANT = "<script>alert(1)</script>"
EVIL_PROJECT = "<b>bold-project</b>"
EVIL_MODEL = "<img src=x onerror=alert(2)>"
PAGES = ("overview", "rankings", "idle", "energy", "unit_economics", "data", "rules", "scenario")


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
    import time
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
def streamlit_server(env_extra: dict[str, str], log_path: Path):
    """`streamlit run app.py` on a loopback port the system picks; yields its URL, stops it after."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, **env_extra, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", "0", "--server.headless",
             "true", "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
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
    doc, seen = getattr(pg, "_ailedger_settled", (None, 0))
    pg.wait_for_function(_SETTLED, arg=[doc, seen, title, quiet * 1000], timeout=timeout * 1000, polling=100)
    pg._ailedger_settled = tuple(pg.evaluate("() => [window.__ailedgerDoc, window.__ailedgerRuns]"))


def painted(pg) -> None:
    """Wait until the browser has painted what is on the page (two animation frames)."""
    pg.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))")
