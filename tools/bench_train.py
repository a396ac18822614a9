"""YOLOv8n training fed by Ultralytics' own pipeline and by detfmt, same model, loss, optimizer.

Both sides run Ultralytics' default detection augmentation (mosaic, affine, flip, HSV): the
Ultralytics side through its own ``YOLODataset`` + ``InfiniteDataLoader``, the detfmt side
through ``DetfmtYoloLoader`` (``detfmt.torch.Loader`` threads running the ``yolo_train``
preset in the loader, ``Loader(transform=)``). The pipelines, each measured once per round,
the order rotated every round:

- Ultralytics per ``--ultralytics-workers`` value: ``0`` runs its pipeline in this process
  (once per ``--in-process-torch-threads`` value: its tensor work runs on torch's intra-op
  threads, whose OpenMP spin-waits count as CPU on a busy machine), ``1`` in one worker
  process (which torch runs with one intra-op thread);
- detfmt per ``--codec`` (a raw-stored and a JPEG-stored copy, long side imgsz) and
  ``--threads`` (the loader's threads).

Per pipeline and round:

- data only: ``--data-batches`` batches through the pipeline alone; CPU seconds of the whole
  process tree (workers included) per augmented image, images/s, the 1-minute load average
  before and after;
- training (``--iters`` > 0): that many steps of YOLOv8n (``v8DetectionLoss``, SGD) from the
  same initial weights; per step the time spent waiting for the batch, the data-wait share
  of the step and images/s.

Ratios are detfmt / Ultralytics of the same round, for every pair.

``--memory`` instead measures two ranks on one machine reading one epoch each: the summed RSS
and PSS (proportional set size: shared pages divided among the processes that map them) of
detfmt's memory-mapped dataset (one page-cache copy) against Ultralytics' ``cache="ram"`` (one
copy per rank).

    python tools/bench_train.py --imgsz 640 --iters 0 --rounds 11 --codec raw jpeg \
        --name train_data_640

Run it in the integrations environment (tools/test_integrations.sh builds it). Writes
``<name>.md`` and ``<name>.json`` (or ``train_memory.*``) to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import torch
from benchpaths import SHARED_DATA, command_line, shown

HYP_KEYS = ("mosaic", "mixup", "degrees", "translate", "scale", "shear", "perspective",
            "flipud", "fliplr", "hsv_h", "hsv_s", "hsv_v")


# ---------------------------------------------------------------------------- data set-up


def prepare(source: Path, work: Path, imgsz: int,
            codecs: tuple[str, ...] = ("raw",)) -> tuple[Path, dict[str, Path], list[str]]:
    """A writable copy of the YOLO dataset (Ultralytics writes a labels cache) and its detfmt
    conversions, long side imgsz, one per codec: ``raw`` (the pixels Ultralytics' RAM cache
    holds) and ``jpeg`` (re-encoded at the writer's default quality, how ``auto`` stores a
    dataset whose raw size does not fit half the RAM)."""
    import yaml

    from detfmt.convert import from_yolo

    names_file = source / "object_detection" / "config.yaml"
    names = yaml.safe_load(names_file.read_text())["names"]
    names = [names[k] for k in sorted(names)] if isinstance(names, dict) else list(names)
    yolo = work / "yolo"
    if not yolo.exists():
        (yolo / "images").mkdir(parents=True)
        shutil.copytree(source / "images" / "train2017", yolo / "images" / "train2017")
        shutil.copytree(source / "object_detection" / "labels" / "train2017",
                        yolo / "labels" / "train2017")
    data_yaml = yolo / "data.yaml"
    data_yaml.write_text(yaml.safe_dump({"path": str(yolo), "train": "images/train2017",
                                         "val": "images/train2017", "names": names}))
    paths = {}
    for codec in codecs:
        dst = work / (f"detfmt-{imgsz}" if codec == "raw" else f"detfmt-{imgsz}-{codec}")
        if not dst.exists():
            from_yolo(yolo / "images" / "train2017", yolo / "labels" / "train2017", dst,
                      names=names, max_side=imgsz, codec=codec)
        paths[codec] = dst
    return data_yaml, paths, names


def cfg_for(imgsz: int, workers: int) -> Any:
    from ultralytics.cfg import get_cfg
    from ultralytics.utils import DEFAULT_CFG

    return get_cfg(DEFAULT_CFG, {"imgsz": imgsz, "workers": workers, "mode": "train"})


def ultralytics_loader(data_yaml: Path, imgsz: int, batch: int, workers: int,
                       cache: bool | str = False) -> Any:
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    cfg = cfg_for(imgsz, workers)
    cfg.cache = cache
    data = check_det_dataset(str(data_yaml))
    dataset = build_yolo_dataset(cfg, data["train"], batch, data, mode="train")
    return build_dataloader(dataset, batch, workers, shuffle=True, rank=-1, device="cpu")


def detfmt_loader(path: Path, imgsz: int, batch: int, threads: int, rank: int | None = None,
                  world: int | None = None) -> Any:
    from detfmt.integrations.ultralytics import DetfmtYoloDataset, DetfmtYoloLoader

    hyp = SimpleNamespace(**{k: getattr(cfg_for(imgsz, threads), k) for k in HYP_KEYS})
    dataset = DetfmtYoloDataset(path, augment=True, hyp=hyp)
    # rank/world: the memory bench's ranks, without a process group
    return DetfmtYoloLoader(dataset, batch, imgsz=imgsz, augment=True, seed=0, threads=threads,
                            rank=rank, world_size=world)


# ---------------------------------------------------------------------------- measuring


def endless(loader: Any) -> Any:
    """Batches across epoch boundaries (windows may be longer than one epoch)."""
    while True:
        yield from loader


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process and its live descendants."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(child.cpu_times()[:2])
    return total


def data_only(loader: Any, batches: int) -> dict[str, float]:
    """Both pipelines prefetch (Ultralytics 2 batches per worker, detfmt 2 augmented batches
    plus the loader's gathers): work done before the window is not counted, work for batches
    beyond it is, so use windows much longer than the prefetch depth."""
    it = endless(loader)
    next(it)  # workers started, buffers and pools warm
    cpu0, t0, images = tree_cpu(), time.perf_counter(), 0
    for _ in range(batches):
        images += int(next(it)["img"].shape[0])
    wall, cpu = time.perf_counter() - t0, tree_cpu() - cpu0
    del it
    return {"images": images, "wall_s": wall, "images_per_s": images / wall,
            "cpu_s_per_image": cpu / images}


def train(loader: Any, model: torch.nn.Module, iters: int, warmup: int) -> dict[str, float]:
    model = copy.deepcopy(model)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    it = endless(loader)
    waits, steps, images = [], [], 0
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        batch["img"] = batch["img"].float() / 255
        loss, _ = model(batch)
        loss.sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        t2 = time.perf_counter()
        if i >= warmup:
            waits.append(t1 - t0)
            steps.append(t2 - t0)
            images += int(batch["img"].shape[0])
    del it
    return {"images_per_s": images / sum(steps), "wait_share": sum(waits) / sum(steps),
            "wait_ms_median": 1000 * statistics.median(waits),
            "step_ms_median": 1000 * statistics.median(steps)}


def build_model(nc: int, imgsz: int) -> torch.nn.Module:
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    model = DetectionModel("yolov8n.yaml", nc=nc, verbose=False)
    model.args = cfg_for(imgsz, 0)  # the loss gains (box, cls, dfl)
    return model


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def configs(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """The measured pipelines: (key, side, parameter). Ultralytics' pipeline does not depend
    on detfmt's thread count: each ``workers`` value is measured once per round, and every
    detfmt (codec, threads) row of that round is divided by it. In-process (``workers=0``) it
    is measured once per ``--in-process-torch-threads`` value: its tensor work then runs on
    torch's intra-op threads, whose OpenMP spin-waits show as CPU on a busy machine (worker
    processes run with one)."""
    ult = []
    for w in args.ultralytics_workers:
        if w == 0:
            ult += [(f"ultralytics/w0/tt{n}", "ultralytics", (0, n))
                    for n in args.in_process_torch_threads]
        else:
            ult.append((f"ultralytics/w{w}", "ultralytics", (w, None)))
    det = [(f"detfmt/{c}/t{t}", "detfmt", (c, t)) for c in args.codec for t in args.threads]
    return ult + det


def speed(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work)
    data_yaml, dpaths, names = prepare(Path(args.data), work, args.imgsz, tuple(args.codec))
    model = build_model(len(names), args.imgsz)
    todo = configs(args)

    def make(side: str, param: Any) -> Any:
        if side == "ultralytics":
            return ultralytics_loader(data_yaml, args.imgsz, args.batch, param[0])
        codec, threads = param
        return detfmt_loader(dpaths[codec], args.imgsz, args.batch, threads)

    def measure(side: str, param: Any, window: int) -> dict[str, float]:
        torch_threads = param[1] if side == "ultralytics" and param[1] else default_threads
        torch.set_num_threads(torch_threads)
        try:
            return data_only(make(side, param), window)
        finally:
            torch.set_num_threads(default_threads)

    default_threads = torch.get_num_threads()
    for _, side, param in todo:  # numba caches, OpenCV and torch warm before round 0
        measure(side, param, args.warm_batches)
    rows = []
    for r in range(args.rounds):
        # rotate the order each round, reversed every other: no pipeline is always first or
        # always after the same one
        k = r % len(todo)
        order = todo[k:] + todo[:k]
        if r % 2:
            order = order[::-1]
        result: dict[str, Any] = {"round": r, "order": [key for key, _, _ in order],
                                  "load_before": load()}
        for key, side, param in order:
            load0 = os.getloadavg()[0]
            result[key] = {"data": measure(side, param, args.data_batches)}
            result[key]["load1"] = [load0, os.getloadavg()[0]]
            if args.iters:
                result[key]["train"] = train(make(side, param), model, args.iters, args.warmup)
        result["load_after"] = load()
        ratios: dict[str, dict[str, float]] = {}
        for dkey, dside, _ in todo:
            if dside != "detfmt":
                continue
            d = result[dkey]
            for ukey, uside, _ in todo:
                if uside != "ultralytics":
                    continue
                u = result[ukey]
                ratio = {
                    "data_images_per_s": d["data"]["images_per_s"] / u["data"]["images_per_s"],
                    "cpu_per_image": d["data"]["cpu_s_per_image"] / u["data"]["cpu_s_per_image"],
                }
                if args.iters:
                    ratio["train_images_per_s"] = (
                        d["train"]["images_per_s"] / u["train"]["images_per_s"]
                    )
                ratios[f"{dkey} / {ukey}"] = ratio
        result["ratio"] = ratios
        rows.append(result)
        print(json.dumps(result), flush=True)
    return {"args": recorded(args), "rows": rows, "command": command_line(),
            "torch_threads": torch.get_num_threads()}


# ---------------------------------------------------------------------------- two ranks


def _memory() -> dict[str, int]:
    """Pss, Rss and the anonymous/file split of Pss from /proc/self/smaps_rollup (bytes)."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":"):
                fields[parts[0][:-1]] = int(parts[1]) * 1024
    return {k: fields.get(k, 0) for k in ("Pss", "Rss", "Pss_Anon", "Pss_File")}


def _rank(side: str, rank: int, args: dict[str, Any], barrier: Any, out: Any) -> None:
    torch.set_num_threads(1)
    if side == "ultralytics":
        loader = ultralytics_loader(Path(args["data_yaml"]), args["imgsz"], args["batch"], 0,
                                    cache="ram")
        share = len(loader) // 2  # a rank's share of the epoch (workers=0: in this process)
    else:
        loader = detfmt_loader(Path(args["detfmt"]), args["imgsz"], args["batch"], 1, rank, 2)
        share = len(loader)
    it = iter(loader)
    for _ in range(share):
        next(it)
    barrier.wait()  # both ranks alive and done: shared pages are split between them
    out.put((side, rank, _memory()))
    barrier.wait()


def memory(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work)
    data_yaml, dpaths, _ = prepare(Path(args.data), work, args.memory_imgsz)
    dpath = dpaths["raw"]
    shared = {"data_yaml": str(data_yaml), "detfmt": str(dpath), "imgsz": args.memory_imgsz,
              "batch": args.batch}
    ctx = mp.get_context("spawn")
    rows = []
    for r in range(args.memory_rounds):
        for side in (("ultralytics", "detfmt") if r % 2 == 0 else ("detfmt", "ultralytics")):
            barrier, out = ctx.Barrier(2), ctx.Queue()
            procs = [ctx.Process(target=_rank, args=(side, k, shared, barrier, out))
                     for k in range(2)]
            for p in procs:
                p.start()
            got = [out.get(timeout=600) for _ in procs]
            for p in procs:
                p.join(timeout=120)
            row = {"round": r, "side": side, "load": load()}
            for key in ("Pss", "Rss", "Pss_Anon", "Pss_File"):
                row[key.lower() + "_mb"] = sum(g[2][key] for g in got) / 2**20
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
    blob = sum(f.stat().st_size for f in Path(dpath).iterdir() if f.is_file())
    return {"args": recorded(args), "rows": rows, "detfmt_bytes_mb": blob / 2**20}


# ---------------------------------------------------------------------------- report


def _mmm(values: list[float], fmt: str = "{:.2f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values),
                                              max(values)))


def describe(key: str) -> str:
    """A configuration key as the report's row states it."""
    parts = key.split("/")
    if parts[0] == "ultralytics":
        workers = int(parts[1][1:])
        if workers == 0:
            return f"Ultralytics, `workers=0` (in-process, torch threads {parts[2][2:]})"
        return f"Ultralytics, `workers={workers}` (worker process{'es' if workers > 1 else ''})"
    threads = int(parts[2][1:])
    return f"detfmt, {parts[1]}-stored, {threads} thread{'s' if threads > 1 else ''}"


def report_speed(result: dict[str, Any]) -> str:
    a = result["args"]
    rows = result["rows"]
    keys = [k for k in rows[0]["order"]]
    keys = sorted(keys, key=lambda k: (not k.startswith("ultralytics"), k))
    trained = bool(a["iters"])
    lines = [
        "# Training data: Ultralytics' pipeline and detfmt's `yolo_train`",
        "",
        f"`{result.get('command', 'python tools/bench_train.py')}` on this machine's CPU "
        f"(torch {torch.__version__}, {os.cpu_count()} cores, shared; torch intra-op threads "
        f"in the main process: {result.get('torch_threads', '?')}), {a['imgsz']} px, batch "
        f"{a['batch']}, {a['data_batches']} batches per pipeline and round, {a['rounds']} "
        "rounds, the pipelines interleaved (order rotated each round). Ultralytics' default "
        "augmentation on both sides (mosaic, affine, flip, HSV). Data CPU: user + system "
        "seconds of the whole process tree (worker processes included) per augmented image. "
        "Min / median / max over the rounds; ratios are taken per round (detfmt / Ultralytics "
        "of the same round).",
        "",
        "| pipeline | data-only img/s | data CPU ms / image | load (1 min) during | "
        "train img/s | data-wait share of the step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in keys:
        train_text = wait_text = "-"
        if trained:
            train_text = _mmm([r[key]["train"]["images_per_s"] for r in rows])
            wait_text = _mmm([100 * r[key]["train"]["wait_share"] for r in rows], "{:.1f}%")
        loads = [x for r in rows for x in r[key]["load1"]]
        lines.append(
            f"| {describe(key)} | {_mmm([r[key]['data']['images_per_s'] for r in rows], '{:.1f}')}"
            f" | {_mmm([1000 * r[key]['data']['cpu_s_per_image'] for r in rows], '{:.1f}')} | "
            f"{min(loads):.1f}-{max(loads):.1f} | {train_text} | {wait_text} |"
        )
    lines += ["", "| detfmt | against | data CPU per image | data img/s | train img/s |",
              "|---|---|---:|---:|---:|"]
    for name in rows[0]["ratio"]:
        dkey, ukey = name.split(" / ")
        got = [r["ratio"][name] for r in rows]
        train_ratio = _mmm([g["train_images_per_s"] for g in got]) if trained else "-"
        lines.append(f"| {describe(dkey)} | {describe(ukey)} | "
                     f"{_mmm([g['cpu_per_image'] for g in got])} | "
                     f"{_mmm([g['data_images_per_s'] for g in got])} | {train_ratio} |")
    loads = [r["load_before"] for r in rows] + [r["load_after"] for r in rows]
    lines += ["", f"Load average (1/5/15 min) at the start and end: {loads[0]} .. {loads[-1]}.",
              ""]
    return "\n".join(lines)


def report_memory(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = ["# Two ranks on one machine: memory of the training data", "",
             f"Two processes, each reading its half of one epoch of {a['data']} at imgsz "
             f"{a['memory_imgsz']} with augmentation: Ultralytics with `cache=\"ram\"` (each rank "
             "caches every image), detfmt through its memory-mapped raw dataset "
             f"({result['detfmt_bytes_mb']:.0f} MB on disk, shared through the page cache). "
             "PSS splits shared pages between the processes that map them, so the PSS sum is "
             "the memory both ranks use; the RSS sum counts shared pages twice.", "",
             "| side | PSS sum MB (min / median / max) | of which anonymous | of which files "
             "(libraries, dataset) | RSS sum MB |", "|---|---:|---:|---:|---:|"]
    for side in ("ultralytics", "detfmt"):
        rows = [r for r in result["rows"] if r["side"] == side]
        lines.append(f"| {side} | {_mmm([r['pss_mb'] for r in rows], '{:.0f}')} | "
                     f"{_mmm([r['pss_anon_mb'] for r in rows], '{:.0f}')} | "
                     f"{_mmm([r['pss_file_mb'] for r in rows], '{:.0f}')} | "
                     f"{_mmm([r['rss_mb'] for r in rows], '{:.0f}')} |")
    lines.append("")
    return "\n".join(lines)


def recorded(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments a record states: the data relative to the repository, no work directory
    (where things go, not what was measured)."""
    return {**{k: v for k, v in vars(args).items() if k not in ("work", "out")},
            "data": shown(args.data)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(SHARED_DATA / "coco128-yolo"))
    parser.add_argument("--out", default="docs/bench")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bench-train"))
    parser.add_argument("--imgsz", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iters", type=int, default=3, help="training steps; 0: data only")
    parser.add_argument("--warmup", type=int, default=1)
    # 64 batches of 8 are ~3 s of detfmt's data work: shorter windows let this shared
    # machine's noise swamp the ratio (16 gave rounds from 0.27 to 0.42)
    parser.add_argument("--data-batches", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="detfmt's loader threads")
    parser.add_argument("--codec", nargs="+", choices=["raw", "jpeg"], default=["raw"],
                        help="how the detfmt copies store the images (one copy each)")
    parser.add_argument("--ultralytics-workers", type=int, nargs="+", default=[0, 1],
                        help="Ultralytics' DataLoader workers: 0 runs its pipeline in this "
                        "process, 1 in one worker process (its CPU is counted too)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch.set_num_threads in this process (default: torch's own)")
    parser.add_argument("--in-process-torch-threads", type=int, nargs="+",
                        default=[1, torch.get_num_threads()],
                        help="torch intra-op threads while Ultralytics' in-process "
                        "(workers=0) pipeline runs, one row each (default: 1 and torch's own)")
    parser.add_argument("--warm-batches", type=int, default=4,
                        help="batches per pipeline before round 0 (compiles, caches)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default=None, help="output file stem (default: train, or "
                        "train_data_<imgsz> with --iters 0, the data-only measurement)")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--memory-imgsz", type=int, default=640)
    parser.add_argument("--memory-rounds", type=int, default=3)
    args = parser.parse_args()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    if args.memory:
        result = memory(args)
        result["commit"] = commit
        (out / "train_memory.json").write_text(json.dumps(result, indent=1))
        (out / "train_memory.md").write_text(report_memory(result))
        print(report_memory(result))
    else:
        result = speed(args)
        result["commit"] = commit
        name = args.name or ("train" if args.iters else f"train_data_{args.imgsz}")
        (out / f"{name}.json").write_text(json.dumps(result, indent=1))
        (out / f"{name}.md").write_text(report_speed(result))
        print(report_speed(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
