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


def readonly_checks(mountpoint: str) -> dict[str, Any]:
    """Inside a private mount namespace: a tmpfs at ``mountpoint`` gets a dataset, is remounted
    read-only (a real EROFS even for root), and then read and written."""
    import subprocess

    import detfmt

    def mount(*args: str) -> None:
        subprocess.run(["mount", *args], check=True, capture_output=True)

    mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", mountpoint)
    root = f"{mountpoint}/data"
    relharness.build_dataset(f"{root}/ds", n=4, seed=2, codec="zstd")
    before = relharness.content_digest(f"{root}/ds")
    mount("-o", "remount,ro", mountpoint)
    result: dict[str, Any] = {}
    result["read_equal"] = relharness.content_digest(f"{root}/ds") == before
    result["verify_ok"] = detfmt.verify(f"{root}/ds").ok
    with detfmt.open(f"{root}/ds") as ds:
        result["batch_ok"] = ds.batch([0, 1]).images.shape[0] == 2
    consumed = []

    def samples() -> Any:
        for s in relharness.make_samples(2, 3):
            consumed.append(1)
            yield s

    for name, target, overwrite in (("new", f"{root}/new", False), ("overwrite", f"{root}/ds",
                                                                    True)):
        try:
            detfmt.write(samples(), target, classes=relharness.CLASSES,
                         box_fields={"iscrowd": "|u1"}, overwrite=overwrite)
            result[name] = "written?!"
        except detfmt.DetfmtError as e:
            result[name] = [type(e).__name__, e.rule, getattr(e, "errno", None), str(e)]
    result["samples_consumed"] = len(consumed)
    result["still_equal"] = relharness.content_digest(f"{root}/ds") == before
    result["cleanup"] = [str(p) for p in detfmt.cleanup(root)]
    return result


def slow_write(target: str, workers: int, marker: str, count: int = 2000) -> None:
    """A write that takes a while, with worker processes (PNG inputs need decoding): touches
    ``marker`` once samples are flowing, so a test can signal it in the middle of the write."""
    import io
    import time
    from pathlib import Path

    import numpy as np
    from PIL import Image

    import detfmt

    buffer = io.BytesIO()
    Image.fromarray(np.full((24, 24, 3), 7, np.uint8)).save(buffer, format="PNG")
    png = buffer.getvalue()

    def samples() -> Any:
        for i in range(count):
            if i == 40:
                Path(marker).touch()
            time.sleep(0.005)
            yield {"image": png, "boxes": np.zeros((0, 4)), "classes": np.zeros(0, np.int32)}

    detfmt.write(samples(), target, classes=relharness.CLASSES, workers=workers,
                 codec="zstd", progress=False)


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1] == "slow-write":
        slow_write(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        print(json.dumps(readonly_checks(sys.argv[1])))
