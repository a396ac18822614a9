"""Benchmark detfmt.torch loaders against the loaders people use today, on the same pixels.

One command builds every stored variant from a real dataset (pre-resized to long side 640, then
physically replicated so each run lasts seconds), measures images/s, and writes a markdown table,
a JSON record and a PNG bar chart:

    python tools/bench_loader.py --data ../shared/data/raccoon --replicate 20 --out bench-out

Peers (ffcv, webdataset, litdata, mosaicml-streaming, tensordict, matplotlib) are optional: install
them with ``pip install 'detfmt[bench]'`` (FFCV also needs libopencv-dev, libturbojpeg0-dev and
pkg-config from apt). A peer that is not installed is skipped and the table says so.

Every method produces the same thing per batch: B sample images in one HWC uint8 batch buffer,
padded to the batch maximum (FFCV: letterboxed to 640x640, its raw decoder needs one size).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from benchpaths import SHARED_DATA, command_line

BATCH = 32
QUIET_CORES = 0.25  # retry a round when other processes used more than this many cores
LONG_SIDE = 640
RESULTS: list[dict] = []
LAST_MAKE: list = [None]
MAKERS: dict[str, tuple] = {}  # key -> (make, warmup, row) for the interleaved headline
HEADLINE_KEYS = ("limit_2", "stream_limit_2", "detfmt_raw_2", "ffcv_2", "detfmt_raw_1", "ring_2",
                 "detfmt_jpeg_1", "simplejpeg_1", "detfmt_jpeg_2")
SKIPPED: list[tuple[str, str]] = []
CLEANUP: list[Path] = []


# ----------------------------------------------------------------------------- data preparation


def load_voc(root: Path) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, Path]]:
    """Pascal VOC images + boxes, resized (PIL bilinear) so the long side is 640, as RGB arrays."""
    from PIL import Image

    out = []
    for xml in sorted((root / "annotations").glob("*.xml")):
        tree = ET.parse(xml).getroot()
        image_path = root / "images" / tree.findtext("filename")
        if not image_path.exists():
            image_path = root / "images" / (xml.stem + ".jpg")
        with Image.open(image_path) as img:
            img = img.convert("RGB")
            w0, h0 = img.size
            scale = LONG_SIDE / max(w0, h0)
            size = (max(1, round(w0 * scale)), max(1, round(h0 * scale)))
            arr = np.asarray(img.resize(size, Image.BILINEAR), dtype=np.uint8)
        boxes = []
        for obj in tree.iter("object"):
            bb = obj.find("bndbox")
            x0, y0, x1, y1 = (float(bb.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
            sx, sy = size[0] / w0, size[1] / h0
            box = [(x0 - 1) * sx, (y0 - 1) * sy, x1 * sx, y1 * sy]
            boxes.append([min(max(v, 0.0), lim) for v, lim in
                          zip(box, (size[0], size[1], size[0], size[1]), strict=True)])
        b = np.array(boxes, np.float32).reshape(-1, 4)
        out.append((arr, b, np.zeros(len(b), np.int32), image_path))
    return out


def pad_into(buf: np.ndarray, j: int, img: np.ndarray) -> None:
    """Copy one image into slot j of a (B, H, W, 3) buffer, zeroing the rest of the slot."""
    h, w = img.shape[:2]
    slot = buf[j]
    slot[h:] = 0
    slot[:h, w:] = 0
    np.copyto(slot[:h, :w], img)


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def warm(path: Path) -> None:
    """Read every file once so the page cache holds it (warm-cache measurements)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    buf = bytearray(16 << 20)
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def drop_caches(paths: list[Path]) -> str:
    """Empty the page cache: drop_caches as root, else fadvise(DONTNEED) on the files."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return "drop_caches"
    except OSError:
        for root in paths:
            for f in ([root] if root.is_file() else root.rglob("*")):
                if f.is_file():
                    fd = os.open(f, os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
        return "fadvise"


# ----------------------------------------------------------------------------- timing


def _busy_jiffies() -> tuple[float, float]:
    """(all CPUs' busy seconds, this process tree's CPU seconds) so far."""
    with open("/proc/stat") as fh:
        fields = [float(v) for v in fh.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    busy = (sum(fields) - fields[3] - fields[4]) / tick  # minus idle and iowait
    own = 0.0
    try:
        import psutil

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                own += t.user + t.system
    except ImportError:
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
    return busy, own


class ForeignLoad:
    """CPU cores used by other processes while a round ran (the machine is shared)."""

    def __enter__(self) -> ForeignLoad:
        self.start, self.t0 = _busy_jiffies(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        end = _busy_jiffies()
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        self.cores = max(0.0, ((end[0] - self.start[0]) - (end[1] - self.start[1])) / elapsed)


def one_round(make: Callable[[], Iterator[int]], warmup: int, seconds: float,
              before_round: Callable[[], None] | None = None) -> tuple[float, float]:
    """(images/s, foreign cores) of one timed run of an endless batch iterator."""
    if before_round is not None:
        before_round()
    gc.collect()
    it = make()
    try:
        for _ in range(warmup):
            next(it)
        count, start = 0, time.perf_counter()
        with ForeignLoad() as load:
            for n in it:
                count += n
                if time.perf_counter() - start >= seconds:
                    break
        return count / (time.perf_counter() - start), load.cores
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def add_row(name: str, rates: list[float], foreign: list[float], **meta) -> dict:
    row = {"method": name, "median": statistics.median(rates), "min": min(rates),
           "max": max(rates), "rates": rates, "foreign_cores": [round(f, 2) for f in foreign],
           **meta}
    RESULTS.append(row)
    print(f"  {name}: {row['median']:.0f} img/s [{row['min']:.0f}..{row['max']:.0f}] "
          f"(foreign cores {max(foreign):.2f})", flush=True)
    return row


def measure(name: str, make: Callable[[], Iterator[int]], *, group: str, stored: str = "",
            nbytes: int | None = None, threads: str = "", rounds: int = 3, seconds: float = 3.0,
            warmup: int = 1, before_round: Callable[[], None] | None = None,
            note: str = "") -> dict | None:
    """Images/s of an endless batch iterator: median and range over rounds."""
    rates, foreign = [], []
    try:
        attempts = 0
        while len(rates) < rounds:
            rate, cores = one_round(make, warmup, seconds, before_round)
            attempts += 1
            # a round disturbed by other processes is measured again (at most 2 extra tries)
            if cores > QUIET_CORES and attempts < 3 * rounds:
                print(f"    retry: {cores:.2f} foreign cores", flush=True)
                continue
            rates.append(rate)
            foreign.append(cores)
    except Exception as error:  # a peer failing is a result to report, not a crash
        traceback.print_exc()
        SKIPPED.append((name, f"failed: {type(error).__name__}: {error}"))
        print(f"  {name}: FAILED {error}", flush=True)
        return None
    LAST_MAKE[0] = (make, warmup)
    return add_row(name, rates, foreign, group=group, stored=stored, bytes=nbytes,
                   threads=threads, note=note)


def headline(args) -> None:
    """The goal comparisons again, with their rounds interleaved (A B C A B C ...), so that the
    load other processes put on the shared machine hits every method alike."""
    keys = [k for k in HEADLINE_KEYS if k in MAKERS]
    if len(keys) < 2:
        return
    rates: dict[str, list[float]] = {k: [] for k in keys}
    foreign: dict[str, list[float]] = {k: [] for k in keys}
    print(f"interleaved headline: {keys}", flush=True)
    for _ in range(args.rounds + 2):
        for k in keys:
            make, warmup, _row = MAKERS[k]
            try:
                rate, cores = one_round(make, warmup, args.seconds)
            except Exception as error:
                print(f"  headline {k} failed: {error}", flush=True)
                continue
            rates[k].append(rate)
            foreign[k].append(cores)
    for k in keys:
        if rates[k]:
            base = MAKERS[k][2]
            add_row(f"interleaved: {base['method']}", rates[k], foreign[k], group="headline",
                    stored=base["stored"], bytes=base["bytes"], threads=base["threads"],
                    note="", key="h_" + k)


def forever(make_epoch: Callable[[int], Iterator[int]]) -> Iterator[int]:
    epoch = 0
    while True:
        yield from make_epoch(epoch)
        epoch += 1


def random_batches(n: int, seed: int = 0) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n)
        for k in range(0, n - BATCH + 1, BATCH):
            yield perm[k : k + BATCH]


# ----------------------------------------------------------------------------- methods


def bench_limit(raw_ds, threads: int, args, stream: bool = False) -> None:
    """np.copyto of the same bytes: B consecutive samples' payload, one block, into the buffer.
    With ``stream``, the copy is the gather kernel's own with non-temporal stores (the limit of
    the store kind the Loader uses for large batches)."""
    copy = np.copyto
    if stream:
        from detfmt.reading import kernel

        if not kernel.load():
            SKIPPED.append(("streaming copy limit", "numba is not installed"))
            return
        from detfmt.reading.kernel_numba import copy_bytes

        def copy(dst, src):
            copy_bytes(dst, src, True)
    blob = np.memmap(raw_ds.path / "images.bin", np.uint8, mode="r")
    offsets = np.asarray(raw_ds.index["offset"], np.int64)
    n = len(offsets)
    ends = offsets + np.asarray(raw_ds.index["nbytes"], np.int64)
    buf = np.empty(BATCH * LONG_SIDE * LONG_SIDE * 3, np.uint8)

    def gen() -> Iterator[int]:
        from concurrent.futures import ThreadPoolExecutor

        rng = np.random.default_rng(1)
        with ThreadPoolExecutor(threads) as pool:
            while True:
                k = int(rng.integers(0, n - BATCH))
                lo, hi = int(offsets[k]), int(ends[k + BATCH - 1])
                size = hi - lo
                cuts = np.linspace(0, size, threads + 1).astype(np.int64).tolist()
                parts = [(buf[cuts[t] : cuts[t + 1]], blob[lo + cuts[t] : lo + cuts[t + 1]])
                         for t in range(threads)]
                list(pool.map(lambda pair: copy(*pair), parts))
                yield BATCH

    name = "streaming copy (non-temporal stores" if stream else "memcpy limit (np.copyto"
    measure(f"{name}, {threads} threads)", gen, group="limit",
            stored="raw blob", nbytes=du(raw_ds.path / "images.bin"), threads=str(threads),
            rounds=args.rounds, seconds=args.seconds)


def bench_detfmt_loader(ds, label: str, args, stored: str, **kwargs) -> dict | None:
    import detfmt.torch as dt

    threads = kwargs.get("num_threads", 1)

    def gen() -> Iterator[int]:
        loader = dt.Loader(ds, BATCH, seed=0, drop_last=True, delivery=dt.Delivery(**kwargs))
        try:
            while True:
                for batch in loader:
                    yield len(batch)
        finally:
            loader.close()

    # warm-up: enough batches to allocate (and first-touch) the loader's whole buffer ring
    return measure(label, gen, group="detfmt", stored=stored, nbytes=du(ds.path),
                   threads=str(threads), rounds=args.rounds, seconds=args.seconds, warmup=6)


def bench_ring_dataloader(ds, args, workers: int, stored: str = "raw") -> dict | None:
    import detfmt.torch as dt

    def gen() -> Iterator[int]:
        loader = dt.RingDataLoader(ds, BATCH, num_workers=workers, seed=0, drop_last=True,
                                   prefetch_factor=4)
        while True:
            for batch in loader:
                yield len(batch)

    return measure(f"detfmt RingDataLoader {stored} ({workers} workers, shared ring)", gen,
                   group="detfmt", stored=stored, nbytes=du(ds.path), threads=f"{workers} proc",
                   rounds=args.rounds, seconds=args.seconds, warmup=4)


def bench_map_dataset(ds, args, workers: int) -> dict | None:
    import torch.utils.data as tud

    import detfmt.torch as dt

    def gen() -> Iterator[int]:
        loader = tud.DataLoader(dt.DetectionDataset(ds.path), batch_size=BATCH, shuffle=True,
                                num_workers=workers, collate_fn=dt.collate, drop_last=True,
                                prefetch_factor=4, persistent_workers=False)
        while True:
            for batch in loader:
                yield len(batch)

    return measure(f"detfmt DetectionDataset + DataLoader({workers} workers, collate)", gen,
                   group="detfmt", stored="raw", nbytes=du(ds.path), threads=f"{workers} proc",
                   rounds=args.rounds, seconds=args.seconds, warmup=4)


def bench_simplejpeg(jpeg_ds, args) -> dict | None:
    """Plain simplejpeg decode of the same JPEG bytes into a reused buffer, one thread."""
    import simplejpeg

    n = len(jpeg_ds)
    buf = np.empty((BATCH, LONG_SIDE, LONG_SIDE, 3), np.uint8)
    blob = np.memmap(jpeg_ds.path / "images.bin", np.uint8, mode="r")
    off = np.asarray(jpeg_ds.index["offset"], np.int64)
    nb = np.asarray(jpeg_ds.index["nbytes"], np.int64)
    hw = np.asarray(jpeg_ds.sizes)

    def gen() -> Iterator[int]:
        for idx in random_batches(n):
            for j, i in enumerate(idx.tolist()):
                h, w = int(hw[i, 0]), int(hw[i, 1])
                out = buf[j].reshape(-1)[: h * w * 3].reshape(h, w, 3)
                simplejpeg.decode_jpeg(blob[off[i] : off[i] + nb[i]], colorspace="RGB",
                                       buffer=out)
            yield BATCH

    return measure("simplejpeg decode only (1 thread, same bytes)", gen, group="reference",
                   stored="jpeg q90", nbytes=du(jpeg_ds.path), threads="1",
                   rounds=args.rounds, seconds=args.seconds)


def bench_pread_plain(raw_ds, args, label: str, before=None) -> dict | None:
    """The baseline's d_pread: os.preadv of each sample of a random batch into a packed buffer."""
    n = len(raw_ds)
    off = np.asarray(raw_ds.index["offset"], np.int64)
    nb = np.asarray(raw_ds.index["nbytes"], np.int64)
    buf = np.empty(BATCH * LONG_SIDE * LONG_SIDE * 3, np.uint8)
    view = memoryview(buf)

    def gen() -> Iterator[int]:
        fd = os.open(raw_ds.path / "images.bin", os.O_RDONLY)
        try:
            for idx in random_batches(n, seed=7):
                pos = 0
                for i in idx.tolist():
                    size = int(nb[i])
                    os.preadv(fd, [view[pos : pos + size]], int(off[i]))
                    pos += size
                yield BATCH
        finally:
            os.close(fd)

    return measure(label, gen, group="reference", stored="raw", nbytes=du(raw_ds.path),
                   threads="1", rounds=args.rounds, seconds=args.seconds, before_round=before)


def bench_pil(samples, args, workers: int) -> dict | None:
    import torch
    import torch.utils.data as tud

    files = [s[3] for s in samples]
    n = len(files) * args.replicate

    def gen() -> Iterator[int]:
        loader = tud.DataLoader(_PilDataset(files, n), batch_size=BATCH, shuffle=True,
                                num_workers=workers, collate_fn=_pad_collate, drop_last=True,
                                prefetch_factor=4 if workers else None)
        while True:
            for batch in loader:
                yield len(batch)

    torch.set_num_threads(1)
    return measure(f"PIL JPEG files, decode+resize, DataLoader({workers} workers)", gen,
                   group="peer", stored="source JPEG files", nbytes=sum(du(f) for f in files),
                   threads=f"{workers} proc", rounds=args.rounds, seconds=args.seconds,
                   warmup=4, note=f"{len(files)} source files reused x{args.replicate}")


class _PilDataset:
    def __init__(self, files, n):
        self.files, self.n = files, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch
        from PIL import Image

        with Image.open(self.files[i % len(self.files)]) as img:
            img = img.convert("RGB")
            w0, h0 = img.size
            s = LONG_SIDE / max(w0, h0)
            img = img.resize((max(1, round(w0 * s)), max(1, round(h0 * s))), Image.BILINEAR)
            return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())


def _pad_collate(images):
    import torch

    h = max(i.shape[0] for i in images)
    w = max(i.shape[1] for i in images)
    out = torch.zeros((len(images), h, w, 3), dtype=torch.uint8)
    for j, img in enumerate(images):
        out[j, : img.shape[0], : img.shape[1]] = img
    return out


def bench_npy(samples, work: Path, args) -> None:
    """Ultralytics-style cache: one .npy per pre-resized image, np.load per sample."""
    root = work / "npy"
    n = len(samples) * args.replicate
    if not root.exists():
        root.mkdir(parents=True)
        for i in range(n):
            np.save(root / f"{i:06d}.npy", samples[i % len(samples)][0])
    warm(root)
    buf = np.empty((BATCH, LONG_SIDE, LONG_SIDE, 3), np.uint8)

    def gen() -> Iterator[int]:
        for idx in random_batches(n):
            for j, i in enumerate(idx.tolist()):
                pad_into(buf, j, np.load(root / f"{i:06d}.npy"))
            yield BATCH

    measure("Ultralytics-style .npy per image (np.load)", gen, group="peer", stored=".npy files",
            nbytes=du(root), threads="1", rounds=args.rounds, seconds=args.seconds)
    if not args.keep:
        shutil.rmtree(root)


def fresh_dir(path: Path, create: bool = True) -> Path:
    """``path`` emptied of an earlier run's peer data (and created unless the peer does it)."""
    if path.exists():
        shutil.rmtree(path)
    if create:
        path.mkdir(parents=True)
    return path


def bench_tensordict(samples, work: Path, args) -> None:
    try:
        import torch
        from tensordict import MemoryMappedTensor, TensorDict
    except ImportError as error:
        SKIPPED.append(("tensordict", f"not installed ({error})"))
        return
    root = fresh_dir(work / "tensordict")
    n = len(samples) * args.replicate
    images = MemoryMappedTensor.empty((n, LONG_SIDE, LONG_SIDE, 3), dtype=torch.uint8,
                                      filename=str(root / "images.memmap"))
    padded = np.zeros((LONG_SIDE, LONG_SIDE, 3), np.uint8)
    for u, (arr, *_rest) in enumerate(samples):
        padded[:] = 0
        padded[: arr.shape[0], : arr.shape[1]] = arr
        src = torch.from_numpy(padded)
        for i in range(u, n, len(samples)):
            images[i].copy_(src)
    td = TensorDict({"image": images}, batch_size=[n])
    warm(root)
    out = torch.empty((BATCH, LONG_SIDE, LONG_SIDE, 3), dtype=torch.uint8)

    def gen_index() -> Iterator[int]:
        for idx in random_batches(n):
            batch = td[torch.from_numpy(idx)]
            out.copy_(batch["image"])
            yield BATCH

    def gen_select() -> Iterator[int]:
        for idx in random_batches(n):
            torch.index_select(images, 0, torch.from_numpy(idx), out=out)
            yield BATCH

    torch.set_num_threads(1)
    size = du(root)
    measure("tensordict MemoryMappedTensor padded, td[idx]", gen_index, group="peer",
            stored="padded 640x640 memmap", nbytes=size, threads="1", rounds=args.rounds,
            seconds=args.seconds)
    measure("tensordict MemoryMappedTensor padded, index_select(out=)", gen_select, group="peer",
            stored="padded 640x640 memmap", nbytes=size, threads="1", rounds=args.rounds,
            seconds=args.seconds)
    if not args.keep:
        shutil.rmtree(root)


def bench_webdataset(samples, work: Path, args) -> None:
    try:
        import webdataset as wds
    except ImportError as error:
        SKIPPED.append(("webdataset", f"not installed ({error})"))
        return
    root = fresh_dir(work / "wds")
    n = len(samples) * args.replicate
    with wds.ShardWriter(str(root / "shard-%05d.tar"), maxsize=256 << 20, verbose=0) as sink:
        for i in range(n):
            arr, boxes, classes, _ = samples[i % len(samples)]
            sink.write({"__key__": f"{i:07d}", "u8": arr.tobytes(),
                        "json": json.dumps({"h": arr.shape[0], "w": arr.shape[1],
                                            "boxes": boxes.tolist(),
                                            "classes": classes.tolist()}).encode()})
    shards = sorted(str(p) for p in root.glob("*.tar"))
    warm(root)
    buf = np.empty((BATCH, LONG_SIDE, LONG_SIDE, 3), np.uint8)

    def gen() -> Iterator[int]:
        dataset = wds.WebDataset(shards, shardshuffle=len(shards), empty_check=False).shuffle(500)
        while True:
            j = 0
            for sample in dataset:
                meta = json.loads(sample["json"])
                img = np.frombuffer(sample["u8"], np.uint8).reshape(meta["h"], meta["w"], 3)
                pad_into(buf, j, img)
                j += 1
                if j == BATCH:
                    j = 0
                    yield BATCH

    measure("WebDataset tar shards (raw .u8), shuffle(500)", gen, group="peer",
            stored="tar shards, raw", nbytes=du(root), threads="1", rounds=args.rounds,
            seconds=args.seconds, note="shard-level + buffer shuffle, not a full permutation")
    if not args.keep:
        shutil.rmtree(root)


def _litdata_item(i):
    arr, boxes, classes, _ = _LIT_SAMPLES[i % len(_LIT_SAMPLES)]
    return {"image": arr, "boxes": boxes, "classes": classes}


_LIT_SAMPLES: list = []


def bench_litdata(samples, work: Path, args) -> None:
    try:
        import litdata
    except ImportError as error:
        SKIPPED.append(("litdata", f"not installed ({error})"))
        return
    root = fresh_dir(work / "litdata", create=False)
    n = len(samples) * args.replicate
    _LIT_SAMPLES[:] = samples
    with contextlib.redirect_stdout(sys.stderr):
        litdata.optimize(fn=_litdata_item, inputs=list(range(n)), output_dir=str(root),
                         chunk_bytes="256MB", num_workers=2, start_method="fork", verbose=False)
    warm(root)
    buf = np.empty((BATCH, LONG_SIDE, LONG_SIDE, 3), np.uint8)

    def gen() -> Iterator[int]:
        dataset = litdata.StreamingDataset(str(root), shuffle=True, seed=0)
        loader = litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=2,
                                             collate_fn=list, drop_last=True)
        while True:
            for batch in loader:
                for j, item in enumerate(batch):
                    pad_into(buf, j, np.asarray(item["image"]))
                yield len(batch)

    measure("LitData optimize + StreamingDataset, StreamingDataLoader(2 workers)", gen,
            group="peer", stored="litdata chunks", nbytes=du(root), threads="2 proc",
            rounds=args.rounds, seconds=args.seconds, warmup=4)
    if not args.keep:
        shutil.rmtree(root)


def _torchvision_stub_dir(work: Path) -> Path | None:
    """mosaicml-streaming imports torchvision at import time; a CPU-only torch has no matching
    torchvision on PyPI, so give it two inert names (its MDS read/write path never calls them)."""
    try:
        import torchvision  # noqa: F401

        return None
    except Exception:
        pass
    stub = work / "tv-stub" / "torchvision"
    (stub / "transforms").mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text("from . import datasets, transforms\n")
    (stub / "datasets.py").write_text("class VisionDataset:\n    pass\n")
    (stub / "transforms" / "__init__.py").write_text("from . import functional\n")
    (stub / "transforms" / "functional.py").write_text(
        "def to_tensor(x):\n    raise NotImplementedError\n")
    return stub.parent


def bench_mds(samples, work: Path, args) -> None:
    stub = _torchvision_stub_dir(work)
    if stub is not None:
        sys.path.insert(0, str(stub))
    try:
        import streaming
    except ImportError as error:
        SKIPPED.append(("mosaicml-streaming", f"not installed ({error})"))
        return
    root = fresh_dir(work / "mds", create=False)
    n = len(samples) * args.replicate
    columns = {"image": "ndarray:uint8", "boxes": "ndarray:float32", "classes": "ndarray:int32"}
    with streaming.MDSWriter(out=str(root), columns=columns, compression=None,
                             size_limit=256 << 20) as out:
        for i in range(n):
            arr, boxes, classes, _ = samples[i % len(samples)]
            out.write({"image": arr, "boxes": boxes, "classes": classes})
    warm(root)
    buf = np.empty((BATCH, LONG_SIDE, LONG_SIDE, 3), np.uint8)

    def gen() -> Iterator[int]:
        import torch.utils.data as tud

        streaming.base.util.clean_stale_shared_memory()
        dataset = streaming.StreamingDataset(local=str(root), shuffle=True, batch_size=BATCH,
                                             shuffle_seed=0)
        loader = tud.DataLoader(dataset, batch_size=BATCH, num_workers=2, collate_fn=list,
                                drop_last=True)
        while True:
            for batch in loader:
                for j, item in enumerate(batch):
                    pad_into(buf, j, item["image"])
                yield len(batch)

    note = "torchvision stub on sys.path (import-time only)" if stub is not None else ""
    measure("MosaicML Streaming MDS (ndarray:uint8), DataLoader(2 workers)", gen, group="peer",
            stored="mds shards, raw", nbytes=du(root), threads="2 proc", rounds=args.rounds,
            seconds=args.seconds, warmup=4, note=note)
    if not args.keep:
        shutil.rmtree(root)


class _FfcvSource:
    def __init__(self, samples, n, max_boxes):
        self.samples, self.n, self.max_boxes = samples, n, max_boxes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        arr, boxes, _classes, _ = self.samples[i % len(self.samples)]
        canvas = np.zeros((LONG_SIDE, LONG_SIDE, 3), np.uint8)
        canvas[: arr.shape[0], : arr.shape[1]] = arr
        flat = np.zeros(self.max_boxes * 4, np.float32)
        flat[: boxes.size] = boxes.ravel()
        return canvas, flat


def bench_ffcv(samples, work: Path, args) -> None:
    try:
        from ffcv.fields import NDArrayField, RGBImageField
        from ffcv.fields.decoders import NDArrayDecoder, SimpleRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.writer import DatasetWriter
    except Exception as error:
        SKIPPED.append(("ffcv", f"not importable ({type(error).__name__}: {error})"))
        return
    path = work / "ffcv.beton"
    n = len(samples) * args.replicate
    max_boxes = max(len(s[1]) for s in samples)
    writer = DatasetWriter(str(path), {
        "image": RGBImageField(write_mode="raw", max_resolution=LONG_SIDE),
        "boxes": NDArrayField(np.dtype(np.float32), (max_boxes * 4,)),
    }, num_workers=2)
    with contextlib.redirect_stdout(sys.stderr), contextlib.redirect_stderr(sys.stderr):
        writer.from_indexed_dataset(_FfcvSource(samples, n, max_boxes))
    warm(path)
    for threads in (1, 2):
        def gen(threads=threads) -> Iterator[int]:
            loader = Loader(str(path), batch_size=BATCH, num_workers=threads, os_cache=True,
                            order=OrderOption.RANDOM, seed=0, drop_last=True,
                            pipelines={"image": [SimpleRGBImageDecoder()],
                                       "boxes": [NDArrayDecoder()]})
            while True:
                for images, _boxes in loader:
                    yield len(images)

        measure(f"FFCV raw, letterboxed 640x640, RANDOM ({threads} threads)", gen, group="peer",
                stored="ffcv raw (padded)", nbytes=du(path), threads=str(threads),
                rounds=args.rounds, seconds=args.seconds, warmup=2)
        tag(f"ffcv_{threads}")
    CLEANUP.append(path)  # kept for the interleaved headline, removed at the end


def bench_cold(raw, args) -> str:
    """Cold page cache: drop it, then time the first K batches only (each sample is read at most
    once, so nothing is served from the cache the run itself fills). Methods alternate round by
    round, and each round uses another epoch's order."""
    import detfmt.torch as dt

    k = max(4, min(40, len(raw) // BATCH // 3))
    off = np.asarray(raw.index["offset"], np.int64)
    nb = np.asarray(raw.index["nbytes"], np.int64)
    buf = np.empty(BATCH * LONG_SIDE * LONG_SIDE * 3, np.uint8)

    def plain(epoch: int) -> Iterator[int]:
        fd = os.open(raw.path / "images.bin", os.O_RDONLY)
        view = memoryview(buf)
        try:
            for idx in random_batches(len(raw), seed=100 + epoch):
                pos = 0
                for i in idx.tolist():
                    size = int(nb[i])
                    os.preadv(fd, [view[pos : pos + size]], int(off[i]))
                    pos += size
                yield BATCH
        finally:
            os.close(fd)

    def loader(epoch: int, order: str = "random", **kwargs) -> Iterator[int]:
        it = dt.Loader(raw, BATCH, seed=0, drop_last=True, sampling=dt.Sampling(order=order),
                       delivery=dt.Delivery(**kwargs))
        it.set_epoch(epoch)
        for batch in it:
            yield len(batch)

    methods = [
        ("COLD plain os.preadv of random batches (1 thread)", "cold_pread", "1", plain),
        ("COLD detfmt Loader io=pread, random (1 thread)", "cold_detfmt_pread_1", "1",
         lambda e: loader(e, io="pread", num_threads=1)),
        ("COLD detfmt Loader io=pread, random (2 threads)", "cold_detfmt_pread", "2",
         lambda e: loader(e, io="pread", num_threads=2)),
        ("COLD detfmt Loader io=pread, quasi_random (2 threads)", "cold_detfmt_quasi", "2",
         lambda e: loader(e, io="pread", num_threads=2, order="quasi_random")),
        ("COLD detfmt Loader io=mmap, random (2 threads)", "cold_detfmt_mmap", "2",
         lambda e: loader(e, io="mmap", num_threads=2)),
    ]
    rates: dict[str, list[float]] = {m[1]: [] for m in methods}
    foreign: dict[str, list[float]] = {m[1]: [] for m in methods}
    how = ""
    for r in range(args.rounds):
        for name, key, _threads, make in methods:
            how = drop_caches([raw.path])
            try:
                it = make(r)
                count, start = 0, time.perf_counter()
                with ForeignLoad() as load:
                    for n in it:
                        count += n
                        if count >= k * BATCH:
                            break
                rates[key].append(count / (time.perf_counter() - start))
                foreign[key].append(load.cores)
                it.close()
            except Exception as error:
                SKIPPED.append((name, f"failed: {type(error).__name__}: {error}"))
    for name, key, threads, _make in methods:
        if rates[key]:
            add_row(name, rates[key], foreign[key], group="cold", stored="raw",
                    bytes=du(raw.path), threads=threads, key=key,
                    note=f"first {k} batches after emptying the page cache ({how})")
    return how


# ----------------------------------------------------------------------------- report


def write_report(out: Path, args, context: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    refs = {r["key"]: r["median"] for r in RESULTS if r.get("key") in ("detfmt_raw_2",
                                                                     "h_detfmt_raw_2")}
    lines = [
        "# detfmt.torch loader benchmark",
        "",
        f"Command: `{context['command']}`",
        "",
        f"Machine: {context['machine']}; dataset: {context['dataset']}; batch {BATCH}; "
        f"{args.rounds} rounds of >= {args.seconds} s after warm-up; median [min..max].",
        "Ratio: to the detfmt Loader, raw, 2 threads, warm cache (the first detfmt row; for the "
        "'interleaved' rows, to its interleaved row). The interleaved rows re-measure the goal "
        "pairs with alternating rounds (A B C A B C ...), so other processes' load hits them "
        "alike; the goals use them when present.",
        f"The machine is shared: a round during which other processes used more than "
        f"{QUIET_CORES} cores was measured again (up to 3x the rounds); the last column shows "
        "the worst foreign load among the kept rounds.",
        "",
        "| method | stored as | on disk | threads | img/s | ratio | foreign cores (max) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in RESULTS:
        size = f"{r['bytes'] / 1e9:.2f} GB" if r.get("bytes") else ""
        ref_rate = refs.get("h_detfmt_raw_2" if r["group"] == "headline" else "detfmt_raw_2")
        ratio = f"{r['median'] / ref_rate:.3f}" if ref_rate else ""
        note = f" ({r['note']})" if r.get("note") else ""
        lines.append(f"| {r['method']}{note} | {r['stored']} | {size} | {r['threads']} | "
                     f"{r['median']:,.0f} [{r['min']:,.0f}..{r['max']:,.0f}] | {ratio} | "
                     f"{max(r['foreign_cores']):.2f} |")
    if SKIPPED:
        lines += ["", "Skipped or failed:", ""]
        lines += [f"- {name}: {why}" for name, why in SKIPPED]
    goals = context.get("goals", [])
    if goals:
        lines += ["", "## Goals (issue 4)", "", "| goal | measured | met |", "|---|---|---|"]
        lines += [f"| {g} | {m} | {'yes' if ok else 'NO'} |" for g, m, ok in goals]
    (out / "loader.md").write_text("\n".join(lines) + "\n")
    (out / "loader.json").write_text(json.dumps(
        {"context": context, "results": RESULTS, "skipped": SKIPPED}, indent=1, default=str))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
        return
    rows = sorted(RESULTS, key=lambda r: r["median"])
    colors = {"detfmt": "#1f77b4", "peer": "#ff7f0e", "limit": "#2ca02c", "reference": "#7f7f7f",
              "cold": "#9467bd", "headline": "#17becf"}
    fig, ax = plt.subplots(figsize=(11, 0.38 * len(rows) + 1.5))
    ax.barh([r["method"] for r in rows], [r["median"] for r in rows],
            xerr=[[r["median"] - r["min"] for r in rows], [r["max"] - r["median"] for r in rows]],
            color=[colors.get(r["group"], "#333") for r in rows])
    ax.set_xscale("log")
    ax.set_xlabel("images/s (log scale), batch 32, ~900 KB per decoded image")
    ax.set_title("detfmt.torch loader vs peers\nblue: detfmt, orange: peers, green: memcpy, "
                 "cyan: interleaved re-runs, purple: cold cache", fontsize=9, loc="right")
    for k, r in enumerate(rows):
        ax.text(r["median"] * 1.05, k, f"{r['median']:,.0f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "loader.png", dpi=110)


def goal_rows() -> list[tuple[str, str, bool]]:
    by = {r.get("key"): r["median"] for r in RESULTS if r.get("key")}
    for key in list(by):  # prefer the interleaved measurement of a pair when there is one
        if key.startswith("h_"):
            by[key[2:]] = by[key]
    goals = []

    def add(text, a, b, factor, fmt="{:.2f}x"):
        if a in by and b in by:
            ratio = by[a] / by[b]
            goals.append((text, fmt.format(ratio), ratio >= factor))

    add(">= 0.8x memcpy limit (raw, warm, 2 threads)", "detfmt_raw_2", "limit_2", 0.8)
    best_peer = max((r for r in RESULTS if r["group"] == "peer" and r["threads"] in ("2",
                     "2 proc")), key=lambda r: r["median"], default=None)
    if best_peer is not None and best_peer.get("key") and by.get(best_peer["key"]):
        best_peer = {**best_peer, "median": by[best_peer["key"]]}
    if best_peer and "detfmt_raw_2" in by:
        ratio = by["detfmt_raw_2"] / best_peer["median"]
        goals.append((f">= 1.5x best peer at 2 threads ({best_peer['method']})",
                      f"{ratio:.2f}x", ratio >= 1.5))
    add(">= 1.5x FFCV raw at equal threads (2)", "detfmt_raw_2", "ffcv_2", 1.5)
    add(">= 30x PIL DataLoader(2 workers)", "detfmt_raw_2", "pil_2", 30)
    add("RingDataLoader (2 workers) >= one process (Loader, 1 thread)", "ring_2", "detfmt_raw_1",
        1.0)
    add("JPEG, 1 thread >= 0.9x plain simplejpeg", "detfmt_jpeg_1", "simplejpeg_1", 0.9)
    add("JPEG scaling 2 threads / 1 thread >= 1.6x", "detfmt_jpeg_2", "detfmt_jpeg_1", 1.6)
    add("cold, pread loader (2 threads) >= 0.9x plain pread (random, 1 thread)",
        "cold_detfmt_pread", "cold_pread", 0.9)
    add("cold, pread loader (1 thread) >= 0.9x plain pread (random, 1 thread)",
        "cold_detfmt_pread_1", "cold_pread", 0.9)
    add("cold, quasi-random loader (2 threads) >= 0.9x plain pread (random, 1 thread)",
        "cold_detfmt_quasi", "cold_pread", 0.9)
    return goals


def tag(key: str) -> None:
    if RESULTS and "key" not in RESULTS[-1]:
        RESULTS[-1]["key"] = key
        if LAST_MAKE[0] is not None:
            MAKERS[key] = (*LAST_MAKE[0], RESULTS[-1])
    LAST_MAKE[0] = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "raccoon")
    parser.add_argument("--replicate", type=int, default=20)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-loader")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--skip", default="", help="comma list: peers,cold,jpeg,zstd,dataloader")
    parser.add_argument("--keep", action="store_true", help="keep the generated peer data")
    parser.add_argument("--from-json", type=Path, help="only re-render loader.md/.png from a "
                        "loader.json written by an earlier run")
    args = parser.parse_args()
    if args.from_json:
        record = json.loads(args.from_json.read_text())
        RESULTS.extend(record["results"])
        SKIPPED.extend(tuple(x) for x in record["skipped"])
        args.rounds = int(record["context"].get("rounds", args.rounds))
        args.seconds = float(record["context"].get("seconds", args.seconds))
        write_report(args.out, args, record["context"])
        return
    skip = set(filter(None, args.skip.split(",")))
    import torch

    import detfmt

    torch.set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    samples = load_voc(args.data)
    n = len(samples) * args.replicate
    print(f"{len(samples)} images x {args.replicate} = {n} samples "
          f"({np.mean([s[0].nbytes for s in samples]) / 1e3:.0f} KB mean)", flush=True)

    def write(codec: str):
        path = args.work / f"detfmt-{codec}"
        if not path.exists():
            def gen():
                for i in range(n):
                    arr, boxes, classes, _ = samples[i % len(samples)]
                    yield {"image": arr, "boxes": boxes, "classes": classes}
            t = time.time()
            detfmt.write(gen(), path, classes=["raccoon"], codec=codec, workers=2,
                         progress=False)
            print(f"wrote {codec}: {time.time() - t:.1f} s, {du(path) / 1e9:.2f} GB", flush=True)
        return detfmt.open(path)

    raw = write("raw")
    warm(raw.path)
    # ---- warm cache, raw
    bench_limit(raw, 2, args)
    tag("limit_2")
    bench_limit(raw, 1, args)
    tag("limit_1")
    bench_limit(raw, 2, args, stream=True)
    tag("stream_limit_2")
    bench_limit(raw, 1, args, stream=True)
    tag("stream_limit_1")
    bench_detfmt_loader(raw, "detfmt Loader raw (2 threads)", args, "raw", num_threads=2)
    tag("detfmt_raw_2")
    bench_detfmt_loader(raw, "detfmt Loader raw (1 thread)", args, "raw", num_threads=1)
    tag("detfmt_raw_1")
    bench_detfmt_loader(raw, "detfmt Loader raw, io=pread (2 threads)", args, "raw",
                        num_threads=2, io="pread")
    tag("detfmt_raw_pread_2")
    bench_pread_plain(raw, args, "plain os.preadv of random batches (1 thread, warm)")
    tag("pread_warm")
    if "dataloader" not in skip:
        bench_ring_dataloader(raw, args, 2)
        tag("ring_2")
        bench_map_dataset(raw, args, 2)
        tag("map_2")
    # ---- codecs
    if "jpeg" not in skip:
        jpeg = write("jpeg")
        warm(jpeg.path)
        bench_simplejpeg(jpeg, args)
        tag("simplejpeg_1")
        bench_detfmt_loader(jpeg, "detfmt Loader jpeg q90 (1 thread)", args, "jpeg q90",
                            num_threads=1)
        tag("detfmt_jpeg_1")
        bench_detfmt_loader(jpeg, "detfmt Loader jpeg q90 (2 threads)", args, "jpeg q90",
                            num_threads=2)
        tag("detfmt_jpeg_2")
        if "dataloader" not in skip:
            bench_ring_dataloader(jpeg, args, 2, stored="jpeg q90")
            tag("ring_jpeg_2")
    if "zstd" not in skip:
        zstd = write("zstd")
        warm(zstd.path)
        bench_detfmt_loader(zstd, "detfmt Loader zstd-3 (2 threads)", args, "zstd-3",
                            num_threads=2)
        tag("detfmt_zstd_2")
    # ---- peers
    if "peers" not in skip:
        bench_pil(samples, args, 2)
        tag("pil_2")
        bench_npy(samples, args.work, args)
        tag("npy_1")
        bench_tensordict(samples, args.work, args)
        bench_webdataset(samples, args.work, args)
        bench_litdata(samples, args.work, args)
        bench_mds(samples, args.work, args)
        bench_ffcv(samples, args.work, args)
    headline(args)
    if not args.keep:
        for path in CLEANUP:
            path.unlink(missing_ok=True)
    # ---- cold cache, random and quasi-random order
    cold_how = ""
    if "cold" not in skip:
        cold_how = bench_cold(raw, args)
    context = {
        "command": command_line(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, "
                   f"Python {platform.python_version()}",
        "dataset": f"{args.data.name}: {len(samples)} images -> long side {LONG_SIDE}, x"
                   f"{args.replicate} = {n} samples",
        "cold_cache": cold_how,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "seconds_total": round(time.time() - t0, 1),
        "versions": _versions(),
    }
    context["goals"] = goal_rows()
    write_report(args.out, args, context)
    print((args.out / "loader.md").read_text())


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("torch", "numpy", "simplejpeg", "ffcv", "webdataset", "litdata",
                 "mosaicml-streaming", "tensordict"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


if __name__ == "__main__":
    main()
