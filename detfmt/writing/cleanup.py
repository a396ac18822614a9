"""``detfmt cleanup``: remove what writers that died left beside their targets, and nothing else.

A writer builds a dataset in a sibling ``.detfmt-tmp-<target>-<pid>-<token>`` directory; after a
crash (or a failure it could not clean up) that directory stays. It may be removed when no
writer holds the target's lock (the kernel releases the lock when its holder dies) and when it
holds only files a detfmt writer writes; then exactly those files are removed, one by one, and
the directory. Everything else is kept, with the reason.

Writers remove their ``.<target>.detfmt-lock`` file when they finish; one left by a writer that
died (or by a version that kept them) is removed here when no process holds it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from detfmt import errors, fileio
from detfmt.format import members, spec

__all__ = ["CleanupReport", "cleanup"]

_NAME = re.compile(r"^(?P<target>.+)-(?P<pid>[0-9]+)-(?P<token>[0-9a-f]+)(?P<old>-old)?$")
_FIELD_FILE = re.compile(r"^box_[a-z][a-z0-9_]{0,31}\.npy$")
_MEMBERS = frozenset(members.member_names(()))
#: what writers before the nameless scratch files left in a ``.spool`` subdirectory
_OLD_SPOOL = frozenset({"index", "counts", "boxes", "classes", "orig_size", "scale_offset",
                        "source_id", "file_name_offsets"})
_OLD_SPOOL_FIELD = re.compile(r"^box_[a-z][a-z0-9_]{0,31}$")


class CleanupReport(list[Path]):
    """The removed paths (a list, as `cleanup` always returned), plus ``kept``: (path, reason)
    for every leftover not removed, and ``summary()`` saying why nothing was removed."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.kept: list[tuple[Path, str]] = []
        self.locks: list[Path] = []  # stale lock files removed
        self.note = ""

    def summary(self) -> str:
        lines = [f"removed {path}" for path in self]
        lines += [f"removed stale lock {path}" for path in self.locks]
        lines += [f"kept {path}: {reason}" for path, reason in self.kept]
        count = len(self)
        locks = len(self.locks)
        lines.append(f"{count} temporary director{'y' if count == 1 else 'ies'} removed, "
                     f"{locks} stale lock file{'' if locks == 1 else 's'} removed"
                     + (f" ({self.note})" if self.note else ""))
        return "\n".join(lines)


def cleanup(directory: str | os.PathLike[str]) -> CleanupReport:
    """Remove temporary directories left in ``directory`` by writers that died.

    ``directory`` is where the datasets are (the parent of each target). A leftover whose target
    is still locked by a live writer, that holds files a writer does not write, or that holds
    the only copy of a dataset is kept, with the reason in the report.

    Raises:
        UsageError: ``directory`` is not a directory.
    """
    root = Path(directory)
    report = CleanupReport(root)
    try:
        entries = sorted(e for e in os.listdir(root) if e.startswith(fileio.TEMP_PREFIX))
    except NotADirectoryError as error:
        raise errors.UsageError(f"{root} is not a directory", path=root) from error
    except FileNotFoundError as error:
        raise errors.UsageError(f"{root} does not exist", path=root) from error
    for name in entries:
        path = root / name
        reason = _remove_leftover(root, path, name[len(fileio.TEMP_PREFIX):])
        if reason is None:
            report.append(path)
        else:
            report.kept.append((path, reason))
    for name in sorted(os.listdir(root)):
        if name.startswith(".") and name.endswith(fileio.LOCK_SUFFIX) and len(name) > len(
                fileio.LOCK_SUFFIX) + 1:
            reason = _remove_stale_lock(root, name)
            if reason is None:
                report.locks.append(root / name)
            elif reason:  # "": a live writer's lock, not a leftover
                report.kept.append((root / name, reason))
    if not entries and not report.locks:
        report.note = f"no {fileio.TEMP_PREFIX}* entries in {root}"
        if (root / spec.HEADER_FILE).exists() or (root / "manifest.json").exists():
            report.note += ("; it is a dataset itself: a writer's temporaries sit beside the "
                            "dataset, so run cleanup on its parent directory")
    return report


def _remove_leftover(root: Path, path: Path, name: str) -> str | None:
    """Remove one leftover; None when removed, else why it was kept."""
    match = _NAME.match(name)
    if match is None:
        return "not named like a detfmt temporary directory"
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory (a symbolic link or a file): detfmt did not make it"
    target = root / match["target"]
    try:
        lock = fileio.lock_target(target)
    except BlockingIOError:
        holder = fileio.lock_holder(target)
        who = f" (pid {holder[0]} on {holder[1]})" if holder else ""
        return f"a writer{who} is still writing {target.name}"
    try:
        files, foreign = _writer_files(path)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            return f"holds files a detfmt writer does not write ({shown})"
        if match["old"] and not os.path.lexists(target) and spec.HEADER_FILE in files:
            return (f"holds the previous dataset and {target.name} is missing (a replace was "
                    f"interrupted): rename it back to {target.name}")
        spool = path / ".spool"
        if ".spool" in files and not fileio.remove_members(spool, sorted(os.listdir(spool))):
            return "could not empty its .spool directory"
        if not fileio.remove_members(path, [f for f in files if f != ".spool"]):
            return "files appeared in it while it was being removed"
    finally:
        fileio.unlock(lock)
    return None


def _remove_stale_lock(root: Path, name: str) -> str | None:
    """Remove a lock file no process holds; None when removed, "" when a live writer holds
    it, else why it was kept."""
    path = root / name
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return "not a regular file: detfmt did not make it"
    except FileNotFoundError:
        return None  # a writer finished and removed it meanwhile
    target = root / name[1 : -len(fileio.LOCK_SUFFIX)]
    try:
        lock = fileio.lock_target(target)
    except BlockingIOError:
        return ""  # held: a writer is at work (its temporary directory says so, if any)
    except OSError as error:
        return f"cannot take it ({error.strerror})"
    fileio.unlock(lock)  # removes the file
    return None


def _writer_files(path: Path) -> tuple[list[str], list[str]]:
    """(the entries of ``path``, those a detfmt writer never writes there)."""
    files = sorted(os.listdir(path))
    foreign = []
    for name in files:
        kind = os.lstat(path / name).st_mode
        if name == ".spool" and stat.S_ISDIR(kind):
            foreign += [f".spool/{n}" for n in sorted(os.listdir(path / name))
                        if not (n in _OLD_SPOOL or _OLD_SPOOL_FIELD.match(n))
                        or not stat.S_ISREG(os.lstat(path / name / n).st_mode)]
        elif not stat.S_ISREG(kind) or not (name in _MEMBERS or _FIELD_FILE.match(name)
                                            or name.startswith(fileio.TEMP_PREFIX + "scratch-")):
            foreign.append(name)
    return files, foreign
