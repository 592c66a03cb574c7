"""Tenant-scoped access in a real browser: a reverse proxy's user header decides what each
person sees (two tenants and an admin), and another tenant's drill-down URL shows nothing."""

from __future__ import annotations

import pytest

from tests.dashboard_support import _settle_polling, grid_with, make_store, new_page, streamlit_server
from tests.dashboard_support import settle as wait_for_run

pytestmark = pytest.mark.browser

ACCESS = """
mode = "header"
admin_groups = ["finance"]
user_header = "X-Forwarded-User"
groups_header = "X-Forwarded-Groups"
[users]
"alice@example.com" = ["research"]
"bob@example.com" = ["product"]
"""


SERVED: dict = {}  # what the server shows: its store and the rules file beside it


@pytest.fixture(scope="module")
def server(chromium, tmp_path_factory):
    root = tmp_path_factory.mktemp("access")
    (root / "access.toml").write_text(ACCESS)
    db = make_store(root / "store")
    SERVED.update(store=db, rules=db.with_suffix(".toml"))
    env = {"AILEDGER_SOURCE": str(db), "AILEDGER_ACCESS": str(root / "access.toml")}
    with streamlit_server(env, root / "streamlit.log") as url:
        yield url


def page_as(browser, user: str | None, groups: str = ""):
    headers = {}
    if user:
        headers["X-Forwarded-User"] = user
    if groups:
        headers["X-Forwarded-Groups"] = groups
    return new_page(browser, extra_http_headers=headers)


def choose(pg, group, option: str, tries: int = 3) -> None:
    """Pick `option` of a radio group until the page shows it picked (a state). The app can rerun
    itself just after a first run; a click that lands while it redraws the group is lost (CI once
    waited 90 s for the run such a click never started), and a person would click again."""
    from playwright.sync_api import expect

    radio = group.get_by_role("radio", name=option, exact=True)
    for _ in range(tries):
        group.get_by_text(option, exact=True).click()
        try:
            expect(radio).to_be_checked(timeout=20_000)
            return
        except AssertionError:
            _settle_polling(pg, 90.0, 1.2, False)
    expect(radio).to_be_checked(timeout=1_000)


def settle(pg, timeout: float = 90.0) -> None:
    """The shared wait for a finished run; a page shown to nobody may have no title."""
    wait_for_run(pg, timeout, title=False)


def record_rows(pg, url: str) -> int:
    """Rows shown in every table of the page at `url`, once the page shows its records or
    says there are none (the grid fills in after the script has finished: wait for it)."""
    pg.goto(url)
    settle(pg)
    assert pg.locator('[data-testid="stException"]').count() == 0
    pg.wait_for_function(
        "() => document.querySelector('[data-testid=\"stMain\"] [data-testid=\"stDataFrame\"] table[role=grid] td')"
        " || document.querySelector('[data-testid=\"stMain\"]').innerText.includes('behind this figure')",
        timeout=60_000,
    )
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
        tenants = set(grid_with(pg, 0, [mine]))
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
        # Item 13: this read an empty table once under -n 2 (it waited for any cell of any
        # grid, then read the first grid). Wait for the three tenants in the ranking's grid.
        assert {"research", "product", "platform"} <= set(grid_with(pg, 0, ["research", "product", "platform"]))
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


# ------------------------------------------------------------------ issue 17: items 1, 9, 10


def test_scoped_user_cannot_write_the_shared_rules(server, browser):
    """Item 1. On main alice could set idle = "proportional" on the Rules page and write it to the
    store's config (ledger.toml) for every user and the CLI. Now the button is disabled for her
    and a forced click changes nothing (the writing function itself refuses non-admins:
    tests/test_shared_writes.py)."""
    ctx, pg = page_as(browser, "alice@example.com")
    try:
        pg.goto(f"{server}/rules")
        settle(pg)
        assert pg.locator('[data-testid="stException"]').count() == 0
        choose(pg, pg.locator('[data-testid="stRadio"]').filter(has_text="Idle capacity"), "proportional")
        settle(pg)
        button = pg.get_by_role("button", name="Write to ledger.toml beside the source")
        rules = SERVED["rules"]
        before = rules.read_bytes()
        button.click(force=True)
        # A click on a disabled button may run nothing: wait for a quiet run state, not for a new run.
        _settle_polling(pg, 90.0, 1.2, False)
        assert rules.read_bytes() == before, "a tenant-scoped user changed the shared rules"
        assert button.is_disabled()
    finally:
        ctx.close()


def _options(pg, label: str) -> list[str]:
    """The options of the sidebar multiselect labelled `label`, as its dropdown lists them."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = pg.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').filter(has_text=label)
    listbox = pg.locator('[role="listbox"]')
    for _ in range(6):  # a rerun may redraw the widget under the click: open it again
        box.get_by_role("combobox").focus()
        pg.keyboard.press("ArrowDown")
        try:
            listbox.wait_for(timeout=15_000)
            break
        except PlaywrightTimeout:
            pg.keyboard.press("Escape")
    texts = [t.strip() for t in listbox.locator('[role="option"]').all_inner_texts()]
    pg.keyboard.press("Escape")
    listbox.wait_for(state="detached")
    return [t for t in texts if t != "Select all"]  # Streamlit's own entry above several options


def test_scoped_sidebar_offers_only_what_the_tenant_held(server, browser):
    """Item 9. On main alice's Tenant filter offered product and platform too."""
    from cost_engine import access, api, views

    scoped = access.scope(api.run(SERVED["store"]), access.Principal("alice@example.com", frozenset({"research"})))
    want = views.filter_options(scoped)
    ctx, pg = page_as(browser, "alice@example.com")
    try:
        pg.goto(f"{server}/")
        settle(pg)
        assert _options(pg, "Tenant") == ["research"]
        assert _options(pg, "Pool") == want["pools"]
    finally:
        ctx.close()


def test_requests_are_screened_before_the_app(server):
    """Item 10. On main /_stcore/metrics answered anyone, and a second X-Forwarded-User header
    was read first-wins."""
    import http.client
    import urllib.error
    import urllib.request
    from urllib.parse import urlparse

    def status(path: str, headers: list[tuple[str, str]]) -> int:
        u = urlparse(server)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            conn.putrequest("GET", path)
            for k, v in headers:  # putheader sends each one, duplicates included
                conn.putheader(k, v)
            conn.endheaders()
            return conn.getresponse().status
        finally:
            conn.close()

    assert status("/_stcore/metrics", []) == 403
    assert status("/_stcore/metrics", [("X-Forwarded-User", "alice@example.com")]) == 403
    assert status("/_stcore/metrics", [("X-Forwarded-User", "carol@example.com"),
                                       ("X-Forwarded-Groups", "finance")]) == 200
    assert status("/", [("X-Forwarded-User", "alice@example.com"), ("X-Forwarded-User", "carol@example.com")]) == 400
    assert status("/", [("X-Forwarded-User", "alice@example.com")]) == 200
    assert status("/_stcore/health", []) == 200
