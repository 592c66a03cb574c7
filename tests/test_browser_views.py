"""Issue 20 in a real browser (Debian's Chromium, Playwright): a link carries the whole view and
reopens it in a fresh browser; a zip uploads into the default (relative) folder; exports name
their period and boundary; no KPI value is cut at 800, 1280, 1440 or 1920 px; partial buckets are
marked; no request leaves 127.0.0.1; coming back to Rankings keeps its drill level.

One `streamlit run` for the module, started in a temporary working folder (the default upload
folder `data/uploads` is relative to it), reading a DuckDB store of the sample fleet."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.dashboard_support import (
    SAMPLE,
    chart_titled,
    charts_drawn,
    download,
    grid_cells,
    grid_with,
    make_store,
    no_exceptions,
    open_url,
    pick,
    settle,
    shot,
    streamlit_server,
    svg_texts,
)

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def served(chromium, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("views")
    run = root / "run"
    run.mkdir()
    store = make_store(root / "store")
    env = {"AILEDGER_SOURCE": str(store), "AILEDGER_CHROMIUM": chromium}  # no AILEDGER_UPLOAD_DIR: the default
    try:
        with streamlit_server(env, root / "streamlit.log", cwd=run) as url:
            yield {"url": url, "store": store, "run": run, "root": root}
    except RuntimeError as exc:
        pytest.fail(str(exc))


def new_page(browser, width: int = 1400, height: int = 1000):
    context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
    return context.new_page()


def default_kpis(store: Path) -> dict[str, str]:
    """The Overview's ten cards as the engine computes them for a fresh view: the store's rules
    over the whole local days of its data (2026-10-06 .. 2026-10-11, Europe/Berlin)."""
    from cost_engine import api, period_choice, views
    from cost_engine.config import load_config

    base = load_config(store.with_suffix(".toml"))
    full = api.run(store, config=base)
    span = period_choice.DataSpan(full.period.start, full.period.end, full.period.timezone)
    chosen = period_choice.resolve("whole_days", span)
    start, end = span.window(chosen.first, chosen.last)
    comp = api.run(store, config=views.config_with(base, period_start=start, period_end=end))
    return {r["label"]: views.format_value(r["value"], r["unit"]) for r in views.kpi_cards(comp).iter_rows(named=True)}


def _shown_choice(side, label: str) -> str:
    """What a sidebar selectbox shows: its label and the chosen option (in its combobox input
    or as text, depending on how the widget draws it)."""
    box = side.locator('[data-testid="stSelectbox"]').filter(has_text=label)
    values = [i.input_value() for i in box.locator("input").all()]
    return " | ".join([box.inner_text().strip(), *values])


def snapshot(pg) -> dict:
    """What a person sees of the view: the URL's query, the title and caption, every metric,
    the sidebar's period, dates and boundary, and the first table's cells."""
    settle(pg)
    main = pg.locator('[data-testid="stMain"]')
    side = pg.locator('[data-testid="stSidebar"]')
    metrics = main.locator('[data-testid="stMetric"]')
    cells = grid_cells(pg, 0) if main.locator('[data-testid="stDataFrame"]').count() else []
    return {
        "query": parse_qs(urlparse(pg.url).query),
        "path": urlparse(pg.url).path,
        "title": main.locator("h1").first.inner_text(),
        "caption": main.locator('[data-testid="stCaptionContainer"]').first.inner_text(),
        "subheaders": main.locator("h3").all_inner_texts(),
        "metrics": [m.inner_text() for m in metrics.all()],
        "period": _shown_choice(side, "Period"),
        "dates": [i.input_value() for i in side.locator('[data-testid="stDateInput"] input').all()],
        "boundary": _shown_choice(side, "Cost boundary"),
        "filters": [m.inner_text() for m in side.locator('[data-testid="stMultiSelect"]').all()],
        "cells": cells,
    }


def reopened(browser, link: str, like: dict) -> dict:
    """What a fresh browser context shows of `link` (nothing of the sender's session), once the
    kinds of elements the sender's view `like` showed are drawn: its sidebar's date inputs, its
    metrics and its first grid's cells. A busy machine can draw them after the script run ended
    (CI read the dates and the grid empty), and the app can rerun itself after a first run that
    stopped short of them: a five-in-a-row run read a view with its title and no metrics when
    the rerun came after settle's quiet second. So the view is read again, a few times at most,
    until it has them (a state); what it shows is then compared whole by the caller."""
    pg = new_page(browser)
    main = pg.locator('[data-testid="stMain"]')
    try:
        open_url(pg, link)
        no_exceptions(pg)
        seen: dict = {}
        for _ in range(3):
            if like["dates"]:
                pg.locator('[data-testid="stSidebar"] [data-testid="stDateInput"] input').nth(
                    len(like["dates"]) - 1).wait_for(timeout=60_000)
            if like["metrics"]:
                main.locator('[data-testid="stMetric"]').nth(len(like["metrics"]) - 1).wait_for(timeout=60_000)
            if like["cells"]:
                main.locator('[data-testid="stDataFrame"] table[role=grid] td').first.wait_for(
                    state="attached", timeout=60_000)
            seen = snapshot(pg)
            if (len(seen["metrics"]), bool(seen["cells"]), len(seen["dates"])) == (
                    len(like["metrics"]), bool(like["cells"]), len(like["dates"])):
                break
        return seen
    finally:
        pg.context.close()


def copied_link(pg) -> str:
    """The link the "Copy link" box offers (its code block's copy button copies this text)."""
    pg.get_by_role("button", name="Copy link").click()
    code = pg.locator('[data-testid="stPopoverBody"] code').first
    code.wait_for()
    text = code.inner_text().strip()
    pg.keyboard.press("Escape")
    return text


def test_a_link_with_every_kind_of_state_reopens_identically(served, browser):
    """Item 1. On main, Rankings > Projects with the boundary set to rental gave the link
    /rankings?rank=project&sort=cost, which opened fully_loaded. Now the sidebar's boundary and
    the rules beside the ranking go into the link, and a link holding every kind of state
    (period, buckets, comparison, boundary, idle treatment, recharge, a driver, filters, drill
    level) reopens the same view in a fresh browser."""
    url = served["url"]
    pg = new_page(browser)
    try:
        open_url(pg, f"{url}/rankings?rank=project&sort=cost")
        side = pg.locator('[data-testid="stSidebar"]')
        pick(pg, side.locator('[data-testid="stSelectbox"]').filter(has_text="Cost boundary"), "Rental")
        pg.wait_for_url(re.compile(r"boundary=rental"))
        settle(pg)
        pg.locator('[data-testid="stButtonGroup"]').get_by_text("Idle charged to owners").click()
        pg.wait_for_url(re.compile(r"idle=proportional"))
        first = snapshot(pg)
        assert "boundary rental" in first["caption"] and "idle proportional" in first["caption"]
        link = copied_link(pg)
        assert "boundary=rental" in link and "idle=proportional" in link and "rank=project" in link
    finally:
        pg.context.close()
    assert reopened(browser, link, first) == first

    every = (f"{url}/rankings?period=custom&from=2026-10-07&to=2026-10-10&grain=week&compare=off&boundary=narrow"
             "&idle=proportional&recharge=requests&driver=software:even&f_pool=h100-train"
             "&level=project&tenant=research&project=rlhf")
    a = new_page(browser)
    try:
        open_url(a, every)
        no_exceptions(a)
        # A custom period shows two date inputs; a busy machine draws them after the run ends.
        a.locator('[data-testid="stSidebar"] [data-testid="stDateInput"] input').nth(1).wait_for(timeout=60_000)
        seen = snapshot(a)
        assert seen["query"]["period"] == ["custom"] and seen["query"]["driver"] == ["software:even"]
        assert seen["dates"] == ["2026-10-07", "2026-10-10"]
        assert "Narrow" in seen["boundary"] and "h100-train" in seen["filters"][0]
        assert any(h.startswith("Project rlhf") for h in seen["subheaders"])
        link = copied_link(a)
    finally:
        a.context.close()
    assert reopened(browser, link, seen) == seen


def test_zip_upload_into_the_default_relative_folder(served, browser, tmp_path):
    """Item 2. On main a zip uploaded with the default AILEDGER_UPLOAD_DIR (data/uploads, relative)
    ended in a raw ValueError traceback (safe_extract returns absolute paths)."""
    zpath = tmp_path / "fleet-week.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for f in sorted(SAMPLE.iterdir()):
            z.write(f, f"fleet-week/{f.name}")
    pg = new_page(browser)
    try:
        open_url(pg, f"{served['url']}/data")
        pg.get_by_role("tab", name="Upload a bundle").click(timeout=90_000)
        pg.locator('[data-testid="stFileUploaderDropzoneInput"][accept*=".zip"]').set_input_files(str(zpath))
        pg.get_by_role("button", name="Validate and open").click()
        pg.get_by_text(re.compile(r"^Opened the upload")).wait_for(timeout=180_000)
        settle(pg)
        no_exceptions(pg)
        assert "fleet-week" in pg.locator('[data-testid="stSidebar"]').inner_text()
    finally:
        pg.context.close()
    staged = list((served["run"] / "data" / "uploads").glob("*/fleet-week/allocations.csv"))
    assert len(staged) == 1


def _svg_text(data: bytes) -> str:
    import html

    return html.unescape(" ".join(re.findall(r"<text[^>]*>([^<]*)</text>", data.decode("utf-8"))))


def test_exports_say_what_they_show(served, browser):
    """Item 3. On main a rental chart was saved as project-ranking.png like a fully_loaded one, and
    CSVs carried engine column names only. Now every export names its period and boundary."""
    q = ("period=custom&from=2026-10-07&to=2026-10-09&boundary=rental&idle=separate&recharge=tokens"
         "&rank=project&sort=cost")
    stem = "project-ranking_2026-10-07_2026-10-09_rental"
    pg = new_page(browser)
    try:
        open_url(pg, f"{served['url']}/rankings?{q}")
        charts_drawn(pg)
        svg = download(pg, pg.get_by_role("button", name="SVG").first)
        assert svg.suggested_filename == f"{stem}.svg"
        text = _svg_text(Path(svg.path()).read_bytes())
        assert "Project ranking by Cost (rental)" in text
        assert "2026-10-07 to 2026-10-09, whole days in Europe/Berlin" in text
        assert "boundary rental" in text and "idle separate" in text and "no filters" in text
        assert "source ledger.duckdb" in text and "data " in text

        with pg.expect_download(timeout=60_000) as info:
            pg.get_by_role("button", name="CSV", exact=True).first.click(timeout=90_000)
        assert info.value.suggested_filename == f"{stem}.csv"
        lines = Path(info.value.path()).read_text(encoding="utf-8").splitlines()
        head = [ln for ln in lines if ln.startswith("#")]
        assert "# Period: 2026-10-07 to 2026-10-09, whole days in Europe/Berlin" in head
        assert "# Boundary: rental (gpu_rental)" in head
        header = lines[len(head)]
        assert header.startswith("Tenant,Project,Name,Cost (USD),Allocated GPU-hours (GPU-h)")

        with pg.expect_download(timeout=60_000) as info:
            pg.get_by_role("button", name="CSV (raw)").first.click(timeout=90_000)
        raw = Path(info.value.path()).read_text(encoding="utf-8").splitlines()
        assert raw[0].startswith("tenant,project,display_name,cost,allocated_gpu_hours")
    finally:
        pg.context.close()
    # The idle chart's legend names the causes, not only allocated / unallocated.
    pg = new_page(browser)
    try:
        open_url(pg, served["url"])
        charts_drawn(pg)
        legend = svg_texts(chart_titled(pg, "Idle GPU-hours this week"), ".legendtext")
        assert "No demand (free)" in legend and "Underutilized (held)" in legend
    finally:
        pg.context.close()


@pytest.mark.parametrize("width", [800, 1280, 1440, 1920])
def test_no_kpi_value_is_cut(served, browser, width):
    """Item 4. On main, at 800 px all ten KPI cards showed "3…", "Al…". Each card's value must be
    the whole figure (its text equal to the engine's, nothing clipped); the idle-by-pool chart
    keeps most of its width for the plot."""
    want = default_kpis(served["store"])
    pg = new_page(browser, width, 900)
    try:
        open_url(pg, served["url"])
        no_exceptions(pg)
        cards = pg.locator('[data-testid="stMain"] [data-testid="stMetric"]')
        cards.nth(9).wait_for(timeout=90_000)  # the cards draw after the script has finished
        assert cards.count() == 10
        for card in cards.all():
            card.scroll_into_view_if_needed()
            label = card.locator('[data-testid="stMetricLabel"]').inner_text().strip()
            value = card.locator('[data-testid="stMetricValue"]')
            assert value.inner_text().strip() == want[label], label
            fits = value.evaluate("e => [...e.querySelectorAll('*'), e].every(n => n.scrollWidth <= n.clientWidth + 1)")
            assert fits, (label, value.inner_text())
        if width in (800, 1440):  # the screenshots of docs/dashboard.md
            shot(pg, f"overview-{width}")
        open_url(pg, f"{served['url']}/idle")
        charts_drawn(pg)
        chart = chart_titled(pg, "Idle GPU-hours by pool")
        chart.scroll_into_view_if_needed()
        plot = chart.locator(".nsewdrag").first.bounding_box()
        whole = chart.bounding_box()
        assert plot["width"] > 0.5 * whole["width"], (plot, whole)
        if width in (800, 1440):
            shot(pg, f"idle-{width}")
    finally:
        pg.context.close()


def test_partial_buckets_are_marked(served, browser):
    """Item 6. The sample's data runs 02:00 to 02:00 Europe/Berlin: by default the dashboard
    shows whole local days (no partial bar); asked for all the data, the first day (22 of 24 h)
    and the last (2 of 24 h) are drawn hatched and labelled "partial"."""
    pg = new_page(browser)
    try:
        open_url(pg, served["url"])
        charts_drawn(pg)
        assert svg_texts(chart_titled(pg, "Trend by day"), ".annotation-text") == []
        open_url(pg, f"{served['url']}/?period=all_data")
        assert svg_texts(chart_titled(pg, "Trend by day"), ".annotation-text") == ["partial", "partial"]
        pg.get_by_text("2026-10-05 (22 of 24 h), 2026-10-12 (2 of 24 h)").wait_for()
        no_exceptions(pg)
    finally:
        pg.context.close()


def test_nothing_is_fetched_from_outside(served, browser):
    """Item 11. On main every page load asked a font host for the favicon (fails offline)."""
    from tests.dashboard_support import PAGES

    pg = new_page(browser)
    seen: list[str] = []
    pg.on("request", lambda r: seen.append(r.url))
    try:
        for name in PAGES:
            open_url(pg, f"{served['url']}/{'' if name == 'overview' else name}")
            no_exceptions(pg)
        icon = pg.locator("link[rel~='icon']").first.get_attribute("href")
    finally:
        pg.context.close()
    hosts = {urlparse(u).hostname for u in seen if urlparse(u).scheme in ("http", "https", "ws", "wss")}
    assert hosts == {"127.0.0.1"}, sorted(u for u in seen if urlparse(u).hostname != "127.0.0.1")[:5]
    assert icon and (icon.startswith("/") or icon.startswith("data:") or "127.0.0.1" in icon), icon


def test_coming_back_keeps_the_drill_level(served, browser):
    """Item 8. Going to another page and back, or the browser's back button, returns to the
    drill level left, not to the top of the rankings."""
    url = served["url"]
    pg = new_page(browser)
    try:
        open_url(pg, f"{url}/rankings?level=project&tenant=research&project=rlhf")
        pg.get_by_role("heading", name=re.compile("^Project rlhf")).wait_for()
        nav = pg.locator('[data-testid="stSidebarNav"]')
        nav.get_by_text("Idle", exact=True).click()
        pg.wait_for_url(re.compile(r"/idle"))
        settle(pg)
        nav.get_by_text("Rankings", exact=True).click()
        pg.wait_for_url(re.compile(r"/rankings\?.*level=project"))
        pg.get_by_role("heading", name=re.compile("^Project rlhf")).wait_for()
        pg.get_by_role("button", name="All owners").click()
        pg.wait_for_url(re.compile(r"level=tenants"))
        settle(pg)
        pg.go_back()
        pg.wait_for_url(re.compile(r"level=project"))
        pg.get_by_role("heading", name=re.compile("^Project rlhf")).wait_for()
        settle(pg)
        no_exceptions(pg)
        # The recharged allocations say where their cost came from (item 9).
        pg.get_by_role("button", name=re.compile("^Raw records")).click()
        pg.wait_for_url(re.compile(r"level=records"))
        pg.get_by_role("heading", name=re.compile("^Raw records")).wait_for()
        # rlhf's top records: 0.0 GPU-h and cost, recharged from the project serving the model
        cells = grid_with(pg, 0, ["recharge from shared-inference (ns-inference · llama-3.1-70b · by tokens)"])
        assert "own use" in cells
    finally:
        pg.context.close()
