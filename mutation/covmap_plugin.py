"""Pytest plugin for mutation/covered.py's map: names coverage's context after the running test.

Loaded with `-p covmap_plugin` under `coverage run`; each phase of a test (setup, call,
teardown) records its lines under `nodeid|phase`, and import time stays the empty context.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil

import coverage
import pytest


def pytest_sessionstart(session):
    """Every engine module imported under the empty context: a module first imported inside a
    test would otherwise put its import-time lines (constants, defaults) on that test alone."""
    import cost_engine

    for info in pkgutil.iter_modules(cost_engine.__path__):
        try:
            importlib.import_module(f"cost_engine.{info.name}")
        except ImportError:  # an optional dependency (Spark, NVML) absent here
            pass


def _switch(name: str) -> None:
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(name)


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Each test's time (setup + call + teardown), so a mutant's tests can run fastest first."""
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    out = os.environ.get("COVMAP_DURATIONS")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(_DURATIONS, f)


def _in_context(phase: str):
    """A hook wrapper that records the lines of one phase of a test under `nodeid|phase`."""

    @pytest.hookimpl(wrapper=True)
    def hook(item):
        _switch(f"{item.nodeid}|{phase}")
        try:
            return (yield)
        finally:
            _switch("")

    return hook


pytest_runtest_setup = _in_context("setup")
pytest_runtest_call = _in_context("call")
pytest_runtest_teardown = _in_context("teardown")
