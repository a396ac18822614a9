"""The bundled chess sample as a detfmt split root (train/ and val/) for the integration tests.

These tests run in the integrations environment (tools/test_integrations.sh); each module
skips cleanly where its framework is not installed (the main suite's environment).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import detfmt
from detfmt.convert import from_coco

CHESS = Path(detfmt.__file__).parent / "samples" / "chess"


@pytest.fixture(scope="session")
def chess_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root holding ``train/`` and ``val/``: both the 8 chess images (tiny, for speed)."""
    root = tmp_path_factory.mktemp("chess") / "chess"
    root.mkdir()
    for split in ("train", "val"):
        from_coco(CHESS / "annotations.coco.json", CHESS, root / split)
    return root


@pytest.fixture(scope="session")
def chess_train(chess_root: Path) -> Path:
    return chess_root / "train"
