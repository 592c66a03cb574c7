"""ailedger cost engine: bundles in, reports out."""

# The one place the version is written: the wheel's metadata (pyproject's dynamic version),
# `ailedger --version` and the dashboard's footer all read it from here.
__version__ = "0.1.0"
