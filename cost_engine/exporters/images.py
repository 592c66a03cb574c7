"""Figures to PNG / SVG (kaleido 1.x driving Debian's Chromium) and to self-contained HTML.

Kaleido 1.x renders through a headless Chromium it finds with choreographer; we point it at
Debian's browser: `AILEDGER_CHROMIUM`, else `BROWSER_PATH`, else `/usr/bin/chromium`. No
browser is ever downloaded. MathJax is off (it would be fetched from a CDN) and plotly.js
comes from the installed plotly package, so rendering works offline.

Each call starts one Chromium for the whole batch (about two seconds), behind a lock so
concurrent callers (Streamlit runs download callables on worker threads) never share a
browser session; results are memoised per (figure, format, size).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go

DEFAULT_CHROMIUM = "/usr/bin/chromium"
WIDTH, HEIGHT, SCALE = 1100, 520, 2.0
RENDER_TIMEOUT_S = 120.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_lock = threading.Lock()
_memo: OrderedDict[str, bytes] = OrderedDict()
_MEMO_MAX = 64


class ExportError(RuntimeError):
    """A figure could not be rendered (no browser, a render error or a timeout)."""


def chromium_path() -> str | None:
    """The browser kaleido drives, or None when there is none on this machine."""
    for candidate in (os.environ.get("AILEDGER_CHROMIUM"), os.environ.get("BROWSER_PATH"), DEFAULT_CHROMIUM):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def unavailable_reason() -> str | None:
    """Why PNG/SVG export cannot run here, in the user's words (None: it can)."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "kaleido, a dependency of ailedger, is missing from this install (reinstall ailedger)"
    if chromium_path() is None:
        return (f"no Chromium browser on the server (install Debian's chromium at {DEFAULT_CHROMIUM}, "
                "or set AILEDGER_CHROMIUM to one)")
    return None


def available() -> bool:
    """True when PNG/SVG export can run here (kaleido installed and a Chromium found)."""
    return unavailable_reason() is None


def _key(fig: go.Figure, fmt: str, width: int, height: int, scale: float) -> str:
    h = hashlib.sha256(fig.to_json().encode("utf-8"))
    h.update(f"|{fmt}|{width}|{height}|{scale}".encode())
    return h.hexdigest()


def _render_batch(figs: Sequence[go.Figure], fmt: str, width: int, height: int, scale: float) -> list[bytes]:
    try:
        import kaleido
    except ImportError as exc:  # pragma: no cover - kaleido is a core dependency
        raise ExportError("kaleido, a dependency of ailedger, is missing from this install (reinstall ailedger)") from exc
    path = chromium_path()
    if path is None:
        raise ExportError(f"no Chromium found (set AILEDGER_CHROMIUM or install Debian's chromium at {DEFAULT_CHROMIUM})")

    async def run() -> list[bytes]:
        out: list[bytes] = []
        async with kaleido.Kaleido(n=1, timeout=RENDER_TIMEOUT_S, mathjax=False, path=path) as k:
            for fig in figs:
                opts = {"format": fmt, "width": width, "height": height, "scale": scale}
                out.append(await k.calc_fig(fig, opts=opts))
        return out

    for attempt in range(2):
        result: list[list[bytes]] = []
        error: list[BaseException] = []

        def target() -> None:
            try:
                result.append(asyncio.run(run()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                error.append(exc)

        # A fresh thread owns the event loop, so callers inside a running loop work too.
        t = threading.Thread(target=target, name="ailedger-kaleido", daemon=True)
        t.start()
        t.join(RENDER_TIMEOUT_S + 30 * len(figs))
        if t.is_alive():
            raise ExportError("rendering timed out")
        # kaleido can call into its page before the page's script has defined its scopes (a
        # start-up race seen once in CI on a busy machine): a fresh browser renders it.
        if error and attempt == 0 and "kaleido_scopes is not defined" in str(error[0]):
            continue
        break
    if error:
        raise ExportError(f"rendering failed: {error[0]}") from error[0]
    return result[0]


def render(figs: Sequence[go.Figure], fmt: str = "png", *, width: int = WIDTH, height: int = HEIGHT,
           scale: float = SCALE) -> list[bytes]:
    """Render several figures in one browser session; `fmt` is png or svg."""
    if fmt not in ("png", "svg"):
        raise ValueError(f"unsupported image format {fmt!r}")
    sc = scale if fmt == "png" else 1.0
    keys = [_key(f, fmt, width, height, sc) for f in figs]
    with _lock:
        missing = [i for i, k in enumerate(keys) if k not in _memo]
        if missing:
            rendered = _render_batch([figs[i] for i in missing], fmt, width, height, sc)
            for i, data in zip(missing, rendered):
                _memo[keys[i]] = data
                while len(_memo) > _MEMO_MAX:
                    _memo.popitem(last=False)
        out = []
        for k in keys:
            _memo.move_to_end(k)
            out.append(_memo[k])
    return out


def to_png(fig: go.Figure, *, width: int = WIDTH, height: int = HEIGHT, scale: float = SCALE) -> bytes:
    return render([fig], "png", width=width, height=height, scale=scale)[0]


def to_svg(fig: go.Figure, *, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    return render([fig], "svg", width=width, height=height)[0]


def to_html(fig: go.Figure, *, title: str | None = None) -> str:
    """A self-contained HTML page (plotly.js inlined, works offline). `title` may be chart text
    (a figure's own title, its names escaped by charts.label): it is unescaped once, then
    escaped for the page's <title>, so a name shows as written there too, and stays inert."""
    html = fig.to_html(include_plotlyjs=True, full_html=True, config={"displaylogo": False})
    if title:
        import html as _html

        html = html.replace("<head>", f"<head><title>{_html.escape(_html.unescape(title))}</title>", 1)
    return html
