"""The README's Ray recipe (tools/example_ray_coco.py) on the bundled chess sample gives the same
images and boxes as the one-machine converter, `detfmt.convert.from_coco`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt.convert import from_coco

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CHESS = REPO / "detfmt" / "samples" / "chess"


def load_example():
    spec = importlib.util.spec_from_file_location("example_ray_coco", REPO / "tools" /
                                                  "example_ray_coco.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def by_file_name(ds):
    return {str(ds[i].fields["file_name"]): ds[i] for i in range(len(ds))}


def test_ray_recipe_matches_the_converter(tmp_path):
    example = load_example()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        example.build(str(CHESS / "annotations.coco.json"), str(CHESS), str(tmp_path / "ray"),
                      shard_mb=1, max_side=320, codec="raw")
    finally:
        ray.shutdown()
    from_coco(CHESS / "annotations.coco.json", CHESS, tmp_path / "one", max_side=320,
              codec="raw", progress=False)
    sharded, single = detfmt.open(tmp_path / "ray"), detfmt.open(tmp_path / "one")
    assert len(sharded.shards) > 1 and len(sharded) == len(single) == 8
    assert sharded.class_names == single.class_names
    got, want = by_file_name(sharded), by_file_name(single)
    assert sorted(got) == sorted(want)
    for name, sample in want.items():
        other = got[name]
        assert other.image.shape == sample.image.shape, name
        np.testing.assert_array_equal(other.classes, sample.classes, err_msg=name)
        np.testing.assert_allclose(other.boxes, sample.boxes, atol=1e-3, err_msg=name)
        # both resize with the same code; only the decoder differs (PIL in Ray, ours here)
        diff = np.abs(other.image.astype(np.int16) - sample.image.astype(np.int16))
        assert np.mean(diff <= 2) > 0.99, name
    assert os.path.exists(tmp_path / "ray" / "manifest.json")
