"""Sharded roots (SPEC.md §19, format 1.1): a manifest naming packed shard files.

Modules: ``manifest`` (the only source of truth), ``pack`` (one file per shard), ``sharded``
(reading a root: one `ShardedDataset` over local and remote storage), ``write``/``append``/
``session`` (write-shard and commit), ``gc``, ``cache`` and ``remote``. The epoch order lives in
`detfmt.order` and the gather engine in `detfmt.reading.gather`, shared with 1.0 directories.
Nothing
here imports torch or ray; fsspec only for remote roots.
"""
