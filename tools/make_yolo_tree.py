"""A YOLO tree (the layout `tools/bench_train.py --data` reads) from a COCO JSON folder, each image
linked ``--copies`` times under new names, so that a small set of large photos outgrows
Ultralytics' image buffer (min(n, 8 * batch) images) as a real dataset does.

    python tools/make_yolo_tree.py ../shared/data/chess-coco/valid WORK/chess-yolo --copies 3
    python tools/bench_train.py --data WORK/chess-yolo --imgsz 640 --iters 0 ...

Writes ``images/train2017/*.jpg`` (symbolic links), ``object_detection/labels/train2017/*.txt``
(class cx cy w h, normalised) and ``object_detection/config.yaml`` (the class names).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("coco_dir", type=Path, help="a folder with _annotations.coco.json "
                        "(or --annotations) and the images it names")
    parser.add_argument("out", type=Path)
    parser.add_argument("--annotations", default="_annotations.coco.json")
    parser.add_argument("--copies", type=int, default=1)
    args = parser.parse_args()
    src = args.coco_dir.resolve()
    data = json.loads((src / args.annotations).read_text())
    categories = sorted(data["categories"], key=lambda c: c["id"])
    index = {c["id"]: i for i, c in enumerate(categories)}
    by_image: dict[int, list[dict]] = {}
    for ann in data["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    images = args.out / "images" / "train2017"
    labels = args.out / "object_detection" / "labels" / "train2017"
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    for copy in range(args.copies):
        for image in data["images"]:
            stem = f"c{copy}_{Path(image['file_name']).stem}"
            link = images / f"{stem}.jpg"
            if not link.exists():
                os.symlink(src / image["file_name"], link)
            width, height = image["width"], image["height"]
            lines = []
            for ann in by_image.get(image["id"], []):
                x, y, w, h = ann["bbox"]
                if w > 0 and h > 0:
                    lines.append(f"{index[ann['category_id']]} {(x + w / 2) / width:.6f} "
                                 f"{(y + h / 2) / height:.6f} {w / width:.6f} {h / height:.6f}")
            (labels / f"{stem}.txt").write_text("".join(line + "\n" for line in lines))
    names = "".join(f"  {i}: {json.dumps(c['name'])}\n" for i, c in enumerate(categories))
    (args.out / "object_detection" / "config.yaml").write_text("names:\n" + names)
    print(f"{args.copies * len(data['images'])} images, {len(categories)} classes -> {args.out}")


if __name__ == "__main__":
    main()
