"""The dashboard in headless Chromium (Debian's /usr/bin/chromium, never a Playwright download)
against one `streamlit run` server per session on a port the system picks, reading a DuckDB store of the
sample fleet. Screenshots of each page go to test-output/screenshots/."""

from __future__ import annotations

import contextlib
import io
import re
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.dashboard_support import (
    EVIL_TENANT,
    PAGES,
    ROOT,
    charts_drawn,
    click_row,
    download,
    grid_cells,
    make_store,
    new_page,
    no_exceptions,
    open_url,
    placeholders_gone,
    settle,
    shot,
    streamlit_server,
    write_html_bundle,
)

pytestmark = pytest.mark.browser
# A busy machine can take seconds to draw what a run sent: every expect() waits up to a minute.
expect.set_options(timeout=60_000)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dashboard")
    return {"store": make_store(root / "store"), "evil": write_html_bundle(root / "evil"), "root": root}


@pytest.fixture(scope="session")
def server(chromium, data) -> str:
    """One `streamlit run app.py` for the whole session; stopped after it."""
    env = {"AILEDGER_SOURCE": str(data["store"]), "AILEDGER_UPLOAD_DIR": str(data["root"] / "uploads"),
           "AILEDGER_CHROMIUM": chromium}
    try:
        with streamlit_server(env, data["root"] / "streamlit.log") as url:
            yield url
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def page(browser):
    context, pg = new_page(browser, accept_downloads=True)
    pg.dialogs = []  # any alert() would land here: names must never run as script
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    yield pg
    context.close()


@contextlib.contextmanager
def whole_page(pg):
    """The whole page in the viewport, every element drawn (the app scrolls inside its main block
    and draws elements lazily as they scroll into view); the usual viewport again after."""
    height = pg.evaluate("() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
                         " return m ? m.scrollHeight : 1000 }")
    pg.set_viewport_size({"width": 1400, "height": min(max(1000, height + 40), 8000)})
    try:
        # Elements scrolled into view render lazily: wait for their placeholders to go.
        placeholders_gone(pg)
        yield pg
    finally:
        pg.set_viewport_size({"width": 1400, "height": 1000})


@contextlib.contextmanager
def fresh_page(browser, url: str):
    """The URL alone, opened in a fresh browser session (no state carried over), without errors."""
    _, other = new_page(browser)
    try:
        open_url(other, url)
        no_exceptions(other)
        yield other
    finally:
        other.context.close()


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", PAGES)
def test_every_page_loads(server, page, name):
    open_url(page, f"{server}/{'' if name == 'overview' else name}")
    no_exceptions(page)
    assert page.locator("h1").count() >= 1
    if name != "scenario":
        assert page.locator('[data-testid="stSidebar"]').get_by_text("Filters").count() == 1
        page.wait_for_selector('[data-testid="stPlotlyChart"], [data-testid="stDataFrame"]', timeout=30_000)
    shot(page, name)
    assert not page.dialogs


def test_rankings_drill_down_and_shareable_url(server, page, browser):
    open_url(page, f"{server}/rankings")
    click_row(page, 0, 0)  # the top tenant by cost
    page.wait_for_url(re.compile(r"level=projects"))
    settle(page)
    no_exceptions(page)
    expect(page.get_by_role("heading", name="Projects of research")).to_have_count(1)
    shot(page, "rankings-tenant")
    click_row(page, 0, 0)  # its top project
    page.wait_for_url(re.compile(r"level=project&"))
    settle(page)
    no_exceptions(page)
    page.get_by_role("button", name=re.compile("^Raw records")).click()
    page.wait_for_url(re.compile(r"level=records"))
    settle(page)
    no_exceptions(page)
    expect(page.get_by_text("read from the DuckDB store")).to_have_count(1)
    cells = grid_cells(page, 0)
    assert any(c.startswith("alloc-") for c in cells)
    shot(page, "rankings-records")
    # The URL alone reopens the same records, in a fresh browser session.
    with fresh_page(browser, page.url) as other:
        assert grid_cells(other, 0) == cells
        expect(other.get_by_role("heading", name=re.compile("^Raw records"))).to_have_count(1)
    # The breadcrumb goes back to the top.
    page.get_by_role("button", name="All owners").click()
    page.wait_for_url(re.compile(r"level=tenants"))
    settle(page)
    no_exceptions(page)


def test_idle_page_lists_causes(server, page):
    from cost_engine import api, labels
    from cost_engine.report import build_report

    open_url(page, f"{server}/idle?period=all_data")  # the source's whole period: build_report's
    no_exceptions(page)
    idle = build_report(api.run(ROOT / "sample_data" / "fleet-week"))["idle"]
    pills = page.locator('[data-testid="stButtonGroup"]').filter(has_text=re.compile(r"\((free|held)\) ·"))
    text = pills.inner_text()
    for r in idle:  # causes in words with their kind: "Underutilized (held)", not "underutilized"
        assert labels.cause_kind(r["cause"], r["kind"]) in text
    pills.get_by_text(re.compile(r"^Underutilized \(held\)")).click()
    page.wait_for_url(re.compile(r"cause=underutilized"))
    settle(page)
    no_exceptions(page)
    expect(page.get_by_role("heading", name=re.compile(r"^Behind Underutilized \(held\)"))).to_have_count(1)
    expect(page.get_by_role("heading", name="Card telemetry")).to_have_count(1)
    shot(page, "idle-cause")


def test_chart_png_download(server, page):
    open_url(page, server)
    got = download(page, page.get_by_role("button", name=re.compile("PNG")).first)
    data = Path(got.path()).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert got.suggested_filename.endswith(".png")


def test_review_pack_download(server, page):
    from cost_engine.exporters.review_pack import REVIEW_PACK_FILES

    open_url(page, server)
    got = download(page, page.get_by_role("button", name=re.compile("Download the review pack")))
    z = zipfile.ZipFile(io.BytesIO(Path(got.path()).read_bytes()))
    assert sorted(z.namelist()) == sorted(REVIEW_PACK_FILES)
    assert z.read("charts/trend.png").startswith(PNG_MAGIC)
    assert "research" in z.read("tables/by_tenant.csv").decode()


def test_html_in_names_shows_as_text(server, page, data):
    open_url(page, f"{server}/data")
    page.get_by_label("Path to a bundle folder or an ailedger .duckdb store").fill(str(data["evil"]))
    page.locator('[data-testid="stForm"]').get_by_role("button", name="Open", exact=True).click()
    settle(page)
    no_exceptions(page)
    # Same session: follow the app's own navigation to the rankings.
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Rankings").click()
    settle(page)
    no_exceptions(page)
    expect(page.get_by_text(EVIL_TENANT).first).to_be_attached()  # the chart's axis label, as text
    click_row(page, 0, 0)
    page.wait_for_url(re.compile(r"level=projects"))
    settle(page)
    no_exceptions(page)
    expect(page.get_by_role("heading", name=f"Projects of {EVIL_TENANT}")).to_have_count(1)
    expect(page.get_by_role("button", name=f"tenant {EVIL_TENANT}")).to_have_count(1)
    shot(page, "rankings-html-names")
    # Nothing was interpreted: no dialog, no injected element, no script carrying the payload.
    assert not page.dialogs
    assert page.locator("b", has_text="bold-project").count() == 0
    assert page.locator("img[src=x]").count() == 0
    assert not page.evaluate("() => [...document.scripts].some(s => s.textContent.includes('alert(1)'))")
    for name in ("unit_economics", "idle"):
        page.locator('[data-testid="stSidebarNav"]').get_by_text(name.replace("_", " ").capitalize()).click()
        settle(page)
        no_exceptions(page)
        assert not page.dialogs and page.locator("img[src=x]").count() == 0


def records_cells(pg) -> list[str]:
    """The cells of the Compare page's fifth table (the period's records), once it has rows drawn."""
    with whole_page(pg):
        return grid_cells(pg, 4)


def test_compare_page_waterfall_and_drill_down(server, page, browser):
    """Compare: the waterfall draws, the change shown is the engine's, a row opens the owner's
    drill-down with the records behind it, and the URL alone reopens it."""
    from cost_engine import api, compare, diff
    from cost_engine.engine import compute

    comp = api.run(ROOT / "sample_data" / "fleet-week")
    base, period = "2026-10-06..2026-10-08", "2026-10-09..2026-10-11"
    tz = comp.period.timezone
    expected = compare.compare_periods(
        compute(comp.bundle, compare.period_config(comp.config, diff.parse_span(base, tz))),
        compute(comp.bundle, compare.period_config(comp.config, diff.parse_span(period, tz))), by="tenant")
    open_url(page, f"{server}/compare?base={base}&new={period}&by=tenant")
    no_exceptions(page)
    charts_drawn(page)
    page.wait_for_selector('[data-testid="stPlotlyChart"] .waterfalllayer .trace', state="attached", timeout=30_000)
    assert page.get_by_text(f"{expected.change:+,.2f}", exact=True).count() >= 1
    shot(page, "compare")
    top = expected.owners.filter(expected.owners["kind"] == "owner")["key"][0]
    click_row(page, 1, 0)  # the owner with the largest change
    page.wait_for_url(re.compile(rf"owner={top}"))
    settle(page)
    no_exceptions(page)
    assert page.get_by_role("heading", name=f"Why tenant {top} changed").count() == 1
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .waterfalllayer .trace').length >= 2")
    cells = records_cells(page)  # the period's records behind the first effect
    assert any(c.startswith("alloc-") for c in cells)
    shot(page, "compare-owner")
    with fresh_page(browser, page.url) as other:
        assert other.get_by_role("heading", name=f"Why tenant {top} changed").count() == 1
        assert records_cells(other) == cells
    assert not page.dialogs


def test_scenario_sections_draw_when_opened_and_keep_their_edits(server, page):
    """A closed scenario section draws no inputs (issue 20: drawing elements is most of a page
    visit) and keeps the values submitted in it. The sample's horizon is 36 months at 4.0 % a
    month; set Months to 12 and recalculate: the Horizon card reads "12 months". Close the
    workload section: its inputs are gone and the card still reads 12 months. Open it again:
    Months shows 12, not the file's 36."""
    open_url(page, f"{server}/scenario")
    no_exceptions(page)
    main = page.locator('[data-testid="stMain"]')
    section = lambda name: main.locator('[data-testid="stExpander"] summary').filter(has_text=name)  # noqa: E731
    months = main.get_by_label("Months", exact=True)
    horizon = main.locator('[data-testid="stMetric"]').filter(has_text="Horizon")
    expect(months).to_have_value("36")
    expect(horizon).to_contain_text("36 months")
    expect(main.get_by_label("Output weight", exact=True)).to_have_count(0)  # "split" starts closed
    section("split").click()
    settle(page)
    expect(main.get_by_label("Output weight", exact=True)).to_have_value("4")

    months.fill("12")
    months.press("Tab")
    main.get_by_role("button", name="Recalculate").click()
    settle(page)
    expect(horizon).to_contain_text("12 months")
    section("workload").click()
    settle(page)
    expect(months).to_have_count(0)
    expect(horizon).to_contain_text("12 months")
    section("workload").click()
    settle(page)
    expect(months).to_have_value("12")
    no_exceptions(page)
