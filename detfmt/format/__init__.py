"""SPEC.md as code: one module per artefact, decode and encode side by side.

No engines here: these modules import nothing of detfmt but `detfmt.errors` and each other.
"""
