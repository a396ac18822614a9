"""`Reopen`: a dataset handed to worker processes by identity, re-opened in each."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from detfmt.reading.protocol import DatasetLike

__all__ = ["Reopen"]


class Reopen:
    """A dataset that reaches worker processes as its identity and is re-opened there on first
    use, pickled (spawn) or inherited (fork) alike: a worker never uses its parent's mappings,
    threads or descriptors, unpickling never touches the files, and a dataset replaced since
    the parent opened it fails on the worker's first read (`DatasetChangedError`)."""

    def __init__(self, ds: DatasetLike) -> None:
        self._ds: DatasetLike | None = ds
        self._pid = os.getpid()
        self._reduced: tuple[Callable[..., DatasetLike], tuple] = ds.__reduce__()  # type: ignore[assignment]

    @property
    def ds(self) -> DatasetLike:
        if self._ds is None or self._pid != os.getpid():
            opener, args = self._reduced
            self._ds = opener(*args)
            self._pid = os.getpid()
        return self._ds

    def __getstate__(self) -> dict[str, Any]:
        return {"_ds": None, "_pid": None, "_reduced": self._reduced}
