"""What a tenant-scoped user can see beyond money (issue 17, item 9), and how requests are
screened before the app (item 10): names and telemetry are scoped too.

The bundle (hand-made, one day; `frames`): card g1 (pool p1, H100) is held by A1 (tenant A) 00:00-06:05
and by B1 (tenant B) 06:05-12:00; card g2 (pool p2, A100) by B1 all day. Project B2 (tenant B)
has no usage. g1 reports a sample every 15 minutes (max_sample_gap_s = 900, so each stands for
15 minutes): util 10 % at 100 W before 06:00, util 90 % at 500 W from 06:00 to 11:45.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from cost_engine import views
from cost_engine import access
from cost_engine.access import AccessConfig, AccessError, principal_for, scope
from cost_engine.bundle import Bundle
from cost_engine.contract import make_frame
from cost_engine.engine import compute
from tests.helpers import make_config

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
ACCESS = AccessConfig(mode="header", users={"alice": ["A"], "bob": ["B"]}, admin_groups=["finance"])


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def frames(costs: list[dict]) -> dict:
    tele = [{"ts": h(q / 4), "gpu_id": "g1", "util_pct": 10.0 if q < 24 else 90.0,
             "power_w": 100.0 if q < 24 else 500.0} for q in range(48)]
    return {
        "inventory": make_frame("inventory", [{"gpu_id": "g1", "pool": "p1", "accelerator": "H100"},
                                              {"gpu_id": "g2", "pool": "p2", "accelerator": "A100"}]),
        "allocations": make_frame("allocations", [
            {"allocation_id": "a1", "gpu_id": "g1", "start": h(0), "end": h(6 + 5 / 60), "owner": "A1",
             "workload": "training"},
            {"allocation_id": "a2", "gpu_id": "g1", "start": h(6 + 5 / 60), "end": h(12), "owner": "B1",
             "workload": "inference", "model": "m"},
            {"allocation_id": "a3", "gpu_id": "g2", "start": h(0), "end": h(24), "owner": "B1",
             "workload": "fine_tuning"},
        ]),
        "owners": make_frame("owners", [{"tenant": "A", "project": "A1"}, {"tenant": "B", "project": "B1"},
                                        {"tenant": "B", "project": "B2"}]),
        "telemetry": make_frame("telemetry", tele),
        "costs": make_frame("costs", costs),
    }


C1 = {"cost_id": "c1", "category": "gpu_rental", "amount": 48.0, "start": h(0), "end": h(24)}
CONFIG = make_config(activity={"max_sample_gap_s": 900})


@pytest.fixture(scope="module")
def comp():
    return compute(Bundle.from_frames(frames([C1])), CONFIG)


@pytest.fixture(scope="module")
def alice(comp):
    return scope(comp, principal_for(ACCESS, "alice"))


def test_sidebar_options_name_only_what_the_tenant_held(comp, alice):
    """On main the scoped options listed tenants B and every pool and accelerator of the fleet."""
    assert views.filter_options(comp) == {"pools": ["p1", "p2"], "accelerators": ["A100", "H100"],
                                          "workloads": ["fine_tuning", "inference", "training"],
                                          "tenants": ["A", "B"]}
    assert views.filter_options(alice) == {"pools": ["p1"], "accelerators": ["H100"], "workloads": ["training"],
                                           "tenants": ["A"]}


def test_project_list_and_card_labels_are_the_tenants(comp, alice):
    """On main views.projects listed B1 and B2 to tenant A."""
    assert views.projects(comp) == ["A1", "B1", "B2"]
    assert views.projects(alice) == ["A1"]
    assert set(views.card_label(alice)) == {"g1"}


def test_card_timeline_of_a_shared_card_shows_only_the_held_time(comp, alice):
    """The day's timeline buckets are 60 s (86,400 s / 1,500 points, rounded up to a minute), so
    each 15-minute sample is one point. The admin sees 48 points (00:00-11:45). Tenant A held g1
    00:00-06:05: the 24 samples before 06:00 (util 10 %) and the 06:00 sample (util 90 %), whose
    interval is cut at 06:05 -- 25 points, the last 5 minutes long. On main A saw all 48."""
    full = views.card_timeline(comp, "g1")
    mine = views.card_timeline(alice, "g1")
    assert full.height == 48
    assert mine.height == 25
    assert mine["ts"].max() == h(6).astimezone(timezone.utc)
    assert mine["util_pct"].to_list() == [10.0] * 24 + [90.0]
    assert views.card_timeline(alice, "g2").height == 0  # never A's


def test_card_energy_of_a_shared_card_is_the_held_share(comp, alice):
    """Joules per quarter hour: 100 W x 900 s = 90,000 J before 06:00 (24 quarters), 500 W x 900 s
    = 450,000 J after (24 quarters): 2,160,000 + 10,800,000 = 12,960,000 J on g1 for the admin.
    A held 5 of the 06:00 quarter's 15 minutes: 2,160,000 + 450,000 / 3 = 2,310,000 J."""
    assert comp.card_energy.filter(pl.col("gpu_id") == "g1")["joules"].sum() == pytest.approx(12_960_000)
    assert alice.card_energy["joules"].sum() == pytest.approx(2_310_000)
    assert alice.card_energy["gpu_id"].unique().to_list() == ["g1"]
    assert alice.card_energy.schema["gpu_id"] == pl.String  # an Enum dtype would list every card
    profile = views.power_profile(alice, every="1h")
    # 00:00-06:00 is 100 W each hour (0.1 kW); 06:00-07:00 holds A's third of one quarter:
    # 150,000 J / 3,600 s = 41.67 W
    assert profile["gpu_kw"].to_list() == pytest.approx([0.1] * 6 + [150_000 / 3600 / 1000])


def test_other_tenants_owner_tables_are_gone(alice):
    assert alice.ownership.projects["tenant"].unique().to_list() == ["A"]
    assert alice.ledger.segments["allocation_id"].drop_nulls().unique().to_list() == ["a1"]
    assert alice.ledger.conflicts.height == 0


# ------------------------------------------------------------------------- item 10: requests


def test_identity_header_twice_is_refused():
    pairs = [("x-forwarded-user", "alice"), ("X-Forwarded-User", "root")]
    with pytest.raises(AccessError, match="carries the X-Forwarded-User header 2 times"):
        access.identity_from_headers(ACCESS, pairs)
    with pytest.raises(AccessError, match="X-Forwarded-Groups header 2 times"):
        access.identity_from_headers(ACCESS, [("x-forwarded-user", "alice"), ("x-forwarded-groups", "x"),
                                       ("x-forwarded-groups", "finance")])
    assert access.identity_from_headers(ACCESS, [("X-Forwarded-User", " alice "), ("X-Forwarded-Groups", "a, b")]) == (
        "alice", ["a", "b"])


def test_gate_refuses_duplicates_and_anonymous_metrics():
    """On main a request without identity read /_stcore/metrics (sessions, cache sizes)."""
    anon: list[tuple[str, str]] = []
    assert access.gate_request(ACCESS, "/_stcore/metrics", anon) == (403, "metrics are for administrators")
    assert access.gate_request(ACCESS, "/_stcore/metrics", [("X-Forwarded-User", "alice")])[0] == 403
    assert access.gate_request(ACCESS, "/_stcore/metrics", [("X-Forwarded-User", "carol"),
                                                     ("X-Forwarded-Groups", "finance")]) is None
    assert access.gate_request(ACCESS, "/", [("X-Forwarded-User", "alice"), ("X-Forwarded-User", "carol")])[0] == 400
    assert access.gate_request(ACCESS, "/rankings", [("X-Forwarded-User", "alice")]) is None
    oidc = AccessConfig(mode="oidc", users={"alice": ["A"]})
    assert access.gate_request(oidc, "/_stcore/metrics", [("X-Forwarded-User", "alice")])[0] == 403
    assert access.gate_request(AccessConfig(), "/_stcore/metrics", anon) is None  # no access configured


def test_access_names_match_in_any_unicode_form():
    """A user and a tenant typed in NFD in access.toml match NFC names from the proxy and the data."""
    import unicodedata

    cfg = AccessConfig(mode="header", users={unicodedata.normalize("NFD", "josé"): [unicodedata.normalize("NFD", "Café")]})
    p = principal_for(cfg, unicodedata.normalize("NFC", "josé"))
    assert p.tenants == frozenset({unicodedata.normalize("NFC", "Café")})


# ------------------------------------------------------------ issue 38 item 11: who may connect


def test_header_mode_believes_only_the_trusted_proxy():
    """On main any peer that reached the port could send X-Forwarded-Groups: finance. In mode
    "header" only loopback peers are believed when no proxy is named; with trusted_proxies, only
    those addresses (networks included). Other modes trust no header: any peer."""
    finance = [("X-Forwarded-User", "mallory"), ("X-Forwarded-Groups", "finance")]
    assert access.gate_request(ACCESS, "/", finance, "203.0.113.9") == (
        403, "requests must come through the trusted proxy, not from 203.0.113.9")
    assert access.gate_request(ACCESS, "/", finance, "127.0.0.1") is None
    assert access.gate_request(ACCESS, "/", finance, "::1") is None
    assert access.gate_request(ACCESS, "/", finance, "::ffff:127.0.0.1") is None  # IPv4 on a dual-stack port
    assert access.gate_request(ACCESS, "/", finance, "::ffff:203.0.113.9")[0] == 403
    assert access.gate_request(ACCESS, "/", finance, "")[0] == 403  # no address known
    behind = AccessConfig(mode="header", admin_groups=["finance"], trusted_proxies=["10.0.0.5", "10.1.0.0/16"])
    assert access.gate_request(behind, "/", finance, "10.0.0.5") is None
    assert access.gate_request(behind, "/", finance, "10.1.200.3") is None
    assert access.gate_request(behind, "/", finance, "127.0.0.1")[0] == 403  # not named
    assert access.gate_request(AccessConfig(mode="oidc", users={"a": ["A"]}), "/", [], "203.0.113.9") is None
    env = access.with_trusted_proxies(ACCESS, {access.TRUSTED_PROXIES_ENV: "192.0.2.1, 192.0.2.2"})
    assert env.trusted_proxies == ["192.0.2.1", "192.0.2.2"]
    with pytest.raises(AccessError, match="'x' is not an IP address"):
        access.with_trusted_proxies(ACCESS, {access.TRUSTED_PROXIES_ENV: "x"})


def test_the_request_gate_reads_the_peer_address():
    """The ASGI middleware passes scope["client"] to the gate: a page request from 198.51.100.7
    gets 403 before the app runs; from loopback the app answers."""
    import asyncio

    calls, sent = [], []

    async def app(scope, receive, send):
        calls.append(scope["path"])

    async def send(msg):
        sent.append(msg)

    gate = access.RequestGate(app, ACCESS)
    for client in (("198.51.100.7", 5000), ("127.0.0.1", 5001)):
        asyncio.run(gate({"type": "http", "path": "/", "headers": [(b"x-forwarded-user", b"alice")],
                          "client": client}, None, send))
    assert calls == ["/"]
    assert sent[0]["status"] == 403


# -------------------------------------------------------- issue 38 item 9: saved views' names


def test_saved_views_naming_other_tenants_are_not_listed(tmp_path, comp, alice):
    """On main every saved view was listed to everyone: tenant A's user read the admin's
    "B1 overspend review" (project=B1). Now A sees the views whose state names only A, A's
    project A1, or no owner at all (a pool on Compare is nobody's tenant); the admin sees all."""
    from cost_engine import saved_views

    root = access.Principal("root", None)
    made = {
        "fleet week": ("", {"period": ["last_7_days"]}),
        "A training": ("rankings", {"f_tenant": ["A"], "tenant": ["A"], "project": ["A1"]}),
        "B1 overspend review": ("rankings", {"level": ["project"], "project": ["B1"]}),
        "B filter": ("", {"f_tenant": ["A", "B"]}),
        "B tenant drill": ("rankings", {"tenant": ["B"]}),
        "compare B": ("compare", {"owner": ["B"]}),  # by defaults to tenant
        "compare A1": ("compare", {"by": ["project"], "owner": ["A1"]}),
        "compare B2": ("compare", {"by": ["project"], "owner": ["B2"]}),
        "compare pool p2": ("compare", {"by": ["pool"], "owner": ["p2"]}),
        "idle of B1": ("idle", {"cause": ["low_util"], "owner": ["B1"]}),
    }
    for name, (page, query) in made.items():
        saved_views.save(tmp_path, name, page, query, root)
    listed = saved_views.load(tmp_path)
    assert len(listed) == 10
    assert saved_views.visible_to(listed, root, views.projects(comp)) == listed
    mine = saved_views.visible_to(listed, principal_for(ACCESS, "alice"), views.projects(alice))
    assert [v.name for v in mine] == ["A training", "compare A1", "compare pool p2", "fleet week"]


# ---------------------------------------------- issue 38 item 8: a shared cost row, as a tenant


SHARED = [C1, {"cost_id": "c2", "category": "other", "amount": 10.0, "start": h(0), "end": h(24), "owner": "A1"},
          {"cost_id": "c3", "category": "other", "amount": 20.0, "start": h(0), "end": h(24), "owner": "B1"}]


@pytest.fixture(scope="module")
def shared_sources(tmp_path_factory):
    """The same three cost rows read from a bundle's frames and from a DuckDB store."""
    from cost_engine import store
    from cost_engine.api import run

    db = tmp_path_factory.mktemp("shared") / "ledger.duckdb"
    store.ingest(db, Bundle.from_frames(frames(SHARED)))
    return {"bundle": (compute(Bundle.from_frames(frames(SHARED)), CONFIG), None), "store": (run(db, config=CONFIG), db)}


@pytest.mark.parametrize("path", ["bundle", "store"])
def test_a_shared_cost_row_shows_as_the_tenants_share(shared_sources, path):
    """On main tenant A's records of cost rows from a store showed the fleet's whole $48 rental
    row (and from a bundle nothing at all). c1, $48 of gpu_rental for the whole fleet over the
    day, is shared by capacity hours: 2 cards x 24 h = 48 card-hours, $1 each; A held g1 00:00 to
    06:05, 6 h 5 min, so A's share is $6.083333 (73/12); B's is 5 h 55 min + 24 h = $29.916667.
    c2 ($10, direct to A1) is A's whole row; c3 ($20, direct to B1) is not A's at all.
    Page and download (the CSV of the same rows) show the share, on both paths alike."""
    from cost_engine import exports_meta

    full, source = shared_sources[path]
    a = scope(full, principal_for(ACCESS, "alice"))
    page = views.records(a, None, source, table="costs", tenant="A")
    assert page.backend == "scoped"
    rows = {r["cost_id"]: r for r in page.rows.iter_rows(named=True) if r["record"] is not None}
    assert sorted(rows) == ["c1", "c2"]
    assert rows["c1"]["record"] == "share" and rows["c1"]["amount"] == pytest.approx(73 / 12)
    assert rows["c1"]["attributed_cost"] == pytest.approx(73 / 12)
    assert rows["c1"]["driver"] == "capacity_hours" and rows["c1"]["via"] == "shared by driver capacity hours"
    assert rows["c1"]["owner"] is None and rows["c1"]["currency"] == "USD"
    assert rows["c2"]["record"] == "row" and rows["c2"]["amount"] == 10.0 and rows["c2"]["owner"] == "A1"
    assert "original_amount" not in page.rows.columns
    for text in (exports_meta.csv_for_machines(page.rows), exports_meta.csv_for_people(page.rows, [("Source", "test")], "records of A")):
        text = text.decode() if isinstance(text, bytes) else text
        assert "48.0" not in text and "20.0" not in text and "c3" not in text
    b = scope(full, principal_for(ACCESS, "bob"))
    mine = b.bundle["costs"]
    assert mine["cost_id"].to_list() == ["c1", "c3"] and mine["record"].to_list() == ["share", "row"]
    assert mine["amount"].to_list() == pytest.approx([359 / 12, 20.0])


def test_bundle_and_store_show_a_tenant_the_same_cost_rows(shared_sources):
    """Whichever the source, tenant B's cost records are the same frame: c1 as B's $29.916667
    share (359/12 card-hours at $1) and c3 whole, $20."""
    (fb, _), (fs, db) = shared_sources["bundle"], shared_sources["store"]
    pb = views.records(scope(fb, principal_for(ACCESS, "bob")), None, None, table="costs", tenant="B")
    ps = views.records(scope(fs, principal_for(ACCESS, "bob")), None, db, table="costs", tenant="B")
    assert pb.rows.equals(ps.rows)
    assert pb.rows.filter(pl.col("cost_id") == "c1")["amount"].to_list() == pytest.approx([359 / 12])
    # The administrator still reads the stored row whole from the store.
    admin = views.records(fs, None, db, table="costs", tenant="B")
    assert admin.backend == "store"
    assert admin.rows.filter(pl.col("cost_id") == "c1")["amount"].to_list() == [48.0]
