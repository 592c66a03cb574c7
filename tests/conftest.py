"""pytest set-up shared by every test module."""

import os

from hypothesis import settings

# CI runs the same examples every time (a red CI run must mean a change broke something);
# developers' runs stay random and keep exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")
