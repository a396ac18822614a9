"""The write engine: stream -> feed -> builder -> sink, with options, image preparation,
worker processes and cleanup. Built on `detfmt.format`.
"""
