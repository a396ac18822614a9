"""Every ```python block of README.md and docs/*.md runs (issue 29, item 11).

Each block is executed as printed, in a fresh working directory that holds the datasets the
docs name (made from the bundled chess sample, or built here where a block needs other class
names). A block runs unless it is listed below: ``RECIPES`` are run by tests/integrations (they
need torchvision, transformers, ... which live in the integrations environment), ``SKIP`` names
what each skipped block needs that a test machine lacks. ``PRELUDE`` defines the names a block
takes from the text around it (``path``, ``epochs``); it never replaces the block's own code.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SAMPLE = ROOT / "detfmt" / "samples" / "chess"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->\s*\Z")


class Block(NamedTuple):
    doc: str  # path relative to the repository
    line: int  # of the opening fence
    source: str
    recipe: str | None

    def listed(self, table: dict[tuple[str, str], str]) -> str | None:
        """The entry of ``table`` for this block: keys are (doc, a line of the block), so a
        block keeps its entry when the text around it moves."""
        lines = self.source.splitlines()
        hits = [value for (doc, line), value in table.items() if doc == self.doc and line in lines]
        assert len(hits) <= 1, f"{self.doc}:{self.line} matches {len(hits)} entries"
        return hits[0] if hits else None


def doc_blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            recipe = _RECIPE.search(text[: match.start()])
            found.append(Block(doc.relative_to(ROOT).as_posix(), text.count("\n", 0, match.start())
                               + 1, match.group(1), recipe.group(1) if recipe else None))
    return found


BLOCKS = doc_blocks()

# Skipped blocks and what they need that this machine lacks. Nothing else may be listed here.
SKIP: dict[tuple[str, str], str] = {
    # Ultralytics lives in the integrations environment, where
    # tests/integrations/test_ultralytics.py runs this very block as printed (relative path)
    ("README.md", "from ultralytics import YOLO"): "ultralytics (integrations environment)",
    # a Ray cluster (ray.init(address="auto")) and an S3 bucket; the full script
    # (tools/example_ray_coco.py) runs on the bundled sample in tests/scaleout/test_example_ray.py
    ("README.md", "import ray, ray.data"): "Ray cluster + S3",
    # S3 and torchrun; tools/example_ddp.py runs in tests/torch/test_example_ddp.py
    ("README.md", 'ds = detfmt.open("s3://bucket/train", cache_dir="/local/nvme/detfmt", '
     'cache_limit=200 << 30)'): "S3 + torchrun",
    ("docs/loader.md", 'loader = dt.Loader(["coco/train", "objects365/train", "s3://b/extra"], '
     'batch_size=32,'): "S3 (s3://b/extra)",
    ("docs/loader.md", "# torchrun: rank and world_size come from torch.distributed"):
        "S3 + torchrun",
    ("docs/scaleout.md", "import detfmt.torch as dt   # under torchrun: rank/world_size from "
     "torch.distributed"): "S3 + torchrun",
    # a Ray Data dataset `ds` of your images (a Ray cluster); DetfmtDatasink is tested in
    # tests/scaleout
    ("docs/scaleout.md",
     "from detfmt.integrations.ray import DetfmtDatasink, read_detfmt"): "Ray cluster",
    # processes the driver did not fork (Dask distributed, Slurm): `run_tasks(...)` is the
    # user's scheduler; begin_write/commit are tested in tests/scaleout
    ("docs/scaleout.md", "from detfmt.shard.write import begin_write, commit"): "a scheduler",
    # API signatures (`-> WriteReport`), not code
    ("docs/contract.md", "detfmt.write(samples, path, *, classes, codec=\"raw\", max_side=None, "
     "fixed_size=None, clip=False,"): "signatures, not code",
    # eight source layouts named by placeholder (data.yaml, coco2017/, VOC2007/, images/, ...);
    # each call is tested on real layouts in tests/convert
    ("docs/converters.md", "from detfmt import convert"): "eight source layouts",
}

# Names a block takes from the prose around it.
_CHESS_BATCH = """
import detfmt
from detfmt.torch import Loader
original = batch = next(iter(Loader("data/split/train", batch_size=4, seed=0)))
names = detfmt.open("data/split/train").class_names
"""
PRELUDE: dict[tuple[str, str], str] = {
    ("docs/augment.md", "import detfmt.augment as A"): _CHESS_BATCH,
    ("docs/augment.md", 'A.set_cpu_backend("auto")    # default: OpenCV for uint8 CPU batches '
     "when cv2 imports, else torch"): "import detfmt.augment as A",
    ("docs/loader.md", "augment = A.presets.yolo_train(640)          # or any A.Compose([...]), "
     "any Batch -> Batch"):
        'import detfmt.torch as dt\npath = "data/split/train"',
    ("docs/loader.md", 'loader = dt.Loader("data/train.detfmt", batch_size=32, seed=0,'):
        "start_epoch, epochs = 0, 2",
    ("docs/workflows.md", "from detfmt.workflows import split, split_indices"): "import detfmt",
    ("docs/workflows.md", "from detfmt.workflows import filter_dataset, select_indices"):
        "import detfmt",
    ("docs/scaleout.md", "detfmt.commit(root, metas)"): """
import numpy as np
root, names = "root", ["a", "b"]
partitions = [[{"image": np.full((8, 8, 3), i, np.uint8), "boxes": np.zeros((0, 4)),
                "classes": np.zeros(0, np.int64)} for i in range(p, p + 3)] for p in (0, 3)]
""",
    ("docs/scaleout.md", "def write_part(part, index, root):"): """
import dask.bag
import msgspec
import numpy as np
import detfmt
from detfmt.shard.write import write_partition
root, names = "root", ["a", "b"]
bag = dask.bag.from_sequence([{"image": np.full((8, 8, 3), i, np.uint8), "boxes": np.zeros((0, 4)),
                               "classes": np.zeros(0, np.int64)} for i in range(6)], npartitions=2)
""",
}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# Blocks written for a GPU (`batch.to("cuda")`) run on the CPU where there is none: the only
# rewrite of a block's text, and only of the device name.
ON_CPU = {("docs/augment.md", "import torch"): "cpu"}


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The datasets the docs name: data/chess (the bundled sample), its split data/split (also
    out/split and data/train.detfmt), and `coco` with the class names of docs/workflows.md."""
    import detfmt
    from detfmt import convert
    from detfmt.workflows import split

    base = tmp_path_factory.mktemp("docs")
    (base / "data").mkdir()
    convert.from_coco(SAMPLE / "annotations.coco.json", SAMPLE, base / "data" / "chess",
                      max_side=512, progress=False)
    split(base / "data" / "chess", base / "data" / "split", val=0.25, seed=0, stratify=True)
    (base / "out").mkdir()
    (base / "out" / "split").symlink_to(base / "data" / "split")
    (base / "data" / "train.detfmt").symlink_to(base / "data" / "split" / "train")
    rng = np.random.default_rng(0)
    classes = ["person", "car", "truck", "bus", "dog"]
    samples = []
    for i in range(10):
        ids = np.array([i % 5, (i + 1) % 5])
        boxes = np.array([[4, 4, 20, 20], [10, 12, 30, 28]], np.float32)
        samples.append({"image": rng.integers(0, 256, (32, 40, 3), np.uint8), "boxes": boxes,
                        "classes": ids})
    detfmt.write(samples, base / "coco", classes=classes, progress=False)
    return base


@pytest.fixture
def workdir(sandbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory per block (its outputs do not meet another block's) that sees the
    sandbox's datasets under the names the docs use."""
    for name in ("data", "out", "coco"):
        (tmp_path / name).symlink_to(sandbox / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _ids(block: Block) -> str:
    return f"{block.doc}:{block.line}"


def test_the_lists_name_only_blocks_that_exist():
    for table in (SKIP, PRELUDE, ON_CPU):
        for key in table:
            hits = [b for b in BLOCKS if b.listed({key: "x"})]
            assert len(hits) == 1, f"{key} names {len(hits)} blocks, not one"
    assert not [b for b in BLOCKS if b.listed(SKIP) and b.listed(PRELUDE)]
    assert any(block.doc == "README.md" for block in BLOCKS)
    assert any(block.doc == "docs/guide.md" for block in BLOCKS)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.recipe], ids=_ids)
def test_recipes_are_run_by_the_integration_tests(block: Block):
    """docs/integrations.md's recipes need the trainers (integrations environment): a test
    there runs each one."""
    tests = "".join(p.read_text() for p in (ROOT / "tests" / "integrations").glob("test_*.py"))
    called = re.search(rf'run_recipe\(\s*"{re.escape(block.recipe)}"', tests)
    assert called, f"no test runs recipe {block.recipe!r}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.recipe], ids=_ids)
def test_block_runs(block: Block, workdir: Path):
    if block.listed(SKIP):
        pytest.skip(f"needs {block.listed(SKIP)}")
    source = block.source
    if block.listed(ON_CPU) and not _cuda():
        source = source.replace('"cuda"', '"cpu"')
    namespace: dict = {"__name__": "__doc_block__"}
    exec(compile(block.listed(PRELUDE) or "", "prelude", "exec"), namespace)
    from detfmt import augment

    backend = augment.get_cpu_backend()
    try:
        exec(compile(source, f"{ROOT / block.doc}:{block.line}", "exec"), namespace)
    finally:
        augment.set_cpu_backend(backend)
    assert os.getcwd() == str(workdir)
