"""Tenant-scoped access: who may see which tenants, enforced on the Computation every view reads.

A scoped Computation holds only the allowed tenants' segments, money, requests and records,
so every table, chart, export and drill-down built from it is scoped by construction —
the pages cannot forget a filter. Writes that every user would see (shared settings) are
for administrators only, checked by the functions that write (`require_admin`), and the
requests themselves are screened before the app sees them (`RequestGate`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .budgets import visible_budgets
from .config import read_toml
from .contract import IDLE, empty
from .engine import Computation
from .lineage import explain
from .ownership import Ownership
from .telemetry import HeldTelemetry, merged_spans
from .tokens import model_table
from .unicode_names import nfc

ADMIN = "admin"  # the role's name; in a version-1 tenant list it is refused (AccessConfig)
LOOPBACK = ("127.0.0.0/8", "::1/128")
TRUSTED_PROXIES_ENV = "AILEDGER_TRUSTED_PROXIES"  # comma-separated; `ailedger serve --trusted-proxy`


class AccessError(PermissionError):
    """The user may not see anything, or the access config is broken."""


def _legacy_admin(users: dict[str, list[str]], groups: dict[str, list[str]]) -> tuple[str, str] | None:
    """(section, name) of the first tenant list holding the bare word "admin", else None."""
    for section, grants in (("users", users), ("groups", groups)):
        for name, tenants in grants.items():
            if any(nfc(t) == ADMIN for t in tenants):
                return section, name
    return None


def _legacy_admin_message(section: str, name: str) -> str:
    key = "admins" if section == "users" else "admin_groups"
    return (f'[{section}] "{name}" = ["{ADMIN}"]: a tenant list no longer makes an administrator '
            f'(roles and tenant names are kept apart): write {key} = ["{name}"] instead; to grant '
            f'the tenant named "{ADMIN}", put version = 2 at the top (tenant lists then name tenants only)')


class AccessConfig(BaseModel):
    """`access.toml`: how users are identified, which tenants each may see, who administers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # 1: a tenant list holding "admin" is refused (before version 2 it made an administrator);
    # 2: tenant lists name tenants only. Administrators are `admins` / `admin_groups` in both.
    version: Literal[1, 2] = 1
    mode: Literal["none", "header", "oidc"] = "none"
    # With mode = "header": a reverse proxy that authenticated the user sets these.
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    # user (e-mail or name) -> tenants
    users: dict[str, list[str]] = Field(default_factory=dict)
    # group -> tenants
    groups: dict[str, list[str]] = Field(default_factory=dict)
    # Roles, apart from tenant names: users and groups who see everything and write shared settings.
    admins: list[str] = Field(default_factory=list)
    admin_groups: list[str] = Field(default_factory=list)
    # mode = "header": the addresses (or networks) the proxy connects from; any other peer is
    # refused. Empty: only loopback peers (the proxy on the same host).
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("users", "groups")
    @classmethod
    def _nfc(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        # Names match the data's (read as NFC) whichever Unicode form the file was typed in.
        out: dict[str, list[str]] = {}
        for name, tenants in v.items():
            out.setdefault(nfc(name), []).extend(nfc(t) for t in tenants)
        return out

    @field_validator("admins", "admin_groups")
    @classmethod
    def _nfc_names(cls, v: list[str]) -> list[str]:
        return [nfc(n) for n in v]

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for a in v:
            try:
                ip_network(a.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{a!r} is not an IP address or network (10.0.0.5, 10.0.0.0/24, ::1)") from None
        return [a.strip() for a in v]

    @model_validator(mode="after")
    def _roles_apart(self) -> "AccessConfig":
        found = _legacy_admin(self.users, self.groups) if self.version == 1 else None
        if found:
            raise ValueError(_legacy_admin_message(*found))
        return self


def _line_of(text: str, section: str, name: str) -> int | None:
    """The 1-based line of `name = ...` under `[section]` (or `section.name = ...`), if written so."""
    current = ""
    keys = {name, f'"{name}"', f"'{name}'"}
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("[") and not s.startswith("[["):
            current = s.strip("[] ")
            continue
        key = s.partition("=")[0].strip()
        if (current == section and key in keys) or (current == "" and key in {f"{section}.{k}" for k in keys}):
            return no
    return None


def load_access(path: str | Path | None) -> AccessConfig:
    if path is None:
        return AccessConfig()
    p = Path(path)
    try:
        data = read_toml(p)
    except ValueError as exc:
        raise AccessError(f"{p}: cannot read access config: {exc}") from None
    users, groups = data.get("users"), data.get("groups")
    if data.get("version", 1) == 1 and isinstance(users or {}, dict) and isinstance(groups or {}, dict):
        found = _legacy_admin({k: v for k, v in (users or {}).items() if isinstance(v, list)},
                              {k: v for k, v in (groups or {}).items() if isinstance(v, list)})
        if found:
            line = _line_of(p.read_text(encoding="utf-8"), *found)
            where = f"line {line}: " if line else ""
            raise AccessError(f"{p}: {where}{_legacy_admin_message(*found)}")
    try:
        return AccessConfig.model_validate(data)
    except ValidationError as exc:
        keys = "; ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors())
        raise AccessError(f"{p}: invalid access config: {keys}") from None


def with_trusted_proxies(cfg: AccessConfig, environ: Mapping[str, str]) -> AccessConfig:
    """`cfg` with the proxies named in AILEDGER_TRUSTED_PROXIES (set by `ailedger serve
    --trusted-proxy`) added to the file's."""
    extra = [a.strip() for a in environ.get(TRUSTED_PROXIES_ENV, "").split(",") if a.strip()]
    if not extra:
        return cfg
    try:
        return AccessConfig.model_validate({**cfg.model_dump(), "trusted_proxies": [*cfg.trusted_proxies, *extra]})
    except ValidationError as exc:
        raise AccessError(f"{TRUSTED_PROXIES_ENV}: {exc.errors()[0]['msg']}") from None


def peer_allowed(cfg: AccessConfig, peer: str) -> bool:
    """Whether a request from address `peer` may claim an identity by header: it comes from a
    trusted proxy (or, none named, from loopback). Other modes do not trust headers: any peer."""
    if cfg.mode != "header":
        return True
    try:
        addr = ip_address(peer.strip("[]"))
    except ValueError:
        return False  # no address (a Unix socket): not a peer anyone named
    # A dual-stack listener ("::") sees an IPv4 peer as ::ffff:a.b.c.d.
    addr = getattr(addr, "ipv4_mapped", None) or addr
    nets = cfg.trusted_proxies or LOOPBACK
    return any(addr in ip_network(n, strict=False) for n in nets)


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
    names = [nfc(g.strip()) for g in groups]
    # The role comes from admins / admin_groups only: a tenant's name is never a role.
    if user in cfg.admins or any(g in cfg.admin_groups for g in names):
        return Principal(user, None)
    grants: set[str] = set(cfg.users.get(user, []))
    for g in names:
        grants |= set(cfg.groups.get(g, []))
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


def gate_request(cfg: AccessConfig, path: str, headers: Iterable[tuple[str, str]],
                 peer: str | None = None) -> tuple[int, str] | None:
    """Whether a web request may reach the app: None, or (HTTP status, reason) to refuse it.

    With access configured: a request carrying an identity header twice is refused (400),
    and Streamlit's metrics endpoint (sessions, cache sizes) answers only an administrator
    signed in through the proxy's header (mode "header"; with "oidc" it is closed). In mode
    "header", `peer` (the connecting address; None: not checked here) must be a trusted proxy,
    or loopback when none is named (403): anyone else could send the headers themselves.
    """
    if cfg.mode == "none":
        return None
    if peer is not None and not peer_allowed(cfg, peer):
        return 403, f"requests must come through the trusted proxy, not from {peer or 'an unknown address'}"
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

    The access config is read once, from AILEDGER_ACCESS (as the dashboard reads it), with the
    proxies of AILEDGER_TRUSTED_PROXIES added.
    """

    def __init__(self, app: Any, config: AccessConfig | None = None) -> None:
        import os

        self.app = app
        self.config = config if config is not None else with_trusted_proxies(
            load_access(os.environ.get("AILEDGER_ACCESS")), os.environ)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
            client = scope.get("client")
            peer = str(client[0]) if client else ""  # unknown: refused in mode "header"
            refused = gate_request(self.config, scope.get("path", ""), headers, peer)
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
    Cost rows shared with other tenants are there only as the allowed tenants' share (scoped_costs).
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
    scoped = replace(
        comp, ledger=ledger, seg=seg, money=money, money_spread=spread, money_before_recharge=money_before,
        inputs=inputs, requests=requests, request_summary=summary, request_hours=hours, models=models, idle=idle,
        allocations=allocations, bundle=bundle,
        rejected=comp.rejected.clear(), gaps=[], unmapped_callers=comp.unmapped_callers.clear(),
        cost_rates=comp.cost_rates,
        ownership=_scoped_ownership(comp.ownership, allowed, allocations, requests),
        card_energy=_held_energy(comp.card_energy, seg),
        telemetry=HeldTelemetry(comp.telemetry.only(cards.to_list()), spans),
        scoped_to=frozenset(allowed),
    )
    # The cost rows as the allowed tenants may see them: their own rows whole, their share of
    # the others (the fresh tables dict is the scope's).
    bundle.tables["costs"] = scoped_costs(comp, scoped)
    return scoped


SHARE, WHOLE = "share", "row"  # scoped_costs' `record` column


def scoped_costs(comp: Computation, scoped: Computation) -> pl.DataFrame:
    """The cost rows a scoped computation may show, with `record`: "row" or "share".

    A row whose every dollar (in `comp`, the whole fleet's) landed on the allowed tenants is
    theirs whole (a direct charge to their project): shown as stored. A row shared with other
    tenants (a fleet invoice spread by a driver, a direct charge recharged to callers) is a
    derived row: the same cost_id (the lineage), category, term and pool, `driver` the rule
    that shared it, and `amount` the allowed tenants' part of it in the period (lineage.explain
    of `scoped`, so it sums to their cost figures); the row's own amount, its original
    currency amount and its owner, which would tell what the other tenants paid, are not in it.
    Linear in the cost rows and the allowed tenants' money (one lineage.explain).
    """
    raw = comp.bundle["costs"]
    mine = pl.col("tenant").is_in(sorted(scoped.scoped_to or ())).fill_null(False)
    named = comp.money.filter(pl.col("cost_id").is_not_null()).group_by("cost_id").agg(
        ((pl.col("dest") == "owner") & mine).all().alias("all_mine"))
    whole_ids = named.filter(pl.col("all_mine")).select("cost_id")
    shares = (
        explain(scoped).costs.group_by("cost_id").agg(pl.col("cost").sum().alias("_share"))
        .join(raw.select("cost_id"), on="cost_id", how="semi")  # rows of the costs table, not rates or energy
        .join(whole_ids, on="cost_id", how="anti")
    )
    drivers = comp.cost_rates.group_by("cost_id").agg(pl.col("driver").first().alias("_driver"))
    whole = raw.join(whole_ids, on="cost_id", how="semi").with_columns(pl.lit(WHOLE).alias("record"))
    derived = (
        raw.join(shares, on="cost_id", how="inner").join(drivers, on="cost_id", how="left")
        .with_columns(
            pl.col("_share").alias("amount"),
            pl.lit(comp.config.period.currency.upper(), pl.String).alias("currency"),
            pl.coalesce("_driver", "driver").alias("driver"),
            pl.lit(None, pl.String).alias("owner"),
            pl.lit(SHARE).alias("record"),
        )
    )
    # The contract's columns only: a folder's original_amount (before currency conversion) is
    # a shared row's whole amount, and a store does not keep it, so both show the same.
    cols = [*empty("costs").columns, "record"]
    return pl.concat([whole.select(cols), derived.select(cols)]).sort("cost_id")


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
    # Cost rows: set by scope (scoped_costs), which needs the scoped computation.
    tables["costs"] = b["costs"].clear()
    for t in ("queue", "quotas"):
        tables[t] = b[t].filter(pl.col("tenant").is_in(sorted(set(tenants)))) if "tenant" in b[t].columns else empty(t)
    # Requests left in the store count as the allowed ones (never the store itself: a scoped
    # bundle must not lead back to other owners' rows).
    held = {"requests": requests.height} if "requests" in b.held_rows else {}
    return Bundle(tables=tables, present=b.present, held_rows=held)
