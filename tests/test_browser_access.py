"""Tenant-scoped access in a real browser: a reverse proxy's user header decides what each
person sees (two tenants and an admin), and another tenant's drill-down URL shows nothing."""

from __future__ import annotations

import pytest

from tests.dashboard_support import make_store, streamlit_server

pytestmark = pytest.mark.browser

ACCESS = """
mode = "header"
user_header = "X-Forwarded-User"
groups_header = "X-Forwarded-Groups"
[users]
"alice@example.com" = ["research"]
"bob@example.com" = ["product"]
[groups]
"finance" = ["admin"]
"""


@pytest.fixture(scope="module")
def server(chromium, tmp_path_factory):
    root = tmp_path_factory.mktemp("access")
    (root / "access.toml").write_text(ACCESS)
    env = {"AILEDGER_SOURCE": str(make_store(root / "store")), "AILEDGER_ACCESS": str(root / "access.toml")}
    with streamlit_server(env, root / "streamlit.log") as url:
        yield url


def page_as(browser, user: str | None, groups: str = ""):
    headers = {}
    if user:
        headers["X-Forwarded-User"] = user
    if groups:
        headers["X-Forwarded-Groups"] = groups
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, extra_http_headers=headers)
    return ctx, ctx.new_page()


def settle(pg, timeout: float = 90.0) -> None:
    state = ("() => { const a = document.querySelector('[data-testid=\"stApp\"]');"
             " return a ? a.getAttribute('data-test-script-state') : null }")
    pg.wait_for_selector('[data-testid="stApp"]')
    calm = 0
    for _ in range(int(timeout * 10)):
        calm = calm + 1 if pg.evaluate(state) == "notRunning" else 0
        if calm >= 12:
            return
        pg.wait_for_timeout(100)
    raise AssertionError("Streamlit did not finish running in time")


def record_rows(pg, url: str) -> int:
    """Rows shown in every table of the page at `url`."""
    pg.goto(url)
    settle(pg)
    assert pg.locator('[data-testid="stException"]').count() == 0
    grids = pg.locator('[data-testid="stDataFrame"]')
    return sum(grids.nth(i).locator("table[role=grid] tbody tr").count() for i in range(grids.count()))


def main_text(pg) -> str:
    return pg.locator('[data-testid="stMain"]').inner_text()


def sidebar_tenants(pg) -> str:
    return pg.locator('[data-testid="stSidebar"]').inner_text()


@pytest.mark.parametrize(("user", "mine", "theirs"), [
    ("alice@example.com", "research", "product"),
    ("bob@example.com", "product", "research"),
])
def test_tenant_sees_only_their_tenant(server, browser, user, mine, theirs):
    ctx, pg = page_as(browser, user)
    try:
        pg.goto(f"{server}/rankings")
        settle(pg)
        text = main_text(pg)
        assert pg.locator('[data-testid="stException"]').count() == 0
        cells = pg.locator('[data-testid="stDataFrame"]').first.locator("table[role=grid] td").all_inner_texts()
        tenants = {c.strip() for c in cells}
        assert mine in tenants and theirs not in tenants, (tenants, text[:500])
        # Their own records URL lists records; another tenant's opens empty.
        assert record_rows(pg, f"{server}/rankings?level=records&tenant={mine}") > 0
        assert record_rows(pg, f"{server}/rankings?level=records&tenant={theirs}") == 0
        # The Data page (fleet-wide) is closed to tenant users.
        pg.goto(f"{server}/data")
        settle(pg)
        assert "for administrators" in main_text(pg)
    finally:
        ctx.close()


def test_admin_group_sees_every_tenant(server, browser):
    ctx, pg = page_as(browser, "carol@example.com", "finance")
    try:
        pg.goto(f"{server}/rankings")
        settle(pg)
        cells = pg.locator('[data-testid="stDataFrame"]').first.locator("table[role=grid] td").all_inner_texts()
        assert {"research", "product", "platform"} <= {c.strip() for c in cells}
    finally:
        ctx.close()


def test_unknown_user_sees_nothing(server, browser):
    ctx, pg = page_as(browser, "mallory@example.com")
    try:
        pg.goto(f"{server}/")
        settle(pg)
        text = main_text(pg)
        assert "No access" in text
        assert pg.locator('[data-testid="stDataFrame"]').count() == 0
    finally:
        ctx.close()
