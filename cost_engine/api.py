"""One entry point for the CLI and the dashboard: a bundle folder or a store file in, a Computation out."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from . import overlaps
from .bundle import Bundle, read_bundle
from .config import Config, load_config
from .engine import Computation, compute
from .telemetry import StoreTelemetry, TelemetrySource

CONFIG_NAME = "ailedger.toml"


def find_config(source: str | Path, config_path: str | Path | None) -> Path | None:
    """The config to use: the one given, else `ailedger.toml` inside a bundle folder or beside a store."""
    if config_path is not None:
        return Path(config_path)
    p = Path(source)
    # "." and ".." have no name to put a suffix on: their absolute, normalised form does (a
    # folder given as "." looks where the same folder given by name would); "/" has none at all.
    named = Path(os.path.abspath(p))
    beside = (named.with_suffix(".toml"),) if named.name else ()
    for candidate in (p / CONFIG_NAME, *beside):
        if candidate.is_file() and candidate != named:
            return candidate
    return None


def load_source(source: str | Path, config: Config) -> tuple[Bundle, TelemetrySource | None]:
    """Read a bundle folder, or an ailedger DuckDB store: (bundle, telemetry source).

    From a store every table but telemetry and requests is loaded: the telemetry stays in the
    store and the engine reads it window by window through the returned source; the requests
    stay there too (`Bundle.held_rows`) and the engine reads them in batches. From a folder the
    bundle holds everything and the source is None (the engine reads the bundle's frames).
    """
    from . import store
    from .contract import TABLE_NAMES

    p = Path(source)
    if not p.is_file():
        return read_bundle(p, config), None
    if not store.is_store(p):
        raise store.StoreError(store.describe_file(p))
    held = ("telemetry", "requests")
    bundle = store.load_bundle(p, tables=[t for t in TABLE_NAMES if t not in held], held=held)
    return overlaps.check_bundle(bundle, config), StoreTelemetry(p)


def run(source: str | Path, config_path: str | Path | None = None, config: Config | None = None,
        memo: dict | None = None, now: datetime | None = None) -> Computation:
    """Compute everything for a source under a config (explicit object, file, or discovered).

    `memo`: kept by the caller for one data version of the source; `now`: the report time
    future-dated rows are judged by (engine.compute)."""
    if config is None:
        config = load_config(find_config(source, config_path))
    bundle, telemetry = load_source(source, config)
    return compute(bundle, config, telemetry=telemetry, memo=memo, now=now)
