"""The viewer in a real browser (headless Chromium): what a person sees on each page."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import detfmt
from detfmt.render import PALETTE
from tests.datasets import make_dataset, make_sharded_root, varied_shapes
from tests.view.conftest import BOXES, GRAY, HOSTILE, open_page, serving, wait_ready

pytestmark = pytest.mark.slow


def _by(kind):
    from selenium.webdriver.common.by import By

    return getattr(By, kind)


def _tiles(driver) -> list[int]:
    return [int(t.get_attribute("data-index"))
            for t in driver.find_elements(_by("CSS_SELECTOR"), "#tiles .tile")]


def _expected(ds, keep) -> list[int]:
    """Indices a filter should keep, by a plain loop over the samples (not the viewer's code)."""
    return [i for i in range(len(ds)) if keep(ds[i])]


def _choose(driver, select_id: str, values: list[str]) -> None:
    """Pick options of a <select> the way a person does, then fire its change event."""
    driver.execute_script(
        "const s = document.getElementById(arguments[0]);"
        "for (const o of s.options) o.selected = arguments[1].includes(o.value);"
        "document.body.dataset.ready = '';"
        "s.dispatchEvent(new Event('change'));", select_id, values)
    wait_ready(driver, "grid")


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    path = tmp_path_factory.mktemp("varied") / "ds"
    make_dataset(path, varied_shapes(40), max_boxes=4).close()
    return path


def test_grid_shows_the_tiles_a_filter_keeps(browser, varied):
    ds = detfmt.open(varied)
    with serving(varied) as url:
        open_page(browser, url + "/#/grid", "grid")
        assert _tiles(browser) == list(range(40))
        assert browser.find_element(_by("ID"), "count").text == "40 of 40 samples match"
        _choose(browser, "f-classes", ["1"])
        want = _expected(ds, lambda s: 1 in s.classes)
        assert _tiles(browser) == want
        assert browser.find_element(_by("ID"), "count").text.startswith(f"{len(want)} of 40")
        _choose(browser, "f-mode", ["none"])
        assert _tiles(browser) == _expected(ds, lambda s: 1 not in s.classes)
        _choose(browser, "f-classes", ["0", "2"])
        _choose(browser, "f-mode", ["all"])
        assert _tiles(browser) == _expected(ds, lambda s: {0, 2} <= set(s.classes.tolist()))
        driver = browser
        driver.find_element(_by("ID"), "f-clear").click()
        wait_ready(driver, "grid")
        driver.execute_script("document.getElementById('f-min').value = '3';")
        _choose(driver, "f-sort", ["most-boxes"])
        want = _expected(ds, lambda s: len(s.boxes) >= 3)
        assert sorted(_tiles(driver)) == want and len(want) > 0
    ds.close()


def _pixel_near(shot: Image.Image, x: float, y: float, rgb, reach: int = 1) -> bool:
    """Whether a pixel within ``reach`` of (x, y) has colour ``rgb`` (within 12 per channel)."""
    cx, cy = round(x), round(y)
    for dx in range(-reach - 1, reach + 1):
        for dy in range(-reach, reach + 1):
            px = shot.getpixel((min(max(cx + dx, 0), shot.width - 1),
                                min(max(cy + dy, 0), shot.height - 1)))
            if all(abs(a - b) <= 12 for a, b in zip(px[:3], rgb, strict=True)):
                return True
    return False


def _check_boxes(shot: Image.Image, boxes, scale: float) -> None:
    for (x0, y0, x1, y1), cls in boxes:
        rgb = PALETTE[cls % len(PALETTE)]
        mid_x, mid_y = (x0 + x1) / 2 * scale, (y0 + y1) / 2 * scale
        for x, y in ((x0 * scale, mid_y), (x1 * scale, mid_y), (mid_x, y1 * scale)):
            assert _pixel_near(shot, x, y, rgb), f"no class-{cls} edge at ({x:.0f}, {y:.0f})"
        if min(x1 - x0, y1 - y0) < 30:  # the label covers a small box's inside
            continue
        inside = shot.getpixel((round(mid_x), round(y0 * scale + (y1 - y0) * scale * 0.75)))
        assert all(abs(v - GRAY) <= 3 for v in inside[:3]), f"box {cls} is filled: {inside}"


def test_boxes_are_drawn_where_the_labels_say(browser, boxes_dataset):
    with serving(boxes_dataset) as url:
        for i in (0, 3, 5):
            open_page(browser, f"{url}/#/sample/{i}", f"sample-{i}")
            stage = browser.find_element(_by("ID"), "stage")
            shot = Image.open(io.BytesIO(stage.screenshot_as_png)).convert("RGB")
            assert shot.size == (160, 120)  # stored size at zoom 1
            _check_boxes(shot, BOXES[i], 1.0)
        open_page(browser, url + "/#/grid", "grid")
        frame = browser.find_elements(_by("CSS_SELECTOR"), "#tiles .tile .frame")[3]
        shot = Image.open(io.BytesIO(frame.screenshot_as_png)).convert("RGB")
        scale = min(256 / 160, 256 / 120)
        assert shot.size == (round(160 * scale), round(120 * scale))
        _check_boxes(shot, BOXES[3], scale)


def test_zoom_scales_the_image_and_boxes_not_the_labels(browser, boxes_dataset):
    with serving(boxes_dataset) as url:
        open_page(browser, f"{url}/#/sample/0", "sample-0")
        label = "return document.querySelector('#s-svg text.label').getBoundingClientRect().height"
        before = browser.execute_script(label)
        for _ in range(3):
            _press(browser, "+")
        zoom = 1.25**3
        assert browser.find_element(_by("ID"), "zoom").text == f"{round(zoom * 100)}%"
        stage = browser.find_element(_by("ID"), "stage")
        shot = Image.open(io.BytesIO(stage.screenshot_as_png)).convert("RGB")
        assert shot.size == (int(160 * zoom + 0.5), int(120 * zoom + 0.5))  # as JS rounds
        _check_boxes(shot, BOXES[0], zoom)
        after = browser.execute_script(label)
        assert abs(after - before) <= 0.2 * before, (before, after)  # labels stay readable
        swatch = browser.find_element(_by("CSS_SELECTOR"), "#s-boxes .swatch")
        assert swatch.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"


def test_hostile_names_show_as_text(browser, boxes_dataset):
    with serving(boxes_dataset) as url:
        open_page(browser, url + "/#/grid", "grid")
        options = browser.find_elements(_by("CSS_SELECTOR"), "#f-classes option")
        assert [o.text for o in options] == ["cat", "dog", HOSTILE]
        caption = browser.find_elements(_by("CSS_SELECTOR"), "#tiles .caption")[1]
        assert caption.text == "#1 <b>img</b>_001.png\n1 boxes"
        open_page(browser, url + "/#/sample/1", "sample-1")
        label = browser.find_element(_by("CSS_SELECTOR"), "#s-svg text.label")
        assert label.get_attribute("textContent") == HOSTILE
        assert HOSTILE in browser.find_element(_by("ID"), "s-boxes").text
        open_page(browser, url + "/#/dataset", "dataset")
        card = browser.find_element(_by("ID"), "d-card-lines").text
        assert f"description: a card with {HOSTILE} in it" in card
        table = browser.find_element(_by("ID"), "d-card").get_attribute("textContent")
        assert f"a card with {HOSTILE} in it" in table
        assert not browser.find_elements(_by("CSS_SELECTOR"), "img[src='x'], b")
        assert browser.title == "detfmt view"


def _press(driver, key: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(key).perform()


def test_keyboard_moves_between_samples(browser, boxes_dataset):
    from selenium.webdriver.common.keys import Keys

    with serving(boxes_dataset) as url:
        open_page(browser, url + "/#/grid", "grid")
        browser.find_elements(_by("CSS_SELECTOR"), "#tiles .tile")[0].click()
        wait_ready(browser, "sample-0")
        _press(browser, Keys.ARROW_RIGHT)
        wait_ready(browser, "sample-1")
        assert browser.find_element(_by("ID"), "s-title").text.startswith("#1 ")
        _press(browser, Keys.ARROW_LEFT)
        wait_ready(browser, "sample-0")
        _press(browser, Keys.ESCAPE)
        wait_ready(browser, "grid")
        _choose(browser, "f-classes", ["1"])  # dog: samples 0, 3, 4
        assert _tiles(browser) == [0, 3, 4]
        browser.find_elements(_by("CSS_SELECTOR"), "#tiles .tile")[0].click()
        wait_ready(browser, "sample-0")
        _press(browser, Keys.ARROW_RIGHT)  # the next match, not the next index
        wait_ready(browser, "sample-3")
        rows = browser.find_elements(_by("CSS_SELECTOR"), "#s-boxes tr")
        assert len(rows) == 1 + len(BOXES[3])


def test_keyboard_follows_a_filter_past_the_listed_matches(browser, boxes_dataset,
                                                          monkeypatch):
    """When a filter keeps more samples than an answer lists, the page asks the server."""
    from selenium.webdriver.common.keys import Keys

    from detfmt.view import server

    monkeypatch.setattr(server, "MAX_INDICES", 0)
    with serving(boxes_dataset) as url:
        open_page(browser, url + "/#/grid", "grid")
        _choose(browser, "f-classes", ["1"])  # dog: samples 0, 3, 4
        _choose(browser, "f-sort", ["fewest-boxes"])  # 4 (1 box), 0 (2), 3 (3)
        assert _tiles(browser) == [4, 0, 3]
        browser.find_elements(_by("CSS_SELECTOR"), "#tiles .tile")[0].click()
        wait_ready(browser, "sample-4")
        _press(browser, Keys.ARROW_RIGHT)
        wait_ready(browser, "sample-0")
        _press(browser, Keys.ARROW_RIGHT)
        wait_ready(browser, "sample-3")
        _press(browser, Keys.ARROW_LEFT)
        wait_ready(browser, "sample-0")


def test_split_root(browser, tmp_path):
    from detfmt.workflows.split import split

    src = tmp_path / "all"
    make_dataset(src, varied_shapes(30)).close()
    split(src, tmp_path / "splits", val=0.3, seed=0, progress=False)
    sizes = {name: len(detfmt.open(tmp_path / "splits", split=name)) for name in ("train", "val")}
    with serving(tmp_path / "splits") as url:
        open_page(browser, url + "/#/grid", "grid")
        names = [o.text for o in browser.find_elements(_by("CSS_SELECTOR"), "#split option")]
        assert names == ["train", "val"]
        assert len(_tiles(browser)) == sizes["train"]
        browser.execute_script("const s = document.getElementById('split'); s.value = 'val';"
                               "document.body.dataset.ready = '';"
                               "s.dispatchEvent(new Event('change'));")
        wait_ready(browser, "grid")
        assert len(_tiles(browser)) == sizes["val"]
        assert browser.find_element(_by("ID"), "count").text == \
            f"{sizes['val']} of {sizes['val']} samples match"
        browser.find_elements(_by("CSS_SELECTOR"), "#tiles .tile")[0].click()
        wait_ready(browser, "sample-0")
        open_page(browser, url + "/#/dataset", "dataset")  # the split chosen first: train
        assert f"{sizes['train']}" in browser.find_element(_by("ID"), "d-summary").text


def test_sharded_root(browser, tmp_path):
    root = tmp_path / "sharded"
    ds = make_sharded_root(root, varied_shapes(27), max_boxes=3)
    with serving(root) as url:
        open_page(browser, url + "/#/grid", "grid")
        assert _tiles(browser) == list(range(27))
        _choose(browser, "f-classes", ["2"])
        assert _tiles(browser) == _expected(ds, lambda s: 2 in s.classes)
        open_page(browser, url + "/#/sample/20", "sample-20")
        rows = browser.find_elements(_by("CSS_SELECTOR"), "#s-boxes tr")
        assert len(rows) == 1 + len(ds[20].boxes)
        size = browser.execute_script("const i = document.getElementById('s-img');"
                                      "return [i.naturalHeight, i.naturalWidth];")
        assert tuple(size) == ds.image_shape(20)[:2]
        open_page(browser, url + "/#/dataset", "dataset")
        assert browser.find_element(_by("ID"), "d-classes").find_elements(
            _by("TAG_NAME"), "rect")
    ds.close()


def test_dataset_page_draws_charts(browser, boxes_dataset):
    with serving(boxes_dataset) as url:
        open_page(browser, url + "/#/dataset", "dataset")
        bars = browser.find_elements(_by("CSS_SELECTOR"), "#d-classes rect")
        widths = [float(b.get_attribute("width")) for b in bars]
        # cat: 4 boxes in 3 images, dog 3 in 3, hostile 2 in 2 (boxes, images per class)
        assert np.argmax(widths) == 0 and len(bars) == 6
        painted = browser.execute_script(
            "const c = document.getElementById('d-centre').getContext('2d');"
            "const d = c.getImageData(0, 0, 256, 256).data; let n = 0;"
            "for (let k = 0; k < d.length; k += 4) if (d[k] || d[k+1]) n++; return n;")
        assert painted > 0
