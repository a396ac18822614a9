"""The measurements of ``tools/gpu_check.sh``: one markdown table of what a CUDA machine changes.

Rows (each one line of the table, always present; a part that cannot run says why):

- ``cuda tests``: the pytest summary line of the CUDA tests (run by gpu_check.sh, passed in);
- ``loader cpu`` / ``loader cuda``: ``Loader`` images/s, host batches against
  ``device="cuda"`` (pinned buffers, non_blocking copies on the loader's stream);
- ``h2d overlap``: the share of the host-to-device copy time hidden behind the gather
  (1 - (t_cuda - t_cpu) / t_copy, t_copy a synchronous pinned copy of the same batches);
- ``augment gpu`` / ``augment cpu`` / ``augment ultralytics``: the ``yolo_train`` preset at
  ``--imgsz`` on batches of ``--batch`` on the GPU and on the CPU, and Ultralytics' per-sample
  CPU pipeline (``dataset[i]`` with augment=True) on the same images, images/s;
- ``decode gpu`` / ``decode cpu``: JPEG decode, ``torchvision.io.decode_jpeg`` on cuda (nvJPEG)
  against detfmt's CPU decode (simplejpeg), images/s;
- ``train step``: YOLOv8n forward + backward + SGD step on cuda fed by the loader and the
  preset, images/s and the share of the step spent waiting for data.

Ratios are against a baseline measured in the same run; rounds interleave the sides; the load
average is recorded. ``--dry-run`` (automatic without CUDA) runs every CPU part with small
sizes and writes "skipped (no CUDA)" in the CUDA rows.

    python tools/gpu_check.py --out docs/bench/gpu.md [--data ../shared/data/coco128-yolo]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import detfmt
from detfmt.augment.presets import yolo_train
from detfmt.torch import Loader

SKIP = "skipped (no CUDA)"
ROWS = ("cuda tests", "loader cpu", "loader cuda", "h2d overlap", "augment cpu", "augment gpu",
        "augment ultralytics", "decode cpu", "decode gpu", "train step")


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def make_data(source: str | None, work: Path, n: int, size: tuple[int, int]
              ) -> tuple[Path, Path, list[bytes]]:
    """A raw and a JPEG copy of ``source`` (a YOLO tree) or of ``n`` synthetic images."""
    raw, jpeg = work / "raw", work / "jpeg"
    src = Path(source) if source else None
    if src is not None and (src / "images").is_dir():
        from detfmt.convert import from_yolo

        labels = src / "object_detection" / "labels"
        names = src / "object_detection" / "config.yaml"
        from_yolo(src / "images", labels, raw, names=names, codec="raw", workers=2)
        from_yolo(src / "images", labels, jpeg, names=names, codec="jpeg", workers=2)
    else:
        rng = np.random.default_rng(0)
        h, w = size
        yy, xx = np.mgrid[0:h, 0:w]
        samples = []
        for i in range(n):
            image = np.stack([(xx + 3 * i) % 256, (yy + 5 * i) % 256, (xx + yy) % 256], -1)
            image = (image + rng.integers(0, 16, image.shape)).astype(np.uint8)
            boxes = np.array([[w * 0.1, h * 0.1, w * 0.6, h * 0.7]], np.float32)
            samples.append({"image": image, "boxes": boxes, "classes": np.array([i % 3], np.int32)})
        detfmt.write(samples, raw, classes=["a", "b", "c"], codec="raw")
        detfmt.write(samples, jpeg, classes=["a", "b", "c"], codec="jpeg")
    ds = detfmt.open(jpeg)
    return raw, jpeg, [bytes(ds.payload(i)) for i in range(len(ds))]


def rate(fn: Callable[[], int], sync: Callable[[], None] = lambda: None) -> float:
    """Images/s of one call of ``fn`` (which returns its image count)."""
    sync()
    t0 = time.perf_counter()
    count = fn()
    sync()
    return count / (time.perf_counter() - t0)


def loader_pass(path: Path, batch: int, device: str | None, batches: int) -> int:
    loader = Loader(str(path), batch, seed=0, num_threads=2, device=device, drop_last=False)
    seen = 0
    while seen < batches * batch:
        for b in loader:
            seen += int(b.images.shape[0])
            if seen >= batches * batch:
                break
        loader.set_epoch(loader.epoch + 1)
    if device == "cuda":
        torch.cuda.synchronize()
    return seen


def h2d_copy(path: Path, batch: int, batches: int) -> float:
    """Seconds of synchronous pinned copies of ``batches`` batches like the loader's."""
    ds = detfmt.open(str(path))
    images = torch.from_numpy(ds.batch(list(range(min(batch, len(ds))))).images).pin_memory()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(batches):
        images.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * max(1, batch // max(1, images.shape[0]))


def augment_rate(path: Path, imgsz: int, batch: int, device: str, batches: int
                 ) -> Callable[[], int]:
    pipe = yolo_train(imgsz, generator=torch.Generator().manual_seed(0))
    loader = Loader(str(path), batch, seed=0, num_threads=2)
    host = [b for _, b in zip(range(batches), loader, strict=False)]
    if device == "cuda":
        host = [b.to("cuda") for b in host]
    pipe(host[0])  # warm (kernels, compiled paths)
    return lambda: sum(int(pipe(b).images.shape[0]) for b in host)


def ultralytics_rate(source: str | None, imgsz: int, count: int) -> Callable[[], int] | str:
    """Ultralytics' per-sample training pipeline (``dataset[i]``) on ``source``'s images."""
    try:
        from ultralytics.cfg import get_cfg
        from ultralytics.data import build_yolo_dataset
        from ultralytics.utils import DEFAULT_CFG
    except Exception as error:  # not installed, or a mismatched torch
        return f"skipped (ultralytics does not import: {type(error).__name__})"
    if not source or not (Path(source) / "images").is_dir():
        return "skipped (needs --data, a YOLO tree)"
    import yaml

    src = Path(source)
    names = yaml.safe_load((src / "object_detection" / "config.yaml").read_text())["names"]
    names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
    images = next(p for p in (src / "images").iterdir() if p.is_dir())
    cfg = get_cfg(DEFAULT_CFG, {"imgsz": imgsz, "workers": 0, "mode": "train"})
    data = {"names": dict(enumerate(names)), "nc": len(names), "channels": 3}
    dataset = build_yolo_dataset(cfg, str(images), 16, data, mode="train")
    n = len(dataset)
    dataset[0]
    return lambda: sum(1 for i in range(count) if dataset[i % n] is not None)


def decode_rates(payloads: list[bytes], cuda: bool) -> dict[str, Any]:
    from detfmt.format import codecs

    out: dict[str, Any] = {}
    hw = [codecs.simplejpeg.decode_jpeg_header(p)[:2] for p in payloads] if codecs.simplejpeg \
        else []

    def cpu() -> int:
        for p, (h, w) in zip(payloads, hw, strict=True):
            dst = np.empty((h, w, 3), np.uint8)
            codecs.decode_into(p, detfmt.format.spec.CODEC_JPEG, dst, path="-", index=0)
        return len(payloads)

    out["cpu"] = cpu
    if not cuda:
        out["gpu"] = SKIP
        return out
    try:
        from torchvision.io import decode_jpeg
    except Exception as error:
        out["gpu"] = f"skipped (torchvision does not import: {type(error).__name__})"
        return out
    tensors = [torch.frombuffer(bytearray(p), dtype=torch.uint8) for p in payloads]
    try:
        decode_jpeg(tensors[:2], device="cuda")
    except Exception as error:
        out["gpu"] = _failure(error)
        return out

    def gpu() -> int:
        for start in range(0, len(tensors), 64):
            decode_jpeg(tensors[start : start + 64], device="cuda")
        return len(tensors)

    out["gpu"] = gpu
    return out


def train_step(path: Path, imgsz: int, batch: int, steps: int) -> str:
    try:
        from ultralytics.nn.tasks import DetectionModel
        from ultralytics.utils import DEFAULT_CFG
    except Exception as error:
        return f"skipped (ultralytics does not import: {type(error).__name__})"
    from types import SimpleNamespace

    torch.manual_seed(0)
    model = DetectionModel("yolov8n.yaml", nc=3, verbose=False).cuda()
    model.args = SimpleNamespace(**{k: getattr(DEFAULT_CFG, k) for k in ("box", "cls", "dfl")})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    pipe = yolo_train(imgsz, generator=torch.Generator().manual_seed(0))
    loader = Loader(str(path), batch, seed=0, num_threads=2, device="cuda", transform=pipe)
    waits, totals, images = [], [], 0
    it = iter(_endless(loader))
    for i in range(steps + 2):
        t0 = time.perf_counter()
        b = next(it)
        t1 = time.perf_counter()
        mask = b.mask
        idx = torch.nonzero(mask)[:, 0].float()
        boxes = b.boxes[mask]
        hw = torch.tensor([imgsz, imgsz], device="cuda", dtype=torch.float32)
        xywh = torch.cat([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]], 1)
        xywh = xywh / hw.repeat(2)
        targets = {"batch_idx": idx, "cls": b.classes[mask].float()[:, None], "bboxes": xywh,
                   "img": _chw(b.images).float() / 255}
        loss, _ = model.loss(targets)
        optimizer.zero_grad()
        loss.sum().backward()
        optimizer.step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= 2:
            waits.append(t1 - t0)
            totals.append(t2 - t0)
            images += int(b.images.shape[0])
    return f"{images / sum(totals):.1f} images/s, data wait {100 * sum(waits) / sum(totals):.0f}%"


def _guard(rows: dict[str, str]) -> Callable[[str, Callable[[], Any]], Any]:
    """Run a side's set-up; on an exception, its row says so and None comes back."""
    def prepared(name: str, build: Callable[[], Any]) -> Any:
        try:
            return build()
        except Exception as error:
            rows[name] = _failure(error)
            return None
    return prepared


def _failure(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".replace("|", "/").replace("\n", " ")
    return f"error ({text[:160]})"


def _chw(images: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) whatever layout the batch has (the preset's output is CHW)."""
    return images if images.shape[1] == 3 else images.permute(0, 3, 1, 2)


def _endless(loader: Loader) -> Any:
    while True:
        yield from loader
        loader.set_epoch(loader.epoch + 1)


def measure(args: argparse.Namespace) -> dict[str, str]:
    cuda = torch.cuda.is_available() and not args.dry_run
    rows: dict[str, str] = {name: SKIP for name in ROWS}
    rows["cuda tests"] = args.tests_summary or SKIP
    if not cuda and not args.tests_summary:
        rows["cuda tests"] = SKIP
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        raw, _jpeg, payloads = make_data(args.data, Path(tmp), args.samples, (480, 640))
        sides: dict[str, Callable[[], int]] = {
            "loader cpu": lambda: loader_pass(raw, args.batch, None, args.batches),
            "augment cpu": augment_rate(raw, args.imgsz, args.batch, "cpu", args.batches),
        }
        prepared = _guard(rows)
        decode = decode_rates(payloads, cuda)  # the GPU side's set-up errors: in its rows
        sides["decode cpu"] = decode["cpu"]
        if callable(decode["gpu"]):
            sides["decode gpu"] = decode["gpu"]
        else:
            rows["decode gpu"] = decode["gpu"]
        ultra = prepared("augment ultralytics",
                         lambda: ultralytics_rate(args.data, args.imgsz, args.batch))
        if callable(ultra):
            sides["augment ultralytics"] = ultra
        elif ultra is not None:  # None: the set-up failed, its row says how
            rows["augment ultralytics"] = ultra
        if cuda:
            sides["loader cuda"] = lambda: loader_pass(raw, args.batch, "cuda", args.batches)
            gpu_aug = prepared("augment gpu", lambda: augment_rate(raw, args.imgsz, args.batch,
                                                                   "cuda", args.batches))
            if callable(gpu_aug):
                sides["augment gpu"] = gpu_aug
        results: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        failed: dict[str, str] = {}
        for r in range(args.rounds):  # interleaved, the order alternating
            for name in names if r % 2 == 0 else names[::-1]:
                if name in failed:
                    continue
                try:
                    results[name].append(rate(sides[name], sync))
                except Exception as error:  # one broken side must not lose the table
                    failed[name] = _failure(error)
        med = {name: statistics.median(v) for name, v in results.items() if name not in failed}
        rows.update(failed)

        def ratio(name: str, base: str) -> str:
            return f"{med[name]:.1f} images/s ({med[name] / med[base]:.2f}x {base})"

        for name, label in (("loader cpu", "baseline"), ("augment cpu", "baseline"),
                            ("decode cpu", "baseline, simplejpeg")):
            if name in med:
                rows[name] = f"{med[name]:.1f} images/s ({label})"
        for name, base in (("augment ultralytics", "augment cpu"), ("decode gpu", "decode cpu"),
                           ("loader cuda", "loader cpu"), ("augment gpu", "augment cpu")):
            if name in med and base in med:
                rows[name] = ratio(name, base)
        if cuda and "loader cuda" in med and "loader cpu" in med:
            try:
                images = args.batches * args.batch
                t_cpu, t_cuda = images / med["loader cpu"], images / med["loader cuda"]
                t_copy = h2d_copy(raw, args.batch, args.batches)
                hidden = 1 - max(0.0, t_cuda - t_cpu) / t_copy if t_copy > 0 else 1.0
                rows["h2d overlap"] = (f"{100 * max(0.0, hidden):.0f}% of {1000 * t_copy:.0f} "
                                       "ms of copies hidden (pinned, non_blocking)")
            except Exception as error:
                rows["h2d overlap"] = _failure(error)
        if cuda:
            try:
                rows["train step"] = train_step(raw, args.imgsz, args.batch, args.train_steps)
            except Exception as error:
                rows["train step"] = _failure(error)
    return rows


def table(rows: dict[str, str], args: argparse.Namespace, load_before: str) -> str:
    mode = "dry run: CUDA parts skipped" if args.dry_run or not torch.cuda.is_available() \
        else f"CUDA: {torch.cuda.get_device_name(0)}"
    lines = [
        "# GPU check", "",
        f"Written by `bash tools/gpu_check.sh` ({mode}). imgsz {args.imgsz}, batch {args.batch}, "
        f"{args.rounds} interleaved rounds, medians; torch {torch.__version__}; load average "
        f"{load_before} before, {load()} after; data: {args.data or 'synthetic 640x480'}.",
        "", "| check | result |", "|---|---|",
    ]
    lines += [f"| {name} | {rows[name]} |" for name in ROWS]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/bench/gpu.md")
    parser.add_argument("--data", default=None, help="a YOLO tree (images/, object_detection/)")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--tests-summary", default="")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        args.dry_run = True
    before = load()
    rows = measure(args)
    text = table(rows, args, before)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
