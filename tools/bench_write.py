"""Writer benchmark: `detfmt.write` against a plain write + fsync of the same bytes, and shard I/O.

Every measurement runs in a fresh child process (so peak memory is its own; detfmt and the
modules ``write`` imports on first use are imported before the clock), and within a round
the plain baseline and each implementation run back to back, in an order rotated per round; the
tables report min / median / max of the per-round ratios (never absolute times as pass/fail) and
the machine load of each round. ``--impl NAME=DIR`` runs the `detfmt` package found in DIR (for
example an exported older commit) beside the working tree's, in the same rounds.

Cases:
  raw640    N 640x640 raw arrays, workers=0: throughput vs f.write of the arrays + fsync
  raw640w2  the same with workers=2 (the README's first example)
  tiny      N 8x8 images with 0-3 boxes: microseconds per sample, vs a plain loop
            (pixels f.write, labels kept in lists and np.save'd, fsync)
  memory    peak RSS over the pre-write RSS for tiny samples at two N (bounded or not)
  shard     bytes written (write syscalls, /proc/self/io wchar) and fsyncs per byte of a shard

Usage: python tools/bench_write.py [--rounds 5] [--cases raw640,tiny,...] [--impl old=PATH]
       [--json docs/bench/write.json]
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ["a", "b", "c"]


# --------------------------------------------------------------------------- child side


def _rss_now() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _wchar() -> int:
    with open("/proc/self/io") as handle:
        for line in handle:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def _images(count: int, side: int) -> list[Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    return [np.roll(base, i, axis=1) for i in range(count)]  # distinct, cheap to make


def _tiny_samples(count: int) -> list[dict[str, Any]]:
    return list(_tiny_stream(count))


def _tiny_stream(count: int) -> Any:
    """8x8 images with 0-3 boxes, made as they are consumed (memory stays flat)."""
    import numpy as np

    rng = np.random.default_rng(1)
    for start in range(0, count, 4096):
        block = min(4096, count - start)
        images = rng.integers(0, 256, (block, 8, 8, 3), dtype=np.uint8)
        ks = rng.integers(0, 4, block)
        for j in range(block):
            k = int(ks[j])
            x1 = rng.uniform(0, 4, k)
            yield {"image": images[j], "boxes": np.stack([x1, x1, x1 + 2, x1 + 3], 1),
                   "classes": rng.integers(0, 3, k), "file_name": f"{start + j}.jpg"}


class _PeakMemory:
    """Peak VmRSS and RssAnon (anonymous memory: not the mapped files) over a block, sampled
    every 5 ms by a thread."""

    def __init__(self) -> None:
        import threading

        self.base = self._read()
        self.peak = dict(self.base)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    @staticmethod
    def _read() -> dict[str, int]:
        values = {}
        with open("/proc/self/status") as handle:
            for line in handle:
                key = line.split(":")[0]
                if key in ("VmRSS", "RssAnon"):
                    values[key] = int(line.split()[1]) * 1024
        return values

    def _poll(self) -> None:
        while not self._stop.wait(0.005):
            for key, value in self._read().items():
                self.peak[key] = max(self.peak[key], value)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return {key: self.peak[key] - self.base[key] for key in self.base}


def _plain_arrays(arrays: list[Any], path: Path) -> None:
    with open(path, "wb") as handle:
        for array in arrays:
            handle.write(array)
        handle.flush()
        os.fsync(handle.fileno())


def _plain_tiny(samples: list[dict[str, Any]], path: Path) -> None:
    """What a user would write by hand: pixels to one file, labels in lists, np.save, fsync."""
    import numpy as np

    path.mkdir()
    boxes, classes, counts, offsets = [], [], [], []
    with open(path / "images.bin", "wb") as handle:
        position = 0
        for sample in samples:
            offsets.append(position)
            handle.write(sample["image"])
            position += sample["image"].nbytes
            boxes.append(sample["boxes"])
            classes.append(sample["classes"])
            counts.append(len(sample["boxes"]))
        handle.flush()
        os.fsync(handle.fileno())
    for name, value in (("boxes", np.concatenate(boxes)), ("classes", np.concatenate(classes)),
                        ("counts", np.asarray(counts)), ("offsets", np.asarray(offsets))):
        with open(path / f"{name}.npy", "wb") as handle:
            np.save(handle, value)
            handle.flush()
            os.fsync(handle.fileno())


def child(case: str, impl: str, count: int, workdir: str) -> dict[str, Any]:
    """One measurement; ``impl`` is 'plain' or the name of the detfmt implementation on the
    path (this process was started with it first on PYTHONPATH)."""
    target = Path(workdir) / "out"
    if impl != "plain":
        # imported before any clock starts, with the modules write() imports on first use (the
        # writer; the reader of its self-check, whose np.unique imports numpy.ma): where no
        # bytecode cache is written (PYTHONDONTWRITEBYTECODE), compiling them took 0.2-0.4 s
        # of the first write, a one-off cost that is not per sample
        import numpy.ma  # noqa: F401

        import detfmt
        import detfmt.reading.dataset
        import detfmt.writing.writer
    if case in ("raw640", "raw640w2"):
        arrays = _images(count, 640)
        nbytes = sum(a.nbytes for a in arrays)
        before = _rss_now()
        start = time.perf_counter()
        if impl == "plain":
            _plain_arrays(arrays, target)
        else:
            import detfmt

            samples = [{"image": a, "boxes": [[0, 0, 10, 10]], "classes": [0]} for a in arrays]
            detfmt.write(samples, target, classes=CLASSES, progress=False,
                         workers=2 if case == "raw640w2" else 0)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "bytes": nbytes, "peak_rss_over": _peak_rss() - before}
    if case == "memory":
        import detfmt

        probe = _PeakMemory()
        detfmt.write(_tiny_stream(count), target, classes=CLASSES, progress=False)
        return probe.stop()
    if case == "tiny":
        samples = _tiny_samples(count)
        before = _rss_now()
        start = time.perf_counter()
        if impl == "plain":
            _plain_tiny(samples, target)
        else:
            import detfmt

            detfmt.write(iter(samples), target, classes=CLASSES, progress=False)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "samples": count, "peak_rss_over": _peak_rss() - before}
    if case == "shard":
        return _shard_io(count, Path(workdir))
    raise SystemExit(f"unknown case {case}")


def _shard_io(count: int, workdir: Path) -> dict[str, Any]:
    """Bytes passed to write()/pwrite() and fsync calls while one shard is written."""
    import numpy as np

    rng = np.random.default_rng(3)
    samples = [{"image": rng.integers(0, 256, (int(rng.integers(20, 120)),
                                               int(rng.integers(20, 120)), 3), dtype=np.uint8),
                "boxes": [[1, 1, 5, 5]], "classes": [int(i % 3)], "file_name": f"{i}.png"}
               for i in range(count)]
    syncs = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    os.fsync = counting_fsync
    from detfmt import fileio

    through_io = []
    real_write_all = fileio.write_all

    def counting_write_all(fd: int, data: Any, *args: Any) -> None:
        parts = data if isinstance(data, (list, tuple)) else [data]
        through_io.append(sum(memoryview(p).nbytes for p in parts))
        real_write_all(fd, data, *args)

    fileio.write_all = counting_write_all
    written = _wchar()
    start = time.perf_counter()
    try:
        from detfmt.writing import writer

        if hasattr(writer, "build_shard"):
            from detfmt.writing.options import WriteOptions

            built = writer.build_shard(samples, workdir / "part.detfmt", classes=CLASSES,
                                       options=WriteOptions())
            size = built.bytes
        else:
            from detfmt.shard.write import write_shard

            size = write_shard(samples, workdir / "root", "k", classes=CLASSES).bytes
    finally:
        os.fsync = real_fsync
        fileio.write_all = real_write_all
    return {"seconds": time.perf_counter() - start, "shard_bytes": size,
            "written": _wchar() - written, "through_io": sum(through_io), "fsyncs": len(syncs)}


# --------------------------------------------------------------------------- parent side


def _run_child(case: str, impl: str, path: str, count: int) -> dict[str, Any]:
    env = dict(os.environ)
    if impl != "plain":
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="bench-write-", dir=os.environ.get("BENCH_DIR")) as d:
        out = subprocess.run(
            [sys.executable, __file__, "--child", case, "--impl-name", impl, "--count",
             str(count), "--workdir", d], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{case}/{impl} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spread(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))


def bench(cases: list[str], impls: dict[str, str], rounds: int, counts: dict[str, int]
          ) -> dict[str, Any]:
    results: dict[str, Any] = {"uptime_start": os.getloadavg(), "rounds": rounds, "cases": {}}
    for case in cases:
        if case == "shard":
            rows = {name: _run_child(case, name, path, counts[case])
                    for name, path in impls.items()}
            results["cases"][case] = rows
            continue
        if case == "memory":
            rows = {}
            for name, path in impls.items():
                rows[name] = {str(n): _run_child("memory", name, path, n)
                              for n in (counts["memory"] // 8, counts["memory"])}
            results["cases"][case] = rows
            continue
        order = ["plain", *impls]
        per_round = []
        for r in range(rounds):
            load = os.getloadavg()[0]
            rotated = order[r % len(order):] + order[: r % len(order)]
            got = {name: _run_child(case, name, impls.get(name, ""), counts[case])
                   for name in rotated}
            got["load1"] = load
            per_round.append(got)
            print(f"  {case} round {r}: " + ", ".join(
                f"{n} {got[n]['seconds']:.3f}s" for n in order) + f" (load {load:.2f})",
                file=sys.stderr)
        results["cases"][case] = per_round
    results["uptime_end"] = os.getloadavg()
    return results


def report(results: dict[str, Any], impls: dict[str, str]) -> str:
    lines = [f"load (1/5/15 min) at start {results['uptime_start']}, at end "
             f"{results['uptime_end']}; {results['rounds']} rounds, order rotated per round", ""]
    for case, data in results["cases"].items():
        if case == "shard":
            lines += ["| shard | shard bytes | bytes written (all write syscalls) | per shard byte "
                      "| of which through detfmt.fileio | per shard byte | fsyncs |",
                      "|---|---:|---:|---:|---:|---:|---:|"]
            for name, row in data.items():
                size = row["shard_bytes"]
                lines.append(f"| {name} | {size:,} | {row['written']:,} | "
                             f"{row['written'] / size:.2f} | {row['through_io']:,} | "
                             f"{row['through_io'] / size:.2f} | {row['fsyncs']} |")
            lines.append("")
            continue
        if case == "memory":
            sizes = list(next(iter(data.values())))
            lines += ["| memory: peak over the pre-write value (MB), tiny samples from a "
                      "generator | " + " | ".join(f"RSS, N = {n} | anonymous, N = {n}"
                                                   for n in sizes) + " |",
                      "|---|" + "---:|" * (2 * len(sizes))]
            for name, row in data.items():
                lines.append(f"| {name} | " + " | ".join(
                    f"{row[n]['VmRSS'] / 1e6:.1f} | {row[n]['RssAnon'] / 1e6:.1f}" for n in sizes)
                    + " |")
            lines.append("")
            continue
        loads = [r["load1"] for r in data]
        header = f"| {case} | ratio vs plain (min / median / max) |"
        if case == "tiny":
            header += " us per sample (min / median / max) |"
        lines += [header, "|---|---:|" + ("---:|" if case == "tiny" else "")]
        for name in ["plain", *impls]:
            ratios = [r["plain"]["seconds"] / r[name]["seconds"] for r in data]
            row = f"| {name} | {_spread(ratios)} |"
            if case == "tiny":
                per_sample = [r[name]["seconds"] / r[name]["samples"] * 1e6 for r in data]
                row += f" {_spread(per_sample)} |"
            lines.append(row)
        lines += [f"(load1 per round: {', '.join(f'{v:.2f}' for v in loads)})", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default="raw640,raw640w2,tiny,memory,shard")
    parser.add_argument("--impl", action="append", default=[],
                        help="NAME=DIR: a detfmt package directory to measure (repeatable)")
    parser.add_argument("--raw-count", type=int, default=400)
    parser.add_argument("--tiny-count", type=int, default=20000)
    parser.add_argument("--memory-count", type=int, default=400000)
    parser.add_argument("--shard-count", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child")
    parser.add_argument("--impl-name")
    parser.add_argument("--count", type=int)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.impl_name, args.count, args.workdir)))
        return
    impls = dict(item.split("=", 1) for item in args.impl) or {"current": str(ROOT)}
    counts = {"raw640": args.raw_count, "raw640w2": args.raw_count, "tiny": args.tiny_count,
              "memory": args.memory_count, "shard": args.shard_count}
    results = bench(args.cases.split(","), impls, args.rounds, counts)
    print(report(results, impls))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
