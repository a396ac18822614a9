"""The version of the detfmt package (one place; the package face and the writer read it)."""

__version__ = "0.1.0"
