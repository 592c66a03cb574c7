"""The pipeline: a validated bundle and a config in, every frame the report and the dashboard read out."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import polars as pl

from . import activity, allocation, future, idle, power_limits, quarter_activity, token_sources, tokens
from .bundle import Bundle, release_pages, spill_folder
from .config import Config
from .contract import IDLE, TS
from .ledger import Ledger, Period, build_ledger, cards_frame, clip, mig_over_parent, resolve_period
from .ownership import Ownership
from .tariffs import Bands
from .telemetry import FrameTelemetry, TelemetrySource

J_PER_KWH = 3_600_000.0
# The [energy] keys the telemetry stage reads (what an energy counter may claim): part of its memo key.
_COUNTER_RULES = ("max_power_w_by_pool", "max_power_w_by_accelerator", "unknown_max_power_w", "counter_power_ratio")
# Requests of a bundle frame resolved per slice (as a store's are per batch).
REQUEST_SLICE_ROWS = 250_000
# Above this many requests the resolved ones are spilled to memory-mapped files.
SPILL_REQUESTS_ABOVE = 1_000_000


@dataclass
class Computation:
    """Everything computed for one (bundle, config): the report and drill-downs read from here."""

    config: Config
    period: Period
    ledger: Ledger
    ownership: Ownership
    seg: pl.DataFrame  # enriched segments (see enrich_segments)
    money: pl.DataFrame  # final destination of every dollar (allocation.MONEY_SCHEMA)
    money_spread: pl.DataFrame  # after the drivers, before idle chargeback and recharge
    money_before_recharge: pl.DataFrame  # after idle chargeback, before inference recharge
    inputs: pl.DataFrame  # input side of the reconciliation
    cost_rates: pl.DataFrame  # per cost and rate row: price per driver unit while in force (lineage)
    requests: pl.DataFrame  # requests in the period, resolved (`fslot`: their allocation.request_slots slot)
    # The requests summed per tokens.SUMMARY_KEYS, with `slot` (the project_slots slot of their
    # fslot): what the spread, the recharge, the by-model table and the report read.
    request_summary: pl.DataFrame
    request_hours: pl.DataFrame  # (model, tenant, hour): the UTC hours with requests (tokens.busy_hours)
    # Where two request sources count one model's hours: tokens per overlap and source, billed or
    # a check (token_sources.reconciliation); the check rows are not in `requests`.
    token_reconciliation: pl.DataFrame
    models: pl.DataFrame  # by_model table
    idle: pl.DataFrame  # idle pieces with cause (s_idx, kind, cause, gpu_hours, idle_frac, energy_kwh_gpu)
    card_energy: pl.DataFrame  # per card and quarter hour (UTC): joules of the samples starting there
    telemetry: TelemetrySource  # where raw samples are read from (card timelines)
    allocations: pl.DataFrame  # allocations in the period, resolved
    # What each caller key that maps to no project paid for inference, per model (source, key,
    # model, amount); in `money` those callers are one unattributed line per model row.
    unmapped_callers: pl.DataFrame
    bundle: Bundle
    rejected: pl.DataFrame
    gaps: list[tuple[str, str]] = field(default_factory=list)
    # The tenants a computation was scoped to (access.scope); None: the whole fleet. A scoped
    # one's records are read from its own bundle, never the store (which holds every row whole).
    scoped_to: frozenset[str] | None = None


def _edges(frame: pl.DataFrame, key: str | None, start: str, end: str) -> pl.DataFrame:
    """(key, t): both edges of each row's [start, end)."""
    k = [key] if key else []
    return pl.concat([frame.select(*k, pl.col(c).cast(TS).alias("t")) for c in (start, end)]).drop_nulls("t")


def card_cuts(bundle: Bundle, cards: pl.DataFrame, config: Config, period: Period, sampled: pl.Series) -> pl.DataFrame:
    """(gpu_id, t): where each card's ledger is cut beyond its allocations and the days.

    - Every card, at the events scoped to it or to its node: an event then covers a segment
      wholly or not at all (records x cards per node).
    - Cards with telemetry (`sampled`) also at their pool's events and quota/resources waits,
      and at the edges of the rates and shared cost rows of their pool or the fleet: inside a
      segment activity and energy are not spread evenly over time, so an idle cause's or a
      price's share of what the card did needs the cut. Such a card already has a sample every
      minute or so, so these cuts are fewer than its samples.

    Nothing else cuts a card: a queue wait, a pool's event or a cost row meets a card without
    telemetry by the share of the segment's time it overlaps (idle.classify,
    allocation.spread_costs), exact because such a segment's hours and prices are known at
    every instant without it.
    """
    ev = bundle["events"]
    parts = [_edges(ev.filter(pl.col("gpu_id").is_not_null()), "gpu_id", "start", "end")]
    by_node = _edges(ev.filter(pl.col("node").is_not_null()), "node", "start", "end").unique()
    parts.append(by_node.join(cards.select("gpu_id", "node"), on="node").select("gpu_id", "t"))
    if sampled.len():
        q = bundle["queue"].filter(pl.col("reason").is_in(list(idle.QUEUE_CAUSES))).with_columns(
            pl.col("start").fill_null(pl.lit(period.end, dtype=TS))
        )
        # Every shared cost row and rate, whatever the boundary and the drivers: the ledger (and so
        # the telemetry stage) then stays the same when only those rules change, and a dashboard
        # rule change reuses it (`memo` in compute). A cut where no price changes changes no figure
        # (tests/test_interval_property.py, tests/test_rule_memo.py).
        p0, p1 = pl.lit(period.start, dtype=TS), pl.lit(period.end, dtype=TS)
        c = bundle["costs"].with_columns(
            pl.max_horizontal("start", p0).alias("cs"), pl.min_horizontal("end", p1).alias("ce")
        ).filter(pl.col("owner").is_null() & (pl.col("ce") > pl.col("cs")))
        r = bundle["rates"]
        by_pool = pl.concat(
            [
                _edges(ev.filter(pl.col("pool").is_not_null()), "pool", "start", "end"),
                _edges(q, "pool", "submit", "start"),
                _edges(c.filter(pl.col("pool").is_not_null()), "pool", "cs", "ce"),
                _edges(r, "pool", "start", "end"),
            ]
        ).unique()
        sampled_cards = cards.filter(pl.col("gpu_id").is_in(sampled.implode())).select("gpu_id", "pool")
        parts.append(by_pool.join(sampled_cards, on="pool").select("gpu_id", "t"))
        fleet = _edges(c.filter(pl.col("pool").is_null()), None, "cs", "ce").unique()
        parts.append(sampled_cards.select("gpu_id").join(fleet, how="cross"))
    p0, p1 = pl.lit(period.start, dtype=TS), pl.lit(period.end, dtype=TS)
    return pl.concat([p.select("gpu_id", pl.col("t").cast(TS)) for p in parts]).filter(
        (pl.col("t") > p0) & (pl.col("t") < p1)
    )


def future_rows(bundle: Bundle, now: datetime) -> list[future.FutureRows]:
    """The future-dated rows of every table, those left in a store (telemetry, requests) read there."""
    found = future.scan_tables({t: f for t, f in bundle.tables.items() if t not in bundle.held_rows}, now)
    if bundle.store is not None:
        from . import store

        found += [f for t in future.TABLES if t in bundle.held_rows
                  and (f := store.future_rows(bundle.store, t, now)) is not None]
    order = {t: i for i, t in enumerate(future.TABLES)}
    return sorted(found, key=lambda f: order[f.table])


def compute(bundle: Bundle, config: Config, telemetry: TelemetrySource | None = None,
            memo: dict | None = None, now: datetime | None = None) -> Computation:
    """Everything for one bundle under one config.

    `telemetry` is where samples are read from when they are not in the bundle (the store:
    see telemetry.StoreTelemetry); by default the bundle's own telemetry table. `memo`: a dict
    the caller keeps for one version of the data (the dashboard, per data version); the ledger
    and the telemetry stage are kept there and reused by a later call that changes only rules
    they do not read (boundary, drivers, idle treatment, recharge, token weights, SLO).
    `now`: the report time future-dated rows are judged by (future.py; default the wall clock).
    """
    now = future.clock(now)
    # A store keeps the future-dated notes of its ingests; they are judged again at this `now`.
    gaps: list[tuple[str, str]] = [g for g in bundle.notes if g[0] != future.WHAT]
    gaps += future.gaps(future_rows(bundle, now), now)
    rejected = [bundle.rejected.select("table", "row", "reason")]
    period = resolve_period(config, bundle["allocations"], now)
    own = Ownership.from_tables(bundle["owners"], bundle["aliases"])
    if own.identity:
        gaps.append(("ownership", "no owners or aliases tables: owner keys are used as project and tenant ids"))
    for p in own.tenants_without_owner_row():
        gaps.append(("ownership", f"project {p!r} appears only in aliases; its tenant is unknown"))

    cards, has_inventory = cards_frame(
        bundle["inventory"], bundle["allocations"], period,
        has_inventory="inventory" in bundle.present or bundle["inventory"].height > 0,
    )
    if not has_inventory:
        gaps.append(("inventory", "no inventory table: available capacity, unallocated time and rates are unknown"))
    for r in mig_over_parent(bundle["inventory"], cards).iter_rows(named=True):
        itself = " and its own inventory row" if r["listed"] else ""
        gaps.append(("MIG over capacity", f"{r['parent']}: its {r['n']} MIG instance{'' if r['n'] == 1 else 's'}{itself} "
                     f"hold {r['capacity']:.4g} cards of capacity at once from {r['t']:%Y-%m-%d %H:%M}Z, more than "
                     "the one physical card; available hours count them as given"))
    alloc = clip(bundle["allocations"], "start", "end", period.start, period.end)
    if has_inventory:
        unknown = alloc.join(cards.select("gpu_id"), on="gpu_id", how="anti")
        unknown = unknown.join(bundle["inventory"].select("gpu_id"), on="gpu_id", how="anti")
        if unknown.height:
            rejected.append(
                unknown.select(
                    pl.lit("allocations").alias("table"),
                    pl.lit(None, dtype=pl.Int64).alias("row"),
                    (pl.lit("allocation ") + pl.col("allocation_id") + pl.lit(": gpu_id ") + pl.col("gpu_id")
                     + pl.lit(" is not in the inventory")).alias("reason"),
                )
            )
            alloc = alloc.join(unknown.select("allocation_id"), on="allocation_id", how="anti")

    source = telemetry if telemetry is not None else FrameTelemetry(bundle["telemetry"])
    # The ledger and the telemetry stage depend on the data, the period, the activity rule, the
    # flat energy price and how telemetry is read, nothing else of the config (card_cuts): the key
    # of what `memo` keeps. (The period with its time zone, which cuts the days, and its
    # currency, which the ledger keeps.)
    key = ("telemetry stage", period, config.activity.model_dump_json(), config.energy.flat_price_per_kwh,
           config.engine.rollup, config.energy.model_dump_json(include=set(_COUNTER_RULES)))
    held = memo.get(key) if memo is not None else None
    rollup = None
    if held is not None:
        ledger = held[0]
    else:
        with source.reader() as r:
            if config.engine.rollup == "auto":
                rollup = r.rollup(config.activity)
            since = period.start - timedelta(seconds=config.activity.max_sample_gap_s)
            if quarter_activity.usable(rollup, config.activity, period.start, period.end):
                assert rollup is not None
                sampled = quarter_activity.sampled_cards(rollup, since, period.end, reader=r)
            else:
                sampled = r.cards(since, period.end)
        ledger = build_ledger(cards, has_inventory, alloc, period, card_cuts(bundle, cards, config, period, sampled))
    for row in (
        ledger.conflicts.group_by("gpu_id")
        .agg(
            (pl.col("t1") - pl.col("t0")).dt.total_seconds().sum().alias("s"),
            pl.col("share_sum").max(),
            pl.col("t0").min(),
        )
        .sort("gpu_id")
        .iter_rows(named=True)
    ):
        gaps.append(
            ("over-allocation",
             f"{row['gpu_id']}: shares sum to {row['share_sum']:g} for {row['s'] / 3600:.2f} h from {row['t0']:%Y-%m-%d %H:%M}Z; split pro rata")
        )

    multi = (
        alloc.filter(pl.col("job_id").is_not_null())
        .group_by("job_id")
        .agg(pl.col("gpu_id").n_unique().alias("n"))
        .filter(pl.col("n") > 1)
    )
    jobs = (
        ledger.segments.filter(pl.col("allocation_id").is_not_null())
        .select("e_idx", "allocation_id")
        .join(alloc.select("allocation_id", "job_id"), on="allocation_id")
        .join(multi.select("job_id"), on="job_id")
        .select("e_idx", "job_id")
        .unique()
    )
    ceilings = power_limits.ceilings(cards, config.energy)
    bands = (Bands.of(bundle["tariffs"], config.energy.flat_price_per_kwh) if bundle["tariffs"].height
             else Bands.flat(config.energy.flat_price_per_kwh))
    if held is not None:
        ta = held[1]
    else:
        ta = activity.interval_activity(source, ledger.intervals, config.activity, period.start, period.end, jobs,
                                        known=cards["gpu_id"], bands=bands, rollup=rollup, ceilings=ceilings,
                                        ratio=config.energy.counter_power_ratio)
        if memo is not None:
            memo[key] = (ledger, ta)
    del rollup  # hundreds of MB at fleet scale, and nothing after the telemetry stage reads it
    if ta.outside:
        gaps.append(("telemetry", f"{ta.outside} samples of cards outside the inventory or out of service ignored"))
    if ta.undecided is not None and ta.undecided.height:
        first = ", ".join(f"{r['gpu_id']} {datetime.fromtimestamp(r['q'] * 900, timezone.utc):%Y-%m-%d %H:%M}Z"
                          for r in ta.undecided.head(5).iter_rows(named=True))
        gaps.append(("telemetry rollup", f"{ta.undecided.height} card quarter hours need raw samples the store does "
                     f"not hold (a ledger or tariff edge inside, or an undecided multi-card job): their activity "
                     f"and energy are spread by time, e.g. {first}"))
    act, oversized = ta.per_interval, ta.oversized
    has_telemetry = ta.samples > 0
    if has_telemetry:
        for r in ta.resets.head(10).iter_rows(named=True):
            # The drop shows in the sample at t_end; the interval priced by power x time starts at ts.
            gaps.append(("energy counter reset", f"{r['gpu_id']} at {r['t_end']:%Y-%m-%d %H:%M:%S}Z: the counter "
                         f"went down since the {r['ts']:%H:%M:%S}Z sample; that interval uses power x time"))
        gaps += power_limits.gap_lines(ta.implausible, ceilings, config.energy.counter_power_ratio)
    else:
        gaps.append(("telemetry", "no telemetry: active hours, utilization and energy are unknown"))

    allocs = own.resolve(alloc.select("allocation_id", "owner", "source", "workload", "job_id", "model", "gpu_id",
                                      "start", "end", "share", "requested_gpus"))
    seg = enrich_segments(ledger, act, allocs, bands, config, oversized)
    # The slots the tokens, requests, shares and even drivers spread over (days and those rows' edges).
    slots = allocation.project_slots(bundle["costs"], period, config)
    # Requests are resolved against the finest slots any boundary and drivers can make, so they
    # depend on the data, the period, the token weights and the SLO only: what `memo` keeps
    # them (and their summary) under. A boundary or driver change maps the summary's slots.
    fine = allocation.request_slots(bundle["costs"], period)
    rkey = ("requests", period, config.allocation.token_weights.model_dump_json(), config.slo.model_dump_json(),
            tuple(fine["g0"].to_list()), config.validation.token_source_order, config.validation.token_overlap)
    held_req = memo.get(rkey) if memo is not None else None
    if held_req is not None:
        req, summary, hours, recon, plan = held_req
    else:
        in_store = "requests" in bundle.held_rows and bundle.store is not None
        if in_store:
            from . import store  # requests left in the store: read in batches, resolved batch by batch

            cov = store.request_coverage(bundle.store, period.start, period.end)
            raw = store.request_batches(bundle.store, period.start, period.end)
        else:  # in the same batches: resolving millions at once holds several copies
            cov = token_sources.coverage(bundle["requests"], period)
            raw = bundle["requests"].iter_slices(REQUEST_SLICE_ROWS)
        # Two sources counting one model's hours (gateway logs and vLLM counters) bill once.
        plan = token_sources.plan(cov, config, period)
        recon_parts: list[pl.DataFrame] = []
        n_requests = bundle.held_rows.get("requests", bundle["requests"].height)
        parts: list[pl.DataFrame] = []
        hour_parts: list[pl.DataFrame] = []
        with contextlib.ExitStack() as stack:
            # Millions of resolved requests live in memory-mapped spill files, like a big bundle's
            # tables: resident only while scanned (bundle.release_pages), not all the time.
            spill = stack.enter_context(spill_folder()) if n_requests > SPILL_REQUESTS_ABOVE else None

            def keep(batch: pl.DataFrame) -> pl.DataFrame:
                batch, rec = token_sources.split(batch, plan)  # rows another source bills: a check only
                recon_parts.append(rec)
                # Each batch is summed while it is in memory, before it is spilled.
                parts.append(tokens.summarize(batch))
                hour_parts.append(tokens.busy_hours(batch))
                return spill(batch) if spill is not None else batch

            req = tokens.prepare_requests(raw, period, config, own.resolve, fine, keep=keep)
        del raw
        release_pages()  # a big bundle's requests are mapped from the reader's spill: done with them
        summary = tokens.merge_summaries(parts) if parts else tokens.summarize(req)
        hours = pl.concat(hour_parts).unique() if hour_parts else tokens.busy_hours(req)
        recon = token_sources.reconciliation(recon_parts)
        if memo is not None:
            memo[rkey] = (req, summary, hours, recon, plan)
    gaps += token_sources.gaps(recon, plan)
    to_slot = allocation.coarse_slots(fine, slots)
    summary = summary.with_columns(
        pl.lit(to_slot).gather(pl.col("fslot")).alias("slot") if to_slot.len()
        else pl.lit(None, dtype=pl.Int64).alias("slot"))
    no_latency = int(summary["no_latency"].sum())
    if no_latency:
        gaps.append(("latency missing", f"{no_latency} requests without ttft or latency count as meeting the SLO"))
    weights = summary.select("slot", "project", "tenant", "owner", "source", "tokens_w", "requests")

    spread = allocation.spread_costs(
        seg, bundle["costs"], bundle["rates"], weights, slots, period, config, own.resolve
    )
    release_pages()  # the spread scanned the requests' weights (mapped pages when spilled)
    gaps += spread.gaps
    money = spread.money
    if config.allocation.idle == "proportional":
        money = charge_idle_to_owners(money, seg)
    money_before = money
    recharged = tokens.recharge(money, summary, config)
    money = recharged.money
    gaps += recharged.gaps
    models, mgaps = tokens.model_table(money_before, seg, summary, config)
    gaps += mgaps
    idle_pieces = idle.classify(seg, bundle["events"], bundle["queue"], period, ledger.cards, spread.cost_rates)

    coverage_gap = seg.filter(pl.col("allocation_id").is_not_null()).select(
        (pl.col("alloc_h") - pl.col("covered_h")).sum()
    ).item()
    if coverage_gap and coverage_gap > 1e-9 and has_telemetry:
        gaps.append(("telemetry coverage", f"{coverage_gap:.2f} allocated GPU-hours have no telemetry (neither active nor idle)"))
    no_energy = seg.filter((pl.col("covered_h") > 0) & (pl.col("energy_s") < pl.col("covered_s") - 1e-6))
    if no_energy.height:
        cards_no_e = no_energy["gpu_id"].unique().sort()
        gaps.append(("energy unknown", f"{cards_no_e.len()} cards report no power or energy counter for some samples: "
                     + ", ".join(cards_no_e.head(5).to_list())))

    return Computation(
        config=config, period=period, ledger=ledger, ownership=own, seg=seg, money=money,
        money_spread=spread.money, money_before_recharge=money_before, inputs=spread.inputs, cost_rates=spread.cost_rates,
        requests=req, request_summary=summary, request_hours=hours, token_reconciliation=recon, models=models,
        idle=idle_pieces,
        card_energy=ta.card_energy, telemetry=source,
        allocations=allocs, unmapped_callers=recharged.unmapped, bundle=bundle,
        rejected=pl.concat(rejected), gaps=gaps,
    )


def enrich_segments(
    ledger: Ledger,
    act: pl.DataFrame,
    allocs: pl.DataFrame,
    bands: Bands,
    config: Config,
    oversized: pl.DataFrame,
) -> pl.DataFrame:
    """Segments with owners, driver quantities, energy, its cost at the tariffs in force
    (`energy_cost`, and `idle_energy_cost` for the joules drawn while inactive), its carbon
    (`carbon_g`) and whether a tariff gave a carbon intensity (`carbon_known`)."""
    e = config.energy
    seg = (
        ledger.segments.join(act, on="e_idx", how="left")
        .join(
            allocs.select("allocation_id", "owner", "source", "workload", "job_id", "model", "project", "tenant"),
            on="allocation_id",
            how="left",
        )
        .join(oversized, on=["e_idx", "job_id"], how="left")
        .with_columns(pl.col("over_s", "over_util_s", "over_j", "over_price_j").fill_null(0.0))
    )
    share = pl.col("capacity") * pl.col("eff") / 3600
    seg = seg.with_columns(
        pl.when(pl.col("allocation_id").is_not_null()).then(pl.col("cap_h")).otherwise(0.0).alias("alloc_h"),
        (share * pl.col("covered_s")).alias("covered_h"),
        pl.when(pl.col("allocation_id").is_not_null()).then(share * pl.col("active_s")).otherwise(0.0).alias("active_h"),
        pl.when(pl.col("allocation_id").is_not_null())
        .then(share * pl.col("util_s") / 100.0)
        .otherwise(0.0)
        .alias("util_h"),
        # Util-weighted hours of the inactive part (and of its oversized-request part): what money
        # spread by utilization paid for held idle time.
        pl.when(pl.col("allocation_id").is_not_null())
        .then(share * pl.col("idle_util_s") / 100.0)
        .otherwise(0.0)
        .alias("idle_util_h"),
        (share * pl.col("over_util_s") / 100.0).alias("oversized_util_h"),
        (pl.col("eff") * pl.col("joules")).alias("joules"),
        (pl.col("eff") * pl.col("idle_joules")).alias("idle_joules"),
        (share * pl.col("over_s")).alias("oversized_h"),
        (pl.col("eff") * pl.col("over_j")).alias("oversized_joules"),
    ).with_columns(
        (pl.col("joules") / J_PER_KWH).alias("kwh_gpu"),
        (pl.col("joules") / J_PER_KWH * e.server_overhead * e.pue).alias("kwh_fac"),
        # Price and carbon intensity apply to the facility energy drawn from the grid, band by band.
        (pl.col("eff") * pl.col("price_j") / J_PER_KWH * e.server_overhead * e.pue).alias("energy_cost"),
        # The part of it drawn while inactive: what held idle time cost in measured energy.
        (pl.col("eff") * pl.col("idle_price_j") / J_PER_KWH * e.server_overhead * e.pue).alias("idle_energy_cost"),
        # The part drawn while a sibling card of the job worked (the oversized-request cause).
        (pl.col("eff") * pl.col("over_price_j") / J_PER_KWH * e.server_overhead * e.pue).alias("oversized_energy_cost"),
        (pl.col("eff") * pl.col("carbon_j") / J_PER_KWH * e.server_overhead * e.pue).alias("carbon_g"),
    ).drop("price_j", "idle_price_j", "carbon_j", "over_price_j")
    return seg.with_columns(bands.carbon_known(seg["t0"], seg["t1"]).alias("carbon_known"))


def charge_idle_to_owners(money: pl.DataFrame, seg: pl.DataFrame) -> pl.DataFrame:
    """idle = proportional: each pool's idle cost onto the pool's allocations by allocated GPU-hours."""
    weights = (
        seg.filter(pl.col("allocation_id").is_not_null())
        .group_by("pool", "allocation_id", "day", "owner", "source", "project", "tenant", "model", "workload")
        .agg(pl.col("alloc_h").sum().alias("w"))
        .with_columns((pl.col("w") / pl.col("w").sum().over("pool")).alias("f"))
    )
    pools_with_owners = set(weights["pool"].drop_nulls().unique().to_list())
    # fill_null: a row without a pool is never movable (and must not vanish from ~movable).
    movable = ((pl.col("dest") == IDLE) & pl.col("pool").is_in(sorted(pools_with_owners))).fill_null(False)
    idle_pool = money.filter(movable).group_by("pool", "category", "origin", "driver").agg(pl.col("amount").sum())
    moved = (
        idle_pool.join(weights, on="pool")
        .with_columns((pl.col("amount") * pl.col("f")).alias("amount"), (pl.col("origin") + "+idle").alias("origin"))
    )
    moved = allocation.destination(moved)
    return pl.concat([money.filter(~movable), allocation._money_frame(moved)])
