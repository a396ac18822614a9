"""The package version (not the format version: that is `detfmt.format.spec.FORMAT_VERSION`)."""

__version__ = "0.1.0"
