"""Tenant-scoped access: who may see which tenants, enforced on the Computation every view reads.

A scoped Computation holds only the allowed tenants' segments, money, requests and records,
so every table, chart, export and drill-down built from it is scoped by construction —
the pages cannot forget a filter. Writes that every user would see (shared settings) are
for administrators only, checked by the functions that write (`require_admin`), and the
requests themselves are screened before the app sees them (`RequestGate`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .budgets import visible_budgets
from .config import read_toml
from .contract import IDLE, empty
from .engine import Computation
from .ownership import Ownership
from .telemetry import HeldTelemetry, merged_spans
from .tokens import model_table
from .unicode_names import nfc

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

    @field_validator("users", "groups")
    @classmethod
    def _nfc(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        # Names match the data's (read as NFC) whichever Unicode form the file was typed in.
        out: dict[str, list[str]] = {}
        for name, tenants in v.items():
            out.setdefault(nfc(name), []).extend(nfc(t) for t in tenants)
        return out


def load_access(path: str | Path | None) -> AccessConfig:
    if path is None:
        return AccessConfig()
    p = Path(path)
    try:
        data = read_toml(p)
    except ValueError as exc:
        raise AccessError(f"{p}: cannot read access config: {exc}") from None
    try:
        return AccessConfig.model_validate(data)
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
    user = nfc(user)
    grants: set[str] = set(cfg.users.get(user, []))
    for g in groups:
        grants |= set(cfg.groups.get(nfc(g.strip()), []))
    if ADMIN in grants:
        return Principal(user, None)
    if not grants:
        raise AccessError(f"user {user!r} has no tenants granted")
    return Principal(user, frozenset(grants))


def identity_from_headers(cfg: AccessConfig, headers: Iterable[tuple[str, str]]) -> tuple[str | None, list[str]]:
    """(user, groups) from a request's headers as (name, value) pairs (names in any case).

    A request that carries the user or groups header more than once is refused: a proxy that
    adds its header without removing the client's would otherwise let the client's copy win
    in whichever reader takes the first.
    """
    wanted = {cfg.user_header.lower(): "user", cfg.groups_header.lower(): "groups"}
    seen: dict[str, list[str]] = {"user": [], "groups": []}
    for name, value in headers:
        role = wanted.get(name.lower())
        if role is not None:
            seen[role].append(value)
    for role, header in (("user", cfg.user_header), ("groups", cfg.groups_header)):
        if len(seen[role]) > 1:
            raise AccessError(f"the request carries the {header} header {len(seen[role])} times; refused")
    user = seen["user"][0].strip() if seen["user"] else None
    groups = [g.strip() for g in (seen["groups"][0] if seen["groups"] else "").split(",") if g.strip()]
    return user or None, groups


def require_admin(principal: Principal, what: str) -> None:
    """Raise AccessError unless `principal` is an administrator: for writes every user sees
    (the rules config beside a source, aliases, imports into the shared store)."""
    if not principal.is_admin:
        raise AccessError(f"{principal.user} may not {what}: it changes what every user sees (administrators only)")


METRICS_PATH = "/_stcore/metrics"


def gate_request(cfg: AccessConfig, path: str, headers: Iterable[tuple[str, str]]) -> tuple[int, str] | None:
    """Whether a web request may reach the app: None, or (HTTP status, reason) to refuse it.

    With access configured: a request carrying an identity header twice is refused (400),
    and Streamlit's metrics endpoint (sessions, cache sizes) answers only an administrator
    signed in through the proxy's header (mode "header"; with "oidc" it is closed).
    """
    if cfg.mode == "none":
        return None
    headers = list(headers)
    try:
        user, groups = identity_from_headers(cfg, headers)
    except AccessError as exc:
        return 400, str(exc)
    if path.rstrip("/").endswith(METRICS_PATH):
        if cfg.mode != "header" or not user:
            return 403, "metrics are for administrators"
        try:
            if not principal_for(cfg, user, groups).is_admin:
                return 403, "metrics are for administrators"
        except AccessError:
            return 403, "metrics are for administrators"
    return None


class RequestGate:
    """ASGI middleware running gate_request before the app (HTTP and the WebSocket handshake).

    The access config is read once, from AILEDGER_ACCESS (as the dashboard reads it).
    """

    def __init__(self, app: Any, config: AccessConfig | None = None) -> None:
        import os

        self.app = app
        self.config = config if config is not None else load_access(os.environ.get("AILEDGER_ACCESS"))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
            refused = gate_request(self.config, scope.get("path", ""), headers)
            if refused is not None:
                await _refuse(scope, send, *refused)
                return
        await self.app(scope, receive, send)


async def _refuse(scope: dict, send: Any, status: int, reason: str) -> None:
    if scope["type"] == "websocket":  # before the handshake is accepted: an HTTP-level denial
        await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
        return
    body = (reason + "\n").encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def scope(comp: Computation, principal: Principal) -> Computation:
    """The Computation as this principal may see it: only the allowed tenants' rows.

    Fleet-wide figures that would reveal other tenants (unallocated capacity and its idle
    cost, unattributed keys, rejected rows, gaps) are left out for a tenant-scoped user, and
    so are names and telemetry: the cards, pools and accelerators are those the tenants held,
    the projects theirs, and a card's samples and energy only those of the time they held it.
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
    summary, hours = comp.request_summary.filter(mine), comp.request_hours.filter(mine)
    allocations = comp.allocations.filter(mine)
    models, _ = model_table(money_before, seg, summary, comp.config)
    own_ids = set(seg["s_idx"].to_list())
    idle = comp.idle.filter(pl.col("s_idx").is_in(sorted(own_ids)) & (pl.col("kind") == "allocated"))
    # Inputs become what landed on the allowed tenants: their reconciliation is their own money.
    inputs = money.group_by("category", "pool").agg(pl.col("amount").sum()).select(
        pl.lit("scoped").alias("origin"), pl.lit("scoped").alias("id"), "category", "pool", "amount"
    )
    bundle = _scoped_bundle(comp, allocations, requests)
    # Budgets: the allowed tenants' own and their projects' (the fresh tables dict is the scope's).
    bundle.tables["budgets"] = visible_budgets(comp.bundle["budgets"], principal.tenants, comp.ownership.projects)
    cards = seg["gpu_id"].unique().sort()
    ledger = replace(
        comp.ledger, has_inventory=False,
        cards=comp.ledger.cards.filter(pl.col("gpu_id").is_in(cards.implode())),
        segments=comp.ledger.segments.filter(pl.col("s_idx").is_in(seg["s_idx"].implode())),
        intervals=comp.ledger.intervals.filter(pl.col("e_idx").is_in(seg["e_idx"].implode())),
        conflicts=comp.ledger.conflicts.clear(),
    )
    spans = merged_spans(seg.select("gpu_id", "t0", "t1"))
    return replace(
        comp, ledger=ledger, seg=seg, money=money, money_spread=spread, money_before_recharge=money_before,
        inputs=inputs, requests=requests, request_summary=summary, request_hours=hours, models=models, idle=idle,
        allocations=allocations, bundle=bundle,
        rejected=comp.rejected.clear(), gaps=[], unmapped_callers=comp.unmapped_callers.clear(),
        cost_rates=comp.cost_rates,
        ownership=_scoped_ownership(comp.ownership, allowed, allocations, requests),
        card_energy=_held_energy(comp.card_energy, seg),
        telemetry=HeldTelemetry(comp.telemetry.only(cards.to_list()), spans),
    )


def _scoped_ownership(own: Ownership, allowed: list[str], allocations: pl.DataFrame,
                      requests: pl.DataFrame) -> Ownership:
    """The projects (and their aliases) of the allowed tenants only: names of other tenants'
    projects must not reach a sidebar or a project list."""
    if own.identity:  # owner keys are the project and tenant ids: those the allowed rows carry
        keys = pl.concat([allocations.select("project", "tenant"), requests.select("project", "tenant")]).unique()
        projects = keys.drop_nulls("project").select(
            "project", "tenant", pl.lit(None, pl.String).alias("display_name"),
            pl.lit(None, pl.String).alias("cost_center"))
        return replace(own, projects=projects.cast(dict(own.projects.schema)), aliases=own.aliases.clear())
    projects = own.projects.filter(pl.col("tenant").is_in(allowed).fill_null(False))
    aliases = own.aliases.join(projects.select("project"), on="project", how="semi")
    return replace(own, projects=projects, aliases=aliases)


_QUARTER = timedelta(minutes=15)


def _held_energy(card_energy: pl.DataFrame, seg: pl.DataFrame) -> pl.DataFrame:
    """Each card's quarter-hour energy times the share of the quarter the allowed tenants held it
    (overlap x share / 15 min): another tenant's energy on a shared card is not theirs to see.

    Linear: each held segment is expanded to the quarter hours it touches (one row each).
    """
    held = seg.select(pl.col("gpu_id").cast(pl.String), "t0", "t1", "eff").filter(pl.col("t1") > pl.col("t0"))
    if held.height == 0 or card_energy.height == 0:
        return pl.DataFrame(schema={"gpu_id": pl.String, "bucket": card_energy.schema["bucket"], "joules": pl.Float64})
    quarters = held.with_columns(
        pl.datetime_ranges(pl.col("t0").dt.truncate("15m"), pl.col("t1") - timedelta(microseconds=1), "15m")
        .alias("bucket")
    ).explode("bucket")
    overlap = (pl.min_horizontal("t1", pl.col("bucket") + _QUARTER) - pl.max_horizontal("t0", "bucket"))
    frac = quarters.group_by("gpu_id", "bucket").agg(
        ((overlap.dt.total_microseconds() * pl.col("eff")).sum() / (_QUARTER / timedelta(microseconds=1))).alias("frac")
    )
    return (
        card_energy.with_columns(pl.col("gpu_id").cast(pl.String))  # the Enum dtype lists every card
        .join(frac, on=["gpu_id", "bucket"], how="inner")
        .select("gpu_id", "bucket", (pl.col("joules") * pl.col("frac").clip(upper_bound=1.0)).alias("joules"))
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
