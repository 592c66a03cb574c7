"""ailedger dashboard: the st.navigation router and the sidebar every page shares."""

import streamlit as st

st.set_page_config(page_title="ailedger", page_icon=":material/receipt_long:", layout="wide")

pages = [
    st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("pages/scenario.py", title="Scenario", icon=":material/calculate:"),
]
st.navigation(pages).run()
