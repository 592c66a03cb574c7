"""Tenant-scoped access enforced on the Computation (the query layer), not only in pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from cost_engine.access import AccessConfig, AccessError, load_access, principal_for, scope
from cost_engine.api import run
from cost_engine.lineage import explain
from cost_engine.report import build_report

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "fleet-week"

ACCESS = AccessConfig(
    mode="header",
    users={"alice": ["research"], "bob": ["product"]},
    admins=["root"], admin_groups=["finance"],
)


@pytest.fixture(scope="module")
def comp():
    return run(SAMPLE)


def test_tenant_user_sees_only_their_rows(comp):
    full = build_report(comp)
    mine = build_report(scope(comp, principal_for(ACCESS, "alice")))
    assert [r["tenant"] for r in mine["by_tenant"]] == ["research"]
    assert {r["tenant"] for r in mine["by_project"]} == {"research"}
    research = next(r for r in full["by_tenant"] if r["tenant"] == "research")
    assert mine["by_tenant"][0]["cost"] == pytest.approx(research["cost"])
    # Fleet-wide figures that would reveal others are withheld.
    assert mine["totals"]["available_gpu_hours"] is None
    assert mine["unattributed"] == [] and mine["rejected"] == [] and mine["gaps"] == []
    assert mine["reconciliation"]["idle"] == 0.0
    assert mine["totals"]["cost"] == pytest.approx(research["cost"])
    assert all(r["kind"] == "allocated" for r in mine["idle"])


def test_other_tenants_drill_down_returns_nothing(comp):
    bob = scope(comp, principal_for(ACCESS, "bob"))
    research_project = next(r["project"] for r in build_report(comp)["by_project"] if r["tenant"] == "research")
    ex = explain(bob, project=research_project)
    assert ex.allocations.height == 0 and ex.costs.height == 0 and ex.requests.height == 0
    assert ex.total_cost == 0.0
    assert set(bob.bundle["allocations"].join(comp.allocations.select("allocation_id", "tenant"),
                                              on="allocation_id")["tenant"].unique()) <= {"product"}


def test_admin_and_groups_see_everything(comp):
    assert principal_for(ACCESS, "root").is_admin
    assert principal_for(ACCESS, "carol", ["finance"]).is_admin
    assert scope(comp, principal_for(ACCESS, "root")) is comp


def test_unknown_or_missing_user_sees_nothing():
    with pytest.raises(AccessError, match="no tenants"):
        principal_for(ACCESS, "mallory")
    with pytest.raises(AccessError, match="not signed in"):
        principal_for(ACCESS, None)
    assert principal_for(AccessConfig(), None).is_admin  # mode none: a local single-user install


# ------------------------------------------------------------------- issue 38 item 10: roles


def test_a_tenant_named_admin_is_a_tenant_not_the_role(tmp_path):
    """On main `"dana" = ["admin"]` made dana a full administrator, whether or not a tenant is
    called `admin`. Roles are their own keys now (admins, admin_groups); with version = 2 a tenant
    list names tenants only, so granting the tenant `admin` scopes to it."""
    cfg = AccessConfig(mode="header", version=2, users={"dana": ["admin"]}, admins=["root"],
                       admin_groups=["finance"], groups={"ops": ["admin", "platform"]})
    dana = principal_for(cfg, "dana")
    assert not dana.is_admin and dana.tenants == frozenset({"admin"})
    assert principal_for(cfg, "erin", ["ops"]).tenants == frozenset({"admin", "platform"})
    assert principal_for(cfg, "root").is_admin and principal_for(cfg, "x", ["finance"]).is_admin
    # A group named like a tenant is not a role either.
    assert principal_for(cfg, "dana", ["admin"]).tenants == frozenset({"admin"})


def test_the_old_admin_grant_is_refused_naming_the_line(tmp_path):
    """A version-1 file (no version key) that still writes `"finance" = ["admin"]` is refused,
    with the file, the line and the two ways out: nothing silently becomes an administrator,
    nor silently stops being one."""
    f = tmp_path / "access.toml"
    f.write_text('mode = "header"\n\n[users]\n"bob" = ["product"]\n\n[groups]\n"finance" = ["admin"]\n')
    with pytest.raises(AccessError) as err:
        load_access(f)
    msg = str(err.value)
    assert msg.startswith(f"{f}: line 7: [groups] \"finance\" = [\"admin\"]")
    assert 'admin_groups = ["finance"]' in msg and "version = 2" in msg
    f.write_text('mode = "header"\nusers.root = ["admin"]\n')
    with pytest.raises(AccessError, match=r'line 2: \[users\] "root".*write admins = \["root"\]'):
        load_access(f)
    f.write_text('version = 2\nmode = "header"\nadmins = ["root"]\n[users]\n"bob" = ["admin"]\n')
    cfg = load_access(f)
    assert principal_for(cfg, "root").is_admin and principal_for(cfg, "bob").tenants == frozenset({"admin"})
