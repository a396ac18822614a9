"""The package's import graph: no cycles (imports inside functions count), a light face."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import detfmt

PACKAGE = Path(detfmt.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """detfmt module -> the detfmt modules it imports anywhere in its body (TYPE_CHECKING
    blocks and function bodies included)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # a submodule (``from detfmt import errors``) or a name of the module itself
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 30 and "detfmt.reading.gather" in graph["detfmt.reading.dataset"]
    assert cycles(graph) == []


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_library_module_imports_the_package_face():
    graph = import_graph()
    offenders = sorted(name for name, deps in graph.items() if "detfmt" in deps)
    assert offenders == []


def test_a_raw_read_needs_numpy_and_msgspec_only(tmp_path):
    """import detfmt, open a raw dataset and read it: no Pillow, simplejpeg, zstandard, xxhash,
    writer or torch is imported (they load when a decode, a checksum or a write needs them)."""
    from tests.datasets import make_dataset, make_sharded_root

    make_dataset(tmp_path / "ds", [(8, 9), (10, 12)]).close()
    make_sharded_root(tmp_path / "root", [(8, 9), (10, 12), (4, 4)], shard_sizes=(2,)).close()
    code = f"""
import sys
import detfmt
for path in ({str(tmp_path / "ds")!r}, {str(tmp_path / "root")!r}):
    ds = detfmt.open(path)
    ds[0]; ds.batch([1, 0]); ds.labels([0])
heavy = [m for m in sys.modules if m.split(".")[0] in
         ("PIL", "simplejpeg", "zstandard", "xxhash", "torch", "fsspec")
         or m in ("detfmt.writing.writer", "detfmt.writing.prepare", "detfmt.writing.image",
         "detfmt.format.codecs")]
assert not heavy, heavy
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_dataset_kind_satisfies_the_protocol(tmp_path):
    """DatasetLike is what every read path accepts: a method added to it must exist on every
    kind (a 1.0 directory, a sharded root, a mixture), or the Loader refuses that kind."""
    import detfmt
    from detfmt.reading.mixture import Mixture
    from detfmt.reading.protocol import DatasetLike
    from tests.datasets import make_dataset, make_sharded_root

    one = make_dataset(tmp_path / "a", [(8, 8)] * 3)
    root = make_sharded_root(tmp_path / "b", [(8, 8)] * 3)
    for ds in (one, root, Mixture([one, root])):
        assert isinstance(ds, DatasetLike), type(ds).__name__
        missing = [name for name in dir(DatasetLike) if not name.startswith("_")
                   and not hasattr(ds, name)]
        assert missing == [], (type(ds).__name__, missing)
    assert isinstance(detfmt.open(tmp_path / "a"), DatasetLike)
