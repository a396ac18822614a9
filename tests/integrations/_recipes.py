"""Run the python recipes of docs/integrations.md (blocks after ``<!-- recipe: NAME -->``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
_BLOCK = re.compile(r"<!-- recipe: ([\w-]+) -->\s*```python\n(.*?)```", re.S)


def recipe(name: str) -> str:
    """The source of one recipe."""
    blocks = dict(_BLOCK.findall(DOC.read_text(encoding="utf-8")))
    if name not in blocks:
        raise KeyError(f"no recipe {name!r} in {DOC} (have {sorted(blocks)})")
    return blocks[name]


def run_recipe(name: str, **names: Any) -> dict[str, Any]:
    """Execute a recipe with ``names`` predefined; returns its namespace."""
    namespace: dict[str, Any] = {"__name__": f"recipe_{name}", **names}
    exec(compile(recipe(name), f"{DOC}:{name}", "exec"), namespace)
    return namespace


def falling(losses: list[float], window: int = 3) -> bool:
    """The mean of the last ``window`` losses is below the mean of the first ``window``."""
    head = sum(losses[:window]) / window
    tail = sum(losses[-window:]) / window
    return tail < head
