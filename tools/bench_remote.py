#!/usr/bin/env python
"""Remote epochs of a sharded root over a bandwidth-capped loopback store (docs/bench/remote.md).

    python tools/bench_remote.py [--data ../shared/data/coco128-yolo] [--replicate 16]
                                 [--rounds 3] [--cap-mb auto] [--big 1000000] [--out FILE]
    python tools/bench_remote.py --quick     # seconds: synthetic data, what the test runs

The store is an HTTP server in a child process (``--serve``: static files with range support,
what fsspec's HTTP reader needs) whose responses all draw from one token bucket: the link cap,
shared by every connection. It counts the bytes it sends. ``tc`` is not used (it needs
privileges). Figures, all measured in the same run, interleaved per round:

1. **link**: one plain sequential download of every shard through the capped server (one
   connection, no detfmt): the bandwidth a client actually gets from the link.
2. **first epoch** (fresh cache): shard bytes / epoch seconds, as a share of the link figure;
   with the default ``prefetch_shards=2`` and with ``prefetch_shards=0`` (no download ahead of
   the batches, so the read waits for every shard: the overlap that prefetch buys).
3. **second epoch** (the shard cache now holds every shard) against the same epoch read from
   the local sharded root.
4. **bytes fetched per sample read**: a fresh cache reads the first quarter of an epoch, then
   stops; bytes the server sent against the bytes of the shards that quarter touched (the
   window ahead, ``prefetch_shards`` more shards, is the only allowed excess).
5. **time to first batch** of a large root (``--big`` samples of 4x4 images, 1000 per shard,
   each shard distinct), remote over the cap against the same root on local disk.

The cap: ``--cap-mb auto`` sets it to 0.4x the local-disk epoch's byte rate measured first
(decode included), so that the link, not this machine's CPU, is what a first epoch waits on;
the ratios say nothing when the CPU is slower than the link. Load is recorded per round.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchpaths import SHARED_DATA, command_line

BATCH = 32
CHUNK = 64 << 10
PEERS = Path(__file__).resolve().parent / "bench_remote_peers.py"
_INDEXES = ("manifest.json", "index.json")


# ---------------------------------------------------------------------------- the capped server


class _Bucket:
    """One token bucket for all connections: ``rate`` bytes/s, bursts of one chunk."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.burst = float(CHUNK)
        self.tokens = 0.0
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: int) -> None:
        with self.lock:  # one sender at a time: the link is serial
            while True:
                now = time.monotonic()
                self.tokens = min(self.tokens + (now - self.stamp) * self.rate, self.burst)
                self.stamp = now
                if self.tokens >= min(n, self.burst):
                    self.tokens -= n
                    return
                time.sleep((n - self.tokens) / self.rate)


class _Handler(http.server.SimpleHTTPRequestHandler):
    bucket: _Bucket
    sent: dict[str, int]
    requests: list[int]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/__stats":
            body = json.dumps({"bytes": sum(self.sent.values()), "requests": self.requests[0],
                               "by_path": self.sent}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def send_head(self):  # type: ignore[override]
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return None
        f = open(path, "rb")  # noqa: SIM115 (closed by the base class)
        size = os.fstat(f.fileno()).st_size
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if m:
            start = int(m[1]) if m[1] else max(0, size - int(m[2]))
            end = min(int(m[2]), size - 1) if m[1] and m[2] else size - 1
            if start >= size:
                f.close()
                self.send_error(416)
                return None
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            f.seek(start)
            self.left = end - start + 1
        else:
            self.send_response(200)
            self.left = size
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(self.left))
        self.end_headers()
        self.requests[0] += 1
        return f

    def copyfile(self, source, outputfile) -> None:  # type: ignore[override]
        key = self.path.split("?")[0]
        while self.left > 0:
            chunk = source.read(min(self.left, CHUNK))
            if not chunk:
                break
            self.bucket.take(len(chunk))
            outputfile.write(chunk)
            self.sent[key] = self.sent.get(key, 0) + len(chunk)
            self.left -= len(chunk)


def serve(directory: str, rate: float) -> None:
    """``--serve``: run the capped server over ``directory``; prints its port, then serves."""
    _Handler.bucket = _Bucket(rate)
    _Handler.sent = {}
    _Handler.requests = [0]

    def handler(*args, **kwargs):
        return _Handler(*args, directory=directory, **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


class Store:
    """The capped server as a child process (its own GIL: it does not slow the reader)."""

    def __init__(self, directory: str, rate: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", directory,
                                      "--rate", str(rate)], stdout=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"  # type: ignore[union-attr]

    def sent(self) -> int:
        """Shard bytes sent so far (manifests and index files are not counted)."""
        with urllib.request.urlopen(self.url + "/__stats") as r:
            by_path = json.loads(r.read())["by_path"]
        return sum(n for p, n in by_path.items() if not p.endswith(_INDEXES))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# ---------------------------------------------------------------------------- data


def coco_root(data: Path, work: Path, replicate: int) -> Path:
    """coco128 at long side 640, JPEG-stored, as a sharded root: ``replicate`` copies in shards of
    64 samples; each shard's metadata names it, so no two shards have the same bytes (the cache
    is content addressed: identical shards would be fetched once)."""
    import detfmt
    from detfmt.convert import from_yolo
    from detfmt.shard.write import commit, write_shard

    root = work / f"coco128-x{replicate}"
    if (root / "manifest.json").exists():
        return root
    flat = work / "coco128-jpeg"
    if not (flat / "header.json").exists():
        from_yolo(data / "images", data / "object_detection" / "labels", flat,
                  names=data / "object_detection" / "config.yaml", max_side=640, codec="jpeg",
                  progress=False)
    ds = detfmt.open(flat)
    samples = [{"image": s.image, "boxes": s.boxes, "classes": s.classes}
               for s in (ds[i] for i in range(len(ds)))]
    metas = []
    for r in range(replicate * 2):
        part = samples[(r % 2) * 64:(r % 2) * 64 + 64]
        metas.append(write_shard(part, root, f"{r:05d}-0000", classes=ds.class_names,
                                 codec="jpeg", metadata={"shard": str(r)}))
    commit(root, metas, write_id="c" * 32)
    return root


def synthetic_root(work: Path, shards: int, per_shard: int, side: int, name: str,
                   codec: str = "raw") -> Path:
    """``shards`` x ``per_shard`` synthetic samples (noise), each shard distinct."""
    from detfmt.shard.write import commit, write_shard

    root = work / name
    if (root / "manifest.json").exists():
        return root
    rng = np.random.default_rng(0)
    metas = []
    for k in range(shards):
        samples = []
        for _ in range(per_shard):
            image = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            samples.append({"image": image, "boxes": np.array([[0, 0, 2, 2]], np.float32),
                            "classes": np.zeros(1, np.int64)})
        metas.append(write_shard(samples, root, f"{k:05d}-0000", classes=["a"], codec=codec,
                                 metadata={"shard": str(k)}))
    commit(root, metas, write_id="b" * 32)
    return root


# ---------------------------------------------------------------------------- measurements


def load() -> float:
    return os.getloadavg()[0]


def shard_bytes(root: Path) -> int:
    import detfmt

    with detfmt.open(root) as ds:
        return sum(int(s.bytes) for s in ds.shards)


def link_seconds(store: Store, root: Path) -> float:
    """Every shard downloaded once, in order, on one connection-per-file plain client."""
    import detfmt

    with detfmt.open(root) as ds:
        paths = [s.path for s in ds.shards]
    t = time.perf_counter()
    for p in paths:
        with urllib.request.urlopen(f"{store.url}/b/ds/{p}") as r:
            while r.read(1 << 20):
                pass
    return time.perf_counter() - t


def epoch(url: str, cache: str | None, *, epoch_no: int, prefetch: int = 2,
          fraction: float = 1.0, ds=None) -> tuple[float, object]:
    """Open (unless ``ds`` is given) and read ``fraction`` of one epoch's batches; seconds from
    before the open. The dataset stays open (second epochs reuse it)."""
    import detfmt

    t = time.perf_counter()
    if ds is None:
        ds = detfmt.open(url, cache_dir=cache) if cache else detfmt.open(url)
    plan = ds.plan(seed=0, epoch=epoch_no, batch_size=BATCH)
    total = len(list(plan.batches()))
    stop = max(1, int(total * fraction))
    for t_no, _ in enumerate(ds.iter_batches(plan, prefetch_shards=prefetch)):
        if t_no + 1 >= stop:
            break
    return time.perf_counter() - t, ds


def touched_bytes(ds, fraction: float, epoch_no: int, ahead: int = 2) -> tuple[int, int, int]:
    """(bytes of the shards the first ``fraction`` of the epoch reads, samples read, bytes of the
    ``ahead`` shards first used next: what ``prefetch_shards=ahead`` may fetch beyond them).
    Worked out from the plan alone, not with detfmt's own working-set code."""
    batches = list(ds.plan(seed=0, epoch=epoch_no, batch_size=BATCH).batches())
    stop = max(1, int(len(batches) * fraction))
    first: dict[int, int] = {}  # shard -> first step that reads it
    for t, b in enumerate(batches):
        for k in np.searchsorted(ds.starts, np.asarray(b), side="right") - 1:
            first.setdefault(int(k), t)
    by_first = sorted(first, key=lambda k: (first[k], k))  # ties: by shard number
    active = {int(k) for b in batches[:stop]
              for k in np.searchsorted(ds.starts, np.asarray(b), side="right") - 1}
    nxt = by_first[len(active):len(active) + ahead]  # active is a prefix of by_first
    size = [int(s.bytes) for s in ds.shards]
    return (sum(size[k] for k in active), sum(len(b) for b in batches[:stop]),
            sum(size[k] for k in nxt))


def first_batch(url: str, cache: str | None) -> tuple[float, int]:
    """Seconds from ``open`` to the first batch of a fresh plan, and the bytes that batch cannot
    do without: the manifest and every shard it reads from (all ``shard_window`` shards of the
    first window, as a shuffled window draws from each)."""
    import detfmt

    t = time.perf_counter()
    ds = detfmt.open(url, cache_dir=cache) if cache else detfmt.open(url)
    plan = ds.plan(seed=0, epoch=0, batch_size=BATCH)
    first = next(iter(ds.iter_batches(plan)))
    took = time.perf_counter() - t
    shards = np.unique(np.searchsorted(ds.starts, np.asarray(first.indices), side="right") - 1)
    need = ds.storage.size("manifest.json") + sum(int(ds.shards[k].bytes) for k in shards)
    ds.close()
    return took, need


def peer_roots(python: str, root: Path, work: Path) -> Path:
    """The same samples (JPEG bytes as detfmt stores them, labels) as MDS and LitData shards
    of the same size, written by the peers' own writers in their venv."""
    import detfmt

    out = work / f"peers-{root.name}"
    if (out / "mds" / "index.json").exists() and (out / "lit" / "index.json").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    with detfmt.open(root) as ds:
        labels = ds.ragged_labels()
        o = labels.offsets
        samples = [(bytes(ds.payload(i)), labels.boxes[o[i]:o[i + 1]].ravel().tolist(),
                    labels.classes[o[i]:o[i + 1]].tolist()) for i in range(len(ds))]
        size = sum(int(s.bytes) for s in ds.shards) // len(ds.shards)
    export = work / "export.pkl"
    with open(export, "wb") as f:
        pickle.dump(samples, f)
    subprocess.run([python, str(PEERS), "prepare", str(export), str(out), str(size)], check=True,
                   stdout=subprocess.DEVNULL)
    export.unlink()
    return out


def peer_epochs(python: str, store: Store | None, peer: str, source: str, cache: str,
                seed: int) -> list[float]:
    """Two epochs of a peer in a child process (its venv): seconds each, the first from the
    dataset's construction (imports excluded). NaN when the peer fails (its error is printed)."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s",
               AWS_DEFAULT_REGION="us-east-1")
    env.pop("PYTHONPATH", None)
    if store is not None:
        env["S3_ENDPOINT_URL"] = store.url
    got = subprocess.run([python, str(PEERS), "epoch", peer, source, cache, str(seed), "2"],
                         env=env, capture_output=True, text=True, timeout=1200)
    if got.returncode != 0:
        print(f"{peer} failed: {got.stderr.strip().splitlines()[-3:]}", flush=True)
        return [float("nan"), float("nan")]
    return json.loads(got.stdout.strip().splitlines()[-1])["seconds"]


def med(xs: list[float]) -> float:
    return float(statistics.median(xs))


def run(args: argparse.Namespace) -> dict:
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-remote-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.quick:
        root = synthetic_root(work, 8, 48, 64, "quick", "jpeg")
        big = synthetic_root(work, 20, 100, 4, "quick-big")
    else:
        root = coco_root(Path(args.data), work, args.replicate)
        big = synthetic_root(work, args.big // 1000, 1000, 4, f"big-{args.big}")
    prep_s = time.perf_counter() - t0
    total = shard_bytes(root)
    import detfmt

    with detfmt.open(root) as ds:
        n_samples, n_shards = len(ds), len(ds.shards)
    with detfmt.open(big) as ds:
        big_samples, big_shards = len(ds), len(ds.shards)

    # the local-disk figure first: it sets the automatic cap. The local root stays open (shards
    # mapped), like the remote one in its second epoch.
    _, local = epoch(str(root), None, epoch_no=0)
    local_s = min(epoch("", None, epoch_no=1, ds=local)[0] for _ in range(2))
    rate = (args.cap_mb * 1e6 if args.cap_mb else 0.4 * total / local_s)
    served = work / "served"
    if served.exists():
        shutil.rmtree(served)
    (served / "b").mkdir(parents=True)
    os.symlink(root, served / "b" / "ds")
    os.symlink(big, served / "b" / "big")
    peers = peer_roots(args.peers_python, root, work) if args.peers_python else None
    peer_bytes = {}
    if peers is not None:
        for name in ("mds", "lit"):
            os.symlink(peers / name, served / "b" / name)
            peer_bytes[name] = sum(f.stat().st_size for f in (peers / name).iterdir()
                                   if f.name != "index.json")
    store = Store(str(served), rate)
    rows: dict[str, list[float]] = {}
    loads = []

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    try:
        url, big_url = store.url + "/b/ds", store.url + "/b/big"
        warmup = tempfile.mkdtemp(prefix="cache-", dir=work)  # imports, first connections
        os.chmod(warmup, 0o700)
        epoch(url, warmup, epoch_no=0, fraction=0.1)[1].close()
        shutil.rmtree(warmup)
        for r in range(args.rounds):
            loads.append(load())
            steps = ["link", "cold2", "cold0", "cold4", "partial", "ttfb", *peer_bytes]
            for step in steps if r % 2 == 0 else steps[::-1]:
                cache = tempfile.mkdtemp(prefix="cache-", dir=work)
                os.chmod(cache, 0o700)
                before = store.sent()
                if step == "link":
                    add("link_s", link_seconds(store, root))
                elif step in ("cold2", "cold0", "cold4"):
                    pf = int(step[-1])
                    cold, ds = epoch(url, cache, epoch_no=0, prefetch=pf)
                    add(f"{step}_s", cold)
                    add(f"{step}_fetched", (store.sent() - before) / total)
                    if pf == 2:  # the second epoch and the local disk, alternating first
                        if r % 2:
                            add("local_s", epoch("", None, epoch_no=1, ds=local)[0])
                        warm, ds = epoch(url, cache, epoch_no=1, ds=ds)
                        add("warm_s", warm)
                        if not r % 2:
                            add("local_s", epoch("", None, epoch_no=1, ds=local)[0])
                    ds.close()
                elif step in peer_bytes:
                    got = peer_epochs(args.peers_python, store, step, f"s3://b/{step}", cache, r)
                    add(f"{step}_s", got[0])
                    add(f"{step}_warm_s", got[1])
                    add(f"{step}_fetched", (store.sent() - before) / peer_bytes[step])
                    local_peer = peer_epochs(args.peers_python, None, step,
                                             str(peers / step), cache, r)  # type: ignore[operator]
                    add(f"{step}_local_s", local_peer[1])  # its second: a warm page cache
                elif step == "partial":
                    _, ds = epoch(url, cache, epoch_no=0, fraction=0.25)
                    active, read, ahead = touched_bytes(ds, 0.25, 0)
                    ds.close()  # waits for the downloads in flight
                    got = store.sent() - before
                    add("partial_fetched_per_sample", got / read)
                    add("partial_over_touched", got / active)
                    add("partial_bound", (active + ahead) / active)
                else:
                    took, need = first_batch(big_url, cache)
                    add("ttfb_remote_s", took)
                    add("ttfb_needed", need)
                    add("ttfb_local_s", first_batch(str(big), None)[0])
                    add("ttfb_fetched", store.sent() - before)
                shutil.rmtree(cache, ignore_errors=True)
            print(r, {k: round(v[-1], 3) for k, v in rows.items()}, flush=True)
        loads.append(load())
    finally:
        local.close()
        store.close()
        shutil.rmtree(served, ignore_errors=True)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    link_bps = [total / s for s in rows["link_s"]]
    res = {
        "command": command_line(),
        "samples": n_samples, "shards": n_shards, "shard_MB": total / n_shards / 1e6,
        "total_MB": total / 1e6, "cap_MB_s": rate / 1e6, "link_MB_s": med(link_bps) / 1e6,
        "link_vs_cap": med(link_bps) / rate,
        "first_epoch_vs_link_prefetch2": [total / c / b for c, b in
                                          zip(rows["cold2_s"], link_bps, strict=True)],
        "first_epoch_vs_link_prefetch0": [total / c / b for c, b in
                                          zip(rows["cold0_s"], link_bps, strict=True)],
        "first_epoch_vs_link_prefetch4": [total / c / b for c, b in
                                          zip(rows["cold4_s"], link_bps, strict=True)],
        "first_epoch_fetched_over_shard_bytes": rows["cold2_fetched"] + rows["cold0_fetched"],
        "second_epoch_vs_local": [w and lo / w for w, lo in
                                  zip(rows["warm_s"], rows["local_s"], strict=True)],
        "local_epoch_vs_cap": [total / lo / rate for lo in rows["local_s"]],
        "partial_bytes_per_sample_read": rows["partial_fetched_per_sample"],
        "partial_bytes_per_sample_stored": total / n_samples,
        "partial_fetched_over_touched": rows["partial_over_touched"],
        "partial_allowed_over_touched": rows["partial_bound"],
        "big_samples": big_samples, "big_shards": big_shards,
        "ttfb_remote_s": rows["ttfb_remote_s"], "ttfb_local_s": rows["ttfb_local_s"],
        "ttfb_remote_vs_local": [a / b for a, b in
                                 zip(rows["ttfb_remote_s"], rows["ttfb_local_s"], strict=True)],
        "ttfb_fetched_bytes": rows["ttfb_fetched"],
        "ttfb_needed_bytes": rows["ttfb_needed"],
        "ttfb_vs_link_time_of_needed": [t / (n / b) for t, n, b in
                                        zip(rows["ttfb_remote_s"], rows["ttfb_needed"], link_bps,
                                            strict=True)],
        "load": loads, "cpus": os.cpu_count(), "prepare_s": prep_s, "rounds": args.rounds,
        "peers": {},
    }
    for name, size in peer_bytes.items():
        res["peers"][name] = {
            "MB": size / 1e6,
            "first_epoch_vs_link": [size / c / b for c, b in
                                    zip(rows[f"{name}_s"], link_bps, strict=True)],
            "fetched_over_shard_bytes": rows[f"{name}_fetched"],
            "second_epoch_vs_own_local": [lo / w for w, lo in
                                          zip(rows[f"{name}_warm_s"], rows[f"{name}_local_s"],
                                              strict=True)],
            "second_epoch_vs_detfmt_local": [lo / w for w, lo in
                                             zip(rows[f"{name}_warm_s"], rows["local_s"],
                                                 strict=True)],
            "own_local_vs_cap": [size / lo / rate for lo in rows[f"{name}_local_s"]],
        }
    return res


def table(res: dict) -> str:
    def mmm(xs: list[float], fmt: str = "{:.2f}") -> str:
        xs = sorted(xs)
        return " / ".join(fmt.format(x) for x in (xs[0], med(xs), xs[-1]))

    per_sample = res["partial_bytes_per_sample_stored"]
    lines = [
        f"`{res['command']}`", "",
        f"{res['samples']} samples in {res['shards']} shards of {res['shard_MB']:.2f} MB "
        f"({res['total_MB']:.1f} MB); cap {res['cap_MB_s']:.2f} MB/s (a plain client gets "
        f"{res['link_vs_cap']:.2f}x of it); {res['rounds']} interleaved rounds, min / median / "
        f"max; load {min(res['load']):.2f}-{max(res['load']):.2f} on {res['cpus']} CPUs.", "",
        "| figure | ratio |", "|---|---|",
        f"| first epoch, `prefetch_shards=2`: shard bytes/s vs the link's | "
        f"{mmm(res['first_epoch_vs_link_prefetch2'])} |",
        f"| first epoch, `prefetch_shards=0` (no download ahead) vs the link's | "
        f"{mmm(res['first_epoch_vs_link_prefetch0'])} |",
        f"| first epoch, `prefetch_shards=4` (a whole `shard_window` ahead) vs the link's | "
        f"{mmm(res['first_epoch_vs_link_prefetch4'])} |",
        f"| first epoch: bytes fetched / shard bytes | "
        f"{mmm(res['first_epoch_fetched_over_shard_bytes'], '{:.3f}')} |",
        f"| second epoch (cached) vs the local sharded root, images/s | "
        f"{mmm(res['second_epoch_vs_local'])} |",
        f"| local-disk epoch bytes/s vs the cap (headroom) | {mmm(res['local_epoch_vs_cap'])} |",
        f"| a quarter epoch: bytes fetched / bytes of the shards it read | "
        f"{mmm(res['partial_fetched_over_touched'], '{:.3f}')} (allowed with the 2 shards "
        f"ahead: {mmm(res['partial_allowed_over_touched'], '{:.3f}')}) |",
        f"| a quarter epoch: bytes fetched per sample read / stored bytes per sample | "
        f"{mmm([b / per_sample for b in res['partial_bytes_per_sample_read']])} |",
        f"| time to first batch, {res['big_samples']:,} samples in {res['big_shards']} shards, "
        f"remote vs local | {mmm(res['ttfb_remote_vs_local'])} "
        f"(remote {mmm(res['ttfb_remote_s'], '{:.2f}')} s) |",
        f"| time to first batch, remote, vs the link time of the bytes it needs (manifest "
        f"{res['ttfb_needed_bytes'][0] / 1e6:.2f} MB with the first window's shards) | "
        f"{mmm(res['ttfb_vs_link_time_of_needed'])} |",
    ]
    for name, p in res["peers"].items():
        title = {"mds": "MosaicML Streaming", "lit": "LitData"}[name]
        lines += [
            f"| {title}: first epoch vs the link's | {mmm(p['first_epoch_vs_link'])} |",
            f"| {title}: first epoch bytes fetched / its shard bytes | "
            f"{mmm(p['fetched_over_shard_bytes'], '{:.3f}')} |",
            f"| {title}: second epoch vs its own local-disk epoch | "
            f"{mmm(p['second_epoch_vs_own_local'])} |",
            f"| {title}: second epoch vs detfmt's local-disk epoch, images/s | "
            f"{mmm(p['second_epoch_vs_detfmt_local'])} |",
            f"| {title}: its local-disk epoch bytes/s vs the cap (headroom) | "
            f"{mmm(p['own_local_vs_cap'])} |",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED_DATA / "coco128-yolo"))
    parser.add_argument("--replicate", type=int, default=16, help="copies of coco128")
    parser.add_argument("--big", type=int, default=1_000_000, help="samples of the large root")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cap-mb", type=float, default=None, help="MB/s (default: auto)")
    parser.add_argument("--work", default=None, help="keep the written roots here")
    parser.add_argument("--quick", action="store_true", help="seconds: synthetic data, 1 round")
    parser.add_argument("--json", default=None)
    parser.add_argument("--peers-python", default=None,
                        help="python of a venv with mosaicml-streaming and litdata")
    parser.add_argument("--out", default=None, help="markdown table")
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.rate)
        return
    if args.quick:
        args.rounds = 1
    res = run(args)
    text = table(res)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
