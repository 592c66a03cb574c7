"""The wheel as a user installs it: built from the sdist by the standard front end (`python -m
build`), installed with pip into a fresh virtual environment in a temporary folder, and run
from a working directory outside the checkout: --version, report, ingest (twice: idempotent),
import, export parquet, and `ailedger serve` with the header access mode, checked in Chromium.

Slow: the build takes ~20 s and the install ~1-2 min (pip takes the dependencies from its
cache and the machine's package index; nothing of the checkout is on the new venv's path).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cost_engine
from cost_engine import api, views
from cost_engine.report import build_report
from tests.dashboard_support import ROOT, SAMPLE, bound_url, new_page, settle, stop

pytestmark = [pytest.mark.slow, pytest.mark.browser]

FIXTURES = ROOT / "tests" / "fixtures" / "importers"
ACCESS = """\
mode = "header"
admin_groups = ["finance"]
user_header = "X-Forwarded-User"
groups_header = "X-Forwarded-Groups"

[users]
"bob@example.com" = ["product"]

"""


def _clean_env(root: Path) -> dict[str, str]:
    """The environment of a user's shell: no venv or PYTHONPATH of the test run, HOME in the temp folder."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "AILEDGER_SOURCE", "AILEDGER_ACCESS")}
    env["HOME"] = str(root / "home")  # Streamlit's ~/.streamlit and credentials stay in the temp folder
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT)))
    return env


class Installed:
    """A fresh venv with the wheel in it, and a working folder outside the checkout."""

    def __init__(self, root: Path):
        self.root = root
        self.venv = root / "venv"
        self.work = root / "work"
        self.env = _clean_env(root)
        self.timings: dict[str, float] = {}

    def run(self, *args: str | Path, step: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        proc = subprocess.run([str(a) for a in args], cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=900)
        if step:
            self.timings[step] = time.monotonic() - t0
        if check and proc.returncode != 0:
            raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def ailedger(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(self.venv / "bin" / "ailedger", *args, check=check)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    inst = Installed(tmp_path_factory.mktemp("wheel"))
    (inst.root / "home").mkdir()
    inst.work.mkdir()
    dist = inst.root / "dist"
    # Default `python -m build`: the sdist first, then the wheel built from the unpacked sdist,
    # so a file missing from the sdist fails here too.
    inst.run(sys.executable, "-m", "build", "--outdir", dist, ROOT, step="build")
    wheels, sdists = sorted(dist.glob("ailedger-*.whl")), sorted(dist.glob("ailedger-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
    assert wheels[0].name == f"ailedger-{cost_engine.__version__}-py3-none-any.whl"
    inst.run(sys.executable, "-m", "venv", inst.venv, step="venv")
    inst.run(inst.venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheels[0], step="pip install")
    print(f"\nwheel test timings (s): {json.dumps({k: round(v, 1) for k, v in inst.timings.items()})}")
    return inst


@pytest.fixture(scope="module")
def checkout_report() -> dict:
    """The checkout's own engine on the sample bundle: the installed tool must agree with it."""
    return build_report(api.run(SAMPLE))


def test_the_installed_package_needs_nothing_from_the_checkout(installed):
    probe = ("import cost_engine, importlib.util, json, sys; "
             "print(cost_engine.__file__); print(importlib.util.find_spec('ailedger_dashboard.app').origin); "
             "print(json.dumps(sys.path))")
    out = installed.run(installed.venv / "bin" / "python", "-c", probe).stdout.splitlines()
    engine, app = Path(out[0]), Path(out[1])
    site = installed.venv.resolve()
    assert engine.resolve().is_relative_to(site) and app.resolve().is_relative_to(site), out
    assert not any(str(ROOT) in p for p in json.loads(out[2])), out[2]
    shipped = {p.relative_to(app.parent).as_posix() for p in app.parent.rglob("*") if p.is_file()
               and "__pycache__" not in p.parts}
    assert {"app.py", ".streamlit/config.toml", "pages/common.py", "pages/overview.py"} <= shipped
    assert not any(name.endswith("secrets.toml") for name in shipped)
    version = installed.ailedger("--version").stdout.strip()
    assert version == f"ailedger, version {cost_engine.__version__}"


def test_report_ingest_and_import_from_the_wheel(installed, checkout_report):
    """Total cost of the sample fleet, by hand except for the metered energy:
    costs.csv        1,726.03 + 287.67 + 690.41 + 172.60 + 282.24 + 47.04 + 141.12 + 120.96
                     + 60.48 + 181.44 + 443.52 + 1,209.60 + 100.80 + 20.16 + 1,820.00 = 7,304.07
    rates.csv        8 a100-infer cards x 168 h x 1.60 USD                            = 2,150.40
    energy ("power") telemetry priced by the hourly tariffs: the checkout engine's      313.51
    total                                                                              9,767.98
    """
    shutil.copytree(SAMPLE, installed.work / "fleet-week")
    rep = json.loads(installed.ailedger("report", "fleet-week", "--json").stdout)
    cats = {r["category"]: r["cost"] for r in rep["by_category"]}
    assert sum(v for k, v in cats.items() if k not in ("gpu_rental", "power")) == pytest.approx(7304.07)
    assert cats["gpu_rental"] == pytest.approx(8 * 168 * 1.60)
    assert cats["power"] == pytest.approx(checkout_report["totals"]["energy_cost"], rel=1e-12)
    assert rep["totals"]["cost"] == pytest.approx(7304.07 + 2150.40 + cats["power"])
    assert rep["totals"] == pytest.approx(checkout_report["totals"], rel=1e-12)
    assert "9,767.98" in installed.ailedger("report", "fleet-week").stdout

    first = installed.ailedger("ingest", "fleet-week", "--db", "ledger.duckdb").stdout
    assert re.search(r"ingest 1: [\d,]+ inserted, 0 unchanged", first), first
    again = installed.ailedger("ingest", "fleet-week", "--db", "ledger.duckdb").stdout
    assert re.search(r"ingest 2: 0 inserted, [\d,]+ unchanged, 0 replaced", again), again  # the hourly timer's case
    stored = json.loads(installed.ailedger("report", "ledger.duckdb", "--json").stdout)
    assert stored["totals"]["cost"] == pytest.approx(rep["totals"]["cost"], rel=1e-12)

    # sacct.txt (tests/fixtures/importers): job 1001 holds 4 cards on gpu001 08:00-12:00, job 1002
    # 2 cards on each of gpu002 and gpu003 10:00-11:30, job 1003 runs from 11:00 with 2 cards until
    # --end-at: 4 + 4 + 2 = 10 allocations; 1007 (3 cards on 2 nodes), the owner-less and the
    # backwards rows are reported as unmapped, never guessed.
    (installed.work / "imported").mkdir()
    (installed.work / "imported" / "ailedger.toml").write_text('[period]\nsource_timezone = "UTC"\n')
    shutil.copy(FIXTURES / "sacct.txt", installed.work / "sacct.txt")
    out = installed.ailedger("import", "slurm", "sacct.txt", "--into", "imported",
                             "--end-at", "2026-10-01T14:00:00Z").stdout
    assert re.search(r"allocations\s+10 rows", out), out
    lines = (installed.work / "imported" / "allocations.csv").read_text().splitlines()
    assert len(lines) == 1 + 10

    out = installed.ailedger("export", "parquet", "ledger.duckdb", "backup").stdout
    assert "exported ledger.duckdb" in out and (installed.work / "backup" / "schema.sql").is_file()


@contextlib.contextmanager
def serving(installed: Installed, *args: str):
    """`ailedger serve ... --port 0` from the venv; yields the URL with the port the server bound."""
    log_path = installed.root / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(installed.venv / "bin" / "ailedger"), "serve", *args, "--port", "0"],
                                cwd=installed.work, env=installed.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = bound_url(proc, log_path)
            yield url
        finally:
            stop(proc)


def _metric(pg, label: str) -> str:
    card = pg.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return card.locator('[data-testid="stMetricValue"]').inner_text().strip()


def _offers_its_exports_and_its_favicon(pg, url: str, venv: Path) -> None:
    """Issue 42 item 3: from the wheel, the PNG/SVG buttons and the review pack are enabled (on
    main kaleido was only an extra), and the favicon is served by the app under /media/ (on main
    it was not packaged, and its link was the install path)."""
    main = pg.locator('[data-testid="stMain"]')
    pack = main.get_by_role("button", name=re.compile("Download the review pack"))
    pack.wait_for(timeout=60_000)
    assert pack.is_enabled()
    png = main.locator('[data-testid="stDownloadButton"]').filter(has_text="PNG").first
    png.wait_for(timeout=60_000)
    assert png.locator("button").is_enabled()
    href = pg.locator('link[rel~="icon"], link[rel="shortcut icon"]').first.get_attribute("href")
    assert href and "/media/" in href and str(venv) not in href and "site-packages" not in href, href
    icon = pg.request.get(href if href.startswith("http") else f"{url}/{href.lstrip('/')}")
    assert icon.status == 200 and icon.body()[:8] == b"\x89PNG\r\n\x1a\n"


def test_serve_shows_the_fleet_total_in_chromium(installed, browser, checkout_report):
    """Behind a reverse proxy in header mode (docs/deploy.md): the finance group is admin and sees
    the fleet's total cost (9,767.98 USD, see the test above); bob sees only product's money.
    The Overview opens on whole local days by default; `period=all_data` is the report's period."""
    if not (installed.work / "ledger.duckdb").exists():  # this test run alone
        shutil.copytree(SAMPLE, installed.work / "fleet-week", dirs_exist_ok=True)
        installed.ailedger("ingest", "fleet-week", "--db", "ledger.duckdb")
    (installed.work / "access.toml").write_text(ACCESS)
    product = next(r["cost"] for r in checkout_report["by_tenant"] if r["tenant"] == "product")
    with serving(installed, "ledger.duckdb", "--access", "access.toml") as url:
        for headers, expected in (
            ({"X-Forwarded-User": "carol@example.com", "X-Forwarded-Groups": "finance"},
             views.format_value(checkout_report["totals"]["cost"], "USD")),
            ({"X-Forwarded-User": "bob@example.com"}, views.format_value(product, "USD")),
        ):
            ctx, pg = new_page(browser, extra_http_headers=headers)
            try:
                pg.goto(f"{url}/?period=all_data")
                settle(pg, timeout=120)
                assert pg.locator('[data-testid="stException"]').count() == 0
                assert pg.locator("h1").first.inner_text().strip() == "Overview"
                assert _metric(pg, "Total cost (USD)") == expected
                sidebar = pg.locator('[data-testid="stSidebar"]').inner_text()
                assert f"ailedger {cost_engine.__version__}" in sidebar and "ledger.duckdb" in sidebar
                if "finance" in headers.get("X-Forwarded-Groups", ""):
                    _offers_its_exports_and_its_favicon(pg, url, installed.venv)
            finally:
                ctx.close()
    assert views.format_value(checkout_report["totals"]["cost"], "USD") == "9,767.98"
