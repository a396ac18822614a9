"""The detfmt conformance suite (formats 1.0 and 1.1): golden datasets, expected outputs, a runner.

See conformance/README.md for the command protocol and the canonical dump.
"""
