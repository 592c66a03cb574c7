"""Issue 42 in a real browser (Debian's Chromium, Playwright): "Copy link" carries the ranking
level and sort the address bar carries; selecting every value of a filter says what it leaves
out; a broken upload is refused in the project's words with the source unchanged; export file
names carry idle treatment and recharge; the review pack reads back self-described.

One `streamlit run` for the module (test_browser_views' fixture), reading a DuckDB store of the
sample fleet."""

from __future__ import annotations

import re
import zipfile
from urllib.parse import parse_qs, urlparse

import pytest

from tests.dashboard_support import no_exceptions, open_url, pick, settle
# The module's server: test_browser_views' fixture (a store of the sample, default upload folder).
from tests.test_browser_views import copied_link, new_page, reopened, served, snapshot  # noqa: F401

pytestmark = pytest.mark.browser


def test_copy_link_keeps_the_ranking_level_and_sort(served, browser):
    """Item 1. On main, picking Projects in "Rank" put rank=project in the address bar but not in
    "Copy link" (drawn in the sidebar before the page set it): the colleague opened Tenants. Now
    the link is the address bar's view, and reopens the same rank, sort, period, boundary and
    filters in a fresh browser."""
    url = served["url"]
    pg = new_page(browser)
    try:
        open_url(pg, f"{url}/rankings?period=custom&from=2026-10-07&to=2026-10-10&boundary=rental"
                     "&f_tenant=research&f_tenant=product")
        no_exceptions(pg)
        pg.locator('[data-testid="stButtonGroup"]').get_by_text("Projects", exact=True).click()
        pg.wait_for_url(re.compile(r"rank=project"))
        settle(pg)
        main = pg.locator('[data-testid="stMain"]')
        pick(pg, main.locator('[data-testid="stSelectbox"]').filter(has_text="Sort by"), "GPU-hours")
        pg.wait_for_url(re.compile(r"sort=gpu_hours"))
        first = snapshot(pg)
        link = copied_link(pg)
        assert parse_qs(urlparse(link).query) == first["query"]
        assert first["query"]["rank"] == ["project"] and first["query"]["sort"] == ["gpu_hours"]
        assert first["query"]["f_tenant"] == ["product", "research"] and first["query"]["boundary"] == ["rental"]
        assert first["dates"] == ["2026-10-07", "2026-10-10"]
    finally:
        pg.context.close()
    again = reopened(browser, link, first)
    assert again == first


def test_every_pool_selected_says_what_it_leaves_out(served, browser):
    """Item 2. On main, the three pools selected turned the total 8,371.47 into 6,811.47 with no
    note. The missing 1,560.00 is costs.csv's cost-direct-001 (1,820.00 USD over the 168 h week,
    no pool): its 144 h in the default view's whole days, 1,820 x 144 / 168 = 1,560.00. The
    Overview now says so above its figures."""
    pg = new_page(browser)
    try:
        open_url(pg, f"{served['url']}/?f_pool=a100-infer&f_pool=a100-mig&f_pool=h100-train")
        no_exceptions(pg)
        note = pg.locator('[data-testid="stAlert"]').filter(has_text="Not in these figures")
        note.wait_for(timeout=60_000)
        assert "costs without a pool: 1,560.00 USD not shown" in note.inner_text()
        pools = snapshot(pg)["filters"][0]
        assert all(p in pools for p in ("a100-infer", "a100-mig", "h100-train")), pools
    finally:
        pg.context.close()


def _upload(pg, path) -> None:
    pg.get_by_role("tab", name="Upload a bundle").click(timeout=90_000)
    pg.locator('[data-testid="stFileUploaderDropzoneInput"][accept*=".zip"]').set_input_files(str(path))
    pg.get_by_role("button", name="Validate and open").click()


def test_a_broken_upload_is_refused_and_the_source_stays(served, browser, tmp_path):
    """Items 6 and 12. On main a zip with an ailedger.toml that does not parse was opened, and
    then every page, Data and Rules included, stopped on its config error until a reload; a file
    named .zip that is not one said Python's "File is not a zip file" with the old source's green
    "passed validation" under it. Now both are refused before the source switches, in the
    project's words, the refusal alone is shown (no validation of the old source under it), no
    server folder appears, and the store stays open on every page."""
    from tests.dashboard_support import SAMPLE

    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(broken, "w") as z:
        z.write(SAMPLE / "allocations.csv", "fleet/allocations.csv")
        z.writestr("fleet/ailedger.toml", "[period\n")
    fake = tmp_path / "fleet.zip"
    fake.write_bytes(b"allocation_id,gpu_id\n")
    url = served["url"]
    pg = new_page(browser)
    try:
        for upload, words in ((broken, "Upload refused: fleet/ailedger.toml: not valid TOML"),
                              (fake, "Upload refused: 'fleet.zip' is not a zip archive")):
            open_url(pg, f"{url}/data")
            _upload(pg, upload)
            refusal = pg.locator('[data-testid="stAlert"]').filter(has_text="Upload refused")
            refusal.wait_for(timeout=120_000)
            settle(pg)
            no_exceptions(pg)
            text = refusal.inner_text()
            assert words in text and "The open source is unchanged (ledger.duckdb)" in text, text
            main = pg.locator('[data-testid="stMain"]').inner_text()
            assert "passed validation" not in main and "File is not a zip file" not in main
            assert str(served["root"]) not in main and "/uploads" not in main
            assert "ledger.duckdb" in pg.locator('[data-testid="stSidebar"]').inner_text()
        for page, title in (("rules", "Rules"), ("", "Overview")):
            open_url(pg, f"{url}/{page}")
            no_exceptions(pg)
            assert pg.locator("h1").first.inner_text().strip() == title
            assert pg.locator('[data-testid="stAlert"]').filter(has_text="invalid").count() == 0
    finally:
        pg.context.close()
    assert not any((served["run"] / "data" / "uploads").glob("*/fleet"))


def test_export_names_carry_idle_and_recharge(served, browser):
    """Item 7. On main the tenant ranking's CSV under idle proportional and recharge requests was
    named like the one under the defaults (idle separate, recharge tokens)."""
    pg = new_page(browser)
    try:
        open_url(pg, f"{served['url']}/rankings?period=custom&from=2026-10-07&to=2026-10-09&boundary=rental"
                     "&idle=proportional&recharge=requests")
        no_exceptions(pg)
        with pg.expect_download(timeout=60_000) as info:
            pg.get_by_role("button", name="CSV", exact=True).first.click(timeout=90_000)
        assert info.value.suggested_filename == (
            "tenant-ranking_2026-10-07_2026-10-09_rental_idle-proportional_recharge-requests.csv")
    finally:
        pg.context.close()


def test_the_review_pack_reads_back_self_described(served, browser):
    """Item 4. The review pack downloaded from the Overview: its tables carry the context block and
    the page's headers, and summary.html names the recharge rule with no engine names (the PNGs'
    subtitle is checked on the figures they are drawn from, tests/test_exports.py)."""
    import io

    from tests.dashboard_support import download

    pg = new_page(browser)
    try:
        open_url(pg, f"{served['url']}/?period=custom&from=2026-10-07&to=2026-10-09&boundary=rental")
        no_exceptions(pg)
        got = download(pg, pg.get_by_role("button", name=re.compile("Download the review pack")))
        assert got.suggested_filename == "ailedger-review-pack_2026-10-07_2026-10-09_rental.zip"
        z = zipfile.ZipFile(io.BytesIO(open(got.path(), "rb").read()))
    finally:
        pg.context.close()
    lines = z.read("tables/by_tenant.csv").decode().splitlines()
    assert "# Period: 2026-10-07 to 2026-10-09, whole days in Europe/Berlin" in lines
    assert "# Boundary: rental (gpu_rental)" in lines and "# Source: ledger.duckdb" in lines
    assert next(ln for ln in lines if not ln.startswith("#")).startswith("Tenant,Cost (USD),")
    summary = z.read("summary.html").decode()
    assert "<b>inference recharge</b>: by tokens (tokens)" in summary
    assert "no_demand" not in summary and "cost_per_million_tokens" not in summary
