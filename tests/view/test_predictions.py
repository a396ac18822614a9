"""Predictions beside the ground truth: matching, per-sample counts, the worst-first order, and
what the pages show."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from detfmt.render import PALETTE
from detfmt.view import Viewer
from detfmt.view.index import Query
from detfmt.view.predictions import match
from tests.view.conftest import GRAY, open_page, serving
from tests.view.test_http import _get


def _det(image, cls, xyxy, score):
    x0, y0, x1, y1 = xyxy
    return {"image_id": image, "category_id": cls, "bbox": [x0, y0, x1 - x0, y1 - y0],
            "score": score}


#: against tests.view.conftest.BOXES (no source ids: images and classes by index)
RESULTS = [
    _det(0, 0, [20, 30, 80, 90], 0.9),      # sample 0, cat: a hit
    _det(0, 1, [120, 80, 150, 110], 0.8),   # sample 0, dog where there is none: FP; dog missed
    _det(1, 0, [10, 10, 70, 50], 0.9),      # sample 1: right place, wrong class: FP + FN
    _det(3, 0, [5, 5, 15, 15], 0.7), _det(3, 0, [41, 41, 139, 109], 0.6),
    _det(3, 1, [90, 20, 120, 60], 0.99),    # sample 3: all three found
    _det(3, 1, [90, 21, 120, 61], 0.95),    # ... and a duplicate: FP
    _det(4, 1, [30, 20, 130, 100], 0.2),    # sample 4: below min_score, so the box is missed
    _det(77, 0, [0, 0, 1, 1], 0.9),         # no such image: counted as unmatched
]
COUNTS = {0: (1, 1, 1), 1: (0, 1, 1), 2: (0, 0, 0), 3: (3, 1, 0), 4: (0, 0, 1), 5: (0, 0, 2)}


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "preds.json"
    path.write_text(json.dumps(RESULTS))
    return path


def test_match_greedy_by_score_same_class():
    gt = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    gt_classes = np.array([0, 1])
    boxes = np.array([[0, 0, 10, 9], [1, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]], float)
    tp, found = match(gt, gt_classes, boxes, np.array([0, 0, 0, 1]),
                      np.array([0.5, 0.9, 0.8, 0.7]), 0.5)
    assert tp.tolist() == [False, True, False, False]  # the higher score takes box 0 first
    assert found.tolist() == [True, False]
    tp, _ = match(gt, gt_classes, boxes[:1], np.array([0]), np.array([0.5]), 0.95)
    assert tp.tolist() == [False]  # IoU 0.9 is under 0.95


def test_counts_and_worst_first(boxes_dataset, results):
    viewer = Viewer(boxes_dataset, predictions=results, iou=0.5, min_score=0.5)
    evaluation = viewer.evaluation("")
    assert {i: tuple(c) for i, c in enumerate(evaluation.counts.tolist())} == COUNTS
    assert evaluation.unmatched == 1
    worst = viewer.index("").select(Query(sort="worst")).tolist()
    assert worst == [0, 1, 5, 3, 4, 2]
    assert viewer.sample("", 3)["predictions"]["tp"] == [True, True, True, False]
    viewer.close()


def test_api_answers_predictions(boxes_dataset, results):
    with serving(boxes_dataset) as url:
        status, _, body = _get(url, "/api/query?sort=worst")
        assert status == 400 and "predictions" in json.loads(body)["error"]
    viewer = Viewer(boxes_dataset, predictions=results)
    sample = viewer.sample("", 0)["predictions"]
    assert sample["counts"] == {"tp": 1, "fp": 1, "fn": 1}
    assert sample["tp"] == [True, False] and sample["classes"] == [0, 1]
    assert sample["boxes"][1] == [120, 80, 150, 110]
    assert "worst" in viewer.info()["sorts"]
    viewer.close()


def test_bad_predictions_file_one_line(boxes_dataset, tmp_path, capsys):
    from detfmt.cli import main

    for text in ("{not json", '{"a": 1}', '[{"image_id": 1, "bbox": [1, 2, 3]}]'):
        path = tmp_path / "bad.json"
        path.write_text(text)
        assert main(["view", str(boxes_dataset), "--predictions", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "PREDICTIONS_INVALID" in err[0] and "bad.json" in err[0]


@pytest.mark.slow
def test_predictions_drawn_beside_the_boxes(browser, boxes_dataset, results, monkeypatch):
    import tests.view.conftest as conftest
    from detfmt.view import server as view_server

    class WithPredictions(view_server.Viewer):
        def __init__(self, path):
            super().__init__(path, predictions=results)

    monkeypatch.setattr(conftest, "Viewer", WithPredictions)
    from selenium.webdriver.common.by import By

    with serving(boxes_dataset) as url:
        open_page(browser, url + "/#/grid", "grid")
        captions = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#tiles .caption")]
        assert captions[0] == "#0 img_000.png\n2 boxes · TP 1 FP 1 FN 1"
        browser.execute_script(
            "const s = document.getElementById('f-sort'); s.value = 'worst';"
            "document.body.dataset.ready = ''; s.dispatchEvent(new Event('change'));")
        from tests.view.conftest import wait_ready

        wait_ready(browser, "grid")
        tiles = browser.find_elements(By.CSS_SELECTOR, "#tiles .tile")
        assert [int(t.get_attribute("data-index")) for t in tiles] == [0, 1, 5, 3, 4, 2]
        open_page(browser, url + "/#/sample/0", "sample-0")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#s-svg rect.pred")) == 2
        assert len(browser.find_elements(By.CSS_SELECTOR, "#s-preds tr")) == 3
        shot = Image.open(io.BytesIO(browser.find_element(By.ID, "stage").screenshot_as_png))
        shot = shot.convert("RGB")
        dog = PALETTE[1]
        column = [shot.getpixel((x, 95)) for x in (118, 119, 120, 121)]  # the FP's left edge
        assert any(all(abs(a - b) <= 12 for a, b in zip(px, dog, strict=True))
                   for px in column), column
        assert all(abs(v - GRAY) <= 3 for v in shot.getpixel((135, 95)))
