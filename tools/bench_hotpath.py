"""Read-side hot paths (issue 15), each against a baseline measured in the same process, and
optionally the same measurements for several versions of detfmt in one interleaved run.

Cases (each a fresh child process per round, so first-use costs are real):

- ``getitem``: ``ds[i]`` of random samples (labels checked once) against a plain numpy read of the
  same sample (the image view, copies of its boxes, classes and image fields, its file name
  decoded); ratio ds[i] / numpy.
- ``labels``: the label share of ``ds.batch`` for 640 px raw photos with 0-100 boxes each: the
  time of the batch's label gather (``engine.labels(job)``: gather, re-pad, mask; ``ds.labels``
  where there is no engine) / ``ds.batch(idx, out=buffer)``, B = 32.
- ``verify``: ``detfmt.verify`` of those photos against XXH3-64 of ``images.bin`` through a fresh
  mapping (what any tool hashing the file pays); ratio xxh3 / verify (1.0 = hashing speed).
- ``verify_tiny``: microseconds per sample of ``verify`` on 100k 1x1 samples.
- ``first_batch``: milliseconds of the first ``ds.batch`` of 32 random samples after ``open`` of
  a 10M-sample dataset (import and open excluded), and of the second.
- ``loader``: the torch ``Loader`` over the photos, raw, 2 threads, against a 2-thread memcpy of
  as many bytes per batch from the same mapping, and 2 threads against 1 (best of 2 alternations
  of about 2 s each).
- ``batch``: ``ds.batch`` of 32 random photos (a new padded array each call, the default
  threads) against one ``np.copyto`` of as many image bytes from the mapping (best of 5
  alternating passes over 30 batches).
- ``ragged``: 100k samples with at most 5 boxes and one with 1000, written padded and ragged:
  label bytes (boxes, classes, counts) / valid-box bytes (20 per box) of each, and
  ``ds.labels`` of 201 batches of 32 (one holding the crowded sample), ragged / padded (best
  of 5 alternating passes each).

Usage:
    python tools/bench_hotpath.py [--rounds 5] [--work DIR] [--impl NAME=PATH ...]

``--impl old=/path/to/checkout`` runs the cases with that checkout first on PYTHONPATH (cases it
cannot run are reported as such); without ``--impl`` only this checkout runs. The datasets are
written once into ``--work`` by this checkout (padded labels, so every version reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PHOTOS = REPO.parent / "shared" / "data" / "raccoon"
CASES = ("getitem", "labels", "verify", "verify_tiny", "first_batch", "ragged", "loader",
         "batch")


# ----------------------------------------------------------------------------- datasets


def build(work: Path, big: int) -> dict[str, Path]:
    """The datasets of every case, written once (skipped when present)."""
    import detfmt

    work.mkdir(parents=True, exist_ok=True)
    paths = {name: work / name for name in ("photos", "tiny", "big", "padded", "ragged")}
    if not paths["photos"].exists():
        from detfmt.writing import image as _image

        files = sorted(PHOTOS.rglob("*.jpg"))[:200]
        rng = np.random.default_rng(0)

        def photos():
            for _ in range(2):
                for f in files:
                    img = _image.load_rgb(f)
                    h, w = _image.scaled_size(img.shape[0], img.shape[1], 640)
                    img = _image.resize_rgb(img, h, w)
                    k = int(rng.integers(0, 101))
                    xy = rng.uniform(0, 0.8, (k, 2)) * (w, h)
                    wh = rng.uniform(0.02, 0.2, (k, 2)) * (w, h)
                    boxes = np.concatenate([xy, np.minimum(xy + wh, (w, h))], axis=1)
                    yield {"image": img, "boxes": boxes.astype(np.float32),
                           "classes": rng.integers(0, 3, k)}

        detfmt.write(photos(), paths["photos"], classes=["a", "b", "c"], labels="padded")
    for name, n in (("tiny", 100_000), ("big", big)):
        if not paths[name].exists():
            subprocess.run([sys.executable, str(REPO / "tools" / "synth_dataset.py"),
                            str(paths[name]), "--samples", str(n)], check=True,
                           stdout=subprocess.DEVNULL)
    for labels in ("padded", "ragged"):
        if not paths[labels].exists():
            detfmt.write(_crowded(), paths[labels], classes=["a"], labels=labels)
    return paths


def _crowded():
    """100k tiny samples with 0-5 boxes, and one with 1000 (the same every time)."""
    rng = np.random.default_rng(1)
    image = np.zeros((8, 8, 3), np.uint8)
    for i in range(100_000):
        k = 1000 if i == 4242 else int(rng.integers(0, 6))
        x = rng.uniform(0, 6, k).astype(np.float32)
        yield {"image": image, "boxes": np.stack([x, x, x + 1, x + 2], axis=1),
               "classes": np.zeros(k, int)}


# ----------------------------------------------------------------------------- child side


def child(case: str, paths: dict[str, str]) -> dict:
    t0 = time.perf_counter()
    import detfmt

    if case == "first_batch":
        ds = detfmt.open(paths["big"])
        rng = np.random.default_rng(int(time.time_ns() % 1000))
        first, second = (rng.integers(0, len(ds), 32) for _ in range(2))
        t1 = time.perf_counter()
        ds.batch(first)
        t2 = time.perf_counter()
        ds.batch(second)
        t3 = time.perf_counter()
        return {"import_open_ms": (t1 - t0) * 1e3, "first_ms": (t2 - t1) * 1e3,
                "second_ms": (t3 - t2) * 1e3}
    if case == "getitem":
        ds = detfmt.open(paths["photos"])
        n = len(ds)
        for i in range(n):
            ds[i]  # every sample checked once: the steady state is measured
        rng = np.random.default_rng(2)
        order = rng.integers(0, n, 3000)
        blob, index = ds.blob, ds.index
        boxes, classes, counts = ds.boxes, ds.classes, ds.counts
        # what ds[i] returns, read with plain numpy: the image view, copies of its labels and
        # image fields, its file name decoded (no checks)
        root = Path(paths["photos"])
        fields = {name: np.load(root / f"{name}.npy", mmap_mode="r")
                  for name in ("orig_size", "scale_offset", "source_id")}
        name_ends = np.load(root / "file_name.offsets.npy", mmap_mode="r")
        names = np.memmap(root / "file_name.bin", np.uint8, mode="r") \
            if (root / "file_name.bin").stat().st_size else np.zeros(0, np.uint8)

        def plain(i):
            o, h, w = int(index["offset"][i]), int(index["height"][i]), int(index["width"][i])
            k = int(counts[i])
            extra = {name: values[i].copy() for name, values in fields.items()}
            extra["file_name"] = names[int(name_ends[i]):int(name_ends[i + 1])].tobytes().decode()
            return blob[o:o + h * w * 3].reshape(h, w, 3), boxes[i, :k].copy(), \
                classes[i, :k].copy(), extra

        best = {}
        for name, fn in (("numpy", plain), ("detfmt", ds.__getitem__)) * 3:
            t = time.perf_counter()
            for i in order.tolist():
                fn(i)
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t)
        return {"ratio": best["detfmt"] / best["numpy"],
                "detfmt_us": best["detfmt"] / len(order) * 1e6}
    if case == "loader":
        return _loader_case(paths["photos"])
    if case == "batch":
        ds = detfmt.open(paths["photos"])
        rng = np.random.default_rng(6)
        batches = [np.sort(rng.choice(len(ds), 32, replace=False)) for _ in range(30)]
        nbytes = [int(np.asarray(ds.sizes, np.int64)[idx].prod(axis=1).sum()) * 3
                  for idx in batches]
        blob = np.memmap(Path(paths["photos"]) / "images.bin", np.uint8, mode="r")
        target = np.empty(max(nbytes), np.uint8)
        for idx in batches:
            ds.batch(idx)  # labels checked, pages cached
        best = {"batch": 1e9, "memcpy": 1e9}
        for _ in range(5):  # alternate; keep each side's best pass
            t = time.perf_counter()
            for idx in batches:
                ds.batch(idx)
            best["batch"] = min(best["batch"], time.perf_counter() - t)
            t = time.perf_counter()
            for idx, n in zip(batches, nbytes, strict=True):
                lo = int(ds.index["offset"][idx[0]]) % max(1, blob.size - n)
                np.copyto(target[:n], blob[lo:lo + n])
            best["memcpy"] = min(best["memcpy"], time.perf_counter() - t)
        return {"vs_memcpy": best["memcpy"] / best["batch"],
                "batch_ms": best["batch"] / len(batches) * 1e3}
    if case == "labels":
        ds = detfmt.open(paths["photos"])
        rng = np.random.default_rng(3)
        batches = [rng.choice(len(ds), 32, replace=False) for _ in range(40)]
        for idx in batches:
            ds.batch(idx)  # labels checked, pages cached
        buffer = ds.batch_buffer(32)
        t_batch = t_labels = 0.0
        engine = getattr(ds, "engine", None)
        for idx in batches:
            t = time.perf_counter()
            ds.batch(idx, out=buffer)
            t_batch += time.perf_counter() - t
            if engine is not None:  # the labels part of that batch: gather, pad, mask
                job = engine.job(idx)
                t = time.perf_counter()
                engine.labels(job)
            else:
                t = time.perf_counter()
                ds.labels(idx)
            t_labels += time.perf_counter() - t
        return {"share": t_labels / t_batch}
    if case in ("verify", "verify_tiny"):
        import mmap

        import xxhash

        path = paths["photos" if case == "verify" else "tiny"]
        blob = os.path.join(path, "images.bin")
        for _ in range(2):  # the second of each: modules loaded, pages cached, fresh mappings
            t = time.perf_counter()
            with open(blob, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                view = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            xxhash.xxh3_64_intdigest(view)
            view.close()
            t_hash = time.perf_counter() - t
            t = time.perf_counter()
            report = detfmt.verify(path)
            t_verify = time.perf_counter() - t
        return {"ratio": t_hash / t_verify, "us_per_sample": t_verify / report.num_samples * 1e6}
    if case == "ragged":
        out, opened = {}, {}
        rng = np.random.default_rng(4)
        batches = None
        for labels in ("padded", "ragged"):
            ds = opened[labels] = detfmt.open(paths[labels])
            label_bytes = sum(size for name, size in ds.disk_usage().items()
                              if name in ("boxes.npy", "classes.npy", "counts.npy"))
            valid = int(np.asarray(ds.counts, np.int64).sum()) * (16 + 4)
            if batches is None:
                batches = [rng.choice(len(ds), 32, replace=False) for _ in range(200)]
                batches.append(np.arange(4230, 4262))  # the crowded sample among them
            for idx in batches:
                ds.labels(idx)  # checked once, pages cached
            out[labels] = {"label_bytes_over_payload": label_bytes / valid, "labels_s": 1e9}
        for _ in range(5):  # alternate the layouts, keep each one's best pass
            for labels, ds in opened.items():
                t = time.perf_counter()
                for idx in batches:
                    ds.labels(idx)
                out[labels]["labels_s"] = min(out[labels]["labels_s"], time.perf_counter() - t)
        out["ratio"] = out["ragged"]["labels_s"] / out["padded"]["labels_s"]
        return out
    raise SystemExit(f"unknown case {case}")


def _loader_case(path: str, seconds: float = 2.0) -> dict:
    """images/s of the torch Loader (raw, 1 and 2 threads) and of a 2-thread memcpy of as many
    bytes per batch from the same mapping, alternated twice."""
    from concurrent.futures import ThreadPoolExecutor

    import detfmt
    from detfmt.torch import Delivery, Loader

    ds = detfmt.open(path)
    blob = np.memmap(Path(path) / "images.bin", np.uint8, mode="r")
    per_batch = int(np.asarray(ds.sizes, np.int64).prod(axis=1).mean() * 3 * 32)
    target = np.empty(per_batch, np.uint8)
    pool = ThreadPoolExecutor(2)
    rng = np.random.default_rng(5)

    # one Loader per thread count, kept across rounds: its buffers are allocated (and their
    # pages first touched) in the warm-up, not in every timed window
    loaders = {threads: Loader(
        ds,
        32,
        shuffle=True,
        seed=0,
        delivery=Delivery(num_threads=threads),
    )
               for threads in (1, 2)}

    def loader_rate(threads: int) -> float:
        loader = loaders[threads]
        images, t0, epoch = 0, time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            loader.set_epoch(epoch)
            for batch in loader:
                images += len(batch.images)
            epoch += 1
        return images / (time.perf_counter() - t0)

    def memcpy_rate() -> float:
        copies, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            lo = int(rng.integers(0, blob.size - per_batch))
            half = per_batch // 2
            pairs = [(target[part:part + half], blob[lo + part:lo + part + half])
                     for part in (0, half)]
            list(pool.map(lambda pair: np.copyto(*pair), pairs))
            copies += 1
        return copies * 32 / (time.perf_counter() - t0)

    loader_rate(2)  # warm the page cache and the buffers
    loader_rate(1)
    rates: dict[str, list[float]] = {"loader_2": [], "loader_1": [], "memcpy_2": []}
    for _ in range(2):
        rates["loader_2"].append(loader_rate(2))
        rates["memcpy_2"].append(memcpy_rate())
        rates["loader_1"].append(loader_rate(1))
    best = {k: max(v) for k, v in rates.items()}
    return {"vs_memcpy": best["loader_2"] / best["memcpy_2"],
            "threads_2_vs_1": best["loader_2"] / best["loader_1"],
            "loader_2_img_s": best["loader_2"]}


# ----------------------------------------------------------------------------- driver


def _warm(path: Path) -> None:
    for name in os.listdir(path):
        with open(path / name, "rb") as f:
            while f.read(64 << 20):
                pass


def run_child(impl: str, case: str, paths: dict[str, Path]) -> dict | str:
    env = dict(os.environ, PYTHONPATH=impl)
    args = [sys.executable, __file__, "--child", case, "--paths",
            json.dumps({k: str(v) for k, v in paths.items()})]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:120]
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "detfmt-hotpath")
    parser.add_argument("--big", type=int, default=10_000_000, help="N of first_batch")
    parser.add_argument("--impl", action="append", default=[], help="NAME=PATH")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", type=Path, default=None, help="write every round here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--paths", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.paths))))
        return
    impls = dict(item.split("=", 1) for item in args.impl) or {"this": str(REPO)}
    paths = build(args.work, args.big)
    cases = args.cases.split(",")
    results: dict[str, dict[str, list]] = {c: {i: [] for i in impls} for c in cases}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        if "first_batch" in cases:
            _warm(paths["big"])  # page cache warm: the cost measured is the checks, not the disk
        for case in cases:
            for name, path in impls.items():
                results[case][name].append(run_child(path, case, paths))
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds} done, load {loads[-1]:.2f}", file=sys.stderr)
    print(f"load average (1 min) during the run: min {min(loads):.2f} max {max(loads):.2f}")
    keys = {"getitem": ["ratio", "detfmt_us"], "labels": ["share"],
            "verify": ["ratio"], "verify_tiny": ["us_per_sample"],
            "first_batch": ["first_ms", "second_ms"], "ragged": ["ratio"],
            "loader": ["vs_memcpy", "threads_2_vs_1", "loader_2_img_s"],
            "batch": ["vs_memcpy", "batch_ms"]}
    for case in cases:
        for name in impls:
            rounds = results[case][name]
            fails = [x for x in rounds if isinstance(x, str)]
            if fails:
                print(f"{case:12s} {name:6s} {fails[0]}")
                continue
            for key in keys[case]:
                values = [x[key] for x in rounds]
                print(f"{case:12s} {name:6s} {key:14s} min {min(values):8.3f} median "
                      f"{statistics.median(values):8.3f} max {max(values):8.3f}")
            if case == "ragged":
                for layout in ("padded", "ragged"):
                    value = rounds[0][layout]["label_bytes_over_payload"]
                    print(f"{case:12s} {name:6s} {layout} label bytes / valid-box bytes "
                          f"{value:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"loads": loads, "results": results}, indent=1))


if __name__ == "__main__":
    main()
