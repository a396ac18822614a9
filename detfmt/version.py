"""The package version (not the format version: that is `detfmt.spec.FORMAT_VERSION`)."""

__version__ = "0.1.0"
