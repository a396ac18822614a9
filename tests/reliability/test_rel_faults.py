"""Fault injection (case 27, and 28 by EROFS): fail the N-th filesystem call of a write for
every N until the write completes, with ENOSPC, EIO and EROFS, on a fresh target and on an
overwrite. Each time: a typed WriteError carrying the errno, the target untouched (byte for byte)
and no temporary directory left; the lock is released. A real EFBIG comes from RLIMIT_FSIZE in a
child. The durability order fsync(files) -> fsync(temp dir) -> rename -> fsync(parent) is
checked on the logged calls of a successful write.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import relharness as rh
from faultio import FaultyIO

pytestmark = pytest.mark.filterwarnings("ignore:the old dataset was replaced:UserWarning")

ERRNOS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO, "EROFS": errno.EROFS}
MAX_CALLS = 2000


def new_samples() -> list[dict[str, Any]]:
    return rh.make_samples(4, seed=3, lo=4, hi=12)


def write(target: Path, overwrite: bool) -> None:
    import detfmt

    detfmt.write(new_samples(), target, classes=rh.CLASSES, codec="zstd", overwrite=overwrite,
                 box_fields={"iscrowd": "|u1"}, progress=False)


def lock_is_free(target: Path) -> bool:
    from detfmt import fileio

    try:
        fd = fileio.lock_target(target)
    except BlockingIOError:
        return False
    fileio.unlock(fd)
    return True


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("faults-ref")
    old = rh.build_dataset(root / "old", n=3, seed=8, codec="raw", lo=4, hi=12)
    write(root / "new", overwrite=False)
    return {"old": old, "old_digest": rh.tree_digest(old),
            "new_content": rh.content_digest(str(root / "new"))}


@pytest.mark.parametrize("mode", ["fresh", "overwrite"])
@pytest.mark.parametrize("err", list(ERRNOS))
def test_fail_every_nth_call(err: str, mode: str, tmp_path: Path,
                             reference: dict[str, Any]) -> None:
    import detfmt

    code = ERRNOS[err]
    parent = tmp_path / "parent"
    parent.mkdir()
    target = parent / "ds"
    seen_post_commit = 0
    for n in range(1, MAX_CALLS):
        if os.path.lexists(target):
            shutil.rmtree(target)
        if mode == "overwrite":
            shutil.copytree(reference["old"], target)
        before = rh.tree_digest(target)
        with FaultyIO(fail_at=n, errno=code) as io:
            try:
                write(target, overwrite=mode == "overwrite")
                error = None
            except detfmt.DetfmtError as e:
                error = e
        where = f"{err} at call {n} ({io.injected.name if io.injected else 'none'})"
        if io.injected is None:  # the write got through all its calls: done
            assert error is None, f"{where}: {error!r}"
            assert rh.content_digest(str(target)) == reference["new_content"]
            break
        assert lock_is_free(target), f"{where}: the writer lock was not released"
        if not io.committed:
            assert rh.temp_leftovers(parent) == [], f"{where}: temporary left behind"
            assert isinstance(error, detfmt.WriteError), f"{where}: {error!r}"
            assert error.errno == code, f"{where}: errno {error.errno}"
            expected = detfmt.TargetNotWritableError if code == errno.EROFS else detfmt.WriteError
            assert isinstance(error, expected), f"{where}: {error!r}"
            assert error.rule in ("WRITE_FAILED", "TARGET_NOT_WRITABLE"), where
            assert rh.tree_digest(target) == before, f"{where}: the target was touched"
        else:
            # the atomic switch already happened: the new dataset is complete in place; a
            # failure after it (parent fsync, removing the old copy) is reported, never hidden
            # (a leftover copy of the old dataset is possible; the documented cleanup removes it)
            seen_post_commit += 1
            assert rh.content_digest(str(target)) == reference["new_content"], where
            assert error is None or isinstance(error, detfmt.WriteError), f"{where}: {error!r}"
            detfmt.cleanup(parent)
            assert rh.temp_leftovers(parent) == [], f"{where}: cleanup left a temporary"
    else:
        pytest.fail(f"the write never completed within {MAX_CALLS} calls")
    print(f"fault injection {err} {mode}: failed each of calls 1..{n - 1}, "
          f"{seen_post_commit} of them after the switch; call {n} not reached: write completed")
    assert n > 20, f"suspiciously few I/O calls ({n}): is the writer routed through _io?"
    assert seen_post_commit >= 1, "no failure was injected after the publishing rename"


def test_fsync_order(tmp_path: Path, reference: dict[str, Any]) -> None:
    """fsync every file after its last write -> fsync the temp dir -> rename -> fsync parent."""
    for mode in ("fresh", "overwrite"):
        parent = tmp_path / mode
        parent.mkdir()
        target = parent / "ds"
        if mode == "overwrite":
            shutil.copytree(reference["old"], target)
        with FaultyIO() as io:
            write(target, overwrite=mode == "overwrite")
        log = io.log
        fd_path: dict[int, str] = {}
        last_write: dict[str, int] = {}
        synced: dict[str, int] = {}
        for k, call in enumerate(log):
            if call.name == "open_fd" and isinstance(call.result, int):
                fd_path[call.result] = str(call.args[0])
            elif call.name == "write_all":
                last_write[fd_path[call.args[0]]] = k
            elif call.name == "fsync":
                synced.setdefault(fd_path[call.args[0]], k)
                synced[fd_path[call.args[0]]] = k
        rename = next(k for k, c in enumerate(log)
                      if c.name in ("rename_noreplace", "rename_exchange"))
        temp = str(log[rename].args[0])
        temp_sync = max(k for k, c in enumerate(log[:rename])
                        if c.name == "fsync_dir" and str(c.args[0]) == temp)
        for name in os.listdir(target):
            path = os.path.join(temp, name)
            assert path in synced, f"{mode}: {name} was never fsynced"
            assert last_write.get(path, -1) < synced[path] < temp_sync, f"{mode}: {name} order"
        parent_sync = [k for k, c in enumerate(log)
                       if c.name == "fsync_dir" and str(c.args[0]) == str(parent) and k > rename]
        assert parent_sync, f"{mode}: the parent directory was not fsynced after the rename"
        assert not [c for c in log[:rename] if c.name == "open_fd"
                    and str(c.args[0]).startswith(str(target) + os.sep)], \
            f"{mode}: the writer opened a file inside the live target"


def test_efbig_from_rlimit_fsize(tmp_path: Path) -> None:
    """A real kernel EFBIG: RLIMIT_FSIZE in a child makes images.bin hit the limit."""
    target = tmp_path / "ds"
    out = rh.run_safe("relwrite_child:write_with_fsize_limit", str(target), 4096, timeout=30)
    assert out.kind == "ok", str(out)
    assert out.value["error"] in ("WriteError",), out.value
    assert out.value["errno"] == errno.EFBIG, out.value
    assert not os.path.lexists(target)
    assert rh.temp_leftovers(tmp_path) == []
