#!/usr/bin/env python
"""Scale-out benchmarks: distributed write and sharded/remote read (docs/bench/scaleout.md).

    .venv/bin/python tools/bench_scaleout.py [--samples N] [--side S] [--json out.json]

1. Ray write, 1 vs 2 concurrent write tasks (goal >= 1.8x on 2 idle cores).
2. DetfmtDatasink overhead vs calling write_partition directly, same partitions (goal <= 10%).
3. Sharded read from a warm local cache vs the same samples as one 1.0 directory (goal >= 0.95x).
4. Cold remote epoch from loopback S3 (moto) vs local disk: ratio and where the time goes.
5. torch ``Loader`` over a warm local sharded root vs ``Loader`` over the same samples as one 1.0
   directory: same batches (the sharded plan's), batch size and threads; interleaved rounds
   (goal >= 0.95x). ``--only-loader`` runs this row alone.

Needs the ``scale`` extra (ray, s3fs, moto). Every figure is measured in this run; the machine's
load (``os.getloadavg``) is printed with them because a shared machine skews parallel speedups.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import detfmt
from detfmt.reading.buffers import aligned_empty
from detfmt.shard.write import commit, write_partition

CLASSES = ["a", "b", "c"]
REPEATS = 9


def samples(n: int, side: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        # smooth images so JPEG/zstd do real work on realistic-ish content
        base = rng.integers(0, 256, (side // 8, side // 8, 3), dtype=np.uint8)
        image = np.repeat(np.repeat(base, 8, 0), 8, 1)
        image = (image.astype(np.int16) + rng.integers(-6, 7, image.shape)).clip(0, 255)
        k = int(rng.integers(0, 6))
        xy = rng.uniform(0, side - 2, (k, 2, 2)).astype(np.float32)
        boxes = np.concatenate([xy.min(1), xy.max(1) + 1], axis=1)
        out.append(
            {
                "image": image.astype(np.uint8),
                "boxes": boxes,
                "classes": rng.integers(0, 3, k),
                "source_id": i,
            }
        )
    return out


def timed(fn):
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


_MP_JOB: tuple | None = None  # (chunks, root, codec, shard_bytes), inherited by forked workers


def _mp_write(i: int) -> None:
    chunks, root, codec, shard_bytes = _MP_JOB
    if i < 0:
        return
    write_partition(chunks[i], root, i, classes=CLASSES, codec=codec, shard_bytes=shard_bytes)


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


def _steal_fraction_since(before: list[int]) -> float:
    """Share of CPU time the hypervisor took from this VM since ``before`` (/proc/stat steal)."""
    now = _cpu_times()
    delta = [a - b for a, b in zip(now, before, strict=True)]
    return delta[7] / max(1, sum(delta)) if len(delta) > 7 else 0.0


def bench_ray(
    data: list[dict], parts: int, codec: str, shard_bytes: int, tmp: str, rounds: int = 3,
    policies: str = "default",
) -> dict:
    import ray
    import ray.data

    from detfmt.integrations.ray import DetfmtDatasink

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    if policies == "concurrency-cap":  # Ray Data's ramp-up and object-store budget off
        from ray.data._internal.execution.backpressure_policy import (
            ConcurrencyCapBackpressurePolicy,
        )

        context.set_config("backpressure_policies.enabled", [ConcurrencyCapBackpressurePolicy])
    per = len(data) // parts
    chunks = [data[i * per : (i + 1) * per] for i in range(parts)]

    def direct(root):
        metas = [
            m
            for i, c in enumerate(chunks)
            for m in write_partition(
                c, root, i, classes=CLASSES, codec=codec, shard_bytes=shard_bytes
            )
        ]
        commit(root, metas, write_id="0" * 32)

    def with_ray(root, concurrency):
        ds = ray.data.from_items([s for c in chunks for s in c], override_num_blocks=parts)
        ds = ds.materialize()  # input in the object store before the clock starts
        sink = DetfmtDatasink(
            root, classes=CLASSES, codec=codec, shard_bytes=shard_bytes, write_id="0" * 32
        )
        t = time.perf_counter()
        ds.write_datasink(sink, concurrency=concurrency)
        return time.perf_counter() - t

    def with_processes(root, processes):
        """The machine's own scaling: the same partitions by a fork pool (no Ray)."""
        global _MP_JOB
        _MP_JOB = (chunks, root, codec, shard_bytes)
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            pool.map(_mp_write, [-1] * processes)  # start-up and imports, not measured
            t = time.perf_counter()
            pool.map(_mp_write, range(parts), chunksize=1)
            return time.perf_counter() - t

    with_ray(os.path.join(tmp, "warmup"), 2)  # worker start-up and imports, not measured
    steal0 = _cpu_times()
    names = ("direct", "ray1", "ray2", "mp1", "mp2")
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):  # interleaved, so the machine's other load hits every side alike
        for name in names:
            root = os.path.join(tmp, f"{name}-{r}")
            if name == "direct":
                times[name].append(timed(lambda root=root: direct(root))[0])
            elif name.startswith("ray"):
                times[name].append(with_ray(root, int(name[-1])))
            else:
                times[name].append(with_processes(root, int(name[-1])))
    res = {f"{name}_s": float(np.median(ts)) for name, ts in times.items()}
    res["rounds"] = {name: ts for name, ts in times.items()}
    res["ray_1_s"], res["ray_2_s"] = res.pop("ray1_s"), res.pop("ray2_s")
    res["speedup_2_vs_1"] = res["ray_1_s"] / res["ray_2_s"]
    pairs = zip(times["ray1"], times["ray2"], strict=True)
    res["speedup_2_vs_1_per_round"] = [a / b for a, b in pairs]
    res["datasink_overhead"] = res["ray_1_s"] / res["direct_s"] - 1
    res["processes_2_vs_1"] = res.pop("mp1_s") / res.pop("mp2_s")
    pairs = zip(times["mp1"], times["mp2"], strict=True)
    res["processes_2_vs_1_per_round"] = [a / b for a, b in pairs]
    res["ray_scaling_vs_processes"] = res["speedup_2_vs_1"] / res["processes_2_vs_1"]
    res["steal_fraction"] = _steal_fraction_since(steal0)

    def manifest(name: str) -> bytes:
        with open(os.path.join(tmp, name, "manifest.json"), "rb") as f:
            return f.read()

    firsts = [manifest(f"{name}-0") for name in ("direct", "ray1", "ray2")]
    res["byte_identical_manifests"] = firsts[0] == firsts[1] == firsts[2]
    ray.shutdown()
    return res


def epoch(ds, plan, out: np.ndarray) -> tuple[float, int]:
    """One epoch through ShardedDataset.iter_batches into a reused buffer (as a loader does)."""
    t = time.perf_counter()
    n = 0
    for b in ds.iter_batches(plan, out=out):
        n += len(b.indices)
    return time.perf_counter() - t, n


def flat_epoch(ds, batches, out: np.ndarray) -> tuple[float, int]:
    """The same batches from a 1.0 directory, same consumption pattern and buffer."""
    t = time.perf_counter()
    n = 0
    for b in (ds.batch(idx, out=out) for idx in batches):
        n += len(b.indices)
    return time.perf_counter() - t, n


def write_both(
    data: list[dict], root: str, flat_root: str, codec: str, shard_bytes: int, write_id: str
) -> None:
    """The same samples as a sharded root (4 partitions) and as one 1.0 directory, with the same
    global indices."""
    metas = [
        m
        for i in range(4)
        for m in write_partition(
            data[i::4], root, i, classes=CLASSES, codec=codec, shard_bytes=shard_bytes
        )
    ]
    commit(root, metas, write_id=write_id)
    order = [s for i in range(4) for s in data[i::4]]
    detfmt.write(order, flat_root, classes=CLASSES, codec=codec, progress=False)


def bench_read(data: list[dict], codec: str, shard_bytes: int, tmp: str, batch: int) -> dict:
    root = os.path.join(tmp, "sharded")
    flat_root = os.path.join(tmp, "flat")
    write_both(data, root, flat_root, codec, shard_bytes, "1" * 32)
    sharded = detfmt.open(root)
    flat = detfmt.open(flat_root)
    plan = sharded.plan(seed=0, epoch=0, batch_size=batch, shard_window=2)
    batches = list(plan.batches())
    res = {"shards": len(sharded.shards), "samples": len(sharded)}
    side = int(max(flat.sizes.max(), 1))
    out = aligned_empty(batch * side * side * 3)  # page-aligned: see detfmt/reading/buffers.py
    # warm both (page cache, mappings), then interleave epochs so load spikes hit both alike
    epoch(sharded, plan, out)
    flat_epoch(flat, batches, out)
    n = sum(len(b) for b in batches)
    ts_all, tf_all = [], []
    for _ in range(REPEATS):
        ts_all.append(epoch(sharded, plan, out)[0])
        tf_all.append(flat_epoch(flat, batches, out)[0])
    ts, tf = float(np.median(ts_all)), float(np.median(tf_all))
    res["sharded_local_img_s"] = n / ts
    res["flat_1_0_img_s"] = n / tf
    res["sharded_vs_flat"] = tf / ts
    res["sharded_vs_flat_best"] = min(tf_all) / min(ts_all)

    try:
        import s3fs  # noqa: F401

        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "scaleout"))
        from scaleout_servers import moto_s3

        from detfmt.shard.remote import upload
    except ImportError as error:
        res["remote"] = f"skipped: {error}"
        return res
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto_s3() as endpoint:
        opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
        import fsspec

        fsspec.filesystem("s3", **opts).call_s3("create_bucket", Bucket="bench")
        upload(root, "s3://bench/ds", storage_options=opts)
        cache = os.path.join(tmp, "cache")
        remote = detfmt.open("s3://bench/ds", storage_options=opts, cache_dir=cache)
        t_dl = time.perf_counter()  # download alone: every shard once, sequentially
        for s in remote.shards:
            remote._cache.fetch(s)
        download_s = time.perf_counter() - t_dl
        shutil.rmtree(cache)
        remote = detfmt.open("s3://bench/ds", storage_options=opts, cache_dir=cache)
        cold, _ = epoch(remote, plan, out)
        warm_all, flat_all = [], []
        for _ in range(REPEATS):
            warm_all.append(epoch(remote, plan, out)[0])
            flat_all.append(flat_epoch(flat, batches, out)[0])
        warm = float(np.median(warm_all))
        tf = float(np.median(flat_all))
        res["remote_cold_epoch_s"] = cold
        res["remote_warm_epoch_s"] = warm
        res["local_epoch_s"] = ts
        res["cold_vs_local"] = cold / ts
        res["cold_minus_download_s"] = cold - download_s
        res["warm_cache_vs_flat"] = tf / warm
        res["download_all_shards_s"] = download_s
        res["download_MB_s"] = sum(s.bytes for s in remote.shards) / download_s / 1e6
        res["cache_stats"] = dict(remote._cache.stats)
        remote.close()
    return res


def loader_epoch(loader) -> tuple[float, int]:
    """One epoch of a torch Loader, each batch dropped at once (buffers are reused)."""
    t = time.perf_counter()
    n = 0
    for b in loader:
        n += len(b)
    return time.perf_counter() - t, n


def bench_loader(
    data: list[dict], codec: str, shard_bytes: int, tmp: str, batch: int, threads: int,
    rounds: int,
) -> dict:
    from detfmt.torch import Delivery, Loader

    root = os.path.join(tmp, "sharded")
    flat_root = os.path.join(tmp, "flat")
    write_both(data, root, flat_root, codec, shard_bytes, "2" * 32)
    sharded = Loader(root, batch, seed=0, drop_last=True, delivery=Delivery(num_threads=threads))
    flat = Loader(flat_root, batch, seed=0, drop_last=True, delivery=Delivery(num_threads=threads))
    batches = sharded.rank_batches()
    flat.rank_batches = lambda epoch=None: batches  # the very same batches, in the same order
    assert [b.tolist() for b in flat.rank_batches()] == [b.tolist() for b in batches]
    res = {"shards": len(sharded.ds.shards), "samples": sum(len(b) for b in batches),
           "batch": batch, "threads": threads, "codec": codec}
    loader_epoch(sharded)  # warm: page cache, mappings, shard tables, buffers
    loader_epoch(flat)
    ts_all, tf_all = [], []
    for _ in range(rounds):
        ts_all.append(loader_epoch(sharded)[0])
        tf_all.append(loader_epoch(flat)[0])
    ts, tf = float(np.median(ts_all)), float(np.median(tf_all))
    n = res["samples"]
    res["sharded_loader_img_s"] = n / ts
    res["flat_loader_img_s"] = n / tf
    res["sharded_vs_flat_loader"] = tf / ts
    res["sharded_vs_flat_loader_best"] = min(tf_all) / min(ts_all)
    res["sharded_epochs_s"] = ts_all
    res["flat_epochs_s"] = tf_all
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--samples", type=int, default=240)
    p.add_argument("--side", type=int, default=256)
    p.add_argument("--codec", default="jpeg")
    p.add_argument("--read-codec", default="raw")
    p.add_argument("--shard-mib", type=float, default=2.0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--skip-ray", action="store_true")
    p.add_argument("--only-loader", action="store_true", help="only row 5 (torch Loader)")
    p.add_argument("--threads", type=int, default=2, help="Loader threads (row 5)")
    p.add_argument("--rounds", type=int, default=REPEATS, help="interleaved rounds (row 5)")
    p.add_argument("--write-rounds", type=int, default=3, help="interleaved rounds (rows 1-2)")
    p.add_argument("--write-parts", type=int, default=4, help="input partitions = Ray tasks")
    p.add_argument("--ray-policies", choices=("default", "concurrency-cap"), default="default",
                   help="Ray Data backpressure policies (rows 1-2): Ray's defaults, or only "
                   "the concurrency cap (no ramp-up / object-store budget holding tasks back)")
    p.add_argument("--only-write", action="store_true", help="only rows 1-2 (Ray write)")
    p.add_argument("--json")
    args = p.parse_args()
    shard_bytes = int(args.shard_mib * (1 << 20))
    data = samples(args.samples, args.side)
    out = {
        "samples": args.samples,
        "side": args.side,
        "shard_bytes": shard_bytes,
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
    }
    tmp = tempfile.mkdtemp(prefix="bench-scaleout-")
    try:
        if not args.skip_ray and not args.only_loader:
            out["write"] = bench_ray(
                data, args.write_parts, args.codec, shard_bytes, os.path.join(tmp, "w"),
                args.write_rounds, args.ray_policies,
            )
            out["write"]["parts"], out["write"]["policies"] = args.write_parts, args.ray_policies
        if not args.only_loader and not args.only_write:
            out["read"] = bench_read(
                data, args.read_codec, shard_bytes, os.path.join(tmp, "r"), args.batch
            )
        if not args.only_write:
            out["loader"] = bench_loader(
                data, args.read_codec, shard_bytes, os.path.join(tmp, "l"), args.batch,
                args.threads, args.rounds,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    text = json.dumps(out, indent=1, default=float)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
