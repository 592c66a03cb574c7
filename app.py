"""ailedger dashboard: the st.navigation router and the sidebar every page shares."""

import streamlit as st

from cost_engine import __version__
from pages.common import sidebar

st.set_page_config(page_title="ailedger", page_icon=":material/receipt_long:", layout="wide")

pages = {
    "Costs": [
        st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
        st.Page("pages/rankings.py", title="Rankings", icon=":material/leaderboard:", url_path="rankings"),
        st.Page("pages/idle.py", title="Idle", icon=":material/hourglass_empty:", url_path="idle"),
        st.Page("pages/energy.py", title="Energy", icon=":material/bolt:", url_path="energy"),
        st.Page("pages/unit_economics.py", title="Unit economics", icon=":material/payments:",
                url_path="unit_economics"),
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
page.run()
