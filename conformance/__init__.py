"""The detfmt 1.0 conformance suite: golden datasets, expected outputs and a reader-agnostic runner.

See conformance/README.md for the command protocol and the canonical dump.
"""
