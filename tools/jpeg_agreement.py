"""How far JPEG decoders land from each other, per chroma subsampling (evidence for SPEC §9.3).

For each source photo: decode it, re-encode it as detfmt's writer does (libjpeg-turbo through
simplejpeg, baseline, at ``--quality``) with 4:4:4, 4:2:2 and 4:2:0 chroma, then decode every
encoding with libjpeg-turbo (simplejpeg), Pillow and, when ``--node-modules`` names a folder
holding the npm package ``jpeg-js``, that JavaScript decoder (run by ``node``). Prints, per
subsampling, the encoded size against 4:4:4 and, per pair of decoders and against the source
pixels, the worst per-byte error and the mean error over all images.

    python tools/jpeg_agreement.py ../shared/data/coco128-yolo/images/train2017/*.jpg \
        --node-modules NODE_MODULES --json docs/bench/jpeg-agreement.json

Not a test: it needs the photos, node and jpeg-js. The figures are in docs/jpeg-agreement.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from itertools import combinations
from pathlib import Path

import numpy as np
import simplejpeg
from PIL import Image

SUBSAMPLINGS = ("444", "422", "420")

_NODE_DECODER = """
const fs = require('fs');
const jpeg = require(process.argv[2] + '/jpeg-js');
for (const name of fs.readFileSync(process.argv[3], 'utf8').split('\\n').filter(Boolean)) {
  const img = jpeg.decode(fs.readFileSync(name), {useTArray: true, formatAsRGBA: false,
                                                 maxMemoryUsageInMB: 4096});
  fs.writeFileSync(name + '.rgb', Buffer.from(img.data.buffer, 0, img.width * img.height * 3));
}
"""


def _decode_all_node(paths: list[Path], node_modules: str, scratch: Path) -> list[np.ndarray]:
    listing = scratch / "list.txt"
    listing.write_text("\n".join(str(p) for p in paths))
    script = scratch / "decode.js"
    script.write_text(_NODE_DECODER)
    subprocess.run(["node", str(script), node_modules, str(listing)], check=True)
    return [np.fromfile(f"{p}.rgb", np.uint8) for p in paths]


def _errors(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    diff = np.abs(a.astype(np.int16).ravel() - b.astype(np.int16).ravel())
    return int(diff.max()), float(diff.mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", type=Path)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--node-modules", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    decoders = ["libjpeg-turbo", "pillow"] + (["jpeg-js"] if args.node_modules else [])
    result: dict = {"images": len(args.images), "quality": args.quality, "decoders": decoders,
                    "subsampling": {}}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        sources, encoded = [], {s: [] for s in SUBSAMPLINGS}
        for number, path in enumerate(args.images):
            with Image.open(path) as image:
                rgb = np.ascontiguousarray(np.asarray(image.convert("RGB")))
            sources.append(rgb)
            for sub in SUBSAMPLINGS:
                data = simplejpeg.encode_jpeg(rgb, quality=args.quality, colorspace="RGB",
                                              colorsubsampling=sub)
                target = scratch / f"{number:05d}-{sub}.jpg"
                target.write_bytes(data)
                encoded[sub].append(target)
        for sub in SUBSAMPLINGS:
            decoded: dict[str, list[np.ndarray]] = {"source": [s.ravel() for s in sources]}
            decoded["libjpeg-turbo"] = [
                simplejpeg.decode_jpeg(p.read_bytes(), colorspace="RGB").ravel()
                for p in encoded[sub]]
            decoded["pillow"] = [np.asarray(Image.open(p).convert("RGB")).ravel()
                                 for p in encoded[sub]]
            if args.node_modules:
                decoded["jpeg-js"] = _decode_all_node(encoded[sub], args.node_modules, scratch)
            sizes = sum(p.stat().st_size for p in encoded[sub])
            base = sum(p.stat().st_size for p in encoded["444"])
            pairs = {}
            for a, b in [*combinations(decoders, 2), *(("source", d) for d in decoders)]:
                per_image = [_errors(x, y) for x, y in zip(decoded[a], decoded[b], strict=True)]
                maxima = [m for m, _ in per_image]
                pairs[f"{a} vs {b}"] = {
                    "max_abs_error": max(maxima),
                    "mean_abs_error": float(np.mean([m for _, m in per_image])),
                    "worst_image_mean_abs_error": max(m for _, m in per_image),
                    "images_over_12": sum(m > 12 for m in maxima),
                }
            result["subsampling"][sub] = {"bytes": sizes, "size_vs_444": sizes / base,
                                          "pairs": pairs}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
