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
from detfmt.shard.errors import ShardChecksumError


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
