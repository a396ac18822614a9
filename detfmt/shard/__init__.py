"""Sharded datasets (format 1.1, docs/spec-sharding.md): manifest, packed shards, global order.

Modules: ``manifest`` (the only source of truth), ``pack`` (one file per shard), ``order`` (the
elastic epoch order), ``errors``. Nothing here imports torch, ray or fsspec.
"""
