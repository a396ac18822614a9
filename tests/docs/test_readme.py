"""The README's install facts agree with pyproject.toml (issue 29, items 14 and 15)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _names(requirements: list[str]) -> set[str]:
    """Distribution names of requirement strings, normalised (extras and versions dropped)."""
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-")
            for r in requirements}


def _listed(install: str) -> set[str]:
    """The packages the README's install table lists after the colon of the row for
    ``install`` (text in parentheses is commentary)."""
    row = next(line for line in README.splitlines() if line.startswith(f"| `{install}` |"))
    text = re.sub(r"\([^)]*\)", "", row.split("|")[2]).split(":")[-1]
    return {name.strip().lower() for name in text.split(",") if name.strip()}


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_core_dependencies_listed_are_pyprojects():
    assert _listed("pip install -e .") == _names(PROJECT["dependencies"])


def test_the_torch_extra_listed_is_pyprojects():
    extra = PROJECT["optional-dependencies"]["torch"]
    assert _listed("pip install -e '.[torch]'") == _names(extra)
    assert "opencv-python-headless" in _names(extra)  # the fast CPU augmentation backend


def test_the_scale_extra_listed_is_pyprojects():
    assert _listed("pip install -e '.[scale]'") == _names(PROJECT["optional-dependencies"]["scale"])


def test_every_extra_the_readme_installs_exists():
    extras = set(PROJECT["optional-dependencies"])
    named = set()
    for group in re.findall(r"pip install -e '\.\[([\w,-]+)\]'", README):
        named.update(group.split(","))
    assert named and named <= extras, named - extras


def test_install_says_from_a_clone_and_how_to_get_the_cpu_torch():
    """detfmt is not on PyPI: no line tells a user to `pip install detfmt`; the CPU build of
    torch has its own line (the default Linux wheel brings CUDA)."""
    for doc in ("README.md", "docs/guide.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert not re.search(r"pip install ['\"]?detfmt\b", text), doc
        assert "from a clone" in text, doc
        assert "--index-url https://download.pytorch.org/whl/cpu" in text, doc
        assert "NUMBA_CACHE_DIR" in text, doc


def test_the_first_screen_says_what_it_is_and_where_to_start():
    """What it is, the guide ("start here") and the two commands come before any table of
    figures; the performance tables live in docs/performance.md."""
    first = README[: README.index("## Install")]
    assert "[`docs/guide.md`](docs/guide.md)" in first and "Start here" in first
    assert "bash tools/demo.sh" in first and "bash tools/test.sh" in first
    assert "images/s" not in first and "|" not in first
    assert README.count("\n|") < 30  # the benchmark tables are not in the README
    assert (ROOT / "docs" / "performance.md").exists()
