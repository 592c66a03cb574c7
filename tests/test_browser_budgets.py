"""The Budgets page in headless Chromium: an administrator reads the burn-down, raises a budget in
the editor and saves it to the bundle's budgets file (the alert on Overview goes away); a
tenant-scoped user behind the header proxy sees only their tenant's budgets and no editor."""

from __future__ import annotations

import re

import pytest

from tests.dashboard_support import copy_sample, streamlit_server
from tests.dashboard_support import charts_drawn, grid_cells, grid_with, no_exceptions, open_url, pick, settle, shot

pytestmark = pytest.mark.browser

ACCESS = """
mode = "header"
admin_groups = ["finance"]
[users]
"alice@example.com" = ["research"]
"""


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return copy_sample(tmp_path_factory.mktemp("budgets") / "fleet-week")


@pytest.fixture(scope="module")
def admin_server(chromium, sample, tmp_path_factory):
    with streamlit_server({"AILEDGER_SOURCE": str(sample)}, tmp_path_factory.mktemp("log") / "st.log") as url:
        yield url


@pytest.fixture(scope="module")
def scoped_server(chromium, sample, tmp_path_factory):
    root = tmp_path_factory.mktemp("access")
    (root / "access.toml").write_text(ACCESS)
    env = {"AILEDGER_SOURCE": str(sample), "AILEDGER_ACCESS": str(root / "access.toml")}
    with streamlit_server(env, root / "st.log") as url:
        yield url


def metric(pg, label: str) -> str:
    card = pg.locator('[data-testid="stMetric"]').filter(has_text=label)
    return card.locator('[data-testid="stMetricValue"]').inner_text().strip()


def select_cell(pg, x: float, y: float, text: str, tries: int = 5) -> None:
    """Click a data-editor cell until the grid reports it selected (its accessible table marks the
    cell aria-selected); the first click after a layout change may only focus the canvas."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    selected = ("t => [...document.querySelectorAll('[data-testid=\"stDataFrame\"] td[aria-selected=\"true\"]')]"
                ".some(c => c.textContent === t)")
    for _ in range(tries):
        pg.mouse.click(x, y)
        try:
            pg.wait_for_function(selected, arg=text, timeout=5_000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"the cell {text!r} could not be selected")


def edit_cell(pg, before: str, after: str, tries: int = 5) -> None:
    """Edit rlhf's amount (fourth row, fifth column of the budgets editor) from `before` to
    `after`. Each step waits for the state it needs: the cell editor open on `before`, the typed
    value in it, then the grid showing `after`. A rerun that redraws the grid while the editor
    is open can swallow the edit (seen once in CI, and once in four clean runs on 2026-12-04, after
    the page gained its rejected-rows list: still to be explained): the whole edit is then made
    again. The assertion is unchanged: the grid must show `after`."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    shown = ("v => [...document.querySelectorAll('[data-testid=\"stDataFrame\"] td')]"
             ".some(c => parseFloat(c.textContent.replace(/,/g, '')) === v)")
    for _ in range(tries):
        settle(pg)
        if pg.evaluate(f"({shown})({float(after)})"):  # an earlier try's edit did land
            return
        editor = pg.locator('[data-testid="stDataFrame"]').last
        editor.scroll_into_view_if_needed()
        box = editor.bounding_box()
        select_cell(pg, box["x"] + 90, box["y"] + 35 + 17, "bud-llm-pretrain-sprint")  # row 1, budget_id
        for key in ["ArrowDown"] * 3 + ["ArrowRight"] * 4 + ["Enter"]:  # Enter opens the cell's editor
            pg.keyboard.press(key)
        try:
            pg.wait_for_function("v => document.activeElement && document.activeElement.value === v",
                                 arg=before, timeout=30_000)
            pg.keyboard.press("Control+a")
            pg.keyboard.type(after)
            pg.wait_for_function("v => document.activeElement && document.activeElement.value === v",
                                 arg=after, timeout=30_000)
            pg.keyboard.press("Enter")
            # The grid shows the new amount (the rerun its edit triggers is waited for by the caller).
            pg.wait_for_function(shown, arg=float(after), timeout=60_000)
            return
        except PlaywrightTimeout:
            pg.keyboard.press("Escape")
            continue
    raise AssertionError(f"the amount could not be edited from {before} to {after}")


def test_admin_reads_the_burn_down_and_raises_a_budget(admin_server, browser, sample):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    try:
        open_url(pg, admin_server)
        # Overview: the sample's one overrun fires.
        alert = pg.locator(".st-key-firing_alerts")
        assert "1 alert firing" in alert.inner_text() and "bud-rlhf-month" in alert.inner_text()

        open_url(pg, f"{admin_server}/budgets")
        no_exceptions(pg)
        charts_drawn(pg)
        assert metric(pg, "Budgets in force") == "5"
        assert metric(pg, "Over budget (projected)") == "1"
        cells = grid_cells(pg, 0)
        assert "bud-rlhf-month" in cells and "over" in cells and "bud-product-quarter" in cells
        assert pg.locator('[data-testid="stPlotlyChart"]').count() == 1
        # Another budget's burn-down.
        pick(pg, pg.locator('[data-testid="stSelectbox"]').filter(has_text="Budget"), re.compile("^bud-rlhf-month"))
        settle(pg)
        charts_drawn(pg)
        assert "bud-rlhf-month" in pg.locator('[data-testid="stPlotlyChart"]').inner_text()
        shot(pg, "budgets")

        # Edit: rlhf's amount (fourth row, fifth column) from 9,000 to 20,000, then save.
        edit_cell(pg, "9000", "20000")
        settle(pg)
        pg.get_by_role("button", name="Save budgets").click()
        pg.get_by_text(re.compile(r"Saved \d+ budget rows")).wait_for(timeout=60_000)
        settle(pg)
        no_exceptions(pg)
        assert "bud-rlhf-month,,rlhf,month,20000.0" in (sample / "budgets.csv").read_text()
        assert metric(pg, "Over budget (projected)") == "0"
        open_url(pg, admin_server)
        assert pg.locator(".st-key-firing_alerts").count() == 0
    finally:
        ctx.close()


def test_scoped_user_sees_only_their_budgets(scoped_server, browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000},
                              extra_http_headers={"X-Forwarded-User": "alice@example.com"})
    pg = ctx.new_page()
    try:
        open_url(pg, f"{scoped_server}/budgets")
        no_exceptions(pg)
        # The grid fills in after the script has finished: wait for the rows (a state).
        cells = grid_with(pg, 0, ["bud-llm-pretrain-sprint", "bud-research-month", "bud-rlhf-month"])
        mine = {c for c in cells if c.startswith("bud-")}
        assert mine == {"bud-llm-pretrain-sprint", "bud-research-month", "bud-rlhf-month"}
        text = pg.locator('[data-testid="stMain"]').inner_text()
        assert "bud-product-quarter" not in text and "bud-search-energy-month" not in text
        assert "Budgets are set by administrators" in text
        assert pg.get_by_role("button", name="Save budgets").count() == 0
        assert "product" not in " ".join(grid_cells(pg, 2))  # the burn rate table: research only
    finally:
        ctx.close()
