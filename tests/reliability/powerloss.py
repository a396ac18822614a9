"""A power-loss model for the writers: trace every write, fsync and rename, then rebuild the
directory tree as a crash at any traced call would have left it.

kill -9 keeps the page cache, so a SIGKILL test never loses data that was written but not
fsynced. ``PowerLossTracer`` (in the spirit of SQLite's crash VFS and ALICE) patches the calls a
writer makes to change a file system (``os.open`` with ``O_CREAT``, ``os.write``/``pwrite``/
``writev``/``pwritev``/``ftruncate``, ``os.fsync``/``fdatasync``, ``os.rename``/``replace``/
``link``/``unlink``/``mkdir``/``rmdir``/``symlink``, ``renameat2`` in ``detfmt.fileio``,
``open()`` in a writing mode), so that ``detfmt.fileio``, ``LocalStorage`` and the sinks are
all covered whatever module they call through. After every traced call (a *crash point*) it
records the live tree below ``root``; at every fsync it records what became durable: a file's
bytes (fsync of a file) or a directory's entries (fsync of a directory). ``crash_states(k)``
then rebuilds the tree as a power loss right after call ``k`` may leave it:

- ``synced``: only what was fsynced survives (POSIX's pessimistic reading): a name exists only
  if its directory was fsynced after it was made (renames, creates and unlinks not followed by
  an fsync of their directory are undone); a file holds the bytes of its last fsync, or nothing
  if it was created and never fsynced;
- ``metadata``: every name operation up to ``k`` persisted, but file data only as far as it was
  fsynced (ext4 ``data=writeback``, or delayed allocation: the zero-length-file-after-rename
  failure);
- ``torn``: like ``metadata`` but each file written since its last fsync keeps its synced bytes
  plus half of what was written after them (a write cut in the middle);
- ``cache``: the live tree (what kill -9 leaves; the page cache survives).

Limits: one process (no worker processes); calls through memory maps or C code that bypass the
Python ``os`` module are not traced (detfmt's writers make none); writes through a Python file
object are not separate crash points (their bytes are captured at the fsync); fsyncs made
concurrently by ``fileio.fsync_all`` are replayed one after the other, in order, so the crash
points are deterministic.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATES = ("synced", "metadata", "torn", "cache")

_real_open = builtins.open
_real_os_open = os.open


@dataclass(frozen=True)
class Node:
    kind: str  # "d", "f" or "l"
    ino: int
    data: bytes = b""  # file bytes, or a link's target


Tree = dict[str, Node]  # relative POSIX path -> node ("" is the root)


@dataclass
class CrashPoint:
    index: int
    call: str
    tree: Tree
    events: int  # how many durability events had happened


def _walk(root: str) -> Tree:
    tree: Tree = {"": Node("d", os.lstat(root).st_ino)}
    pending = [""]
    while pending:
        rel = pending.pop()
        base = os.path.join(root, rel) if rel else root
        try:
            names = sorted(os.listdir(base))
        except FileNotFoundError:
            continue
        for name in names:
            child = f"{rel}/{name}" if rel else name
            path = os.path.join(root, child)
            try:
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode):
                    tree[child] = Node("d", st.st_ino)
                    pending.append(child)
                elif stat.S_ISLNK(st.st_mode):
                    tree[child] = Node("l", st.st_ino, os.fsencode(os.readlink(path)))
                elif stat.S_ISREG(st.st_mode):
                    with _real_open(path, "rb") as f:
                        tree[child] = Node("f", st.st_ino, f.read())
            except FileNotFoundError:  # removed by another thread meanwhile
                continue
    return tree


def _entries(path: str) -> dict[str, tuple[int, str, bytes]]:
    out = {}
    for name in os.listdir(path):
        st = os.lstat(os.path.join(path, name))
        kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
        target = os.fsencode(os.readlink(os.path.join(path, name))) if kind == "l" else b""
        out[name] = (st.st_ino, kind, target)
    return out


class PowerLossTracer:
    """Context manager: trace the file system calls made below ``root`` (see module doc)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(root)
        self.lock = threading.RLock()
        self.points: list[CrashPoint] = []
        self.events: list[tuple[Any, ...]] = []  # ("file", ino, bytes) | ("dir", ino, entries)
        self.calls: list[str] = []
        self._saved: list[tuple[Any, str, Any]] = []
        self.initial: Tree = {}

    # ---------------------------------------------------------------- tracing

    def __enter__(self) -> PowerLossTracer:
        self.initial = _walk(self.root)
        self.points.append(CrashPoint(0, "start", self.initial, 0))
        for name in ("write", "pwrite", "writev", "pwritev", "ftruncate", "truncate", "rename",
                     "replace", "link", "unlink", "remove", "rmdir", "symlink"):
            self._patch(os, name, self._traced(name, getattr(os, name)))
        self._patch(os, "open", self._open(os.open))
        self._patch(os, "mkdir", self._mkdir(os.mkdir))
        for name in ("fsync", "fdatasync"):
            self._patch(os, name, self._fsync(name, getattr(os, name)))
        self._patch(builtins, "open", self._builtin_open(builtins.open))
        from detfmt import fileio

        self._patch(fileio, "_renameat2", self._traced("renameat2", fileio._renameat2))

        def fsync_all(fds: Any) -> None:  # one after the other: deterministic crash points
            for fd in fds:
                fileio.fsync(fd)

        self._patch(fileio, "fsync_all", fsync_all)
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def _point(self, call: str) -> None:
        self.calls.append(call)
        self.points.append(CrashPoint(len(self.points), call, _walk(self.root), len(self.events)))

    def _traced(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._point(f"{name}{_short(args)}")

        return wrapper

    def _created(self, path: Any, dir_fd: int | None) -> bool:
        try:
            os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except (OSError, TypeError, ValueError):
            return False
        return False

    def _open(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            tmpfile = getattr(os, "O_TMPFILE", 0)
            if not flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile):
                return fn(path, flags, *args, **kwargs)
            with self.lock:
                new = self._created(path, kwargs.get("dir_fd"))
                fd = fn(path, flags, *args, **kwargs)
                if new:
                    self.events.append(("file", os.fstat(fd).st_ino, b""))
                self._point(f"open{_short((path,))}")
                return fd

        return wrapper

    def _builtin_open(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, int) or not any(c in mode for c in "wxa+"):
                return fn(file, mode, *args, **kwargs)
            with self.lock:
                new = self._created(file, None)
                f = fn(file, mode, *args, **kwargs)
                if new:
                    self.events.append(("file", os.fstat(f.fileno()).st_ino, b""))
                self._point(f"open{_short((file,))}")
                return f

        return wrapper

    def _mkdir(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
            with self.lock:
                try:
                    fn(path, *args, **kwargs)
                    st = os.stat(path, dir_fd=kwargs.get("dir_fd"), follow_symlinks=False)
                    self.events.append(("dir", st.st_ino, {}))
                finally:
                    self._point(f"mkdir{_short((path,))}")

        return wrapper

    def _fsync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(fd: Any) -> Any:
            with self.lock:
                try:
                    fn(fd)
                    number = fd if isinstance(fd, int) else fd.fileno()
                    st = os.fstat(number)
                    proc = f"/proc/self/fd/{number}"
                    if stat.S_ISDIR(st.st_mode):
                        self.events.append(("dir", st.st_ino, _entries(proc)))
                    elif stat.S_ISREG(st.st_mode):
                        with _real_open(proc, "rb") as f:
                            self.events.append(("file", st.st_ino, f.read()))
                finally:
                    self._point(f"{name}{_short((_fd_path(fd),))}")

        return wrapper

    # ---------------------------------------------------------------- crash states

    def durable(self, k: int) -> tuple[dict[int, dict[str, tuple[int, str, bytes]]],
                                       dict[int, bytes]]:
        """(directory entries by inode, file bytes by inode) that survive a crash after call
        ``k``: the state before tracing, then every fsync up to ``k``."""
        dirs: dict[int, dict[str, tuple[int, str, bytes]]] = {}
        files: dict[int, bytes] = {}
        for node in self.initial.values():
            if node.kind == "d":
                dirs[node.ino] = {}
            elif node.kind == "f":
                files[node.ino] = node.data
        for rel, node in self.initial.items():
            if rel:
                parent, _, name = rel.rpartition("/")
                dirs[self.initial[parent].ino][name] = (node.ino, node.kind, node.data
                                                         if node.kind == "l" else b"")
        for kind, ino, value in self.events[:self.points[k].events]:
            (dirs if kind == "dir" else files)[ino] = value
        return dirs, files

    def crash_states(self, k: int) -> Iterator[tuple[str, Tree]]:
        """The trees a power loss right after call ``k`` may leave, one per model of STATES."""
        dirs, files = self.durable(k)
        live = self.points[k].tree
        synced: Tree = {}

        def add(rel: str, ino: int, seen: tuple[int, ...]) -> None:
            synced[rel] = Node("d", ino)
            for name, (child, kind, target) in sorted(dirs.get(ino, {}).items()):
                path = f"{rel}/{name}" if rel else name
                if kind == "d" and child not in seen:
                    add(path, child, (*seen, child))
                elif kind == "f":
                    synced[path] = Node("f", child, files.get(child, b""))
                elif kind == "l":
                    synced[path] = Node("l", child, target)

        add("", self.initial[""].ino, (self.initial[""].ino,))
        yield "synced", synced
        yield "metadata", {rel: Node(n.kind, n.ino, files.get(n.ino, b"")) if n.kind == "f"
                           else n for rel, n in live.items()}
        torn = {}
        for rel, n in live.items():
            if n.kind == "f":
                kept = files.get(n.ino, b"")
                if n.data != kept and n.data.startswith(kept):
                    kept = n.data[:len(kept) + (len(n.data) - len(kept)) // 2]
                n = Node("f", n.ino, kept)
            torn[rel] = n
        yield "torn", torn
        yield "cache", live


def _fd_path(fd: Any) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
    except OSError:
        return str(fd)


def _short(args: tuple[Any, ...]) -> str:
    shown = [os.path.basename(os.fsdecode(a)) if isinstance(a, (str, bytes, os.PathLike))
             else f"fd{a}" if isinstance(a, int) else type(a).__name__ for a in args[:2]]
    return "(" + ", ".join(shown) + ")"


def tree_key(tree: Tree) -> str:
    h = hashlib.sha256()
    for rel in sorted(tree):
        node = tree[rel]
        h.update(f"{rel}\0{node.kind}\0".encode())
        h.update(hashlib.sha256(node.data).digest())
    return h.hexdigest()


def materialize(tree: Tree, dest: str | os.PathLike[str]) -> Path:
    """Write ``tree`` below the new directory ``dest`` (hard links become copies)."""
    dest = Path(dest)
    dest.mkdir(parents=True)
    for rel in sorted(tree):
        if not rel:
            continue
        node = tree[rel]
        path = dest / rel
        if node.kind == "d":
            path.mkdir()
        elif node.kind == "l":
            os.symlink(os.fsdecode(node.data), path)
        else:
            path.write_bytes(node.data)
    return dest
