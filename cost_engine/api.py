"""One entry point for the CLI and the dashboard: a bundle folder or a store file in, a Computation out."""

from __future__ import annotations

from pathlib import Path

from .bundle import Bundle, read_bundle
from .config import Config, load_config
from .engine import Computation, compute

CONFIG_NAME = "ailedger.toml"


def find_config(source: str | Path, config_path: str | Path | None) -> Path | None:
    """The config to use: the one given, else `ailedger.toml` inside a bundle folder or beside a store."""
    if config_path is not None:
        return Path(config_path)
    p = Path(source)
    for candidate in (p / CONFIG_NAME, p.with_suffix(".toml")):
        if candidate.is_file() and candidate != p:
            return candidate
    return None


def load_source(source: str | Path, config: Config) -> Bundle:
    """Read a bundle folder, or the contents of an ailedger DuckDB store."""
    from . import store

    p = Path(source)
    if p.is_file() and store.is_store(p):
        return store.load_bundle(p)
    return read_bundle(p, config)


def run(source: str | Path, config_path: str | Path | None = None, config: Config | None = None) -> Computation:
    """Compute everything for a source under a config (explicit object, file, or discovered)."""
    if config is None:
        config = load_config(find_config(source, config_path))
    return compute(load_source(source, config), config)
