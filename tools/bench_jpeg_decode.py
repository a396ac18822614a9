"""JPEG decoders side by side on the stored payloads of a real dataset (issue 27 item 1).

The payloads are those of a detfmt JPEG copy of ``--data`` (a YOLO tree, default
coco128) at stored size, decoded to RGB. Sides, interleaved per round (order alternating),
each decoding every payload once; images/s, medians over rounds:

- ``simplejpeg``: ``simplejpeg.decode_jpeg(p, "RGB")`` into a new array (libjpeg-turbo);
- ``simplejpeg_buffer``: the same into a reused buffer (``buffer=``);
- ``cv2``: ``cv2.imdecode`` (libjpeg-turbo inside OpenCV) then ``cvtColor`` BGR to RGB (the
  same output); ``cv2_bgr``: without the conversion (not the same output: a bound);
- ``pil``: Pillow ``Image.open(...).convert("RGB")``;
- ``pyturbojpeg``: only where ``turbojpeg`` imports and finds a libturbojpeg;
- ``detfmt_decode``: ``detfmt.format.codecs.decode_into`` into a reused array (the structure
  checks of SPEC §9.3, the header check, the decode);
- ``detfmt_read_image``: ``ds.read_image(i)``, a new array per sample (the structure walked
  once per sample and process, as every read path does);
- ``detfmt_batch``: ``ds.batch`` of ``--batch`` samples into a new array (decode into the
  padded batch slots; default threads), ``_t1`` on one thread, ``_out`` on one thread into a
  reused ``out=`` buffer (what the Loader does); ``before_batch_out`` the same as it was before
  issue 27 (the SPEC §9 structure checks on every read: the dataset's memo cleared per batch);
- ``*_half``: DCT-domain downscale by 2 (``simplejpeg min_height/min_width`` with
  ``min_factor=2``, ``cv2 IMREAD_REDUCED_COLOR_2``): what a decode-scale hint could gain.

Ratios against the fastest full-size decoder with the same (RGB) output, load average recorded.

    python tools/bench_jpeg_decode.py --data ../shared/data/coco128-yolo \
        --out docs/bench/jpeg_decode.md
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import simplejpeg
from benchpaths import load_average, load_line, publish
from PIL import Image

import detfmt
from detfmt.format import codecs, spec


def decode_half(payload: bytes, shape: tuple[int, int]) -> np.ndarray:
    """simplejpeg's DCT-domain decode at 1/2: it takes the largest factor (up to 8) whose output
    is at least ``min_height`` x ``min_width``, so those must be half the stored size (with 1
    and 1 it decodes at 1/8)."""
    h, w = shape
    return simplejpeg.decode_jpeg(payload, "RGB", min_height=-(-h // 2), min_width=-(-w // 2),
                                  min_factor=2)


def sides_for(ds, payloads: list[bytes], batch: int) -> dict[str, Callable[[], int]]:
    shapes = [simplejpeg.decode_jpeg_header(p)[:2] for p in payloads]
    big = max(h * w for h, w in shapes) * 3
    scratch = np.empty(big, np.uint8)
    arrays = [np.frombuffer(p, np.uint8) for p in payloads]
    n = len(payloads)
    from detfmt.reading.gather import batch_buffer

    reused = batch_buffer(np.array(shapes), batch)

    def sj() -> int:
        for p in payloads:
            simplejpeg.decode_jpeg(p, "RGB")
        return n

    def sj_buffer() -> int:
        for p, (h, w) in zip(payloads, shapes, strict=True):
            simplejpeg.decode_jpeg(p, "RGB", buffer=scratch[: h * w * 3])
        return n

    def sj_half() -> int:
        for p, shape in zip(payloads, shapes, strict=True):
            decode_half(p, shape)
        return n

    def cv() -> int:
        for a in arrays:
            cv2.cvtColor(cv2.imdecode(a, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        return n

    def cv_bgr() -> int:
        for a in arrays:
            cv2.imdecode(a, cv2.IMREAD_COLOR)
        return n

    def cv_half() -> int:
        for a in arrays:
            cv2.cvtColor(cv2.imdecode(a, cv2.IMREAD_REDUCED_COLOR_2), cv2.COLOR_BGR2RGB)
        return n

    def pil() -> int:
        for p in payloads:
            Image.open(io.BytesIO(p)).convert("RGB").load()
        return n

    def detfmt_decode() -> int:
        for p, (h, w) in zip(payloads, shapes, strict=True):
            codecs.decode_into(p, spec.CODEC_JPEG, scratch[: h * w * 3].reshape(h, w, 3),
                               path="-", index=0)
        return n

    def detfmt_read_image() -> int:  # a new array per sample, as `simplejpeg` gives
        for i in range(n):
            ds.read_image(i)
        return n

    def detfmt_batch(**kwargs) -> Callable[[], int]:
        def run() -> int:
            for start in range(0, n, batch):
                ds.batch(list(range(start, min(n, start + batch))), **kwargs)
            return n
        return run

    def before_batch_out() -> int:  # the structure memo forgotten: every payload walked again
        for start in range(0, n, batch):
            ds.payload_checked[:] = 0
            ds.batch(list(range(start, min(n, start + batch))), num_threads=1, out=reused)
        return n

    out = {"simplejpeg": sj, "simplejpeg_buffer": sj_buffer, "cv2": cv, "cv2_bgr": cv_bgr,
           "pil": pil, "detfmt_decode": detfmt_decode, "detfmt_read_image": detfmt_read_image,
           "detfmt_batch": detfmt_batch(),
           "detfmt_batch_t1": detfmt_batch(num_threads=1),
           "detfmt_batch_out": detfmt_batch(num_threads=1, out=reused),
           "before_batch_out": before_batch_out,
           "detfmt_batch_out_half": detfmt_batch(num_threads=1, out=reused, decode_scale=2),
           "simplejpeg_half": sj_half, "cv2_half": cv_half}
    try:
        from turbojpeg import TJPF_RGB, TurboJPEG

        tj = TurboJPEG()

        def turbo() -> int:
            for p in payloads:
                tj.decode(p, pixel_format=TJPF_RGB)
            return n

        out["pyturbojpeg"] = turbo
    except Exception as error:  # not installed, or no libturbojpeg on the machine
        print(f"pyturbojpeg: not measured ({type(error).__name__}: {error})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/coco128-yolo")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        from detfmt.convert import from_yolo

        src = Path(args.data)
        from_yolo(src / "images", src / "object_detection" / "labels", Path(tmp) / "jpeg",
                  names=src / "object_detection" / "config.yaml", codec="jpeg")
        ds = detfmt.open(Path(tmp) / "jpeg")
        payloads = [bytes(ds.payload(i)) for i in range(len(ds))]
        sampling = {}
        for p in payloads:
            sub = simplejpeg.decode_jpeg_header(p)[3]
            sampling[sub] = sampling.get(sub, 0) + 1
        sides = sides_for(ds, payloads, args.batch)
        for fn in sides.values():
            fn()
        names = list(sides)
        rates: dict[str, list[float]] = {k: [] for k in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                count = sides[name]()
                rates[name].append(count / (time.perf_counter() - t0))
        med = {k: statistics.median(v) for k, v in rates.items()}
        same = ("simplejpeg", "simplejpeg_buffer", "cv2", "pil", "pyturbojpeg")
        best = max((k for k in same if k in med), key=med.get)
        pixels = sum(h * w for h, w in (simplejpeg.decode_jpeg_header(p)[:2] for p in payloads))
    lines = [f"`python tools/bench_jpeg_decode.py {' '.join(sys.argv[1:])}`", "",
             f"{len(payloads)} stored JPEG payloads of {args.data} "
             f"({pixels / len(payloads) / 1e6:.2f} Mpx mean, subsampling {sampling}), "
             f"{args.rounds} interleaved rounds, medians; one thread unless said; baseline: "
             f"`{best}` (fastest with RGB output at stored size).", "",
             "| side | images/s | ratio to baseline |", "|---|---|---|"]
    for name in names:
        lines.append(f"| {name} | {med[name]:.1f} | {med[name] / med[best]:.2f}x |")
    lines += ["", f"{load_line(load_before)} simplejpeg {simplejpeg.__version__}, OpenCV "
              f"{cv2.__version__}."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
