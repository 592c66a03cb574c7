"""pytest set-up shared by every test module."""

import os
from pathlib import Path

import pytest
from hypothesis import settings

# One Hypothesis setup for every run, a developer's and CI's alike: each test's examples are
# derived from the test itself (derandomize), no example database replays an old run's failures,
# and a failure prints the blob that reproduces it. The same commit therefore tests the same
# examples everywhere: a red run means a change broke something, never a lucky draw.
# Looking for new examples is an explicit choice: HYPOTHESIS_PROFILE=explore (docs/testing.md).
settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium; missing is a failure in CI and a skip elsewhere (never a download)."""
    if not Path(CHROMIUM).is_file():
        msg = f"Debian's Chromium is missing at {CHROMIUM} (make chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium):
    """One Playwright (sync API) per test process: two at once cannot share the event loop."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def comp():
    """The committed sample fleet, computed once per module."""
    from cost_engine import api
    from tests.dashboard_support import SAMPLE

    return api.run(SAMPLE)


@pytest.fixture(scope="module")
def rep(comp):
    from cost_engine.report import build_report

    return build_report(comp)
