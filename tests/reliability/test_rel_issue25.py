"""Issue 25 (hardening, second round), properties 1 and 4 to 8.

1. Readers sharing one bounded cache never fail each other (cross-process pins).
2. A long-lived process re-reads an S3 root after others commit (moto).
4. Clocks cannot disable gc: a lease dated more than its ttl in the future is not live.
5. Opening while another process overwrites sees the old or the new dataset, never an error.
7. Special files and full disks give typed errors; every CLI failure is one line with an id.
8. One pixel limit: detfmt's own (2^28 pixels), not Pillow's global bomb limit (89.5 M).
6. A stored progressive JPEG is not a CPU bomb on read (SPEC R-50: at most 256 scans).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import relharness as rh
from PIL import Image

# ------------------------------------------------------------- 6: stored progressive JPEGs


@pytest.fixture
def many_scans(dataset: Any) -> Path:
    """A jpeg dataset whose sample 0 is a 64x64 progressive JPEG of about 3,000 scans."""
    ds = dataset("jpeg")
    rh.replace_payload(ds, 0, rh.progressive_jpeg(3000, subsampling=0), height=64, width=64,
                       decoded_nbytes=64 * 64 * 3)
    return ds


@pytest.fixture
def no_decoder(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record every JPEG decode; R-50 refuses before decoding anything."""
    from detfmt.format import codecs

    calls: list[int] = []
    original = codecs._decode_jpeg_into

    def record(payload: Any, out: np.ndarray, *, path: str, index: int) -> None:
        if index == 0:
            calls.append(index)
        original(payload, out, path=path, index=index)

    monkeypatch.setattr(codecs, "_decode_jpeg_into", record)
    return calls


@pytest.mark.parametrize("access", ["item", "batch", "verify"])
def test_stored_jpeg_with_thousands_of_scans_is_refused_before_decoding(
        many_scans: Path, no_decoder: list[int], access: str) -> None:
    import detfmt

    ds = detfmt.open(many_scans)
    with pytest.raises(detfmt.DetfmtError) as info:
        if access == "item":
            ds[0]
        elif access == "batch":
            ds.batch([0, 1])
        else:
            detfmt.verify(many_scans)
    assert info.value.rule == "IMAGE_DECODE"
    assert info.value.index == 0
    assert no_decoder == []
    assert ds[1].image.shape[2] == 3  # the other samples still read


# ------------------------------------------------------------------ 4: leases from the future

TEN_YEARS = 10 * 365 * 86400.0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    from detfmt.shard.write import end_write

    path = rh.build_sharded(tmp_path / "root")
    end_write(path)
    return path


def _orphan_and_lease(root: Path, ahead: float) -> tuple[Path, Path]:
    """An unlisted shard file (old) and another host's lease (ttl 60 s) dated ``ahead``."""
    orphan = root / "shards" / "part-orphan.detfmt"
    orphan.write_bytes(b"DETFMTPK" + bytes(64))
    os.utime(orphan, (1e9, 1e9))
    lease = root / f".detfmt-lease-{'f' * 32}.json"
    lease.write_text(json.dumps({"token": "f" * 32, "host": "another-host", "pid": 1,
                                 "ttl": 60.0, "created": time.time() + ahead}))
    os.utime(lease, (time.time() + ahead, time.time() + ahead))
    return orphan, lease


def test_a_lease_dated_ten_years_ahead_does_not_stop_gc(root: Path) -> None:
    from detfmt.shard.gc import collect
    from detfmt.storage import open_storage

    orphan, lease = _orphan_and_lease(root, TEN_YEARS)
    report = collect(open_storage(root), grace_seconds=0)
    assert not orphan.exists() and not lease.exists()
    assert sorted(report.removed) == sorted([str(orphan), str(lease)])
    assert report.future_leases == [str(lease)] and report.honoured_leases == []


def test_a_lease_slightly_ahead_is_honoured_and_named(root: Path) -> None:
    """Clocks within a ttl of each other: the lease holds, and gc says which one held."""
    from detfmt.shard.gc import collect
    from detfmt.storage import open_storage

    orphan, lease = _orphan_and_lease(root, 30.0)
    report = collect(open_storage(root), grace_seconds=0)
    assert orphan.exists() and lease.exists() and report.removed == []
    assert report.honoured_leases == [str(lease)] and report.future_leases == []


def test_gc_cli_names_the_leases(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from detfmt import cli

    _, lease = _orphan_and_lease(root, 30.0)
    assert cli.main(["gc", str(root), "--grace", "0"]) == 0
    assert str(lease) in capsys.readouterr().out
    os.utime(lease, (time.time() + TEN_YEARS, time.time() + TEN_YEARS))
    assert cli.main(["gc", str(root), "--grace", "0"]) == 0
    assert str(lease) in capsys.readouterr().out and not lease.exists()


# ------------------------------------------------------- 5: open during an atomic overwrite

OVERWRITER = """
import sys, relharness as rh
target, rounds = sys.argv[1], int(sys.argv[2])
for k in range(rounds):
    rh.build_dataset(target, n=3 + k % 2, seed=k % 2, overwrite=True, lo=4, hi=8)
"""

OPENER = """
import collections, json, os, sys
import detfmt
target, stop = sys.argv[1], sys.argv[2]
opens, errors, sizes = 0, collections.Counter(), set()
while not os.path.exists(stop) or opens < 50:
    try:
        with detfmt.open(target) as ds:
            sizes.add(len(ds))
            ds[len(ds) - 1]
    except detfmt.DetfmtError as error:
        errors[error.rule] += 1
    opens += 1
print(json.dumps({"opens": opens, "errors": errors, "sizes": sorted(sizes)}))
"""


def test_opening_while_another_process_overwrites_never_fails(tmp_path: Path) -> None:
    """Two processes open and read in a loop while a third overwrites the dataset 150 times
    (3 and 4 samples in turn): every open sees one of the two, none raises (the old code:
    FILE_MISSING or HEADER_MISSING about once in 60 to 100 opens)."""
    target = tmp_path / "ds"
    rh.build_dataset(target, n=3, seed=0, lo=4, hi=8)
    stop = tmp_path / "stop"
    env = rh.child_env()
    openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(target), str(stop)],
                                env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        writer = subprocess.run([sys.executable, "-c", OVERWRITER, str(target), "150"],
                                env=env, capture_output=True, text=True, timeout=600)
    finally:
        stop.touch()
    results = [json.loads(p.communicate(timeout=300)[0]) for p in openers]
    assert writer.returncode == 0, writer.stderr[-2000:]
    assert [r["errors"] for r in results] == [{}, {}], results
    assert {size for r in results for size in r["sizes"]} <= {3, 4}


# ------------------------------------------------ 7: special files, full disks, the CLI


def _cli(*args: str, limit_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m detfmt ARGS`` in a child (killed after 60 s: a hang fails the test);
    ``limit_bytes``: the largest file it may write (RLIMIT_FSIZE: a real EFBIG, a full disk
    without a mount)."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "detfmt", *args], env=rh.child_env(),
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=limit if limit_bytes is not None else None)


def _one_line_failure(out: subprocess.CompletedProcess[str], rule: str) -> None:
    assert out.returncode not in (0, None), out
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"[{rule}]"), out.stderr[-3000:]


def test_gc_on_a_fifo_manifest_is_one_typed_line(root: Path) -> None:
    (root / "manifest.json").unlink()
    os.mkfifo(root / "manifest.json")
    _one_line_failure(_cli("gc", str(root)), "PATH_UNSAFE")


def test_overwrite_onto_a_fifo_header_is_refused_without_hanging(tmp_path: Path) -> None:
    target = rh.build_dataset(tmp_path / "ds", n=2)
    (target / "header.json").unlink()
    os.mkfifo(target / "header.json")
    code = ("import sys, relharness as rh, detfmt\n"
            "try:\n    rh.build_dataset(sys.argv[1], n=2, overwrite=True)\n"
            "except detfmt.DetfmtError as error:\n    print(error.rule)\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, str(target)], env=rh.child_env(),
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("write(overwrite=True) blocked on a FIFO header.json")
    assert out.stdout.strip() == "TARGET_EXISTS", out.stderr[-2000:]
    assert sorted(p.name for p in target.iterdir()) != []  # the target is left as it was


def test_append_on_a_full_disk_is_one_typed_line_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert _cli("append", str(root), str(rh.build_dataset(tmp_path / "a", n=2))).returncode == 0
    before = rh.tree_digest(root)
    big = rh.build_dataset(tmp_path / "big", n=24, seed=3, lo=60, hi=64)
    out = _cli("append", str(root), str(big), limit_bytes=64 * 1024)
    _one_line_failure(out, "WRITE_FAILED")
    assert rh.tree_digest(root) == before  # nothing added, no temporary left


def test_show_into_a_missing_folder_is_one_typed_line(tmp_path: Path) -> None:
    ds = rh.build_dataset(tmp_path / "ds", n=2)
    _one_line_failure(_cli("show", str(ds), "--out", str(tmp_path / "missing" / "dir" / "g.png")),
                      "USAGE")


def test_validate_on_an_unopenable_path_is_one_typed_line(tmp_path: Path) -> None:
    long = tmp_path / ("x" * 300)  # ENAMETOOLONG: opening fails as a permission error would
    out = _cli("validate", str(long))
    assert out.returncode not in (0, None) and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stdout.strip() or out.stderr.strip()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_validate_on_an_unreadable_directory_is_one_typed_line(tmp_path: Path) -> None:
    ds = rh.build_dataset(tmp_path / "ds", n=2)
    ds.chmod(0)
    try:
        out = _cli("validate", str(ds))
    finally:
        ds.chmod(0o755)
    assert out.returncode not in (0, None) and "Traceback" not in out.stderr, out.stderr[-3000:]


@pytest.mark.parametrize("value", ["1e400", "inf", "nan", "-inf", "1e30"])
def test_split_with_a_non_finite_share_is_one_typed_line(tmp_path: Path, value: str) -> None:
    ds = rh.build_dataset(tmp_path / "ds", n=2)
    _one_line_failure(_cli("split", str(ds), str(tmp_path / "out"), "--val", value), "USAGE")


def test_any_os_error_of_a_command_is_one_typed_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's guard: an OSError no command turned into a typed error still prints one line
    with an id (IO_ERROR), never a traceback."""
    from detfmt import cli
    from detfmt.workflows import show

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error", str(tmp_path / "g.png"))

    monkeypatch.setattr(show, "render_grid", broken)
    assert cli.main(["show", str(rh.build_dataset(tmp_path / "ds", n=2)), "--out",
                     str(tmp_path / "g.png")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("[IO_ERROR]"), lines


# --------------------------------------------------------------------- 8: one pixel limit

PILLOW_LIMIT = 1000  # a process's own Pillow limit, far below a 40x40 image


@pytest.fixture
def low_pillow_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", PILLOW_LIMIT)


def _png_file(path: Path, side: int = 40) -> Path:
    pixels = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="PNG")
    return path


def test_write_applies_detfmt_limit_not_pillow_global(tmp_path: Path,
                                                      low_pillow_limit: None) -> None:
    import detfmt

    detfmt.write([{"image": _png_file(tmp_path / "a.png"), "boxes": np.zeros((0, 4)),
                   "classes": np.zeros(0, np.int32)}], tmp_path / "ds", classes=["a"],
                 max_side=16, progress=False)
    assert detfmt.open(tmp_path / "ds")[0].image.shape == (16, 16, 3)
    assert Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT  # the user's setting is back


def test_read_and_probe_apply_detfmt_limit(tmp_path: Path, low_pillow_limit: None) -> None:
    import detfmt
    from detfmt.writing import image as _image

    source = _png_file(tmp_path / "a.png")
    assert _image.check_decodes(source).width == 40
    assert _image.probe_image(source).width == 40
    ds = rh.build_dataset(tmp_path / "ds", n=2, codec="png", lo=40, hi=48)
    with detfmt.open(ds) as opened:
        assert opened[0].image.shape[0] >= 40
    assert Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT


def test_detfmt_limit_still_refuses_a_bomb(tmp_path: Path) -> None:
    """A PNG header claiming 20000 x 20000 pixels (over 2^28) is refused before decoding."""
    from detfmt.errors import InvalidSampleError
    from detfmt.writing import image as _image

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000,
                     20000, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    with pytest.raises(InvalidSampleError) as info:
        _image.load_rgb(bomb)
    assert info.value.rule == "IMAGE_INVALID"


def test_concurrent_opens_restore_the_user_limit(tmp_path: Path,
                                                 low_pillow_limit: None) -> None:
    from detfmt.writing import image as _image

    source = _png_file(tmp_path / "a.png", side=40)
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                _image.load_rgb(source)
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT


def test_a_child_forked_inside_the_lift_gets_the_user_limit_back(
        low_pillow_limit: None) -> None:
    """A worker forked while a thread of its parent is inside `pixel_limit` (the converter's
    pool) starts with the user's limit and a usable lock."""
    from detfmt.format import codecs
    from detfmt.writing import image as _image

    with codecs.pixel_limit():
        pid = os.fork()
        if pid == 0:  # the child: exit status says what it saw
            seen = [Image.MAX_IMAGE_PIXELS]
            with codecs.pixel_limit():
                seen.append(Image.MAX_IMAGE_PIXELS)
            seen.append(Image.MAX_IMAGE_PIXELS)
            os._exit(0 if seen == [PILLOW_LIMIT, _image.MAX_SOURCE_PIXELS, PILLOW_LIMIT] else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT


BIG_SOURCE = """
import sys, numpy as np, detfmt
from PIL import Image
source, target = sys.argv[1], sys.argv[2]
Image.new("L", (9472, 9472), 7).save(source, compress_level=1)
detfmt.write([{"image": source, "boxes": np.zeros((0, 4)), "classes": np.zeros(0, np.int32)}],
             target, classes=["a"], max_side=1024, progress=False)
print(detfmt.open(target)[0].image.shape, Image.MAX_IMAGE_PIXELS)
"""


def test_a_9472_square_png_source_is_written_with_max_side(tmp_path: Path) -> None:
    """The issue's case at full size, with Pillow's default limit: 89.7 M pixels, over
    Pillow's 89.5 M and under detfmt's 2^28 (about 1 GB peak, in a child)."""
    out = subprocess.run([sys.executable, "-c", BIG_SOURCE, str(tmp_path / "big.png"),
                          str(tmp_path / "ds")], env=rh.child_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(1024,", "1024,", "3)", "89478485"]  # Pillow default back


# --------------------------------------------------------- 1: one bounded cache, many readers

CACHE_READER = """
import collections, json, sys
import numpy as np
import detfmt
url, cache, limit, seed, reads = sys.argv[1:6]
rng = np.random.default_rng(int(seed))
errors = collections.Counter()
with detfmt.open(url, cache_dir=cache, cache_limit=int(limit), max_open=1) as ds:
    for index in rng.integers(0, len(ds), int(reads)):
        try:
            ds[int(index)]
        except detfmt.DetfmtError as error:
            errors[error.rule] += 1
print(json.dumps(errors))
"""


def test_readers_sharing_one_bounded_cache_never_fail_each_other(tmp_path: Path) -> None:
    """Four processes read random samples of a remote root of six shards through one cache
    bounded to about one shard (the DDP ranks or DataLoader workers of one user): no read
    fails (the old code: FILE_MISSING when another process evicted a shard between its fetch
    and its open)."""
    pytest.importorskip("aiohttp")
    sys.path.insert(0, str(rh.REPO / "tests" / "scaleout"))
    from scaleout_servers import http_range_server

    plan = tuple(("raw", 4) for _ in range(6))
    root = rh.build_sharded(tmp_path / "root", plan=plan)
    largest = max(p.stat().st_size for p in (root / "shards").iterdir())
    cache = tmp_path / "cache"
    with http_range_server(str(root)) as url:
        children = [subprocess.Popen(
            [sys.executable, "-c", CACHE_READER, url, str(cache), str(largest + 1), str(seed),
             "150"], env=rh.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for seed in range(4)]
        outs = [child.communicate(timeout=600) for child in children]
    assert [child.returncode for child in children] == [0] * 4, [e[-2000:] for _, e in outs]
    assert [json.loads(out) for out, _ in outs] == [{}] * 4


# ----------------------------------------------- 2: re-reading an S3 root after other commits

OTHER_COMMIT = """
import json, sys
from detfmt.shard.append import append
url, options, source = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
print(append(url, [source], storage_options=options).num_samples)
"""


def test_a_long_lived_process_sees_commits_of_others_on_s3(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """This process appends to an S3 root and opens it; another process appends; this process
    then opens, verifies and appends again, all seeing the current manifest (the old code:
    PATH_UNSAFE "ETag no longer exists" from s3fs's cached object details)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    sys.path.insert(0, str(rh.REPO / "tests" / "scaleout"))
    import fsspec
    from scaleout_servers import moto_s3

    import detfmt
    from detfmt.shard.append import append
    from detfmt.shard.gc import gc

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    sources = [rh.build_dataset(tmp_path / f"src{k}", n=2 + k, seed=k) for k in range(3)]
    with moto_s3() as endpoint:
        options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
        fsspec.filesystem("s3", **options).call_s3("create_bucket", Bucket="bkt")
        url = "s3://bkt/root"
        assert append(url, [sources[0]], storage_options=options).num_samples == 2
        assert len(detfmt.open(url, storage_options=options, cache_dir=tmp_path / "c")) == 2
        # this process's client now caches listings and object details (fsspec shares one
        # client per set of options): gc lists the root and shards/, another reader stats
        assert gc(url, storage_options=options) == []
        client = fsspec.filesystem("s3", **options)
        client.info("bkt/root/manifest.json")
        client.ls("bkt/root/shards")
        env = {**rh.child_env(), "AWS_DEFAULT_REGION": "us-east-1"}
        other = subprocess.run([sys.executable, "-c", OTHER_COMMIT, url, json.dumps(options),
                                str(sources[1])], env=env, capture_output=True, text=True,
                               timeout=300)
        assert other.returncode == 0 and other.stdout.split() == ["5"], other.stderr[-2000:]
        with detfmt.open(url, storage_options=options, cache_dir=tmp_path / "c") as ds:
            assert len(ds) == 5
            ds[4]
        assert detfmt.verify(url, storage_options=options).ok
        assert append(url, [sources[2]], storage_options=options).num_samples == 9


def test_an_unexpected_exception_is_one_line_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from detfmt import cli
    from detfmt.workflows import show

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(show, "render_grid", broken)
    monkeypatch.delenv("DETFMT_TRACEBACK", raising=False)
    argv = ["show", str(rh.build_dataset(tmp_path / "ds", n=2)), "--out", str(tmp_path / "g.png")]
    assert cli.main(argv) == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("[INTERNAL]"), lines
    monkeypatch.setenv("DETFMT_TRACEBACK", "1")
    with pytest.raises(RecursionError):
        cli.main(argv)
