"""Parity with Ultralytics' RandomPerspective box math, reimplemented from their numpy code.

The reference follows ultralytics/data/augment.py: M = T @ S @ R @ P @ C in float32,
``apply_bboxes`` (4 corners, perspective divide, min/max), ``Instances.clip`` and
``box_candidates(box1=orig * s, box2=new)``. The same parameters go through RandomAffine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import detfmt.augment as A
from detfmt.augment._geometry import GeometryState

from ._helpers import make_batch


def reference_matrix(params: dict, i: int, in_hw, out_hw) -> np.ndarray:
    """Ultralytics ``affine_transform`` with the random draws replaced by ``params``."""
    c = np.eye(3, dtype=np.float32)
    c[0, 2] = -in_hw[1] / 2
    c[1, 2] = -in_hw[0] / 2
    p = np.eye(3, dtype=np.float32)
    p[2, 0] = params["perspective_x"][i]
    p[2, 1] = params["perspective_y"][i]
    r = np.eye(3, dtype=np.float32)
    a, s = float(params["degrees"][i]), float(params["scale"][i])
    # cv2.getRotationMatrix2D(center=(0, 0), angle=a, scale=s)
    alpha, beta = s * math.cos(math.radians(a)), s * math.sin(math.radians(a))
    r[:2] = np.array([[alpha, beta, 0.0], [-beta, alpha, 0.0]], dtype=np.float32)
    sh = np.eye(3, dtype=np.float32)
    sh[0, 1] = math.tan(float(params["shear_x"][i]) * math.pi / 180)
    sh[1, 0] = math.tan(float(params["shear_y"][i]) * math.pi / 180)
    t = np.eye(3, dtype=np.float32)
    t[0, 2] = float(params["translate_x"][i]) * out_hw[1]
    t[1, 2] = float(params["translate_y"][i]) * out_hw[0]
    return t @ sh @ r @ p @ c


def reference_apply_bboxes(bboxes: np.ndarray, m: np.ndarray, perspective: bool) -> np.ndarray:
    n = len(bboxes)
    xy = np.ones((n * 4, 3), dtype=bboxes.dtype)
    xy[:, :2] = bboxes[:, [0, 1, 2, 3, 0, 3, 2, 1]].reshape(n * 4, 2)
    xy = xy @ m.T
    xy = (xy[:, :2] / xy[:, 2:3] if perspective else xy[:, :2]).reshape(n, 8)
    x = xy[:, [0, 2, 4, 6]]
    y = xy[:, [1, 3, 5, 7]]
    return (
        np.concatenate((x.min(1), y.min(1), x.max(1), y.max(1)), dtype=bboxes.dtype).reshape(4, n).T
    )


def reference_box_candidates(box1, box2, wh_thr=2, ar_thr=100, area_thr=0.1, eps=1e-16):
    w1, h1 = box1[2] - box1[0], box1[3] - box1[1]
    w2, h2 = box2[2] - box2[0], box2[3] - box2[1]
    ar = np.maximum(w2 / (h2 + eps), h2 / (w2 + eps))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + eps) > area_thr) & (ar < ar_thr)


def reference_boxes(bboxes: np.ndarray, m: np.ndarray, s: float, out_hw, perspective: bool):
    new = reference_apply_bboxes(bboxes, m, perspective)
    new[:, [0, 2]] = new[:, [0, 2]].clip(0, out_hw[1])  # Instances.clip(w, h)
    new[:, [1, 3]] = new[:, [1, 3]].clip(0, out_hw[0])
    keep = reference_box_candidates((bboxes * s).T, new.T)
    return new, keep


def _near_threshold(orig: np.ndarray, new: np.ndarray, s: float) -> np.ndarray:
    """Boxes within 1e-3 of a box_candidates threshold (float order may flip them)."""
    w1, h1 = (orig[:, 2] - orig[:, 0]) * s, (orig[:, 3] - orig[:, 1]) * s
    w2, h2 = new[:, 2] - new[:, 0], new[:, 3] - new[:, 1]
    ratio = w2 * h2 / (w1 * h1 + 1e-16)
    return (np.abs(w2 - 2) < 1e-3) | (np.abs(h2 - 2) < 1e-3) | (np.abs(ratio - 0.1) < 1e-4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # Ultralytics defaults: translate 0.1, scale 0.5
        {"degrees": 30.0, "shear": 10.0, "translate": 0.3, "scale": 0.9},
        {"degrees": 10.0, "perspective": 0.0005, "scale": 0.5},
        {"degrees": 180.0, "translate": 0.5, "scale": 0.9, "size": (48, 40)},
    ],
)
def test_boxes_and_candidates_match_ultralytics(kwargs):
    g = torch.Generator().manual_seed(21)
    batch = make_batch(16, 64, 80, 8, seed=22, min_side=1.0)
    op = A.RandomAffine(generator=g, **kwargs)
    params = op.sample_geometry(GeometryState.of(batch))
    out = op(batch, params)
    in_hw = (64, 80)
    out_hw = kwargs.get("size", in_hw)
    perspective = kwargs.get("perspective", 0.0) != 0.0
    np_params = {k: v.numpy() for k, v in params.items()}
    compared = 0
    for i in range(len(batch)):
        m = reference_matrix(np_params, i, in_hw, out_hw)
        ours = op.plan(GeometryState.of(batch), params).matrix[i].numpy()
        np.testing.assert_allclose(ours, m, rtol=1e-5, atol=1e-3)
        valid = batch.mask[i].numpy()
        orig = batch.boxes[i].numpy()[valid].astype(np.float32)
        new, keep = reference_boxes(orig, m, float(np_params["scale"][i]), out_hw, perspective)
        got_mask = out.mask[i].numpy()[valid]
        doubtful = _near_threshold(orig, new, float(np_params["scale"][i]))
        assert np.array_equal(got_mask[~doubtful], keep[~doubtful])
        got = out.boxes[i].numpy()[valid]
        np.testing.assert_allclose(got[keep & got_mask], new[keep & got_mask], atol=1e-3)
        compared += int(keep.sum())
    assert compared >= 20


def test_candidates_rule_matches_reference_on_edge_cases():
    before = torch.tensor([[[0.0, 0.0, 10.0, 10.0]] * 5])
    after = torch.tensor(
        [[[0, 0, 2.0, 10], [0, 0, 2.01, 10], [0, 0, 3.1, 3.1], [0, 0, 3.2, 3.2], [0, 0, 300, 2.5]]]
    )
    change = A.BoxChange(before, after, after, torch.ones(1), (400, 400))
    got = A.UltralyticsCandidates()(change)[0].numpy()
    want = reference_box_candidates(before[0].numpy().T, after[0].numpy().T)
    assert got.tolist() == want.tolist() == [False, True, False, True, False]
