"""Test helpers: tiny hand-made bundles and configs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from cost_engine.bundle import Bundle
from cost_engine.config import parse_config
from cost_engine.contract import make_frame

DAY0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
DAY1 = datetime(2026, 10, 2, tzinfo=timezone.utc)


def ts(day: int, hour: float = 0) -> str:
    """ISO timestamp on 2026-09-`day`/10-`day` at `hour` (fractional hours allowed), UTC."""
    h = int(hour)
    m = int(round((hour - h) * 60))
    month, d = (9, day) if day >= 20 else (10, day)
    return f"2026-{month:02d}-{d:02d}T{h:02d}:{m:02d}:00Z"


def make_bundle(**tables: list[dict]) -> Bundle:
    return Bundle.from_frames({name: make_frame(name, rows) for name, rows in tables.items()})


def make_config(**sections) -> object:
    data = {"period": {"start": DAY0, "end": DAY1}}
    for k, v in sections.items():
        if isinstance(v, dict):
            data.setdefault(k, {}).update(v)
        else:
            data[k] = v
    return parse_config(data)


def stop_process(proc, timeout: float = 20) -> None:
    """Stop a server a test started: terminate, and kill it if it does not exit in time."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


EVENT_KINDS = ["degraded_hardware", "maintenance", "network_bottleneck", "storage_bottleneck", "data_loading"]


def draw_event(draw, span, at, n_cards: int, nodes: Sequence[str], pools: Sequence[str]) -> dict:
    """A Hypothesis-drawn event on a card, a node or a pool over `span` (property tests)."""
    from hypothesis import strategies as st  # only the property tests need Hypothesis

    start, dur = draw(span)
    scope = draw(st.sampled_from(["gpu_id", "node", "pool"]))
    value = {"gpu_id": f"g{draw(st.integers(0, n_cards - 1))}", "node": draw(st.sampled_from(nodes)),
             "pool": draw(st.sampled_from(pools))}[scope]
    return {"start": at(start), "end": at(start + dur), scope: value, "kind": draw(st.sampled_from(EVENT_KINDS))}
