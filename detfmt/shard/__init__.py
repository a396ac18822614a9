"""Operations on sharded roots (SPEC.md §19): writing shards and committing them (``write``,
``session``), ``append``, ``gc`` and ``remote`` (object-store roots).

The manifest and the packed-shard layout are defined in `detfmt.format` (``manifest``, ``pack``);
reading a sharded root is `detfmt.reading.sharded`, its shard cache `detfmt.reading.cache`.
Nothing here imports torch or ray; fsspec only for remote roots.
"""
