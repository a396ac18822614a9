"""Convert a COCO dataset into a sharded detfmt root with Ray Data (the README's Ray recipe).

    python tools/example_ray_coco.py ANNOTATIONS.json IMAGES_DIR ROOT [--num-cpus 2]

Ray decodes the images (`ray.data.read_images`), a `map_batches` step attaches each image's
boxes and classes from the parsed COCO file, and `DetfmtDatasink` writes shards in the Ray tasks
and publishes the manifest once, on the driver, when every task has succeeded. ROOT may be a
local directory, a shared file system or an fsspec URL (``s3://bucket/ds``). The same code runs
on a laptop (``ray.init(num_cpus=2)``) and on a cluster (``ray.init(address="auto")``).

Note: `read_images` does not apply EXIF orientation; COCO boxes refer to the stored pixels, so
this matches COCO's convention. `detfmt convert coco` (one machine) offers ``exif_transpose``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np


def label_table(annotations: str) -> tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(class names, {image basename: (boxes xyxy float32, classes int32)}) from a COCO file."""
    from detfmt.convert.coco import parse_coco

    index = parse_coco(annotations)
    table: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for row, image in enumerate(index.images):
        span = index.annotations_of(row)
        name = os.path.basename(image.file_name)
        if name in table:
            raise SystemExit(f"{annotations}: two images share the file name {name!r}")
        table[name] = (index.boxes[span].astype(np.float32), index.category[span].astype(np.int32))
    return [name for name, _ in index.categories], table


def build(annotations: str, images_dir: str, root: str, *, shard_mb: int = 128,
          max_side: int = 1024, codec: str = "jpeg") -> None:
    """Run the Ray pipeline; ray must already be initialized."""
    import ray.data

    from detfmt.integrations.ray import DetfmtDatasink

    classes, table = label_table(annotations)

    def attach_labels(batch: dict[str, np.ndarray], labels: dict) -> dict[str, list]:
        boxes, ids, names = [], [], []
        for path in batch["path"]:
            name = os.path.basename(str(path))
            b, c = labels.get(name, (np.zeros((0, 4), np.float32), np.zeros(0, np.int32)))
            boxes.append(b)
            ids.append(c)
            names.append(name)
        return {"image": list(batch["image"]), "boxes": boxes, "classes": ids,
                "file_name": names}

    paths = sorted(str(p) for p in Path(images_dir).iterdir() if p.name in table)
    (
        ray.data.read_images(paths, include_paths=True, mode="RGB")
        .map_batches(attach_labels, fn_kwargs={"labels": table}, batch_format="numpy")
        .write_datasink(
            DetfmtDatasink(root, classes=classes, codec=codec, max_side=max_side, clip=True,
                           shard_bytes=shard_mb << 20),
            ray_remote_args={"max_retries": 3},
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("annotations")
    parser.add_argument("images_dir")
    parser.add_argument("root")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--address", default=None, help="a running Ray cluster ('auto')")
    parser.add_argument("--shard-mb", type=int, default=128)
    parser.add_argument("--max-side", type=int, default=1024)
    parser.add_argument("--codec", default="jpeg")
    args = parser.parse_args(argv)

    import ray

    import detfmt

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        build(args.annotations, args.images_dir, args.root, shard_mb=args.shard_mb,
              max_side=args.max_side, codec=args.codec)
    finally:
        ray.shutdown()
    ds = detfmt.open(args.root)
    boxes = int(ds.counts.sum())
    print(f"{args.root}: {len(ds)} images, {boxes} boxes, {len(ds.shards)} shards, "
          f"{len(ds.class_names)} classes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
