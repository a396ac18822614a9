#!/usr/bin/env python
"""The peers of tools/bench_remote.py: MosaicML Streaming (MDS) and LitData, in their own venv.

Run by bench_remote.py with ``--peers-python`` (a venv holding ``mosaicml-streaming`` and
``litdata``; they pin their own numpy and torch, so they do not go into detfmt's venv):

    PY prepare EXPORT OUT SHARD_BYTES         # MDS in OUT/mds, LitData in OUT/lit
    PY epoch PEER SOURCE CACHE SEED [EPOCHS]  # seconds per epoch, JSON on one line

Both peers read the same JPEG bytes and labels that detfmt stores (exported by bench_remote.py
as one pickle of bytes and lists), decode each JPEG with Pillow, and shuffle. ``SOURCE`` is
``s3://bucket/prefix`` (the capped loopback store, S3 path style: ``S3_ENDPOINT_URL`` /
``storage_options``) or a local directory (their local-disk figure).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import time

import numpy as np


def prepare(export: str, out: str, shard_bytes: int) -> None:
    from litdata.streaming.writer import BinaryWriter
    from streaming import MDSWriter

    with open(export, "rb") as f:
        samples = pickle.load(f)  # [(jpeg bytes, boxes as a flat float list, classes list)]
    cols = {"image": "bytes", "boxes": "bytes", "classes": "bytes"}
    with MDSWriter(out=os.path.join(out, "mds"), columns=cols, size_limit=shard_bytes) as w:
        for image, boxes, classes in samples:
            w.write({"image": image, "boxes": np.asarray(boxes, np.float32).tobytes(),
                     "classes": np.asarray(classes, np.int64).tobytes()})
    writer = BinaryWriter(os.path.join(out, "lit"), chunk_bytes=shard_bytes)
    for i, (image, boxes, classes) in enumerate(samples):
        writer.add_item(i, {"image": image, "boxes": np.asarray(boxes, np.float32).tobytes(),
                            "classes": np.asarray(classes, np.int64).tobytes()})
    writer.done()
    writer.merge()


def _decode(item: dict) -> np.ndarray:
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(item["image"])).convert("RGB"))
    np.frombuffer(item["boxes"], np.float32)
    return image


def dataset(peer: str, source: str, cache: str, seed: int):
    remote = source.startswith("s3://")
    if peer == "mds":
        from streaming import StreamingDataset

        if remote:
            return StreamingDataset(remote=source, local=cache, shuffle=True, shuffle_seed=seed,
                                    batch_size=32)
        return StreamingDataset(local=source, shuffle=True, shuffle_seed=seed, batch_size=32)
    from litdata import StreamingDataset
    from litdata.streaming.resolver import Dir

    if remote:
        # LitData fetches chunks with obstore, which refuses a plain-HTTP endpoint unless told
        # (a "builder error"); the loopback store is plain HTTP. Nothing else is changed.
        import litdata.streaming.downloader as downloader

        downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS,
                                              "allow_http": "true"}
        opts = {"endpoint_url": os.environ["S3_ENDPOINT_URL"],
                "aws_access_key_id": "k", "aws_secret_access_key": "s"}
        return StreamingDataset(Dir(path=cache, url=source), shuffle=True, seed=seed,
                                storage_options=opts)
    return StreamingDataset(source, shuffle=True, seed=seed)


def epoch(peer: str, source: str, cache: str, seed: int, epochs: int) -> None:
    __import__("streaming" if peer == "mds" else "litdata")  # imports are not timed
    t = time.perf_counter()
    ds = dataset(peer, source, cache, seed)
    times = []
    for _ in range(epochs):
        n = 0
        for item in ds:
            _decode(item)
            n += 1
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
    print(json.dumps({"seconds": times, "samples": n}), flush=True)


def main() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "k")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "s")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    what = sys.argv[1]
    if what == "prepare":
        prepare(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        epoch(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
              int(sys.argv[6]) if len(sys.argv) > 6 else 1)


if __name__ == "__main__":
    main()
