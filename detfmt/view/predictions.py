"""Model predictions beside the ground truth: a COCO results file matched to a dataset.

A COCO results file is a JSON list of ``{"image_id", "category_id", "bbox": [x, y, w, h],
"score"}`` in original pixels. Images are found by their ``source_id`` (what the COCO converter
keeps), or by sample index when the dataset stores no source ids; categories by the classes'
``source_id``, or by class index when the classes have none. Boxes are mapped to stored pixels
through each image's ``scale_offset``. Each sample's predictions at or above ``min_score`` are
matched greedily, highest score first, to an unmatched ground-truth box of the same class with
IoU >= ``iou`` (COCO's rule at one threshold): a match is a true positive, a prediction left
over a false positive, a ground-truth box left over a false negative.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from detfmt import errors
from detfmt.reading.protocol import DatasetLike

__all__ = ["MAX_RESULTS_BYTES", "Evaluation", "match", "read_results"]

MAX_RESULTS_BYTES = 2 << 30


def _bad(message: str, path: str) -> errors.UsageError:
    return errors.UsageError(f"not a COCO results file: {message}", rule="PREDICTIONS_INVALID",
                             path=path)


def read_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The detections of a COCO results file (checked: a list of objects with numeric
    ``image_id``, ``category_id``, 4-number ``bbox`` and ``score``)."""
    where = os.fspath(path)
    try:
        if os.path.getsize(where) > MAX_RESULTS_BYTES:
            raise _bad(f"over {MAX_RESULTS_BYTES} bytes", where)
        with open(where, "rb") as f:
            data = json.load(f)
    except OSError as error:
        raise errors.UsageError(f"cannot read the predictions ({error.strerror})",
                                path=where) from error
    except ValueError as error:
        raise _bad(f"invalid JSON ({error})", where) from error
    if not isinstance(data, list):
        raise _bad("the top level must be a list of detections", where)
    for k, item in enumerate(data):
        ok = (isinstance(item, dict)
              and all(isinstance(item.get(key), (int, float)) and not isinstance(
                  item.get(key), bool) for key in ("image_id", "category_id", "score"))
              and isinstance(item.get("bbox"), list) and len(item["bbox"]) == 4
              and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      for v in item["bbox"]))
        if not ok:
            raise _bad(f"detection {k} needs numeric image_id, category_id, score and a "
                       f"4-number bbox, got {str(item)[:120]}", where)
    return data


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of xyxy boxes."""
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = (x1 - x0).clip(0) * (y1 - y0).clip(0)
    area_a = ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]))[:, None]
    area_b = ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[None, :]
    union = area_a + area_b - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match(gt_boxes: np.ndarray, gt_classes: np.ndarray, boxes: np.ndarray,
          classes: np.ndarray, scores: np.ndarray, iou: float) -> tuple[np.ndarray, np.ndarray]:
    """(per prediction: true positive, per ground-truth box: found), greedy by score."""
    tp = np.zeros(len(boxes), bool)
    found = np.zeros(len(gt_boxes), bool)
    if not len(boxes) or not len(gt_boxes):
        return tp, found
    overlap = _iou(boxes.astype(np.float64), gt_boxes.astype(np.float64))
    overlap[classes[:, None] != gt_classes[None, :]] = -1
    for p in np.argsort(-scores, kind="stable"):
        row = np.where(found, -1, overlap[p])
        g = int(np.argmax(row))
        if row[g] >= iou:
            tp[p] = found[g] = True
    return tp, found


@dataclasses.dataclass
class Evaluation:
    """Predictions of one dataset in stored pixels, per sample, with their TP/FP/FN counts."""

    boxes: dict[int, np.ndarray]
    classes: dict[int, np.ndarray]
    scores: dict[int, np.ndarray]
    tp: dict[int, np.ndarray]
    counts: np.ndarray  # (N, 3) TP, FP, FN per sample
    iou: float
    min_score: float
    unmatched: int  # detections whose image or category the dataset does not have

    @classmethod
    def build(cls, ds: DatasetLike, results: list[dict[str, Any]], *, iou: float = 0.5,
              min_score: float = 0.5) -> Evaluation:
        n = len(ds)
        fields = ds.schema.image_fields
        ids = (np.asarray(ds.image_field("source_id"), np.int64) if "source_id" in fields
               else np.full(n, -1, np.int64))
        by_image = ({int(v): i for i, v in enumerate(ids)} if (ids >= 0).any()
                    else {i: i for i in range(n)})
        sources = [c.source_id for c in ds.schema.classes]
        by_class = ({int(s): k for k, s in enumerate(sources) if s is not None}
                    if any(s is not None for s in sources) else
                    {k: k for k in range(len(sources))})
        transform = (np.asarray(ds.image_field("scale_offset"), np.float64)
                     if "scale_offset" in fields else None)
        grouped: dict[int, list[tuple[list[float], int, float]]] = {}
        unmatched = 0
        for item in results:
            i, c = by_image.get(int(item["image_id"])), by_class.get(int(item["category_id"]))
            if i is None or c is None:
                unmatched += 1
                continue
            if float(item["score"]) >= min_score:
                grouped.setdefault(i, []).append((item["bbox"], c, float(item["score"])))
        boxes, classes, scores, tp = {}, {}, {}, {}
        counts = np.zeros((n, 3), np.int64)
        counts[:, 2] = np.asarray(ds.counts, np.int64)  # nothing predicted: every box missed
        for i, found in grouped.items():
            xywh = np.array([b for b, _, _ in found], np.float64).reshape(-1, 4)
            xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
            if transform is not None:
                sx, sy, tx, ty = transform[i]
                xyxy = xyxy * [sx, sy, sx, sy] + [tx, ty, tx, ty]
            labels = ds.labels(np.array([i], np.int64))
            mask = labels.mask[0]
            boxes[i] = xyxy
            classes[i] = np.array([c for _, c, _ in found], np.int64)
            scores[i] = np.array([s for _, _, s in found], np.float64)
            tp[i], hit = match(labels.boxes[0][mask], labels.classes[0][mask].astype(np.int64),
                               xyxy, classes[i], scores[i], iou)
            counts[i] = (tp[i].sum(), (~tp[i]).sum(), (~hit).sum())
        return cls(boxes, classes, scores, tp, counts, iou, min_score, unmatched)

    def of(self, i: int) -> dict[str, Any]:
        """Sample ``i``'s predictions and counts as plain data."""
        empty = np.zeros(0)
        return {"boxes": np.round(self.boxes.get(i, empty.reshape(0, 4)), 2).tolist(),
                "classes": self.classes.get(i, empty).astype(int).tolist(),
                "scores": np.round(self.scores.get(i, empty), 4).tolist(),
                "tp": self.tp.get(i, empty).astype(bool).tolist(),
                "counts": dict(zip(("tp", "fp", "fn"), self.counts[i].tolist(), strict=True))}
