"""What the package ships and how it is run: the dashboard as package data, the version from one
place, `ailedger serve` (its command line and errors, without starting a server) and the Parquet
backup of a store. The wheel itself, installed outside the checkout: tests/test_wheel.py."""

from __future__ import annotations

import json
import os
import tomllib

import pytest
from click.testing import CliRunner

import cost_engine
from cost_engine import serve as serving
from cost_engine.cli import main
from tests.dashboard_support import APP, ROOT, SAMPLE
from tests.test_cli import ALLOCS, write_bundle

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ------------------------------------------------------------------------------------- packaging


def test_every_cost_engine_package_and_the_dashboard_are_listed():
    """The package list is explicit (the dashboard is mapped from the top of the repository), so a
    new subpackage of cost_engine must be added to it: this test names the one forgotten."""
    engine = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "cost_engine").rglob("__init__.py")}
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert listed == engine | {"ailedger_dashboard", "ailedger_dashboard.pages"}
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"ailedger_dashboard": "."}
    # Only the config ships from .streamlit/ (a secrets.toml beside it must never reach a wheel).
    assert PYPROJECT["tool"]["setuptools"]["package-data"] == {
        "ailedger_dashboard": [".streamlit/config.toml", "assets/favicon.png"]}


def test_the_wheel_carries_what_its_pages_offer():
    """Issue 42 item 3. On main kaleido was only in the `[export]` extra (the README's install
    line omitted it), so a wheel install showed PNG/SVG and the review pack disabled; the
    favicon was not packaged and its link became the install path. Now kaleido is a core
    dependency, the extra stays (empty) for old install lines, and the favicon the app points
    at is package data that exists."""
    deps = [d.split(">")[0].split("=")[0].strip() for d in PYPROJECT["project"]["dependencies"]]
    assert "kaleido" in deps
    assert PYPROJECT["project"]["optional-dependencies"]["export"] == []
    assert (ROOT / "assets" / "favicon.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert '"assets" / "favicon.png"' in APP.read_text(encoding="utf-8")


def test_version_comes_from_one_place():
    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cost_engine.__version__"}
    res = invoke("--version")
    assert res.exit_code == 0
    assert res.output.strip() == f"ailedger, version {cost_engine.__version__}"


def test_the_editable_install_serves_the_checkouts_dashboard():
    # `make setup` installs the checkout in editable mode: the dashboard found is this app.py,
    # so edits to app.py and pages/ show without a reinstall.
    assert serving.dashboard_app() == APP


def test_the_dashboard_footer_shows_the_version(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("AILEDGER_SOURCE", str(SAMPLE))
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    assert not at.exception, [e.message for e in at.exception]
    assert f"ailedger {cost_engine.__version__}" in [c.value for c in at.sidebar.caption]


# ----------------------------------------------------------------------------------------- serve


@pytest.fixture
def execs(monkeypatch) -> list[tuple[str, list[str], dict[str, str]]]:
    """os.execve recorded instead of run: the command `ailedger serve` would become."""
    calls: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(os, "execve", lambda path, argv, env: calls.append((path, list(argv), dict(env))))
    return calls


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_serve_without_a_source_says_what_to_give(execs):
    res = invoke("serve")
    assert res.exit_code == 2
    assert "needs the data to show: a DuckDB store or a bundle folder" in res.output
    assert "ailedger ingest BUNDLE --db ledger.duckdb" in res.output
    assert not execs


def test_serve_a_bundle_folder_runs_the_installed_app(execs, monkeypatch, tmp_path):
    monkeypatch.setenv("AILEDGER_ACCESS", "/etc/ailedger/access.toml")  # kept when --access is not given
    monkeypatch.chdir(tmp_path)  # a relative source is made absolute before the server starts
    bundle = write_bundle(tmp_path / "fleet", ALLOCS)
    res = invoke("serve", "fleet", "--port", "0")
    assert res.exit_code == 0, res.output
    assert f"serving {bundle} (bundle folder, access $AILEDGER_ACCESS)" in res.output
    [(path, argv, env)] = execs
    assert path == argv[0] and argv[1:5] == ["-m", "streamlit", "run", str(APP)]
    assert _flag(argv, "--server.port") == "0" and _flag(argv, "--server.address") == "127.0.0.1"
    assert _flag(argv, "--server.headless") == "true" and _flag(argv, "--browser.gatherUsageStats") == "false"
    assert env["AILEDGER_SOURCE"] == str(bundle)
    assert env["AILEDGER_ACCESS"] == "/etc/ailedger/access.toml"


def test_serve_a_store_with_an_access_file(execs, tmp_path):
    db = tmp_path / "ledger.duckdb"
    assert invoke("ingest", str(write_bundle(tmp_path / "b", ALLOCS)), "--db", str(db)).exit_code == 0
    access = tmp_path / "access.toml"
    access.write_text('mode = "header"\nadmin_groups = ["finance"]\n')
    res = invoke("serve", str(db), "--port", "9123", "--host", "0.0.0.0", "--access", str(access),
                 "--trusted-proxy", "10.0.0.5", "--trusted-proxy", "10.1.0.0/16")
    assert res.exit_code == 0, res.output
    [(_, argv, env)] = execs
    assert _flag(argv, "--server.port") == "9123" and _flag(argv, "--server.address") == "0.0.0.0"
    assert env["AILEDGER_SOURCE"] == str(db) and env["AILEDGER_ACCESS"] == str(access)
    assert env["AILEDGER_TRUSTED_PROXIES"] == "10.0.0.5,10.1.0.0/16"


def test_serve_refuses_header_mode_beyond_loopback_without_a_trusted_proxy(execs, tmp_path, monkeypatch):
    """Issue 38 item 11: on main `--host 0.0.0.0` with the header mode started, and anyone who
    reached the port could send X-Forwarded-Groups: finance. Refused now, from the file given
    or from $AILEDGER_ACCESS; loopback, or another mode, still serves."""
    bundle = write_bundle(tmp_path / "fleet", ALLOCS)
    access = tmp_path / "access.toml"
    access.write_text('mode = "header"\nadmin_groups = ["finance"]\n')
    res = invoke("serve", str(bundle), "--host", "0.0.0.0", "--access", str(access))
    assert res.exit_code == 2
    assert "--host 0.0.0.0 with the header access mode" in res.output and "--trusted-proxy ADDR" in res.output
    monkeypatch.setenv("AILEDGER_ACCESS", str(access))
    assert invoke("serve", str(bundle), "--host", "::").exit_code == 2
    assert invoke("serve", str(bundle), "--host", "server.example.com").exit_code == 2  # a name: any interface
    assert not execs
    res = invoke("serve", str(bundle), "--host", "0.0.0.0", "--trusted-proxy", "not-an-address")
    assert res.exit_code == 2 and "'not-an-address' is not an IP address or network" in res.output
    assert invoke("serve", str(bundle), "--host", "127.0.0.1").exit_code == 0
    assert invoke("serve", str(bundle), "--host", "::1").exit_code == 0
    (tmp_path / "oidc.toml").write_text('mode = "oidc"\n')
    assert invoke("serve", str(bundle), "--host", "0.0.0.0", "--access", str(tmp_path / "oidc.toml")).exit_code == 0
    assert len(execs) == 3


@pytest.mark.parametrize("case", ["missing", "not_a_store", "bad_config", "bad_access", "bad_port"])
def test_serve_refuses_what_it_cannot_serve(execs, tmp_path, case):
    bundle = write_bundle(tmp_path / "fleet", ALLOCS)
    args, expected = {
        "missing": (["serve", str(tmp_path / "nope")], "nope: no such file or folder"),
        "not_a_store": (["serve", str(bundle / "costs.csv")], "costs.csv: not an ailedger store"),
        "bad_config": (["serve", str(bundle)], "boundary"),
        "bad_access": (["serve", str(bundle), "--access", str(tmp_path / "access.toml")], "invalid access config"),
        "bad_port": (["serve", str(bundle), "--port", "70000"], "70000 is not in the range 0<=x<=65535"),
    }[case]
    if case == "bad_config":
        (bundle / "ailedger.toml").write_text('[boundary]\nname = "no_such_boundary"\n')
    if case == "bad_access":
        (tmp_path / "access.toml").write_text('mode = "basic"\n')
    res = invoke(*args)
    assert res.exit_code == 2
    assert expected in res.output
    assert not execs


# ---------------------------------------------------------------------------------------- backup


def test_export_parquet_and_restore_give_the_same_store(tmp_path):
    """The tiny bundle of test_cli: $48 of depreciation over one day on two cards is $1 per
    card-hour; A holds g0 for 10 h ($10), B holds g1 for 4 h ($4), the other 34 card-hours
    are idle ($34). The restored store reports exactly that, and keeps the ingest history."""
    db = tmp_path / "ledger.duckdb"
    assert invoke("ingest", str(write_bundle(tmp_path / "b", ALLOCS)), "--db", str(db)).exit_code == 0
    backup = tmp_path / "backup"
    res = invoke("export", "parquet", str(db), str(backup))
    assert res.exit_code == 0, res.output
    assert "allocations 2" in res.output and "ingests 1" in res.output
    assert {"schema.sql", "load.sql", "allocations.parquet", "meta.parquet"} <= {p.name for p in backup.iterdir()}

    moved = tmp_path / "elsewhere" / "backup"  # a backup still restores after it was moved
    moved.parent.mkdir()
    backup.rename(moved)
    restored = tmp_path / "restored" / "ledger.duckdb"
    res = invoke("restore", str(moved), "--db", str(restored))
    assert res.exit_code == 0, res.output
    # The config beside the store travelled with the backup.
    assert restored.with_suffix(".toml").read_text() == db.with_suffix(".toml").read_text()
    rep = json.loads(invoke("report", str(restored), "--json").output)
    assert rep["totals"]["cost"] == pytest.approx(48.0)
    assert {r["tenant"]: r["cost"] for r in rep["by_tenant"]} == pytest.approx({"A": 10.0, "B": 4.0})
    assert rep["reconciliation"]["idle"] == pytest.approx(34.0)
    # Re-ingesting the same bundle into the restored store changes nothing (hashes came along).
    res = invoke("ingest", str(tmp_path / "b"), "--db", str(restored))
    assert "0 inserted" in res.output, res.output


def test_backup_never_overwrites(tmp_path):
    db = tmp_path / "ledger.duckdb"
    assert invoke("ingest", str(write_bundle(tmp_path / "b", ALLOCS)), "--db", str(db)).exit_code == 0
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    res = invoke("export", "parquet", str(db), str(full))
    assert res.exit_code == 2 and "exists and is not an empty folder" in res.output
    assert [p.name for p in full.iterdir()] == ["keep.txt"]

    assert invoke("export", "parquet", str(db), str(tmp_path / "bk")).exit_code == 0
    res = invoke("restore", str(tmp_path / "bk"), "--db", str(db))
    assert res.exit_code == 2 and "exists; restore into a new file" in res.output
    res = invoke("restore", str(tmp_path / "b"), "--db", str(tmp_path / "new.duckdb"))
    assert res.exit_code == 2 and "not a store backup" in res.output
    assert not (tmp_path / "new.duckdb").exists()
