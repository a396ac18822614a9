"""Ray Data: DetfmtDatasink (commit on completion, cleanup on failure, retried tasks rewrite the
same bytes) and read_detfmt; equality with a plain in-process write of the same partitioning."""

from __future__ import annotations

import os

import numpy as np
import pytest
from shardkit import CLASSES, make_samples

import detfmt
from detfmt.format.manifest import MANIFEST_NAME
from detfmt.shard.write import commit, write_partition

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from detfmt.integrations.ray import DetfmtDatasink, read_detfmt  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a hang fails, not blocks CI

PARTS, PER_PART, SHARD_BYTES = 3, 8, 2500  # ~1 KiB images: each partition rolls 3 shards
WRITE_ID = "5" * 32


@pytest.fixture(scope="module")
def ray_session():
    here = os.path.dirname(os.path.abspath(__file__))  # workers unpickle this module's hooks
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def samples():
    return make_samples(123, PARTS * PER_PART, side=(10, 20))


def tree_bytes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.startswith("."):
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, root)] = open(p, "rb").read()  # noqa: SIM115
    return out


def reference(tmp_path, samples):
    """The same partitioning written in this process (what multiprocessing/Dask also produce)."""
    root = tmp_path / "reference"
    metas = [
        m
        for i in range(PARTS)
        for m in write_partition(
            samples[i * PER_PART : (i + 1) * PER_PART],
            root,
            i,
            classes=CLASSES,
            codec="zstd",
            shard_bytes=SHARD_BYTES,
        )
    ]
    commit(root, metas, write_id=WRITE_ID)
    return root


def ray_write(root, samples, **kw):
    ds = ray.data.from_items(samples, override_num_blocks=PARTS)
    sink = DetfmtDatasink(
        root, classes=CLASSES, codec="zstd", shard_bytes=SHARD_BYTES, write_id=WRITE_ID, **kw
    )
    ds.write_datasink(sink, ray_remote_args={"max_retries": 3})
    return sink


def test_datasink_equals_direct_write_and_reads_back(tmp_path, ray_session, samples):
    sink = ray_write(tmp_path / "ray", samples)
    assert sink.manifest is not None and len(sink.manifest.shards) > PARTS  # rolled by bytes
    ref = reference(tmp_path, samples)
    assert tree_bytes(tmp_path / "ray") == tree_bytes(ref)  # byte-identical, manifest included
    # the tasks joined the driver's write session (no leases of their own), which ended
    assert not list((tmp_path / "ray").glob(".detfmt-lease-*"))
    ds = detfmt.open(tmp_path / "ray")
    for i in (0, 9, len(samples) - 1):
        np.testing.assert_array_equal(ds[i].image, samples[i]["image"])
        np.testing.assert_array_equal(ds[i].boxes, samples[i]["boxes"])
    rows = sorted(read_detfmt(tmp_path / "ray").take_all(), key=lambda r: r["index"])
    assert [r["index"] for r in rows] == list(range(len(samples)))
    np.testing.assert_array_equal(rows[17]["image"], samples[17]["image"])


class KillOnce:
    """Kill the worker process at one row, once (a marker file survives the crash)."""

    def __init__(self, marker, source_id):
        self.marker, self.source_id = str(marker), source_id

    def __call__(self, row):
        if row["source_id"] == self.source_id and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)  # mid-partition: one shard of this task done, the next one half read
        return row


def test_killed_task_is_retried_byte_identically(tmp_path, ray_session, samples):
    victim = samples[PER_PART + 5]["source_id"]  # partition 1, after its first shard rolled
    ray_write(tmp_path / "ray", samples, to_sample=KillOnce(tmp_path / "killed", victim))
    assert os.path.exists(tmp_path / "killed")
    ref = reference(tmp_path, samples)
    assert tree_bytes(tmp_path / "ray") == tree_bytes(ref)  # no duplicate or partial shard
    assert not list((tmp_path / "ray").glob(".detfmt-lease-*"))  # the killed task held none
    assert detfmt.verify(tmp_path / "ray").num_samples == len(samples)


class Explode:
    def __call__(self, row):
        if row["source_id"] % 1000 == 13:
            raise ValueError("bad row")
        return row


def test_failed_write_publishes_nothing_and_cleans_up(tmp_path, ray_session, samples):
    root = tmp_path / "ray"
    with pytest.raises(Exception, match="bad row"):
        ds = ray.data.from_items(samples, override_num_blocks=PARTS)
        ds.write_datasink(
            DetfmtDatasink(root, classes=CLASSES, shard_bytes=SHARD_BYTES, to_sample=Explode())
        )
    assert not (root / MANIFEST_NAME).exists()
    assert os.listdir(root / "shards") == []  # on_write_failed removed every unlisted file


def test_on_write_start_validates_before_any_task(tmp_path, ray_session):
    ds = ray.data.from_items([{"image": np.zeros((4, 4, 3), np.uint8), "classes": [0]}])
    with pytest.raises(Exception, match="lack columns"):
        ds.write_datasink(DetfmtDatasink(tmp_path / "a", classes=CLASSES))
    with pytest.raises(Exception, match="codec"):
        ds.write_datasink(DetfmtDatasink(tmp_path / "b", classes=CLASSES, codec="webp"))
    assert not (tmp_path / "b" / "shards").exists()


def test_datasink_writes_straight_to_s3(tmp_path, ray_session, samples, monkeypatch):
    s3fs = pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from scaleout_servers import moto_s3

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto_s3() as endpoint:
        opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint}}
        fs = s3fs.S3FileSystem(**opts)
        fs.call_s3("create_bucket", Bucket="bkt")
        ray_write("s3://bkt/ds", samples, storage_options=opts)
        ref = reference(tmp_path, samples)
        assert fs.cat_file("bkt/ds/manifest.json") == (ref / "manifest.json").read_bytes()
        ds = detfmt.open("s3://bkt/ds", storage_options=opts, cache_dir=tmp_path / "cache")
        np.testing.assert_array_equal(ds[5].image, samples[5]["image"])
