"""Confined reading of source files: only regular files inside the folders the user gave.

A source dataset is untrusted input (downloaded, shared, generated). File names written inside
annotation files (COCO ``file_name``, VOC ``<filename>``, lines of a YOLO image list) must not
make a converter read outside the folder the user pointed at, block on a FIFO or a device, or
loop on a symlink cycle. Every check here ends in a `ConversionError` with a stable rule, which
the pipeline raises or counts as a skipped image:

* ``PATH_UNSAFE``: an absolute name, a ``..`` component, a NUL byte, a symlink leaving the
  folder or looping, or something that is not a regular file (FIFO, socket, device, directory);
* ``NAME_ENCODING``: a file name that is not valid UTF-8 (it could not be stored in the dataset);
* the caller's "missing" rule (``IMAGE_MISSING``, ``LABEL_MISSING``) when nothing is there.

Symlinks (``symlinks="follow"``, the default): the *names* are confined (above), and the files
they reach are followed wherever the links point, as DVC and git-annex checkouts and FiftyOne /
``ln -s`` exports need (every image is a symlink into a cache elsewhere). ``symlinks="refuse"``
(the CLI's ``--no-follow-symlinks``, for untrusted archives) also refuses a file or folder whose
resolved location leaves the folder the user named (``PATH_UNSAFE``). The folder the user names
is resolved once either way.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from detfmt.convert.errors import ConversionError

__all__ = ["SYMLINK_MODES", "InputFolder", "name_problem", "printable", "read_source_bytes",
           "read_source_text"]

#: ``follow``: symlinked files and folders are read wherever they point (names stay confined);
#: ``refuse``: a link whose target leaves the folder is ``PATH_UNSAFE`` (untrusted archives).
SYMLINK_MODES = ("follow", "refuse")

#: Read limits for files whose whole content is loaded (a label or XML file is a few KiB).
MAX_LABEL_BYTES = 64 << 20
MAX_CONFIG_BYTES = 16 << 20


def printable(path: str | os.PathLike[str]) -> str:
    """A path as valid text: undecodable bytes of a file name become U+FFFD (for messages and
    reports, which must be valid UTF-8)."""
    name = os.fspath(path)
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def name_problem(name: str) -> str | None:
    """Why a file name taken from an annotation file is refused, or None when it is usable."""
    if not name:
        return "empty file name"
    if "\x00" in name:
        return "file name contains a NUL byte"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "file name is not valid UTF-8"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
        return f"absolute file name {name!r}"
    if ".." in name.replace("\\", "/").split("/"):
        return f"file name {name!r} climbs out of its folder ('..')"
    return None


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a regular file"


class InputFolder:
    """A folder the user named; files are read from it only when they really lie inside it.

    ``given`` is the path as the user wrote it (used for messages and stored file names),
    ``real`` its resolved location: a file is inside when its resolved path is under ``real``.
    """

    def __init__(self, path: str | os.PathLike[str], *, missing_rule: str,
                 what: str = "folder", symlinks: str = "follow") -> None:
        if symlinks not in SYMLINK_MODES:
            raise ConversionError(f"symlinks must be one of {SYMLINK_MODES}, got {symlinks!r}",
                                  rule="USAGE")
        self.symlinks = symlinks
        self.given = Path(path)
        self.missing_rule = missing_rule
        self.what = what
        try:
            real = os.path.realpath(self.given, strict=True)
        except OSError as error:
            rule = "PATH_UNSAFE" if error.errno == errno.ELOOP else missing_rule
            raise ConversionError(f"{what} not found ({error.strerror})", rule=rule,
                                  path=self.given) from error
        if not os.path.isdir(real):
            raise ConversionError(f"{what} is not a directory", rule=missing_rule,
                                  path=self.given)
        self.real = Path(real)

    def __repr__(self) -> str:
        return f"InputFolder({os.fspath(self.given)!r})"

    def contains(self, real: str | os.PathLike[str]) -> bool:
        real = os.fspath(real)
        base = os.fspath(self.real)
        return real == base or real.startswith(base.rstrip(os.sep) + os.sep)

    def contains_name(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` lies inside this folder by its name alone (no link followed)."""
        name = os.path.abspath(path)
        return any(name == base or name.startswith(base.rstrip(os.sep) + os.sep)
                   for base in (os.path.abspath(self.given), os.fspath(self.real)))

    def child(self, name: str) -> Path:
        """The path of ``name`` (a relative name from an annotation file) inside this folder."""
        problem = name_problem(name)
        if problem is not None:
            rule = "NAME_ENCODING" if "UTF-8" in problem else "PATH_UNSAFE"
            raise ConversionError(problem, rule=rule, path=self.given)
        return self.given / name

    def resolve(self, path: str | os.PathLike[str], missing_rule: str | None = None) -> Path:
        """The resolved path of a regular file inside this folder.

        Raises:
            ConversionError: ``PATH_UNSAFE`` (outside, a symlink loop, not a regular file),
                ``NAME_ENCODING``, or the missing rule when the file does not exist.
        """
        missing = missing_rule or self.missing_rule
        name = os.fspath(path)
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ConversionError("file name is not valid UTF-8", rule="NAME_ENCODING",
                                  path=printable(name)) from error
        try:
            real = os.path.realpath(name, strict=True)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise ConversionError("symlink loop", rule="PATH_UNSAFE", path=name) from error
            raise ConversionError("file not found", rule=missing, path=name) from error
        if self.symlinks == "refuse" and not self.contains(real):
            raise ConversionError(f"resolves to {real}, outside the {self.what} "
                                  f"{os.fspath(self.given)} (symlinks are refused; "
                                  "follow them with symlinks='follow')", rule="PATH_UNSAFE",
                                  path=name)
        if self.symlinks == "follow" and not self.contains_name(name):
            raise ConversionError(f"outside the {self.what} {os.fspath(self.given)}",
                                  rule="PATH_UNSAFE", path=name)
        try:
            mode = os.stat(real).st_mode
        except OSError as error:
            raise ConversionError(f"cannot stat: {error.strerror}", rule=missing,
                                  path=name) from error
        if not stat.S_ISREG(mode):
            raise ConversionError(f"{_kind(mode)}, not a regular file", rule="PATH_UNSAFE",
                                  path=name)
        return Path(real)

    def walk(self, keep: Callable[[str], bool]) -> Iterator[tuple[Path, Path | ConversionError]]:
        """Every file under the folder whose name passes ``keep``, sorted, as (path as given,
        its resolved path) or (path, the reason it may not be read). Directory symlinks are
        followed (with ``symlinks="refuse"`` only when they stay inside the folder), and each
        real directory is visited once (no loops)."""
        seen: set[tuple[int, int]] = set()
        yield from self._walk(self.given, self.real, keep, seen)

    def _walk(self, folder: Path, real: Path, keep, seen) -> Iterator[
            tuple[Path, Path | ConversionError]]:
        try:
            info = os.stat(real)
        except OSError:
            return
        if (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        try:
            with os.scandir(real) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as error:
            yield folder, ConversionError(f"cannot list folder: {error.strerror}",
                                          rule=self.missing_rule, path=printable(folder))
            return
        for entry in entries:
            path = folder / entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir:
                try:
                    target = Path(os.path.realpath(real / entry.name, strict=True))
                except OSError:
                    continue  # a dangling or looping link to a folder: nothing to read there
                if self.symlinks == "follow" or self.contains(target):
                    yield from self._walk(path, target, keep, seen)
                continue
            if not keep(entry.name):
                continue
            try:
                yield path, self.resolve(path)
            except ConversionError as error:
                yield path, error


def _open_regular(path: Path, rule: str, limit: int | None) -> bytes:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise ConversionError("file not found", rule=rule, path=path) from error
        if error.errno == errno.ELOOP:
            raise ConversionError("symlink loop", rule="PATH_UNSAFE", path=path) from error
        raise ConversionError(f"cannot open: {error.strerror}", rule=rule, path=path) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConversionError(f"{_kind(info.st_mode)}, not a regular file",
                                  rule="PATH_UNSAFE", path=path)
        if limit is not None and info.st_size > limit:
            raise ConversionError(f"{info.st_size} bytes, over the {limit}-byte limit for this "
                                  "kind of file", rule=rule, path=path)
        os.set_blocking(fd, True)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            if limit is not None and sum(map(len, chunks)) > limit:
                raise ConversionError(f"grew over the {limit}-byte limit while read",
                                      rule=rule, path=path)
        return b"".join(chunks)
    except OSError as error:
        raise ConversionError(f"cannot read: {error.strerror}", rule=rule, path=path) from error
    finally:
        os.close(fd)


def read_source_bytes(path: str | os.PathLike[str], *, rule: str,
                      limit: int | None = None) -> bytes:
    """The bytes of a regular file (never blocks on a FIFO), at most ``limit`` bytes."""
    return _open_regular(Path(path), rule, limit)


def read_source_text(path: str | os.PathLike[str], *, rule: str, encoding_rule: str | None = None,
                     limit: int | None = MAX_LABEL_BYTES) -> str:
    """A UTF-8 text file (a BOM is allowed); invalid UTF-8 is ``encoding_rule`` (default:
    ``rule``), naming the byte offset."""
    data = _open_regular(Path(path), rule, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConversionError(f"not valid UTF-8 (byte {error.start})",
                              rule=encoding_rule or rule, path=path) from error
