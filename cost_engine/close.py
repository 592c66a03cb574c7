"""Month-end close: a period's report stored once sent, late data posted as corrections in the first open period.

`close_period` stores the period's report under the current data version and marks it closed;
`report_doc` then returns those figures for that period (with `closed` and `after_close`),
and an ingest touching a closed period (`LateHook`, inside the ingest's transaction) is either
refused or recorded, its effect per owner posting as corrections at the first instant after
the last closed period. See docs/close.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from . import api, audit, compare, jsonout, store
from .config import Config, ConfigError, load_config, parse_config
from .contract import TABLE_NAMES
from . import report as reports

# Each table's time span (lo, hi): a row touches a period when the span overlaps it. Tables
# without one (owners, aliases, quotas) map records to owners: any change touches every period.
SPANS: dict[str, tuple[str, str | None]] = {
    "inventory": ("in_service_start", "in_service_end"), "allocations": ("start", "end"), "telemetry": ("ts", None),
    "requests": ("ts", "end"), "costs": ("start", "end"), "rates": ("start", "end"), "tariffs": ("start", "end"),
    "queue": ("submit", "start"), "events": ("start", "end"), "budgets": ("start", "end"),
}
POINTS = frozenset({"telemetry", "requests"})  # records at an instant (requests: or a usage bucket)
IDLE, UNATTRIBUTED = "(idle)", "(unattributed)"
# The completeness rule: a period whose report names one of these gaps (no telemetry, allocated
# hours without telemetry, a pool no cost or rate reaches) is not closed without --accept-gaps.
BLOCKING_GAPS = frozenset({"telemetry", "telemetry coverage", "cost unknown"})
# How often a report retries when an ingest committed while it computed (a pinned read).
PINNED_TRIES = 5


class CloseError(ValueError):
    """A close, reopen or late ingest that cannot be done as asked (said why)."""


class LateRefused(store.StoreError):
    """An ingest would change a closed period and late data is refused (--no-late)."""


@dataclass(frozen=True)
class Closed:
    """One closed period (a row of the store's closes table)."""

    id: int
    period: str
    start: datetime
    end: datetime
    timezone: str
    data_version: int
    closed_at: datetime
    user: str | None
    accept_gaps: bool
    gaps: list
    config_sha256: str | None
    report: str  # the report JSON as stored, byte for byte

    def stamp(self) -> dict[str, Any]:
        return {"period": self.period, "data_version": self.data_version, "at": iso(self.closed_at),
                "user": self.user, "accept_gaps": self.accept_gaps, "config_sha256": self.config_sha256}


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_CLOSE_COLS = ('id, period, start, "end", gaps, data_version, closed_at, "user", accept_gaps, config_sha256, '
               'report, reopened_at')


def _closes(con: duckdb.DuckDBPyConnection, *, open_too: bool = False) -> list[Closed]:
    if not store.has_table(con, "closes"):
        return []
    where = "" if open_too else " WHERE reopened_at IS NULL"
    rows = con.execute(f"SELECT {_CLOSE_COLS} FROM closes{where} ORDER BY start, id").fetchall()
    out = []
    for r in rows:
        gaps = json.loads(r[4] or "{}")
        out.append(Closed(int(r[0]), r[1], r[2], r[3], gaps.get("timezone", "UTC"), int(r[5]), r[6], r[7],
                          bool(r[8]), gaps.get("gaps", []), r[9], r[10]))
    return out


def closed_periods(db_path: str | Path) -> list[Closed]:
    """The periods closed now (not reopened), earliest first."""
    with store.connect(db_path) as con:
        return _closes(con)


def find_closed(db_path: str | Path, start: datetime, end: datetime) -> Closed | None:
    return next((c for c in closed_periods(db_path) if c.start == start and c.end == end), None)


# ------------------------------------------------------------------------------ config and report


def pinned_config(db_path: Path, config_path: str | Path | None, version: int) -> Config:
    """The config a report of data `version` runs under: the one given, else the one beside the
    store, unless that file is an older config the store recorded and version's ingest recorded
    another (an ingest committed its data and has not yet written its config: never new data
    under the old config)."""
    found = api.find_config(db_path, config_path)
    if config_path is not None or found is None:
        return load_config(found)
    text = found.read_text(encoding="utf-8")
    recorded = audit.config_at(db_path, version)
    if recorded is not None and sha256(recorded) != sha256(text) and sha256(text) in _recorded_hashes(db_path):
        return _parse_text(recorded, str(found))
    return load_config(found)


def _parse_text(text: str, name: str) -> Config:
    import tomllib

    try:
        return parse_config(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ConfigError) as exc:
        raise ConfigError(f"{name} (as the store recorded it): {exc}") from None


def _recorded_hashes(db_path: Path) -> set[str]:
    with store.connect(db_path) as con:
        if not store.has_table(con, "configs"):
            return set()
        return {r[0] for r in con.execute("SELECT sha256 FROM configs").fetchall()}


def _with_period(cfg: Config, span: tuple[datetime, datetime] | None) -> Config:
    return cfg if span is None else compare.period_config(cfg, span)


def is_store_file(source: str | Path) -> bool:
    p = Path(source)
    return p.is_file() and store.is_store(p)


def pinned_run(source: str | Path, config_path: str | Path | None = None,
               span: tuple[datetime, datetime] | None = None) -> tuple[Any, int | None]:
    """(computation, data version) of a source, read at one data version with the config of that
    version: when an ingest commits while it computes, it computes again (PINNED_TRIES times).
    A bundle folder has no versions (None)."""
    if not is_store_file(source):
        return api.run(source, config=_with_period(load_config(api.find_config(source, config_path)), span)), None
    p = Path(source)
    for _ in range(PINNED_TRIES):
        v0 = audit.current_version(p)
        comp = api.run(p, config=_with_period(pinned_config(p, config_path, v0), span))
        if audit.current_version(p) == v0:
            break
    return comp, v0


def computed_report(source: str | Path, config_path: str | Path | None = None,
                    span: tuple[datetime, datetime] | None = None) -> dict:
    """The engine's report for the source and period, with `data_version` (pinned_run)."""
    comp, version = pinned_run(source, config_path, span)
    rep = reports.build_report(comp)
    rep["data_version"] = version
    return rep


def as_of_report(db_path: str | Path, version: int, config_path: str | Path | None = None,
                 span: tuple[datetime, datetime] | None = None, *, corrections: bool = True) -> dict:
    """The report as the store stood at data `version` (its rows then, the config it recorded then
    unless one is given): what a report run at that version printed, byte for byte."""
    p = Path(db_path)
    with audit.snapshot(p, version) as snap:
        recorded = audit.config_at(p, version) if config_path is None else None
        found = api.find_config(p, config_path)
        cfg = load_config(found) if recorded is None else _parse_text(recorded, str(found or p))
        rep = reports.build_report(api.run(snap, config=_with_period(cfg, span)))
    rep["data_version"] = version
    if corrections:
        _add_corrections(p, rep, upto=version)
    return rep


def report_doc(source: str | Path, config_path: str | Path | None = None, *,
               span: tuple[datetime, datetime] | None = None, as_of: int | None = None) -> dict:
    """What `ailedger report --json` prints: a closed period's stored figures with `closed` and
    `after_close`; else the computed report with `data_version` and the `corrections` posted in it."""
    if as_of is not None:
        if not is_store_file(source):
            raise CloseError("--as-of-version needs a store (a bundle folder has no data versions)")
        return as_of_report(source, as_of, config_path, span)
    if is_store_file(source):
        closed = _closed_for(Path(source), config_path, span)
        if closed is not None:
            return closed_report(Path(source), closed)
    rep = computed_report(source, config_path, span)
    if is_store_file(source):
        _add_corrections(Path(source), rep)
    return rep


def _closed_for(p: Path, config_path: str | Path | None, span: tuple[datetime, datetime] | None) -> Closed | None:
    closes = closed_periods(p)
    if not closes:
        return None
    if span is None:
        per = load_config(api.find_config(p, config_path)).period
        if per.start is None or per.end is None:
            return None
        span = (per.start, per.end)
    return next((c for c in closes if c.start == span[0] and c.end == span[1]), None)


def closed_report(p: Path, closed: Closed) -> dict:
    """The stored report of a closed period, its `closed` stamp and the changes since (`after_close`)."""
    rep = json.loads(closed.report)
    rep["closed"] = closed.stamp()
    rep["after_close"] = after_close(p, closed)
    return rep


def owner_costs(rep: dict) -> dict[str, float]:
    """Cost per owner (tenant), with idle and unattributed as owners of their own: they add up to
    the input cost, so a change is split over owners without a remainder."""
    out = {r["tenant"]: float(r["cost"] or 0.0) for r in rep["by_tenant"]}
    rec = rep["reconciliation"]
    out[IDLE] = float(rec.get("idle") or 0.0)
    out[UNATTRIBUTED] = float(rec.get("unattributed") or 0.0)
    return out


# ------------------------------------------------------------------------------ close and reopen


def close_period(db_path: str | Path, label: str, span: tuple[datetime, datetime], *,
                 config_path: str | Path | None = None, user: str | None = None,
                 accept_gaps: bool = False) -> Closed:
    """Store the period's report under the current data version and mark it closed.

    Refused when it overlaps a closed period, or when the report names gaps (missing telemetry,
    an uncosted pool, no rate ...) unless `accept_gaps` (recorded with the gaps). The report is
    computed first and the close row written in one short transaction that checks the data
    version did not move meanwhile: a process killed at any point leaves the period open."""
    p = Path(db_path)
    if not is_store_file(p):
        raise CloseError(f"{p}: not an ailedger store")
    for c in closed_periods(p):
        if c.start < span[1] and span[0] < c.end:
            raise CloseError(f"{label} overlaps the closed period {c.period} (closed at data version "
                             f"{c.data_version}); reopen it first")
    for _ in range(PINNED_TRIES):
        rep = computed_report(p, config_path, span)
        _add_corrections(p, rep)
        gaps = [g for g in rep["gaps"] if g["what"] in BLOCKING_GAPS]
        if gaps and not accept_gaps:
            listed = "; ".join(f"{g['what']}: {g['detail']}" for g in gaps[:5])
            raise CloseError(f"{label} is not complete, not closed: {len(gaps)} coverage gap(s): {listed}. Complete "
                             "the data or close with --accept-gaps (recorded with the close)")
        cfg = pinned_config(p, config_path, rep["data_version"])
        text = jsonout.dumps(rep, indent=2, default=str)
        meta = json.dumps({"gaps": gaps, "timezone": cfg.period.timezone}, sort_keys=True)
        row = [label, span[0], span[1], meta, rep["data_version"], datetime.now(timezone.utc),
               user if user is not None else store.os_user(), accept_gaps,
               sha256(cfg.model_dump_json()), text]
        if _record(p, row, rep["data_version"]):
            return next(c for c in closed_periods(p) if c.start == span[0] and c.end == span[1])
    raise CloseError(f"{p}: ingests kept committing while {label} was being closed; try again")


def insert_close(con: duckdb.DuckDBPyConnection, row: list[Any]) -> None:
    """The closes row, inside the caller's transaction (nothing is closed until it commits)."""
    nxt = store.first_row(con, "SELECT coalesce(max(id), 0) + 1 FROM closes")
    assert nxt is not None
    con.execute(f"INSERT INTO closes ({_CLOSE_COLS[:-len(', reopened_at')]}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [int(nxt[0]), *row])


def _record(p: Path, row: list[Any], version: int) -> bool:
    """Write the close row in one transaction if the store is still at `version` (False: it moved)."""
    with store.connect(p, read_only=False) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            if audit.version_in(con) != version:
                con.execute("ROLLBACK")
                return False
            insert_close(con, row)
            con.execute("COMMIT")
            return True
        except BaseException:
            store.rollback(con)
            raise


def reopen(db_path: str | Path, label: str, why: str, *, user: str | None = None) -> Closed:
    """Reopen a closed period (recorded: when, by whom, why). Its report is computed again from then on."""
    if not why.strip():
        raise CloseError("reopen needs --why: the reason is kept with the close")
    p = Path(db_path)
    found = [c for c in closed_periods(p) if c.period == label]
    if not found:
        raise CloseError(f"{label} is not a closed period of {p}")
    with store.connect(p, read_only=False) as con:
        con.execute("UPDATE closes SET reopened_at = ?, reopened_by = ?, reopen_why = ? WHERE id = ?",
                    [datetime.now(timezone.utc), user if user is not None else store.os_user(), why, found[0].id])
    return found[0]


def history(db_path: str | Path) -> list[dict[str, Any]]:
    """Every close, reopened ones too, with the reopening's who and why (the Data page, `close --list`)."""
    with store.connect(db_path) as con:
        if not store.has_table(con, "closes"):
            return []
        rows = con.execute('SELECT period, data_version, closed_at, "user", accept_gaps, reopened_at, reopened_by, '
                           "reopen_why FROM closes ORDER BY start, id").fetchall()
    return [{"period": r[0], "data_version": int(r[1]), "closed_at": iso(r[2]), "user": r[3],
             "accept_gaps": bool(r[4]), "reopened_at": None if r[5] is None else iso(r[5]), "reopened_by": r[6],
             "why": r[7]} for r in rows]


# ------------------------------------------------------------------------------ late ingests


@dataclass
class LateHook:
    """Runs inside an ingest's transaction (store.ingest(before_commit=...)): records the config
    the ingest came with, finds the closed periods its new or replaced rows touch, and refuses
    the ingest (`no_late`) or records them in late_ingests with the instant their corrections
    post at (the end of the last closed period: the first open period's first instant)."""

    config_text: str | None = None
    no_late: bool = False
    touched: list[Closed] = field(default_factory=list)
    ingest_id: int | None = None

    def __call__(self, con: duckdb.DuckDBPyConnection, result: store.IngestResult) -> None:
        self.ingest_id = result.ingest_id
        if self.config_text is not None:
            con.execute("INSERT INTO configs VALUES (?, ?, ?)",
                        [result.ingest_id, sha256(self.config_text), self.config_text])
        closes = _closes(con)
        self.touched = [c for c in closes if _touches(con, result.ingest_id, c)]
        if not self.touched:
            return
        if self.no_late:
            raise LateRefused("ingest refused, nothing written: it changes the closed period(s) "
                              + ", ".join(c.period for c in self.touched)
                              + " and late data is refused (--no-late); reopen the period or ingest without --no-late")
        post_at = max(c.end for c in closes)
        for c in self.touched:
            con.execute("INSERT INTO late_ingests VALUES (?, ?, ?)", [result.ingest_id, c.id, iso(post_at)])


def refuses_late(db_path: str | Path | None, cfg: Config | None = None) -> bool:
    """Whether late data is refused by a config rule: `[close] late = "refuse"` in `cfg` (the
    ingest's) or in the config beside the store."""
    if cfg is not None and cfg.close.late == "refuse":
        return True
    beside = Path(db_path).with_suffix(".toml") if db_path is not None else None
    if beside is None or not beside.is_file():
        return False
    try:
        return load_config(beside).close.late == "refuse"
    except ConfigError:  # a broken config beside the store is reported by the commands that use it
        return False


def _touches(con: duckdb.DuckDBPyConnection, ingest_id: int, c: Closed) -> bool:
    """Whether ingest `ingest_id` wrote or replaced a row whose span overlaps the closed period."""
    q = store.quote
    for t in TABLE_NAMES:
        if not store.has_table(con, t):
            continue
        span = SPANS.get(t)
        if span is None:
            cond = "TRUE"
        else:
            lo = q(span[0])
            if t in POINTS:  # a sample or request at lo (a usage bucket: [lo, hi))
                hi = f"coalesce({q(span[1])}, {lo})" if span[1] else lo
                cond = f"{lo} < $e AND ({hi} > $s OR {lo} >= $s)"
            else:  # [lo, hi); an unknown bound is open (a running allocation has no end yet)
                cond = f"({lo} IS NULL OR {lo} < $e) AND ({q(str(span[1]))} IS NULL OR {q(str(span[1]))} > $s)"
        for table, col in ((t, "_ingest_id"), (store.SUPERSEDED + t, "_valid_to")):
            if not store.has_table(con, table):
                continue
            bound = {"i": ingest_id} if span is None else {"i": ingest_id, "s": c.start, "e": c.end}
            row = store.first_row(con, f"SELECT count(*) FROM (SELECT 1 FROM {q(table)} WHERE {col} = $i AND "
                                       f"{cond} LIMIT 1)", bound)
            if row and row[0]:
                return True
    return False


def _late_rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    if not store.has_table(con, "late_ingests"):
        return []
    return con.execute(
        'SELECT l.ingest_id, l.close_id, l.post_to, i.ingested_at, i."user", i.source FROM late_ingests l '
        "JOIN ingests i ON i.id = l.ingest_id ORDER BY l.close_id, l.ingest_id").fetchall()


def _stored_effects(con: duckdb.DuckDBPyConnection) -> dict[tuple[int, int], dict[str, tuple[float, float]]]:
    out: dict[tuple[int, int], dict[str, tuple[float, float]]] = {}
    if not store.has_table(con, "late_effects"):
        return out
    for i, c, owner, after, amount in con.execute(
            "SELECT ingest_id, close_id, owner, cost_after, amount FROM late_effects").fetchall():
        out.setdefault((int(i), int(c)), {})[owner] = (float(after), float(amount))
    return out


def _costs_at(p: Path, closed: Closed, version: int) -> dict[str, float]:
    """Owner costs of the closed period computed at data `version` under the rules it was closed with."""
    span = (closed.start, closed.end)
    if version == audit.current_version(p):
        return owner_costs(computed_report(p, None, span))
    return owner_costs(as_of_report(p, version, None, span, corrections=False))


def effects(p: Path, closed: Closed) -> list[dict[str, Any]]:
    """Each late ingest of a closed period with its effect per owner: the owner's cost of the
    period after that ingest less its cost before it (the closed figures, or the previous late
    ingest's). Stored figures are used where post_effects stored them; the rest computed."""
    with store.connect(p) as con:
        rows = [r for r in _late_rows(con) if int(r[1]) == closed.id]
        stored = _stored_effects(con)
    before = owner_costs(json.loads(closed.report))
    out = []
    for ingest_id, _cid, post_to, at, user, source in rows:
        got = stored.get((int(ingest_id), closed.id))
        after = {o: a for o, (a, _amt) in got.items()} if got else _costs_at(p, closed, int(ingest_id))
        owners = sorted(set(before) | set(after))
        amounts = {o: after.get(o, 0.0) - before.get(o, 0.0) for o in owners}
        out.append({"data_version": int(ingest_id), "at": iso(at), "user": user, "source": source,
                    "posted_at": post_to, "amount": _cents(sum(amounts.values())),
                    "owners": [{"owner": o, "amount": _cents(amounts[o]), "cost_after": after.get(o, 0.0)}
                               for o in owners]})
        before = after
    return out


def _cents(v: float) -> float:
    """A difference of sums, rounded off at 1e-9 so float dust does not show as a change."""
    return round(v, 9) + 0.0


def after_close(p: Path, closed: Closed) -> list[dict[str, Any]]:
    """The report's `after_close`: each later change of the closed period with its `amount` and
    its effect on every owner."""
    return [e | {"owners": _moved(e)} for e in effects(p, closed)]


def _moved(e: dict[str, Any]) -> list[dict[str, Any]]:
    """The owners a late change moved, with the amount (owners it left alone are not listed)."""
    return [{"owner": o["owner"], "amount": o["amount"]} for o in e["owners"] if o["amount"] != 0]


def post_effects(db_path: str | Path, hook: LateHook) -> list[dict[str, Any]]:
    """After a late ingest committed: compute its effect on each closed period it touched and keep
    it (late_effects), so reports need not compute it again. Returns, per period, what the
    ingest's output prints: the period, the amount, the owners and where it posts."""
    p = Path(db_path)
    out = []
    for c in hook.touched:
        mine = [e for e in effects(p, c) if e["data_version"] == hook.ingest_id]
        if not mine:
            continue
        e = mine[0]
        with store.connect(p, read_only=False) as con:
            con.execute("DELETE FROM late_effects WHERE ingest_id = ? AND close_id = ?", [hook.ingest_id, c.id])
            for o in e["owners"]:  # every owner, moved or not: the next change is measured from these
                con.execute("INSERT INTO late_effects VALUES (?, ?, ?, ?, ?)",
                            [hook.ingest_id, c.id, o["owner"], o["cost_after"], o["amount"]])
        out.append({"period": c.period, **e, "owners": _moved(e)})
    return out


def corrections_in(p: Path, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The corrections posted in [start, end): each late change of a closed period whose posting
    instant lies inside, per owner (`closed_period`, `data_version`, `owner`, `amount`)."""
    out = []
    for c in closed_periods(p):
        for e in effects(p, c):
            at = datetime.fromisoformat(e["posted_at"].replace("Z", "+00:00"))
            if start <= at < end:
                out += [{"closed_period": c.period, "closed_start": iso(c.start), "closed_end": iso(c.end),
                         "data_version": e["data_version"], "owner": o["owner"], "amount": o["amount"]}
                        for o in _moved(e)]
    return out


def _add_corrections(p: Path, rep: dict, upto: int | None = None) -> None:
    """`corrections` and `corrections_total` of the report's period, when the store has closed
    periods; as of data version `upto`: those of the late ingests up to it, when there were any."""
    start = datetime.fromisoformat(rep["period"]["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(rep["period"]["end"].replace("Z", "+00:00"))
    if not closed_periods(p):
        return  # a store that never closed a period reports as before
    if upto is not None:
        with store.connect(p) as con:
            if not any(int(r[0]) <= upto for r in _late_rows(con)):
                return
    rows = [r for r in corrections_in(p, start, end) if upto is None or r["data_version"] <= upto]
    rep["corrections"] = rows
    rep["corrections_total"] = _cents(sum(r["amount"] for r in rows))


def focus_corrections(rep: dict, billing_account: str = "gpu-fleet") -> Any:
    """FOCUS rows for the corrections posted in a report's period: ChargeClass "Correction", one per
    closed period, late ingest and owner, billed in this period (BillingPeriod*) for the closed
    one (ChargePeriod*), so they sum to the late effect (`corrections_total`)."""
    import polars as pl

    from .exporters.focus_charges import PROVIDER

    per = rep["period"]
    ts = pl.Datetime("us", "UTC")

    def t(s: str) -> datetime:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))

    start, end = t(per["start"]), t(per["end"])
    rows = []
    for r in rep.get("corrections") or []:
        tenant = None if r["owner"] in (IDLE, UNATTRIBUTED) else r["owner"]
        rows.append({
            "BilledCost": r["amount"], "EffectiveCost": r["amount"], "ListCost": r["amount"],
            "ContractedCost": r["amount"], "BillingAccountId": billing_account,
            "BillingAccountName": "GPU fleet chargeback", "BillingCurrency": per["currency"],
            "BillingPeriodStart": start, "BillingPeriodEnd": end, "ChargeCategory": "Usage",
            "ChargeClass": "Correction", "ChargeFrequency": "Usage-Based",
            "ChargeDescription": f"correction of the closed period {r['closed_period']}: late data of "
                                 f"data version {r['data_version']}",
            "ChargePeriodStart": t(r["closed_start"]), "ChargePeriodEnd": t(r["closed_end"]),
            "InvoiceId": f"{billing_account}-{start:%Y%m%d}-{end:%Y%m%d}", "InvoiceIssuerName": PROVIDER,
            "PricingCategory": "Standard", "ProviderName": PROVIDER, "PublisherName": PROVIDER,
            "HostProviderName": PROVIDER, "ServiceProviderName": PROVIDER,
            "ServiceCategory": "AI and Machine Learning", "ServiceName": "GPU Fleet Shared Costs",
            "SubAccountId": r["owner"], "SubAccountName": r["owner"], "x_Tenant": tenant,
            "x_IdleCause": "idle" if r["owner"] == IDLE else None, "x_DataVersion": r["data_version"],
        })
    schema = {"BillingPeriodStart": ts, "BillingPeriodEnd": ts, "ChargePeriodStart": ts, "ChargePeriodEnd": ts}
    return pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None) if rows else pl.DataFrame()


def closes_table(db_path: str | Path) -> Any:
    """The Data page's list: every close (reopened ones too) with its late changes: how many,
    their amount in all, and the data versions that brought them."""
    import polars as pl

    p = Path(db_path)
    live = {c.period: c for c in closed_periods(p)}
    rows = []
    for h in history(p):
        c = live.get(h["period"]) if h["reopened_at"] is None else None
        late = effects(p, c) if c is not None else []
        rows.append({"period": h["period"], "state": "reopened" if h["reopened_at"] else "closed",
                     "data_version": h["data_version"], "closed_at": h["closed_at"], "closed_by": h["user"],
                     "gaps_accepted": h["accept_gaps"], "late_changes": len(late),
                     "late_amount": _cents(sum(e["amount"] for e in late)),
                     "late_versions": ", ".join(str(e["data_version"]) for e in late),
                     "reopened_at": h["reopened_at"], "reopened_by": h["reopened_by"], "why": h["why"]})
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
