"""Sample usage bundles: a deterministic synthetic GPU fleet (see generate.py and README.md)."""
