"""Remote shard cache robustness (S-21): a download cut off or corrupted in transit never
leaves a file the cache would use (nor its temporary), and fails with a typed error; a cached
shard damaged afterwards from outside (truncated, appended to) is detected by its size and
fetched again. Served by a loopback HTTP server with range support (tests/scaleout)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import relharness
import xxhash

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
sys.path.insert(0, str(relharness.REPO / "tests" / "scaleout"))

from scaleout_servers import RangeHandler
from scaleout_servers import http_range_server as serve

import detfmt
from detfmt.errors import ShardChecksumError


class CutHandler(RangeHandler):
    """Announces the whole body of a shard, sends half of it and closes the connection."""

    def copyfile(self, source, outputfile) -> None:  # type: ignore[override]
        if self.path.endswith(".detfmt"):
            self.range_left //= 2
        super().copyfile(source, outputfile)
        self.close_connection = True


class FlipHandler(RangeHandler):
    """Sends a shard's whole body with one byte changed (corruption in transit)."""

    def copyfile(self, source, outputfile) -> None:  # type: ignore[override]
        data = bytearray(source.read(self.range_left))
        if data and self.path.endswith(".detfmt"):
            data[len(data) // 2] ^= 0x40
        outputfile.write(bytes(data))


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = relharness.build_sharded(tmp_path_factory.mktemp("remote") / "root")
    return root, relharness.sharded_digest(str(root))


def cache_files(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


@pytest.mark.parametrize("handler", [CutHandler, FlipHandler])
def test_broken_download_leaves_nothing_and_is_typed(handler: type[RangeHandler],
                                                     remote: tuple[Path, str],
                                                     tmp_path: Path) -> None:
    root, original = remote
    cache = tmp_path / "cache"
    with serve(root, handler) as url:
        ds = detfmt.open(url, cache_dir=cache)
        with pytest.raises(detfmt.DetfmtError) as e:
            ds[0]
        ds.close()
    expected = ShardChecksumError if handler is FlipHandler else detfmt.errors.WriteError
    assert isinstance(e.value, expected), repr(e.value)
    assert cache_files(cache) == [], cache_files(cache)  # no shard, no temporary, no lock
    with serve(root) as url:  # the same cache then fills from a healthy server
        assert relharness.sharded_digest(url, cache_dir=cache) == original


@pytest.mark.parametrize("damage", ["truncate", "append", "empty"])
def test_damaged_cache_file_is_fetched_again(damage: str, remote: tuple[Path, str],
                                             tmp_path: Path) -> None:
    root, original = remote
    cache = tmp_path / "cache"
    with serve(root) as url:
        assert relharness.sharded_digest(url, cache_dir=cache) == original
        shards = [p for p in cache.rglob("*.detfmt") if p.stat().st_size > 1000]
        assert shards
        for p in shards:
            data = p.read_bytes()
            p.write_bytes({"truncate": data[: len(data) // 2], "append": data + b"\0" * 64,
                           "empty": b""}[damage])
        assert relharness.sharded_digest(url, cache_dir=cache) == original
        for p in shards:  # content addressed: <xxh3_64>-<bytes>.detfmt, whole again
            digest, size = p.name[: -len(".detfmt")].split("-")
            data = p.read_bytes()
            assert (len(data), xxhash.xxh3_64_hexdigest(data)) == (int(size), digest)


# ---------------------------------------------------------------------------------------------
# issue 12 property 3: caches are verified and private; full, read-only, poisoned, endless
# ---------------------------------------------------------------------------------------------

import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402

from detfmt.errors import CacheError  # noqa: E402
from detfmt.reading.cache import default_cache_dir  # noqa: E402


def _cached_name(root: Path, k: int) -> str:
    info = detfmt.open(root).shards[k]
    return f"{info.xxh3_64}-{info.bytes}.detfmt"


def test_default_cache_dir_is_per_user_and_private(remote: tuple[Path, str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root, original = remote
    monkeypatch.delenv("DETFMT_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "detfmt" / "shards")
    monkeypatch.delenv("XDG_CACHE_HOME")
    home_cache = tmp_path / "home" / ".cache" / "detfmt" / "shards"
    assert default_cache_dir() == str(home_cache)
    with serve(root) as url:
        assert relharness.sharded_digest(url) == original  # no cache_dir given
    assert stat.S_IMODE(home_cache.stat().st_mode) == 0o700
    assert any(p.name.endswith(".detfmt") for p in home_cache.iterdir())


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775, 0o757])
def test_a_cache_others_may_write_is_refused(mode: int, remote: tuple[Path, str],
                                             tmp_path: Path) -> None:
    root, _ = remote
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with serve(root) as url, pytest.raises(CacheError) as caught:
        detfmt.open(url, cache_dir=shared)
    assert "other users" in str(caught.value)
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_cache_of_another_user_is_refused(remote: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = remote
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 4242, 4242)
    with serve(root) as url, pytest.raises(CacheError):
        detfmt.open(url, cache_dir=theirs)
    assert list(theirs.iterdir()) == []


@pytest.mark.parametrize("when", ["before-first-use", "after-use-in-place"])
def test_a_poisoned_cache_entry_is_never_used(when: str, remote: tuple[Path, str],
                                              tmp_path: Path) -> None:
    """A file under a shard's cache name with the right size but other bytes (planted before
    the first read, or written in place after this process verified it) is detected by its
    hash and replaced by a fresh download."""
    root, original = remote
    cache = tmp_path / "cache"
    big = max(range(len(detfmt.open(root).shards)), key=lambda k: detfmt.open(root).shards[k].bytes)
    name = _cached_name(root, big)
    good = (root / detfmt.open(root).shards[big].path).read_bytes()
    evil = bytearray(good)
    evil[len(evil) // 2] ^= 0x5A  # the same size: only the hash tells
    with serve(root) as url:
        if when == "before-first-use":
            cache.mkdir(mode=0o700)
            (cache / name).write_bytes(bytes(evil))
        else:
            assert relharness.sharded_digest(url, cache_dir=cache) == original
            with open(cache / name, "r+b") as f:
                f.seek(len(evil) // 2)
                f.write(bytes([evil[len(evil) // 2]]))
        assert relharness.sharded_digest(url, cache_dir=cache) == original
    assert (cache / name).read_bytes() == good


class EndlessHandler(RangeHandler):
    """Serves every shard as 1 GiB: its real bytes, then zeros (a store or proxy that lies)."""

    served = 0

    def send_head(self):  # type: ignore[override]
        if not self.path.endswith(".detfmt"):
            return super().send_head()
        import io
        import re

        real = Path(self.translate_path(self.path)).read_bytes()
        size = 1 << 30
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        start = int(m[1]) if m and m[1] else 0
        end = min(int(m[2]), size - 1) if m and m[2] else size - 1
        self.send_response(206 if m else 200)
        if m:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.range_left = end - start + 1
        self.virtual = (real, start)
        return io.BytesIO()

    def copyfile(self, source, outputfile) -> None:  # type: ignore[override]
        if not hasattr(self, "virtual"):
            return super().copyfile(source, outputfile)
        real, pos = self.virtual
        left = self.range_left
        try:
            while left > 0:
                n = min(left, 1 << 20)
                chunk = real[pos:pos + n]
                chunk += bytes(n - len(chunk))
                outputfile.write(chunk)
                type(self).served += n
                pos += n
                left -= n
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.mark.timeout(120)
def test_a_download_never_reads_past_the_declared_size(remote: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    root, _ = remote
    cache = tmp_path / "cache"
    EndlessHandler.served = 0
    with serve(root, EndlessHandler) as url:
        ds = detfmt.open(url, cache_dir=cache)
        with pytest.raises(ShardChecksumError) as caught:
            ds[0]
        ds.close()
    assert caught.value.rule == "SHARD_SIZE"
    assert EndlessHandler.served < 64 << 20, EndlessHandler.served  # not the 1 GiB offered
    assert cache_files(cache) == []


def _three_shard_root(path: Path) -> tuple[Path, int]:
    """Three raw shards of about 36 KiB; returns the root and a tmpfs size (KiB) that holds
    the first shard but not two."""
    from detfmt.shard.write import commit, end_write, write_shard

    metas = [write_shard(relharness.make_samples(3, 40 + k, lo=60, hi=64), path, f"{k:03d}",
                         classes=relharness.CLASSES, box_fields={"iscrowd": "|u1"})
             for k in range(3)]
    commit(path, metas)
    end_write(path)
    biggest = max(m.bytes for m in metas)
    return path, (biggest + biggest // 3) // 1024 + 4


@pytest.mark.slow
def test_a_full_then_read_only_cache_is_typed_and_recovers(tmp_path: Path) -> None:
    """Real ENOSPC and EROFS: a tiny tmpfs in a private mount namespace. A full cache is a
    CacheError that leaves no partial file or lock and works again once space returns; a
    read-only cache still serves the shards it holds and refuses a miss with a CacheError."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare here")
    root, size_kib = _three_shard_root(tmp_path / "root")
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    script = str(Path(relharness.__file__).with_name("relcache_child.py"))
    result = None
    for flags in (["-m", "--propagation", "private"], ["-r", "-m", "--propagation", "private"]):
        cmd = ["unshare", *flags, sys.executable, script, str(mountpoint), str(root),
               str(size_kib)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             env=relharness.child_env())
        if out.returncode == 0:
            result = json.loads(out.stdout.strip().splitlines()[-1])
            break
        if "mount" not in out.stderr and "unshare" not in out.stderr:
            raise AssertionError(f"cache checks failed:\n{out.stderr[-4000:]}")
    if result is None:
        pytest.skip("no mount namespace here (unshare/mount refused)")
    assert result["first_ok"], result
    cls, rule, code, _ = result["full"]
    assert (cls, rule, code) == ("CacheError", "CACHE_UNUSABLE", errno.ENOSPC), result
    assert [n for n in result["after_full"] if n.endswith((".part", ".lock"))] == [], result
    assert result["recovered"], result
    assert result["read_only_hits"], result
    cls, rule, code, _ = result["read_only_miss"]
    assert (cls, rule, code) == ("CacheError", "CACHE_UNUSABLE", errno.EROFS), result
    assert not any(mountpoint.iterdir()), "the tmpfs leaked out of its namespace"
