"""Child-side write scenarios that change process limits (run in the sandbox)."""

from __future__ import annotations

import resource
import signal
from typing import Any

import relharness


def write_with_fsize_limit(target: str, limit: int) -> dict[str, Any]:
    """Write with RLIMIT_FSIZE = ``limit``: the kernel fails the write that crosses it (EFBIG)."""
    import detfmt

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        relharness.build_dataset(target, n=4, seed=5, codec="raw", lo=40, hi=48)
    except detfmt.DetfmtError as e:
        return {"error": type(e).__name__, "rule": e.rule, "errno": getattr(e, "errno", None),
                "message": str(e)}
    return {"error": None}
