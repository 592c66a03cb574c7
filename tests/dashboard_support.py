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


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(env_extra: dict[str, str], log_path: Path):
    """`streamlit run app.py` on a free loopback port; yields its URL, stops it after."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    port = free_port()
    env = dict(os.environ, **env_extra)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless",
             "true", "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError("streamlit did not start:\n" + Path(log_path).read_text()[-3000:])
                time.sleep(0.3)
            yield url
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
