"""Fault injection into detfmt.fileio, the one module every writer filesystem call goes through.

``FaultyIO(fail_at=N, errno=E)`` patches the primitive calls of ``detfmt.fileio`` (open, write,
fsync, close, mkdir, unlink, renames, tree removal) so that the N-th of them raises
``OSError(E)``; every call is logged with its arguments so tests can also check the durability
order. Composite helpers (``fsync_dir``, ``publish_*``, ``OutputFile``) look the primitives up at
call time, so their inner calls are counted and can fail too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

PRIMITIVES = ("open_fd", "write_all", "fsync", "close", "mkdir", "unlink", "rename_noreplace",
              "rename_exchange", "rename", "remove_tree")
LOGGED = ("fsync_dir", "make_temp_dir", "lock_target", "publish_new", "publish_exchange",
          "publish_replace")
COMMITS = ("rename_noreplace", "rename_exchange", "rename")


@dataclass
class Call:
    name: str
    args: tuple[Any, ...]
    result: Any = None
    failed: bool = False


class FaultyIO:
    """Context manager: count, log, and fail the ``fail_at``-th primitive call."""

    def __init__(self, fail_at: int | None = None, errno: int = 0) -> None:
        from detfmt import fileio

        self.io = fileio
        self.fail_at = fail_at
        self.errno = errno
        self.count = 0
        self.log: list[Call] = []
        self.injected: Call | None = None
        self.committed = False  # a publishing rename completed before the failure
        self._saved: dict[str, Any] = {}

    def _wrap(self, name: str, fn: Any, primitive: bool) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = Call(name, args)
            self.log.append(call)
            if primitive:
                self.count += 1
                if self.count == self.fail_at:
                    call.failed = True
                    self.injected = call
                    raise OSError(self.errno, os.strerror(self.errno), str(args[0]) if args else "")
            call.result = fn(*args, **kwargs)
            if name in COMMITS and self._publishing():
                self.committed = True
            return call.result

        return wrapper

    def _publishing(self) -> bool:
        """A rename issued from publish_* (not e.g. a spool rename) publishes the dataset."""
        return any(c.name.startswith("publish_") for c in self.log)

    def __enter__(self) -> FaultyIO:
        for name in PRIMITIVES + LOGGED:
            fn = getattr(self.io, name)
            self._saved[name] = fn
            setattr(self.io, name, self._wrap(name, fn, name in PRIMITIVES))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._saved.items():
            setattr(self.io, name, fn)

    def names(self) -> list[str]:
        return [c.name for c in self.log]
