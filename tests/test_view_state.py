"""cost_engine.view_state and cost_engine.saved_views: a dashboard link parses to a view state
and writes back to the same canonical query (so a copied link reopens the same view), every
refused value is named, and saved views are kept beside the source, written by admins only."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

import pytest

from cost_engine import saved_views, view_state, views
from cost_engine.access import AccessError, Principal
from cost_engine.config import load_config

ADMIN = Principal("root", None)
ALICE = Principal("alice", frozenset({"research"}))
BASE = load_config(None)


def test_a_full_link_round_trips():
    """Every kind of shared state survives parse -> config -> query, in one canonical order."""
    q = view_state.decode(
        "period=custom&from=2026-10-10&to=2026-10-07&grain=week&compare=off&boundary=narrow&idle=proportional"
        "&recharge=requests&driver=software:even&pue=1.4&f_pool=h100-train&f_tenant=research&f_tenant=product"
        "&level=project&tenant=research&project=rlhf"
    )
    state, problems = view_state.parse_query(q)
    assert problems == []
    # from/to given in the wrong order: the days are kept, in order
    assert (state.period, state.first, state.last) == ("custom", date(2026, 10, 7), date(2026, 10, 10))
    assert (state.grain, state.compare) == ("week", False)
    assert set(state.filters.tenants) == {"research", "product"} and state.filters.pools == ("h100-train",)
    state, cfg, problems = view_state.checked(BASE, state)
    assert problems == []
    assert cfg.boundary.name == "narrow" and cfg.allocation.idle == "proportional"
    assert cfg.allocation.inference_recharge == "requests" and cfg.allocation.drivers["software"] == "even"
    assert cfg.energy.pue == 1.4
    out = view_state.merge(view_state.to_query(state, cfg, BASE), view_state.page_part(q))
    assert out == {
        "period": ["custom"], "from": ["2026-10-07"], "to": ["2026-10-10"], "grain": ["week"],
        "compare": ["off"], "boundary": ["narrow"], "idle": ["proportional"], "recharge": ["requests"],
        "driver": ["software:even"], "pue": ["1.4"], "f_pool": ["h100-train"],
        "f_tenant": ["product", "research"], "level": ["project"], "tenant": ["research"], "project": ["rlhf"],
    }
    # and the written query parses to the same state again
    again, problems = view_state.parse_query(out)
    assert problems == [] and again == state


def test_a_plain_link_writes_the_source_rules_explicitly():
    """Item 1: /rankings?rank=project&sort=cost opened fully_loaded in a fresh browser even when
    the sender saw rental. The written query always names boundary, idle and recharge."""
    state, problems = view_state.parse_query({"rank": ["project"]})
    assert problems == [] and not view_state.has_global({"rank": ["project"]})
    q = view_state.to_query(state, BASE, BASE)
    assert q == {"period": ["whole_days"], "boundary": [BASE.boundary.name], "idle": [BASE.allocation.idle],
                 "recharge": [BASE.allocation.inference_recharge]}


def test_a_custom_boundary_carries_its_categories():
    q = {"category": ["depreciation", "power", "software", "nope"]}  # no preset holds these three
    state, problems = view_state.parse_query(q)
    assert problems == ["category 'nope' is not a cost category"]
    state, cfg, problems = view_state.checked(BASE, state)
    assert problems == []
    assert cfg.boundary.name == "custom" and set(cfg.boundary.included) == {"depreciation", "power", "software"}
    out = view_state.to_query(state, cfg, BASE)
    assert out["boundary"] == ["custom"] and sorted(out["category"]) == ["depreciation", "power", "software"]


@pytest.mark.parametrize(("query", "problem"), [
    ({"period": ["yesterday"]}, "period='yesterday' is not one of"),
    ({"from": ["2026-13-01"], "to": ["2026-10-02"]}, "from='2026-13-01' is not a date"),
    ({"from": ["2026-10-01"]}, "a custom period needs both from and to"),
    ({"grain": ["hour"]}, "grain='hour' is not one of day, week, month"),
    ({"compare": ["maybe"]}, "compare='maybe': use off or on"),
    ({"boundary": ["everything"]}, "boundary='everything' is not one of"),
    ({"boundary": ["custom"]}, "boundary=custom needs at least one category"),
    ({"idle": ["hidden"]}, "idle='hidden' is not one of separate, proportional"),
    ({"driver": ["software"]}, "driver='software': use category:driver"),
    ({"pue": ["nan"]}, "pue='nan' is not a finite number"),
    ({"threshold": ["lots"]}, "threshold='lots' is not a finite number"),
])
def test_refused_values_are_named_and_ignored(query, problem):
    state, problems = view_state.parse_query(query)
    assert problems and problems[0].startswith(problem), problems
    # what was refused takes its default
    assert state.period == "whole_days" and state.grain == "day" and state.compare
    assert state.rules.boundary is None and state.rules.idle is None and state.rules.pue is None


def test_rules_the_config_refuses_fall_back_to_the_source():
    """pue=0.5 parses as a number but the config allows no PUE below 1: the source's rules show."""
    state, problems = view_state.parse_query({"pue": ["0.5"], "idle": ["proportional"]})
    assert problems == []
    kept, cfg, problems = view_state.checked(BASE, state)
    assert cfg == BASE and kept.rules.empty
    assert len(problems) == 1 and "the source's rules are shown" in problems[0]


def test_filters_the_data_lacks_are_dropped_and_named():
    f = views.Filters(pools=("h100-train", "ghost"), tenants=("research",))
    kept, problems = view_state.check_filters(f, {"pools": ["h100-train"], "tenants": ["research", "product"]})
    assert kept == views.Filters(pools=("h100-train",), tenants=("research",))
    assert problems == ["pool 'ghost' is not in this data"]


def test_encode_decode_keep_odd_names():
    q = {"f_tenant": ["a&b", "x=y", "<t>"], "project": ["r l"]}
    assert view_state.decode(view_state.encode(q)) == q


# ----------------------------------------------------------------------------------- saved views


def test_saved_views_live_beside_the_source(tmp_path):
    store = tmp_path / "ledger.duckdb"
    store.write_bytes(b"")
    folder = tmp_path / "bundle"
    folder.mkdir()
    assert saved_views.views_path(store) == tmp_path / "ledger.views.json"
    assert saved_views.views_path(folder) == folder / ".ailedger-views.json"
    assert saved_views.load(store) == []
    when = datetime(2026, 10, 12, 9, 30, tzinfo=timezone.utc)
    q = {"period": ["last_7_days"], "boundary": ["rental"], "level": ["project"]}
    saved_views.save(store, "  Rental   by project ", "rankings", q, ADMIN, now=when)
    saved_views.save(store, "Idle week", "idle", {"period": ["whole_days"]}, ADMIN, now=when)
    # same name (any case): replaced, not duplicated
    saved_views.save(store, "rental BY project", "rankings", {**q, "grain": ["week"]}, ADMIN, now=when)
    got = saved_views.load(store)
    assert [v.name for v in got] == ["Idle week", "rental BY project"]
    assert got[1].query["grain"] == ["week"] and got[1].saved_by == "root"
    assert got[1].saved_at == "2026-10-12T09:30:00+00:00"
    assert json.loads(saved_views.views_path(store).read_text())["version"] == 1
    assert saved_views.delete(store, "IDLE WEEK", ADMIN) is True
    assert saved_views.delete(store, "idle week", ADMIN) is False
    assert [v.name for v in saved_views.load(store)] == ["rental BY project"]


def test_only_admins_write_saved_views(tmp_path):
    folder = tmp_path / "bundle"
    folder.mkdir()
    with pytest.raises(AccessError, match="administrators only"):
        saved_views.save(folder, "mine", "", {}, ALICE)
    saved_views.save(folder, "shared", "", {}, ADMIN)
    with pytest.raises(AccessError):
        saved_views.delete(folder, "shared", ALICE)
    assert [v.name for v in saved_views.load(folder)] == ["shared"]


def test_bad_saved_views_are_refused_with_the_reason(tmp_path):
    folder = tmp_path / "bundle"
    folder.mkdir()
    with pytest.raises(saved_views.SavedViewError, match="view not saved"):
        saved_views.save(folder, "   ", "", {}, ADMIN)
    with pytest.raises(saved_views.SavedViewError, match="view not saved"):
        saved_views.save(folder, "x", "../etc", {}, ADMIN)
    saved_views.views_path(folder).write_text("{not json")
    with pytest.raises(saved_views.SavedViewError, match="is not a saved-views file"):
        saved_views.load(folder)
