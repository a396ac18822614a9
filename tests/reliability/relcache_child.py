"""Child side of the full / read-only shard cache checks: run in a private mount namespace
(``unshare -m``) so that a real tmpfs can be filled and remounted read-only, even as root.

Usage: relcache_child.py MOUNTPOINT ROOT SIZE_KIB — ROOT is a local sharded root of three
shards, served here over loopback HTTP; the cache lives on a SIZE_KIB tmpfs at MOUNTPOINT that
holds the first shard but not the second."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import relharness

sys.path.insert(0, str(relharness.REPO / "tests" / "scaleout"))


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def error_of(call: Any) -> list[Any] | None:
    import detfmt

    try:
        call()
    except detfmt.DetfmtError as e:
        return [type(e).__name__, e.rule, getattr(e, "errno", None), str(e)]
    return None


def cache_checks(mountpoint: str, root: str, size_kib: int) -> dict[str, Any]:
    import numpy as np
    from scaleout_servers import http_range_server

    import detfmt

    mount("-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", mountpoint)
    cache = os.path.join(mountpoint, "cache")
    local = detfmt.open(root)
    firsts = [s.first_index for s in local.shards]
    out: dict[str, Any] = {}
    with http_range_server(root) as url:
        ds = detfmt.open(url, cache_dir=cache)
        out["first_ok"] = bool(np.array_equal(ds[firsts[0]].image, local[firsts[0]].image))
        out["full"] = error_of(lambda: ds[firsts[1]])
        out["after_full"] = sorted(os.listdir(cache))
        mount("-o", f"remount,size={64 * size_kib}k", mountpoint)  # space returns
        out["recovered"] = bool(np.array_equal(ds[firsts[1]].image, local[firsts[1]].image))
        ds.close()
        mount("-o", "remount,ro", mountpoint)
        ro = detfmt.open(url, cache_dir=cache)
        out["read_only_hits"] = all(
            np.array_equal(ro[i].image, local[i].image) for i in firsts[:2])
        out["read_only_miss"] = error_of(lambda: ro[firsts[2]])
        ro.close()
    return out


if __name__ == "__main__":
    print(json.dumps(cache_checks(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
