"""What every page shares: which data source is open and its cached computation."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from cost_engine import api
from cost_engine.report import build_report

DEFAULT_SOURCE = "sample_data/fleet-week"


def source_path() -> str:
    """The store or bundle the dashboard shows: AILEDGER_SOURCE, else the sample bundle."""
    return os.environ.get("AILEDGER_SOURCE", DEFAULT_SOURCE)


def _version(path: str) -> float:
    p = Path(path)
    if p.is_dir():
        return max((f.stat().st_mtime for f in p.iterdir()), default=0.0)
    return p.stat().st_mtime if p.exists() else 0.0


@st.cache_resource(show_spinner="Computing the ledger…", max_entries=4)
def _computation(path: str, version: float):
    return api.run(path)


@st.cache_data(show_spinner=False, max_entries=8)
def _report(path: str, version: float) -> dict:
    return build_report(_computation(path, version))


def computation():
    path = source_path()
    return _computation(path, _version(path))


def report() -> dict:
    path = source_path()
    return _report(path, _version(path))
