"""The read engine: member sources, `Dataset`, the gather engine, sharded and mixture
datasets, the shard cache, `open` and `verify`. Built on `detfmt.format`.
"""
