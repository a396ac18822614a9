"""Write a valid 1.0 dataset of N tiny samples in seconds, with numpy, for scaling benchmarks.

Every sample is a raw 1x1 image with one box; the files are built column by column (no per-sample
Python), then checked by ``detfmt.open`` (and, with ``--verify``, by ``detfmt.verify``). The
writer's own per-sample cost is measured elsewhere (tools/bench_write.py); this tool exists so
that "the first batch after open at N = 10M" can be measured without writing 10M samples through
it. Usage: python tools/synth_dataset.py OUT --samples 10000000
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import xxhash

from detfmt.format import spec
from detfmt.format.npy import encode_header


def _write(path: Path, header: bytes, body: np.ndarray) -> dict:
    digest = xxhash.xxh3_64()
    digest.update(header)
    with open(path, "wb") as f:
        f.write(header)
        flat = body.reshape(-1).view(np.uint8)
        for start in range(0, flat.size, 64 << 20):
            chunk = flat[start : start + (64 << 20)]
            f.write(chunk)
            digest.update(chunk)
    return {"size": path.stat().st_size, "xxh3_64": digest.hexdigest()}


def synthesize(out: Path, n: int) -> None:
    out.mkdir(parents=True)
    pixel = np.array([17, 99, 201], np.uint8)
    record = np.zeros(n, spec.INDEX_DTYPE)
    record["offset"] = np.arange(n, dtype=np.uint64) * np.uint64(spec.ALIGNMENT)
    record["nbytes"] = 3
    record["decoded_nbytes"] = 3
    record["checksum"] = xxhash.xxh3_64_intdigest(pixel.tobytes())
    record["height"] = 1
    record["width"] = 1
    record["channels"] = 3
    files, arrays = {}, {}
    blob = np.zeros((n, spec.ALIGNMENT), np.uint8)
    blob[:, :3] = pixel
    files[spec.BLOB_FILE] = _write(out / spec.BLOB_FILE, b"", blob)
    del blob
    columns = {
        spec.INDEX_FILE: record,
        spec.COUNTS_FILE: np.ones(n, "<i4"),
        spec.BOXES_FILE: np.tile(np.array([0, 0, 1, 1], "<f4"), (n, 1, 1)),
        spec.CLASSES_FILE: np.zeros((n, 1), "<i4"),
    }
    for name, array in columns.items():
        files[name] = _write(out / name, encode_header(array.dtype, array.shape), array)
        descr = np.lib.format.dtype_to_descr(array.dtype)
        arrays[name] = {"dtype": descr if isinstance(descr, str) else [list(f) for f in descr],
                        "shape": list(array.shape)}
    header = {
        "format": spec.FORMAT_NAME, "version": spec.FORMAT_VERSION, "num_samples": n,
        "max_boxes": 1, "classes": [{"name": "dot"}],
        "image": {"codecs": {"raw": n}, "fixed_shape": [1, 1, 3]},
        "files": dict(sorted(files.items())), "arrays": dict(sorted(arrays.items())),
        "writer": "tools/synth_dataset.py",
    }
    (out / spec.HEADER_FILE).write_bytes(json.dumps(header, indent=1).encode() + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--verify", action="store_true", help="run detfmt.verify on the result")
    args = parser.parse_args()
    synthesize(args.out, args.samples)
    import detfmt

    with detfmt.open(args.out) as ds:
        mib = sum(os.path.getsize(args.out / f) for f in os.listdir(args.out)) >> 20
        print(f"{args.out}: {len(ds)} samples, {mib} MiB")
    if args.verify:
        detfmt.verify(args.out)
        print("verified")


if __name__ == "__main__":
    main()
