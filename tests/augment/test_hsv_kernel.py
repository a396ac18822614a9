"""The native HSV kernel (`detfmt.augment._native`) gives OpenCV's bytes: Ultralytics' HSV jitter
(RGB -> HSV, three LUTs, HSV -> RGB with OpenCV) for every colour, layout and gain."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch

cv2 = pytest.importorskip("cv2")
pytest.importorskip("numba")
if os.environ.get("DETFMT_HSV", "").lower() == "opencv":
    pytest.skip("DETFMT_HSV=opencv turns the kernel off", allow_module_level=True)

from detfmt.augment import _native  # noqa: E402
from detfmt.augment._opencv import _hsv_into, _hsv_tables, hsv_luts  # noqa: E402

# Ultralytics' default gains and wider ones; the second saturation gain is one whose nearest
# float32 truncates one entry differently from the float64 table (a neighbour is needed).
GAINS = [
    (0.012, -0.5513, 0.31),
    (-0.0149, 0.43636355613647965, -0.37),
    (0.4, 0.9, -0.9),
    (-0.5, -1.0, 0.95),
    (0.0, 0.0, 0.0),
]


def _all_colours() -> np.ndarray:
    """Every 24-bit colour once, as a 4096 x 4096 RGB image."""
    c = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(c >> 16) & 255, (c >> 8) & 255, c & 255], axis=-1).astype(np.uint8)
    return rgb.reshape(4096, 4096, 3)


def _ultralytics_hsv(image: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """Ultralytics' RandomHSV calls (on RGB, as detfmt's images are)."""
    hue, sat, val = cv2.split(cv2.cvtColor(image, cv2.COLOR_RGB2HSV))
    hsv = cv2.merge((cv2.LUT(hue, tables[0]), cv2.LUT(sat, tables[1]), cv2.LUT(val, tables[2])))
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)


@functools.cache
def _vector_width() -> int:
    """The pixels OpenCV's HSV -> RGB vector loop takes per step here: 32 with AVX2, 64 where
    OpenCV (4.14 on) dispatches its colour code to AVX-512. Its scalar code does the last
    ``width % n`` pixels of a row and rounds where the vector code truncates: the probe's red
    is 138.73 (vector 138, scalar 139), so the narrowest row that gives 138 is one step."""
    for width in (8, 16, 32, 64, 128, 256, 512, 1024):
        probe = np.full((1, width, 3), (39, 113, 160), dtype=np.uint8)
        if int(cv2.cvtColor(probe, cv2.COLOR_HSV2RGB)[0, 0, 0]) == 138:
            return width
    raise AssertionError("OpenCV's HSV -> RGB runs no vector code up to 1024 pixels a row")


def _opencv_fuses_multiply_add() -> bool:
    """Whether this OpenCV build's vector code computes HSV -> RGB's 1 - s*h with one rounding
    (its x86-64 AVX2 / AVX-512 and aarch64 builds do); the kernel follows that path. The probe
    row is one vector step wide: the scalar code rounds 55.999996 to 56 as well."""
    probe = np.full((1, _vector_width(), 3), (1, 90, 85), dtype=np.uint8)
    return int(cv2.cvtColor(probe, cv2.COLOR_HSV2RGB)[0, 0, 1]) == 56


def _outputs(image: np.ndarray, params: np.ndarray) -> list[np.ndarray]:
    """The kernel's result for RGB and RGBA input, interleaved and planar output."""
    results = []
    rgba = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA)
    for source in (image, rgba):
        out = np.empty(image.shape, np.uint8)
        assert _native.recolour(source, params, out)
        planes = [np.empty(image.shape[:2], np.uint8) for _ in range(3)]
        assert _native.recolour(source, params, planes)
        results += [out, np.stack(planes, axis=-1)]
    return results


@pytest.mark.parametrize("gains", GAINS)
def test_every_colour_matches_opencv(gains):
    image = _all_colours()
    g = np.array([gains], dtype=np.float64)
    tables = hsv_luts(g)
    params = _native.lut_parameters(g, tables)[0]
    want = _ultralytics_hsv(image, tables[0])
    for got in _outputs(image, params):
        differ = (got != want).any(axis=-1)
        if _opencv_fuses_multiply_add():
            assert not differ.any(), f"{int(differ.sum())} colours differ from OpenCV"
        else:  # OpenCV's unfused build rounds 1 - s*h twice: one level, rarely
            assert np.abs(got.astype(int) - want).max() <= 1
            assert differ.mean() < 1e-3


def test_lut_parameters_reproduce_every_table():
    g = torch.Generator().manual_seed(11)
    gains = (torch.rand(3000, 3, generator=g, dtype=torch.float64) * 2 - 1) * torch.tensor(
        [0.5, 1.0, 1.0], dtype=torch.float64
    )
    gains[0] = torch.tensor([0.0, -1.0, -1.0], dtype=torch.float64)  # everything to 0
    gains[1, 1] = 0.43636355613647965  # needs a float32 neighbour
    tables = hsv_luts(gains.numpy())
    params = _native.lut_parameters(gains.numpy(), tables)
    assert not np.isnan(params).any()
    x = np.arange(256, dtype=np.float32)
    hue = (np.arange(180) + params[:, :1].astype(np.int64)) % 180
    assert np.array_equal(hue, tables[:, 0, :180])
    for plane in (1, 2):
        closed = np.trunc(np.clip(x * params[:, plane : plane + 1], 0, 255)).astype(np.uint8)
        assert np.array_equal(closed, tables[:, plane])
    assert params[1, 1] != np.float32(1.43636355613647965)


def test_a_table_without_closed_form_is_left_to_opencv():
    """r_s = -0.55: in float64 1 + r_s is just below 0.45, so 20 (1 + r_s) truncates to 9 and
    60 (1 + r_s) to 26; no float32 gain gives both. `recolour` declines, OpenCV runs."""
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (64, 3 * _vector_width(), 3), dtype=np.uint8)  # no scalar tail
    gains = torch.tensor([[0.01, -0.55, -0.3013]], dtype=torch.float64)
    params, tables, used = _hsv_tables(gains)
    assert np.isnan(params[0, 1]) and not np.isnan(params[0, [0, 2]]).any()
    assert not _native.recolour(image, params[0], np.empty_like(image))
    out = np.empty_like(image)
    _hsv_into(image, params[0], tables[0], used[0], out)
    assert np.array_equal(out, _ultralytics_hsv(image, tables[0]))
    ok = torch.tensor([[0.01, -0.5513, -0.3013]], dtype=torch.float64)
    params, tables, used = _hsv_tables(ok)
    native = np.empty_like(image)
    _hsv_into(image, params[0], tables[0], used[0], native)
    assert np.array_equal(native, _ultralytics_hsv(image, tables[0]))


@pytest.mark.parametrize("width", [1, 7, 31, 33, 641])
def test_any_width_and_layout_agree(width):
    """Rows of any length (the vector loop's remainder included): the kernel's four layouts are
    identical, and equal OpenCV's where OpenCV stays on its vector path (the same pixels at the
    start of a row a whole number of its vector steps wide)."""
    rng = np.random.default_rng(width)
    image = rng.integers(0, 256, (5, width, 3), dtype=np.uint8)
    g = np.array([[0.01, 0.6, -0.35]])
    params = _native.lut_parameters(g, hsv_luts(g))[0]
    first, *rest = _outputs(image, params)
    for other in rest:
        assert np.array_equal(first, other)
    # the same pixels inside an image a whole number of vector steps wide (no scalar tail)
    step = _vector_width()
    padded = np.zeros((5, step * (width // step + 1), 3), np.uint8)
    padded[:, :width] = image
    if _opencv_fuses_multiply_add():
        want = _ultralytics_hsv(padded, hsv_luts(g)[0])[:, :width]
        assert np.array_equal(first, want)


def test_non_contiguous_layouts_are_declined():
    image = np.zeros((8, 16, 3), np.uint8)
    params = np.array([0.0, 1.0, 1.0], np.float32)
    assert not _native.recolour(image[:, ::2], params, np.empty((8, 8, 3), np.uint8))
    out = np.empty((8, 32, 3), np.uint8)
    assert not _native.recolour(image, params, out[:, ::2])


def test_opencv_only_when_asked(monkeypatch):
    monkeypatch.setenv("DETFMT_HSV", "opencv")
    assert _native._load() is None
    monkeypatch.delenv("DETFMT_HSV")
    assert _native._load() is not None


def test_a_kernel_that_does_not_compile_falls_back_to_opencv(monkeypatch):
    """A numba that cannot compile the kernel costs speed, never the augmentation: a warning,
    then OpenCV."""
    def broken(*args):
        raise RuntimeError("no such intrinsic")

    # each kernel compiles on its first use (only the one in use is compiled)
    monkeypatch.setitem(_native._state, "loaded", True)
    monkeypatch.setitem(_native._state, "kernels", (broken, broken))
    monkeypatch.setitem(_native._state, "ready", {})
    image = np.full((2, 3, 3), 50, np.uint8)
    params = np.array([0.0, 1.0, 1.0], np.float32)
    with pytest.warns(RuntimeWarning, match="did not compile"):
        assert not _native.recolour(image, params, np.empty_like(image))
    assert not _native.recolour(image, params, np.empty_like(image))  # no second attempt


@pytest.mark.parametrize("planar", [False, True])
def test_content_reads_only_its_pixels(planar):
    """With ``content``, the pixels inside the rectangles are the whole-image result and every
    other pixel is the recoloured fill (what the whole image gives where it holds the fill),
    whatever the image holds there: whole rows, partial ones, empty ones, merged runs of whole
    rows, no rectangle at all, and rectangles side by side with gaps between them in a row."""
    rng = np.random.default_rng(5)
    fill = 114
    image = rng.integers(0, 256, (9, 37, 4), dtype=np.uint8)
    g = np.array([GAINS[0]])
    params = _native.lut_parameters(g, hsv_luts(g))[0]
    for content in [[(0, 0, 37, 9)], [(0, 2, 37, 7)], [(3, 2, 30, 7)], [(5, 4, 5, 8)],
                    [(36, 8, 37, 9)], [], [(0, 0, 10, 4), (12, 0, 20, 6), (25, 2, 37, 9)],
                    [(30, 1, 37, 3), (0, 1, 5, 3), (6, 1, 29, 3), (0, 5, 37, 9)]]:
        inside = np.zeros((9, 37), bool)
        for x0, y0, x1, y1 in content:
            inside[y0:y1, x0:x1] = True
        filled = np.where(inside[..., None], image, fill).astype(np.uint8)
        want = np.empty((9, 37, 3), np.uint8)
        assert _native.recolour(filled, params, want)
        out = np.full((9, 37, 3), 17, np.uint8)
        planes = [np.full((9, 37), 17, np.uint8) for _ in range(3)]
        assert _native.recolour(image, params, planes if planar else out, content, fill)
        got = np.stack(planes, axis=-1) if planar else out
        assert np.array_equal(got, want), content
    for content in [[(0, 0, 38, 9)], [(3, 0, 2, 9)], [(0, -1, 5, 3)], [(0, 0, 5, 10)],
                    [(0, 0, 5, 5), (4, 4, 2, 9)]]:
        before = out.copy()
        with pytest.raises(ValueError, match="content rectangles"):
            _native.recolour(image, params, out, content)
        assert np.array_equal(out, before)  # nothing written


@pytest.mark.parametrize("native", [True, False])
def test_content_rectangles_give_the_whole_image_result(native, monkeypatch):
    """`_hsv_into` with the rectangles that hold the sample: the pixels outside them (a gap
    between two rectangles of a row included) are never read (junk there changes nothing) and
    get exactly what recolouring the fill gives; where the kernel declines, the fill is written
    and every pixel recoloured by OpenCV."""
    if not native:
        monkeypatch.setattr(_native, "recolour_kernels", lambda: None)
    rng = np.random.default_rng(6)
    fill = 114
    content = [(0, 0, 20, 11), (20, 0, 33, 6), (4, 11, 15, 16), (22, 11, 33, 16)]
    image = np.full((19, 41, 4), fill, np.uint8)
    for x0, y0, x1, y1 in content:
        image[y0:y1, x0:x1] = rng.integers(0, 256, (y1 - y0, x1 - x0, 4), dtype=np.uint8)
    params, tables, used = _hsv_tables(torch.tensor([GAINS[0]], dtype=torch.float64))
    assert not np.isnan(params).any()  # the kernel takes these gains where it is loaded
    want = np.empty((19, 41, 3), np.uint8)
    _hsv_into(image.copy(), params[0], tables[0], used[0], want)
    junk = image.copy()
    mask = np.ones((19, 41), bool)
    for x0, y0, x1, y1 in content:
        mask[y0:y1, x0:x1] = False
    junk[mask] = rng.integers(0, 256, (int(mask.sum()), 4), dtype=np.uint8)
    for planar in (False, True):
        planes = [np.empty((19, 41), np.uint8) for _ in range(3)]
        out = np.empty((19, 41, 3), np.uint8)
        _hsv_into(junk.copy(), params[0], tables[0], used[0], planes if planar else out,
                  content, fill)
        got = np.stack(planes, axis=-1) if planar else out
        assert np.array_equal(got, want)
