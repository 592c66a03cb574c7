"""The dashboard keeps serving while another process holds the store for an ingest: it shows
the last committed version (cached) instead of waiting for the writer's lock."""

from __future__ import annotations

import subprocess
import sys
import time

from streamlit.testing.v1 import AppTest

from tests.dashboard_support import APP, make_store

HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])          # a write connection: DuckDB's exclusive lock
con.execute("BEGIN TRANSACTION")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("ROLLBACK")
"""


def test_overview_serves_cached_figures_while_the_store_is_locked(tmp_path, monkeypatch):
    db = make_store(tmp_path / "store")
    monkeypatch.setenv("AILEDGER_SOURCE", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    before = [m.value for m in at.metric]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t = time.monotonic()
        at.run()
        took = time.monotonic() - t
        assert not at.exception
        assert [m.value for m in at.metric] == before
        assert took < 15, f"the page waited {took:.1f} s for the writer"
    finally:
        holder.kill()
        holder.wait()
