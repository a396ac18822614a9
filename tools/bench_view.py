"""Benchmark: ``detfmt view`` against ``detfmt show`` and ``detfmt filter``'s selection.

Two measurements, each side by side with its baseline in the same run (docs/view.md):

1. A page of 48 thumbnails, warm: the viewer's query answer plus 48 ``/api/image?size=256``
   requests over HTTP (6 connections at a time, as a browser does), against ``detfmt show``
   (`detfmt.workflows.show.render_grid`, 256 px cells) drawing the same 48 samples into a PNG. Run
   on
   coco128 (../shared/data/coco128-yolo) converted twice: JPEG payloads (served as stored) and
   raw (decoded, encoded and cached by the viewer).
2. A filter on a 1M-sample synthetic label set (written once with ``detfmt.write``: 1x1 images,
   0-8 boxes of 10 classes, original size 640x480): the viewer's vectorised `LabelIndex.select`
   against `detfmt.workflows.select.select_indices` (the selection of ``detfmt filter``) on the
   same query, results checked equal.

    python tools/bench_view.py --work ../bench_view            # 1M samples
    python tools/bench_view.py --work ../bench_view --samples 100000
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

import detfmt
from detfmt.view import LabelIndex, Query, Viewer, make_server
from detfmt.workflows.select import select_indices
from detfmt.workflows.show import render_grid

SHARED = Path(os.environ.get("DETFMT_SHARED_DATA",
                             Path(__file__).resolve().parents[2].parent / "shared" / "data"))
CLASSES = [f"c{i}" for i in range(10)]


def _median(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- 1. a page of thumbnails ----

def _coco128(work: Path, codec: str, args_data: Path) -> Path:
    out = work / f"coco128-{codec}"
    if not out.exists():
        data = args_data / "coco128-yolo"
        detfmt.convert.from_yolo(data / "images", data / "object_detection" / "labels", out,
                                 names=data / "object_detection" / "config.yaml", max_side=640,
                                 codec=codec, progress=False)
    return out


def _page(port: int, pool: concurrent.futures.ThreadPoolExecutor) -> int:
    def get(path: str) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", path)
        body = connection.getresponse().read()
        connection.close()
        return body

    items = json.loads(get("/api/query?limit=48"))["items"]
    paths = [f"/api/image?i={item['index']}&size=256" for item in items]
    return sum(len(body) for body in pool.map(get, paths))


def bench_page(path: Path, repeat: int) -> dict[str, float]:
    viewer = Viewer(path)
    server = make_server(viewer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    ds = detfmt.open(path)
    indices = list(range(min(48, len(ds))))
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            start = time.perf_counter()
            size = _page(port, pool)  # cold: opens the index, fills the image cache
            cold = time.perf_counter() - start
            warm = _median(lambda: _page(port, pool), repeat)
        show = _median(lambda: render_grid(ds, path.parent / "grid.png", indices, cell=256),
                       max(1, repeat // 2))
    finally:
        server.shutdown()
        server.server_close()
        viewer.close()
        ds.close()
    return {"cold": cold, "warm": warm, "show": show, "bytes": size}


# ---- 2. a filter on 1M samples ----

def _synthetic(work: Path, n: int) -> Path:
    out = work / f"labels-{n}"
    if out.exists():
        return out
    rng = np.random.default_rng(0)
    image = np.zeros((1, 1, 3), np.uint8)
    scale = np.array([1 / 640, 1 / 480, 0, 0], np.float32)
    orig = np.array([480, 640], np.int32)

    def samples():
        for i in range(n):
            k = int(rng.integers(0, 9))
            xy = rng.random((k, 2)).astype(np.float32) * 0.5
            wh = (rng.random((k, 2)) ** 3).astype(np.float32) * 0.5 + 0.001
            yield {"image": image, "boxes": np.hstack([xy, xy + wh]),
                   "classes": rng.integers(0, 10, k).astype(np.int32), "orig_size": orig,
                   "scale_offset": scale, "file_name": f"img_{i:07d}.jpg"}

    detfmt.write(samples(), out, classes=CLASSES, progress=False)
    return out


def bench_filter(path: Path, repeat: int) -> list[tuple[str, float, float | None, int]]:
    ds = detfmt.open(path)
    start = time.perf_counter()
    index = LabelIndex.from_dataset(ds)
    build = time.perf_counter() - start
    start = time.perf_counter()
    index.load_names(ds)
    names = time.perf_counter() - start
    rows: list[tuple[str, float, float | None, int]] = [
        ("label index read (once per split, in the background)", build, None, len(ds)),
        ("file names read (once, in the background after that)", names, None, len(ds))]
    wanted = [0, 1, 2, 3, 4]
    unwanted = tuple(range(5, 10))
    same = Query(none_of=unwanted, min_boxes=2)
    found = index.select(same)
    baseline = select_indices(ds, classes=wanted, min_boxes=2).indices
    assert np.array_equal(found, baseline), "the viewer and detfmt filter disagree"
    rows.append(("only classes c0-c4, >= 2 boxes", _median(lambda: index.select(same), repeat),
                 _median(lambda: select_indices(ds, classes=wanted, min_boxes=2), 1),
                 len(found)))
    for name, query in [("any of c3", Query(any_of=(3,))),
                        ("all of c1, c2", Query(all_of=(1, 2))),
                        ("a small box", Query(size="small")),
                        ("file name contains 12345", Query(name="12345")),
                        ("c7, a large box, 3-5 boxes, most boxes first",
                         Query(any_of=(7,), size="large", min_boxes=3, max_boxes=5,
                               sort="most-boxes"))]:
        rows.append((name, _median(lambda q=query: index.select(q), repeat), None,
                     len(index.select(query))))
    ds.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="datasets are written here")
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=SHARED,
                        help="the shared real datasets (holds coco128-yolo)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print("| data | view: 48 thumbnails, cold | view: warm | detfmt show (48, PNG) | "
          "show / view warm |")
    print("|---|---|---|---|---|")
    for codec in ("jpeg", "raw"):
        r = bench_page(_coco128(args.work, codec, args.data), args.repeat)
        print(f"| coco128 {codec} at 640 px ({r['bytes'] >> 10} KiB a page) | "
              f"{r['cold'] * 1e3:.0f} ms | {r['warm'] * 1e3:.0f} ms | {r['show'] * 1e3:.0f} ms | "
              f"{r['show'] / r['warm']:.1f}x |")
    rows = bench_filter(_synthetic(args.work, args.samples), args.repeat)
    print()
    print(f"| {args.samples} samples: query | view | detfmt filter's selection | ratio | "
          "matches |")
    print("|---|---|---|---|---|")
    for name, view, base, matches in rows:
        other = f"{base * 1e3:.0f} ms" if base is not None else "-"
        ratio = f"{base / view:.0f}x" if base is not None else "-"
        print(f"| {name} | {view * 1e3:.1f} ms | {other} | {ratio} | {matches} |")


if __name__ == "__main__":
    main()
