"""The dashboard keeps serving while another process holds the store for an ingest: it shows
the last committed version (cached) instead of waiting for the writer's lock."""

from __future__ import annotations

import subprocess
import sys

from streamlit.testing.v1 import AppTest

from tests.dashboard_support import APP, make_store

HOLD = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])          # a write connection: DuckDB's exclusive lock
con.execute("BEGIN TRANSACTION")
print("locked", flush=True)
sys.stdin.readline()                       # hold it until the test says so
con.execute("ROLLBACK")
print("released", flush=True)
"""


def test_overview_serves_cached_figures_while_the_store_is_locked(tmp_path, monkeypatch):
    db = make_store(tmp_path / "store")
    monkeypatch.setenv("AILEDGER_SOURCE", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    before = [m.value for m in at.metric]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        at.run()
        # The writer held its lock for the whole run (it lets go only when told, below): the page
        # answered from its cache instead of waiting for the writer, however long that would be.
        assert holder.poll() is None
        assert not at.exception
        assert [m.value for m in at.metric] == before
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
    finally:
        holder.kill()
        holder.wait()
