"""Augmentation in the loader (``Loader(transform=)``) against augmentation in the training loop.

The same data, order and pipeline (the ``yolo_train`` preset: mosaic, affine, flip, HSV at
``--imgsz``) on both sides; only where the augmentation runs differs:

- ``loop``: ``Loader`` gathers; the training loop calls the pipeline on each batch, on the
  trainer's thread, whose torch thread count is the trainer's (``--trainer-threads``, 1 as
  Ultralytics sets it);
- ``loader``: ``Loader(transform=pipeline, transform_threads=--threads)`` augments in its gather
  threads, in epoch order, overlapping the step.

Two kinds of training step stand in for the model: ``sleep`` (``--step-ms`` of idle CPU, what a
GPU step looks like from the host) and ``cpu`` (a small convolutional network's forward and
backward pass on this CPU, competing with the data pipeline for the cores). Per round, both
sides run interleaved (``--rounds`` rounds, the side order alternating); each records images/s
over ``--steps`` steps after ``--warmup`` and the time the step waited for its batch (for
``loop`` this includes the augmentation, as a trainer experiences it).

    python tools/bench_loader_augment.py --data ../shared/data/coco128-yolo --out docs/bench

Writes ``loader_augment.md`` and ``loader_augment.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from benchpaths import SHARED_DATA, shown

import detfmt
from detfmt.augment.presets import yolo_train
from detfmt.torch import Delivery, Loader


def prepare(source: Path, work: Path, imgsz: int) -> Path:
    """coco128 converted to raw pixels at long side ``imgsz`` (the bytes a RAM cache holds)."""
    from detfmt.convert import from_yolo

    dst = work / f"coco128-{imgsz}"
    if not dst.exists():
        from_yolo(source / "images", source / "object_detection" / "labels", dst,
                  names=source / "object_detection" / "config.yaml", max_side=imgsz,
                  codec="raw", workers=2)
    return dst


def pipeline(imgsz: int, n: int, batch: int) -> torch.nn.Module:
    return yolo_train(imgsz, buffer_size=min(n, 8 * batch), generator=torch.Generator())


class SmallNet(torch.nn.Module):
    """A stand-in CPU training step: three strided convolutions and a mean loss."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, 2, 1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, 2, 1), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, 2, 1))
        self.optimizer = torch.optim.SGD(self.parameters(), lr=1e-3)

    def step(self, images: torch.Tensor) -> None:
        loss = self.body(images.float() / 255).mean()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


def endless(loader: Loader) -> Any:
    while True:
        yield from loader


def run(side: str, step_kind: str, trainer_threads: int, args: argparse.Namespace, ds: Any,
        net: SmallNet) -> dict[str, float]:
    augment = pipeline(args.imgsz, len(ds), args.batch)
    if side == "loader":
        loader = Loader(
            ds,
            args.batch,
            seed=0,
            delivery=Delivery(num_threads=args.threads, transform_threads=args.threads),
            transform=augment,
        )
    else:
        loader = Loader(ds, args.batch, seed=0, delivery=Delivery(num_threads=args.threads))
    torch.set_num_threads(trainer_threads)  # the trainer's own choice (this thread only)
    it = endless(loader)
    waits: list[float] = []
    images = 0
    start = 0.0
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            start = time.perf_counter()
        t0 = time.perf_counter()
        batch = next(it)
        if side == "loop":
            batch = augment(batch)
        t1 = time.perf_counter()
        if step_kind == "sleep":
            time.sleep(args.step_ms / 1000)
        else:
            net.step(batch.images)
        if i >= args.warmup:
            waits.append(t1 - t0)
            images += len(batch)
    wall = time.perf_counter() - start
    it.close()
    return {"images_per_s": images / wall, "wait_ms_median": 1000 * statistics.median(waits),
            "wait_share": sum(waits) / wall}


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-loader-augment-"))
    ds = detfmt.open(prepare(Path(args.data), work, args.imgsz))
    net = SmallNet()
    rounds: list[dict[str, Any]] = []
    loads = [load()]
    for r in range(args.rounds):
        row: dict[str, Any] = {}
        for threads in args.trainer_threads:
            for step_kind in args.step_kinds:
                sides = ("loop", "loader") if r % 2 == 0 else ("loader", "loop")
                for side in sides:
                    row[f"{threads}/{step_kind}/{side}"] = run(side, step_kind, threads, args,
                                                               ds, net)
        rounds.append(row)
        loads.append(load())
        print(f"round {r}: " + ", ".join(f"{k} {v['images_per_s']:.1f} img/s"
                                          for k, v in row.items()), flush=True)
    hidden = ("out", "report_only", "work")  # where things go, not what was measured
    config = {k: v for k, v in vars(args).items() if k not in hidden}
    return {"config": {**config, "data": shown(args.data)},
            "cpus": os.cpu_count(), "torch": torch.__version__, "loads": loads,
            "rounds": rounds}


def _mmm(values: list[float], fmt: str = "{:.2f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values),
                                              max(values)))


def _row(result: dict[str, Any], threads: int, kind: str) -> str:
    c = result["config"]
    rows = result["rounds"]
    loop = [r[f"{threads}/{kind}/loop"] for r in rows]
    ours = [r[f"{threads}/{kind}/loader"] for r in rows]
    ratio = [b["images_per_s"] / a["images_per_s"] for a, b in zip(loop, ours, strict=True)]
    name = f"sleep {c['step_ms']:g} ms" if kind == "sleep" else "CPU (small CNN)"
    return (f"| {threads} | {name} | {_mmm(ratio)} | "
            f"{_mmm([x['images_per_s'] for x in loop], '{:.1f}')} | "
            f"{_mmm([x['images_per_s'] for x in ours], '{:.1f}')} | "
            f"{statistics.median(x['wait_ms_median'] for x in loop):.1f} "
            f"({statistics.median(x['wait_share'] for x in loop):.0%}) | "
            f"{statistics.median(x['wait_ms_median'] for x in ours):.1f} "
            f"({statistics.median(x['wait_share'] for x in ours):.0%}) |")


def report(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [
        "# Augmentation in the loader vs in the training loop",
        "",
        f"`tools/bench_loader_augment.py`: coco128 (raw, long side {c['imgsz']}), the "
        f"`yolo_train` preset at {c['imgsz']} px, batch {c['batch']}, {c['threads']} gather "
        f"threads (and `transform_threads`); {c['rounds']} interleaved rounds of {c['steps']} "
        f"steps after {c['warmup']} warm-up steps. {result['cpus']} CPUs, torch "
        f"{result['torch']}; load average (1, 5, 15 min) before the first and after each "
        f"round: {'; '.join(result['loads'])}.",
        "",
        "Per round, `loader / loop` ratio of images/s (min / median / max), and each side's "
        "median wait for its batch per step (for `loop` the wait includes the augmentation, "
        "as the training loop experiences it) and the share of wall time spent waiting.",
        "",
        "The trainer's thread runs at the torch thread count of the first column (Ultralytics "
        "sets 1; torch's default here is the core count): the `loop` side augments on that "
        "thread, so its OpenCV pool gets that many threads; the `loader` side's threads have "
        "their own budget.",
        "",
        "| trainer threads | step | images/s ratio loader/loop | loop images/s | loader "
        "images/s | loop wait ms (share) | loader wait ms (share) |",
        "|---|---|---|---|---|---|---|",
    ]
    for threads in c["trainer_threads"]:
        for kind in c["step_kinds"]:
            lines.append(_row(result, threads, kind))
    bound = c["batch"] / (c["step_ms"] / 1000)
    lines += [
        "",
        "How to read it: with `sleep` steps the CPU is idle during the step, as when a GPU "
        "trains, and no pipeline can beat the step itself: "
        f"{c['batch']} images per {c['step_ms']:g} ms is {bound:.0f} images/s. In the loop "
        "the augmentation adds its whole time to every step; in the loader it runs during the "
        "step, and the step waits only for what the overlap could not hide (other processes "
        "on the machine take cores too: see the load). With `cpu` steps the model and the "
        "augmentation share the same cores, so the overlap can only fill the cores the step "
        "leaves idle: the gain is smaller and noisier, and on a machine whose cores the step "
        "saturates it can vanish.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(SHARED_DATA / "coco128-yolo"))
    parser.add_argument("--out", default="docs/bench")
    parser.add_argument("--work", default=None, help="where the converted dataset is kept")
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trainer-threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=60.0)
    parser.add_argument("--step-kinds", nargs="+", default=["sleep", "cpu"],
                        choices=["sleep", "cpu"])
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the .md from the .json in --out, measuring nothing")
    args = parser.parse_args()
    if args.report_only:
        result = json.loads((Path(args.out) / "loader_augment.json").read_text())
        (Path(args.out) / "loader_augment.md").write_text(report(result))
        return
    result = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "loader_augment.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "loader_augment.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
