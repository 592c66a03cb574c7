"""Oracles for the property tests: figures summed from the raw input tables in plain Python, one
row at a time, never from the engine's frames (`comp.inputs`, `comp.money`, `comp.seg`...), so a
wrong formula in the engine cannot agree with itself (issue 25).

They read what the contract says an input is worth: a cost row pro rata to its overlap with the
period; a rate's price x the capacity-hours of its pool's cards in service inside its window; and
measured energy (facility kWh x the tariff in force, else the flat price) wherever no shared power
cost row of the card's pool, or of the whole fleet, is in force.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl

from cost_engine import power_limits
from cost_engine.contract import DEFAULT_DRIVER

J_PER_KWH = 3_600_000.0


def _h(a: datetime, b: datetime) -> float:
    """Hours of [a, b), 0 when empty."""
    return max(0.0, (b - a).total_seconds() / 3600)


def _rows(bundle, table: str) -> list[dict]:
    return bundle[table].to_dicts() if table in bundle.tables else []


def _period(config) -> tuple[datetime, datetime]:
    return config.period.start, config.period.end


def _in_service(card: dict, p0: datetime, p1: datetime) -> tuple[datetime, datetime]:
    return max(card.get("in_service_start") or p0, p0), min(card.get("in_service_end") or p1, p1)


def cost_rows_input(bundle, config) -> float:
    """Each cost row in the boundary: its amount x its overlap with the period / its span."""
    p0, p1 = _period(config)
    total = 0.0
    for r in _rows(bundle, "costs"):
        if r["category"] not in config.boundary.included:
            continue
        overlap = (min(r["end"], p1) - max(r["start"], p0)).total_seconds()
        if overlap > 0:
            total += r["amount"] * overlap / (r["end"] - r["start"]).total_seconds()
    return total


def rates_input(bundle, config) -> float:
    """Each rate in the boundary: its price x the capacity-hours of its pool's cards in service
    inside its window and the period."""
    p0, p1 = _period(config)
    total = 0.0
    cards = _rows(bundle, "inventory")
    for r in _rows(bundle, "rates"):
        if r["category"] not in config.boundary.included:
            continue
        s, e = max(r["start"] or p0, p0), min(r["end"] or p1, p1)
        for c in cards:
            if c["pool"] == r["pool"]:
                c0, c1 = _in_service(c, p0, p1)
                total += r["price_per_gpu_hour"] * c["capacity"] * _h(max(s, c0), min(e, c1))
    return total


def sample_joules(samples: list[dict], max_gap_s: float, max_w: float = math.inf,
                  ratio: float = math.inf) -> list[tuple[datetime, datetime, float | None]]:
    """One card's samples (sorted by time) as (start, end, joules): a sample stands for the time
    to the next one, capped at max_gap_s; its joules are the counter's delta when the next sample
    is within the cap, the delta is not negative and believable, else power x time, else unknown.

    Believable (docs/engine.md, "Energy counters are checked"), with the readings at most the
    card's ceiling `max_w` (a reading above it is used nowhere): delta / dt at most max_w and at
    most `ratio` x the larger reading, and not below the smaller one / `ratio` where that one is
    above 50 W and dt at least 30 s."""
    out = []
    cap = timedelta(seconds=max_gap_s)
    for i, s in enumerate(samples):
        nxt = samples[i + 1] if i + 1 < len(samples) else None
        end = min(nxt["ts"], s["ts"] + cap) if nxt else s["ts"] + cap
        dt = (end - s["ts"]).total_seconds()
        if dt <= 0:
            continue
        uncapped = nxt is not None and nxt["ts"] <= s["ts"] + cap
        power = s.get("power_w") if s.get("power_w") is not None and s["power_w"] <= max_w else None
        delta = None
        if uncapped and s.get("energy_j") is not None and nxt.get("energy_j") is not None:
            delta = nxt["energy_j"] - s["energy_j"]
        believed = delta is not None and delta >= 0
        if believed:
            refs = [p for p in (power, nxt.get("power_w")) if p is not None and p <= max_w]
            implied = delta / dt
            high = implied > max_w or bool(refs and max(refs) > 0 and implied > max(refs) * ratio)
            low = bool(refs) and dt >= 30 and min(refs) > 50 and implied / min(refs) * ratio < 1
            believed = not (high or low)
        if believed:
            joules = delta
        elif power is not None:
            joules = power * dt
        else:
            joules = None
        out.append((s["ts"], end, joules))
    return out


def _price_at(tariffs: list[dict], t: datetime, flat: float) -> float:
    for r in tariffs:
        if r["start"] <= t < r["end"]:
            return r["price_per_kwh"]
    return flat


def measured_energy_input(bundle, config) -> float:
    """Facility energy of every inventory card in service in the period, at the tariff in force
    when drawn (the flat price where none is), wherever no shared power cost row of its pool or of
    the fleet is in force. A sample's joules are spread evenly over its time."""
    if "power" not in config.boundary.included:
        return 0.0
    p0, p1 = _period(config)
    factor = config.energy.server_overhead * config.energy.pue / J_PER_KWH
    tariffs = _rows(bundle, "tariffs")
    bills = [r for r in _rows(bundle, "costs") if r["category"] == "power" and r["owner"] is None]
    by_card: dict[str, list[dict]] = {}
    for s in sorted(_rows(bundle, "telemetry"), key=lambda s: (s["gpu_id"], s["ts"])):
        by_card.setdefault(s["gpu_id"], []).append(s)
    # The ceilings are a configured look-up (power_limits), not what this oracle checks.
    inv = _rows(bundle, "inventory")
    ceiling = dict(power_limits.ceilings(pl.DataFrame(
        [{k: c.get(k) for k in ("gpu_id", "pool", "accelerator", "capacity")} for c in inv],
        schema={"gpu_id": pl.String, "pool": pl.String, "accelerator": pl.String, "capacity": pl.Float64}),
        config.energy).iter_rows()) if inv else {}
    total = 0.0
    for card in inv:
        c0, c1 = _in_service(card, p0, p1)
        covering = [(max(b["start"], p0), min(b["end"], p1)) for b in bills if b["pool"] in (None, card["pool"])]
        for t0, t1, joules in sample_joules(by_card.get(card["gpu_id"], []), config.activity.max_sample_gap_s,
                                            ceiling.get(card["gpu_id"], math.inf), config.energy.counter_power_ratio):
            a, b = max(t0, c0), min(t1, c1)
            if joules is None or b <= a:
                continue
            # Cut [a, b) where a tariff or a power bill starts or ends: each piece has one price.
            edges = sorted({a, b, *(x for r in tariffs for x in (r["start"], r["end"]) if a < x < b),
                            *(x for span in covering for x in span if a < x < b)})
            for u, v in zip(edges, edges[1:]):
                if any(s <= u < e for s, e in covering):
                    continue
                part = joules * (v - u).total_seconds() / (t1 - t0).total_seconds()
                total += part * factor * _price_at(tariffs, u, config.energy.flat_price_per_kwh)
    return total


def input_cost(bundle, config) -> float:
    """The reconciliation's input side, from the raw tables."""
    return cost_rows_input(bundle, config) + rates_input(bundle, config) + measured_energy_input(bundle, config)


def assert_input_reconciles(rep: dict, bundle, config) -> None:
    """The report's input cost is the raw tables' own, and attributed + idle + unattributed is it."""
    import pytest

    rc = rep["reconciliation"]
    expected = input_cost(bundle, config)
    assert rc["input_cost"] == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert rc["attributed"] + rc["idle"] + rc["unattributed"] == pytest.approx(expected, rel=1e-9, abs=1e-6)


def capacity_prices(bundle, config, pool: str, t: datetime) -> float:
    """The price per capacity-hour in force in `pool` at instant t: every rate of the pool, and
    every shared cost row spread by capacity_hours (its own driver or its category's) of the
    pool or the fleet: its amount inside the period / the capacity-hours of its scope's cards in
    its span inside the period (rows with no such hours are kept whole in idle, on no card)."""
    p0, p1 = _period(config)
    cards = _rows(bundle, "inventory")
    price = 0.0
    for r in _rows(bundle, "rates"):
        if r["pool"] == pool and (r["start"] or p0) <= t < (r["end"] or p1) and r["category"] in config.boundary.included:
            price += r["price_per_gpu_hour"]
    for r in _rows(bundle, "costs"):
        driver = r["driver"] or dict(config.allocation.drivers).get(r["category"]) or DEFAULT_DRIVER.get(r["category"], "gpu_hours")
        s, e = max(r["start"], p0), min(r["end"], p1)
        if (r["owner"] is not None or driver != "capacity_hours" or r["pool"] not in (None, pool) or not s <= t < e
                or r["category"] not in config.boundary.included):
            continue
        hours = sum(c["capacity"] * _h(max(s, _in_service(c, p0, p1)[0]), min(e, _in_service(c, p0, p1)[1]))
                    for c in cards if r["pool"] is None or c["pool"] == r["pool"])
        if hours > 0:
            price += r["amount"] * (e - s) / (r["end"] - r["start"]) / hours
    return price


def idle_by_cause(bundle, config, step: timedelta) -> tuple[dict[str, float], dict[str, float]]:
    """Unallocated hours and cost by cause, one time step at a time (every edge of the bundle must
    fall on the grid): free capacity = capacity x (1 - shares held, at least 0), at the capacity
    prices in force then; the cause is the first match of degraded hardware, maintenance (events
    on the card, its node or its pool), a quota wait, a resources wait (in its pool), else no
    demand."""
    p0, p1 = _period(config)
    allocs, events, queue = _rows(bundle, "allocations"), _rows(bundle, "events"), _rows(bundle, "queue")
    hours: dict[str, float] = {}
    cost: dict[str, float] = {}
    for c in _rows(bundle, "inventory"):
        t = p0
        while t < p1:
            held = sum(a["share"] for a in allocs if a["gpu_id"] == c["gpu_id"] and a["start"] <= t < a["end"])
            free = c["capacity"] * max(0.0, 1.0 - held) * step.total_seconds() / 3600
            if free > 0:

                def event(kind, t=t):
                    return any(e["kind"] == kind and e["start"] <= t < e["end"]
                               and (e["gpu_id"] == c["gpu_id"] or e["node"] == c["node"] or e["pool"] == c["pool"])
                               for e in events)

                def waiting(reason, t=t):
                    return any(w["reason"] == reason and w["pool"] == c["pool"] and w["submit"] <= t < (w["start"] or p1)
                               for w in queue)

                cause = ("degraded_hardware" if event("degraded_hardware") else "maintenance" if event("maintenance")
                         else "quota" if waiting("quota") else "fragmentation" if waiting("resources") else "no_demand")
                hours[cause] = hours.get(cause, 0.0) + free
                cost[cause] = cost.get(cause, 0.0) + free * capacity_prices(bundle, config, c["pool"], t)
            t += step
    return hours, cost
