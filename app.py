"""ailedger dashboard: the st.navigation router and the sidebar every page shares.

`streamlit run app.py` (and `ailedger serve`) first imports this file to find the ASGI app
below (the access gate in front of Streamlit), then runs it as the script of every session:
the router.
"""

import os

import streamlit as st

if __name__ != "__main__":
    # Imported to be served: Streamlit behind cost_engine.access.RequestGate, which refuses a
    # request carrying an identity header twice and keeps /_stcore/metrics from anonymous users
    # when access is configured (AILEDGER_ACCESS).
    from starlette.middleware import Middleware

    from cost_engine.access import RequestGate

    app = st.App(__file__, middleware=[Middleware(RequestGate)])

    # Compute what the pages show on their defaults before the server answers, so no visitor
    # waits for a ledger and no visit competes with the warm-up for the interpreter
    # (pages.common.warm_up; the caches it fills are the pages' own). A source too big for
    # AILEDGER_WARM_WAIT_S seconds (default 30) does not hold the server back longer: it answers,
    # and the warm-up goes on beside the first visits.
    import threading

    def _warm() -> None:
        import sys
        from pathlib import Path

        here = str(Path(__file__).resolve().parent)
        if here not in sys.path:  # what Streamlit does for the script; this runs before it
            sys.path.insert(0, here)
        try:
            from pages.common import warm_up
        except ImportError:
            return
        warm_up()

    _warming = threading.Thread(target=_warm, name="ailedger-warm-up", daemon=True)
    _warming.start()
    try:
        _wait_s = float(os.environ.get("AILEDGER_WARM_WAIT_S", "30"))
    except ValueError:
        _wait_s = 30.0
    _warming.join(timeout=max(_wait_s, 0.0))
else:
    from pathlib import Path

    from cost_engine import __version__
    from pages.common import show_error, sidebar

    # The icon ships with the app (package data of the wheel): a Material icon name would make
    # every browser fetch it from a font host (nothing may leave the machine). Its bytes, not its
    # path: Streamlit serves them under /media/, where a path it cannot open would become the
    # link itself and show the server's install folder.
    _icon = Path(__file__).parent / "assets" / "favicon.png"
    st.set_page_config(page_title="ailedger", page_icon=_icon.read_bytes() if _icon.is_file() else None,
                       layout="wide")

    pages = {
        "Costs": [
            st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
            st.Page("pages/rankings.py", title="Rankings", icon=":material/leaderboard:", url_path="rankings"),
            st.Page("pages/idle.py", title="Idle", icon=":material/hourglass_empty:", url_path="idle"),
            st.Page("pages/energy.py", title="Energy", icon=":material/bolt:", url_path="energy"),
            st.Page("pages/unit_economics.py", title="Unit economics", icon=":material/payments:",
                    url_path="unit_economics"),
            st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
            st.Page("pages/budgets.py", title="Budgets", icon=":material/savings:", url_path="budgets"),
        ],
        "Setup": [
            st.Page("pages/data.py", title="Data", icon=":material/database:", url_path="data"),
            st.Page("pages/rules.py", title="Rules", icon=":material/rule:", url_path="rules"),
            st.Page("pages/scenario.py", title="Scenario", icon=":material/calculate:", url_path="scenario"),
        ],
    }
    page = st.navigation(pages)
    sidebar()
    # The footer: which ailedger this is (sidebar bottom, so it shows even when a page stops early).
    st.sidebar.caption(f"ailedger {__version__}")
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    from pages.sidebar import finish_link

    try:
        page.run()
    except StopException:
        finish_link()  # a page that stops early still links to what it shows
        raise
    except Exception as exc:  # noqa: BLE001 - st.stop / st.rerun are not Exceptions and pass through
        # No page ever shows a traceback: a message that says what to do, the details in the log.
        if os.environ.get("AILEDGER_DEBUG") == "1":
            raise
        show_error(exc, page.title)
    # "Copy link" shows the address bar's view, page keys set during this run included.
    finish_link()
