"""Tenant-scoped access: who may see which tenants, enforced on the Computation every view reads.

A scoped Computation holds only the allowed tenants' segments, money, requests and records,
so every table, chart, export and drill-down built from it is scoped by construction —
the pages cannot forget a filter.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .contract import IDLE, empty
from .engine import Computation
from .tokens import model_table

ADMIN = "admin"


class AccessError(PermissionError):
    """The user may not see anything, or the access config is broken."""


class AccessConfig(BaseModel):
    """`access.toml`: how users are identified and which tenants each may see."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["none", "header", "oidc"] = "none"
    # With mode = "header": a reverse proxy that authenticated the user sets these.
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    # user (e-mail or name) -> tenants, or ["admin"] for all
    users: dict[str, list[str]] = Field(default_factory=dict)
    # group -> tenants, or ["admin"]
    groups: dict[str, list[str]] = Field(default_factory=dict)


def load_access(path: str | Path | None) -> AccessConfig:
    if path is None:
        return AccessConfig()
    p = Path(path)
    try:
        return AccessConfig.model_validate(tomllib.loads(p.read_text(encoding="utf-8")))
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise AccessError(f"{p}: cannot read access config: {exc}") from None
    except ValidationError as exc:
        keys = "; ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors())
        raise AccessError(f"{p}: invalid access config: {keys}") from None


@dataclass(frozen=True)
class Principal:
    """Who is looking: None tenants = admin (everything)."""

    user: str
    tenants: frozenset[str] | None

    @property
    def is_admin(self) -> bool:
        return self.tenants is None


def principal_for(cfg: AccessConfig, user: str | None, groups: list[str] | tuple[str, ...] = ()) -> Principal:
    """Map a user (and groups) to the tenants they may see. Unknown users see nothing."""
    if cfg.mode == "none":
        return Principal(user or "local", None)
    if not user:
        raise AccessError("not signed in")
    grants: set[str] = set(cfg.users.get(user, []))
    for g in groups:
        grants |= set(cfg.groups.get(g.strip(), []))
    if ADMIN in grants:
        return Principal(user, None)
    if not grants:
        raise AccessError(f"user {user!r} has no tenants granted")
    return Principal(user, frozenset(grants))


def scope(comp: Computation, principal: Principal) -> Computation:
    """The Computation as this principal may see it: only the allowed tenants' rows.

    Fleet-wide figures that would reveal other tenants (unallocated capacity and its idle
    cost, unattributed keys, rejected rows, gaps) are left out for a tenant-scoped user.
    """
    if principal.is_admin:
        return comp
    allowed = sorted(principal.tenants or ())
    mine = pl.col("tenant").is_in(allowed).fill_null(False)
    seg = comp.seg.filter(mine)
    money = comp.money.filter((pl.col("dest") == "owner") & mine)
    money_before = comp.money_before_recharge.filter((pl.col("dest") != IDLE) & mine)
    spread = comp.money_spread.filter((pl.col("dest") != IDLE) & mine)
    requests = comp.requests.filter(mine)
    allocations = comp.allocations.filter(mine)
    models, _ = model_table(money_before, seg, requests, comp.config)
    own_ids = set(seg["s_idx"].to_list())
    idle = comp.idle.filter(pl.col("s_idx").is_in(sorted(own_ids)) & (pl.col("kind") == "allocated"))
    # Inputs become what landed on the allowed tenants: their reconciliation is their own money.
    inputs = money.group_by("category", "pool").agg(pl.col("amount").sum()).select(
        pl.lit("scoped").alias("origin"), pl.lit("scoped").alias("id"), "category", "pool", "amount"
    )
    bundle = _scoped_bundle(comp, allocations, requests)
    ledger = replace(comp.ledger, has_inventory=False)
    return replace(
        comp, ledger=ledger, seg=seg, money=money, money_spread=spread, money_before_recharge=money_before,
        inputs=inputs, requests=requests, models=models, idle=idle, allocations=allocations, bundle=bundle,
        rejected=comp.rejected.clear(), gaps=[],
        cost_rates=comp.cost_rates,
        card_energy=comp.card_energy.filter(pl.col("gpu_id").is_in(seg["gpu_id"].unique().implode())),
        telemetry=comp.telemetry.only(seg["gpu_id"].unique().to_list()),
    )


def _scoped_bundle(comp: Computation, allocations: pl.DataFrame, requests: pl.DataFrame):
    """Raw records limited to the allowed owners (for drill-downs that read the bundle)."""
    from .bundle import Bundle

    b = comp.bundle
    alloc_ids = allocations.select("allocation_id")
    req_ids = requests.select("request_id")
    cards = allocations.select("gpu_id").unique()
    tables = dict(b.tables)
    tables["allocations"] = b["allocations"].join(alloc_ids, on="allocation_id", how="semi")
    tables["requests"] = b["requests"].join(req_ids, on="request_id", how="semi")
    tables["telemetry"] = b["telemetry"].join(cards, on="gpu_id", how="semi")
    tables["inventory"] = b["inventory"].join(cards, on="gpu_id", how="semi")
    tenants = allocations["tenant"].drop_nulls().unique().to_list() + requests["tenant"].drop_nulls().unique().to_list()
    owners = b["owners"].filter(pl.col("tenant").is_in(sorted(set(tenants))))
    tables["owners"] = owners
    tables["aliases"] = b["aliases"].join(owners.select("project"), on="project", how="semi")
    # Cost rows: only direct costs of the allowed owners; shared rows are other tenants' too.
    direct = comp.money.filter(pl.col("cost_id").is_not_null() & pl.col("tenant").is_in(sorted(set(tenants))))
    tables["costs"] = b["costs"].join(direct.select("cost_id").unique(), on="cost_id", how="semi")
    for t in ("queue", "quotas"):
        tables[t] = b[t].filter(pl.col("tenant").is_in(sorted(set(tenants)))) if "tenant" in b[t].columns else empty(t)
    # Requests left in the store count as the allowed ones (never the store itself: a scoped
    # bundle must not lead back to other owners' rows).
    held = {"requests": requests.height} if "requests" in b.held_rows else {}
    return Bundle(tables=tables, present=b.present, held_rows=held)
