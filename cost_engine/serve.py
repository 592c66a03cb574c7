"""`ailedger serve`: find the dashboard that ships with the package and build the Streamlit
command that serves it on a store or bundle folder (this module never imports Streamlit)."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

DEFAULT_PORT = 8501
# Loopback by default: the header access mode trusts its headers, so only the reverse proxy
# in front may reach the server (docs/deploy.md).
DEFAULT_HOST = "127.0.0.1"
DASHBOARD_MODULE = "ailedger_dashboard.app"

NO_SOURCE_HELP = """\
ailedger serve needs the data to show: a DuckDB store or a bundle folder.

  ailedger serve ledger.duckdb          a store made by `ailedger ingest BUNDLE --db ledger.duckdb`
  ailedger serve exports/fleet-week     a bundle folder (allocations.csv, costs.csv, ... and ailedger.toml)

Options: --port N (default 8501; 0 lets the system choose, the printed URL says which),
--host ADDRESS (default 127.0.0.1), --access FILE (who sees which tenants: docs/access.md),
--trusted-proxy ADDR (the proxy's address: needed to listen beyond loopback with the header mode)."""


class ServeError(ValueError):
    """The source, the access file or the installation cannot be served."""


@dataclass(frozen=True)
class ServeCommand:
    """What to execute: the Streamlit command line and its environment."""

    argv: list[str]
    env: dict[str, str]


def dashboard_app() -> Path:
    """app.py of the installed dashboard: the wheel's copy, or the checkout's under an editable install.

    Located through the import system without running it (the package `ailedger_dashboard` is
    app.py, pages/ and .streamlit/config.toml, mapped from the top of the repository).
    """
    try:
        spec = importlib.util.find_spec(DASHBOARD_MODULE)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise ServeError("the dashboard is not installed with this ailedger: reinstall the package "
                         "(pip install ailedger-*.whl, or `make setup` in a checkout)")
    return Path(spec.origin)


def check_source(source: str | Path) -> tuple[Path, str]:
    """The absolute source path and its kind ("store" or "bundle folder"); ServeError when unusable.

    The config found with it (ailedger.toml in the folder, FILE.toml beside the store) is
    validated here, so a broken config stops the command instead of every page.
    """
    from . import api, store
    from .config import ConfigError, load_config

    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise ServeError(f"{source}: no such file or folder")
    if path.is_dir():
        kind = "bundle folder"
    elif store.is_store(path):
        kind = "store"
        try:
            with store.connect(path, wait_s=0):  # a damaged file stops here, not on every page
                pass
        except store.StoreBusy:
            pass  # an ingest in progress: the dashboard waits for it
        except store.StoreError as exc:
            raise ServeError(str(exc)) from None
    else:
        raise ServeError(f"{source}: not an ailedger store (make one with `ailedger ingest BUNDLE --db FILE`) "
                         "nor a bundle folder")
    try:
        load_config(api.find_config(path, None))
    except ConfigError as exc:
        raise ServeError(str(exc)) from None
    return path, kind


def check_access(access_file: str | Path) -> Path:
    """The absolute access file path, once it parses (docs/access.md); ServeError otherwise."""
    from .access import AccessError, load_access

    path = Path(access_file).expanduser().resolve()
    try:
        load_access(path)
    except AccessError as exc:
        raise ServeError(str(exc)) from None
    return path


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is this machine only."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ip_address(host.strip("[] ")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def check_exposure(host: str, access_file: Path | None, trusted_proxies: tuple[str, ...] = (),
                   environ: dict[str, str] | None = None) -> None:
    """ServeError for a non-loopback `host` with the header access mode and no trusted proxy named.

    The header mode believes the identity headers of whoever connects: beyond loopback anyone
    who reaches the port could send `X-Forwarded-Groups: finance`. With a trusted proxy named
    (--trusted-proxy or `trusted_proxies` in the access file) the dashboard refuses every other
    peer (access.RequestGate), so the port may listen beyond loopback.
    """
    from .access import TRUSTED_PROXIES_ENV, AccessConfig, AccessError, load_access, with_trusted_proxies

    env = dict(os.environ if environ is None else environ)
    named = ",".join([*trusted_proxies, env.get(TRUSTED_PROXIES_ENV, "")])
    try:
        with_trusted_proxies(AccessConfig(), {TRUSTED_PROXIES_ENV: named})
    except AccessError as exc:
        raise ServeError(f"--trusted-proxy: {exc}") from None
    if is_loopback(host):
        return
    path = access_file if access_file is not None else env.get("AILEDGER_ACCESS")
    try:
        cfg = with_trusted_proxies(load_access(path) if path else AccessConfig(), {TRUSTED_PROXIES_ENV: named})
    except AccessError as exc:
        raise ServeError(f"--host {host}: {exc}") from None
    if cfg.mode == "header" and not cfg.trusted_proxies:
        raise ServeError(
            f"--host {host} with the header access mode: anyone who reaches the port could send "
            f"{cfg.groups_header} or {cfg.user_header} and be whoever they claim. Listen on loopback "
            f"(--host {DEFAULT_HOST}, the default) behind the proxy, or name the proxy with "
            "--trusted-proxy ADDR (or trusted_proxies in the access file): requests from any other "
            "address are then refused")


def serve_command(source: Path, *, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST,
                  access_file: Path | None = None, trusted_proxies: tuple[str, ...] = (),
                  environ: dict[str, str] | None = None) -> ServeCommand:
    """`python -m streamlit run <installed app.py>` on source, with the dashboard's variables set.

    The dashboard reads its source from AILEDGER_SOURCE and the access file from AILEDGER_ACCESS
    (an AILEDGER_ACCESS already in the environment stays unless --access is given), and the
    proxies named with --trusted-proxy from AILEDGER_TRUSTED_PROXIES (added to the file's). Streamlit
    takes .streamlit/config.toml from beside app.py; the flags only fix what a server needs.
    """
    env = dict(os.environ if environ is None else environ)
    env["AILEDGER_SOURCE"] = str(source)
    if access_file is not None:
        env["AILEDGER_ACCESS"] = str(access_file)
    if trusted_proxies:
        env["AILEDGER_TRUSTED_PROXIES"] = ",".join(trusted_proxies)
    # The URL line (with the port the server bound) must reach a log or pipe at once.
    env["PYTHONUNBUFFERED"] = "1"
    argv = [
        sys.executable, "-m", "streamlit", "run", str(dashboard_app()),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        # An installed tool's files do not change under it: no watcher threads or inotify handles.
        "--server.fileWatcherType", "none",
    ]
    return ServeCommand(argv=argv, env=env)
