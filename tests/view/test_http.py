"""The viewer's HTTP surface without a browser: fixed routes only, read-only, typed answers."""

from __future__ import annotations

import http.client
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import detfmt
from detfmt.view import Viewer, make_server
from tests.view.conftest import serving

SAMPLE = Path(__file__).resolve().parents[2] / "detfmt" / "samples" / "chess"


def _get(url: str, path: str, method: str = "GET", body: bytes | None = None):
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(method, path, body=body)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), data


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*"))}


@pytest.fixture(scope="module")
def chess(tmp_path_factory) -> Path:
    """The bundled chess sample, JPEG payloads."""
    out = tmp_path_factory.mktemp("chess") / "chess"
    detfmt.convert.from_coco(SAMPLE / "annotations.coco.json", SAMPLE, out, max_side=256,
                             codec="jpeg", progress=False)
    return out


HOSTILE_PATHS = [
    "/../../../../etc/passwd", "/static/../server.py", "/static/..%2fserver.py",
    "/static/%2e%2e/%2e%2e/pyproject.toml", "//etc/passwd", "/static/app.js/../../cli.py",
    "/header.json", "/static/", "/static/index.html", "/api/", "/api/../header.json",
    "/api/image/../../header.json", "/api/info/../../../etc/passwd",
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_no_path_reaches_the_filesystem(boxes_dataset, path):
    with serving(boxes_dataset) as url:
        status, _, body = _get(url, path)
    assert status == 404, (path, status)
    assert json.loads(body) == {"error": "not found"}


def test_splits_are_names_from_the_dataset(boxes_dataset):
    with serving(boxes_dataset) as url:
        for split in ("..", "../boxes", "/etc", "train"):
            status, _, body = _get(url, f"/api/query?split={split}")
            assert status == 404 and "no split" in json.loads(body)["error"]


def test_bad_values_are_400_and_404(boxes_dataset):
    with serving(boxes_dataset) as url:
        for path, status in [("/api/image?i=x", 400), ("/api/image?i=-1", 400),
                             ("/api/image?i=6", 404), ("/api/image?i=0&size=77", 400),
                             ("/api/sample?i=99", 404), ("/api/query?any=9", 400),
                             ("/api/query?size=huge", 400), ("/api/query?sort=worst", 400),
                             ("/api/query?min=a", 400), ("/api/query?any=1;2", 400)]:
            got, _, body = _get(url, path)
            assert got == status, (path, got, body)
            assert json.loads(body)["error"]


def test_read_only(boxes_dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _tree(boxes_dataset)
    with serving(boxes_dataset) as url:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, headers, _ = _get(url, "/api/query", method, b"{}")
            assert status == 405 and headers["Allow"] == "GET, HEAD"
        for path in ("/", "/api/info", "/api/query?any=0", "/api/sample?i=1", "/api/stats",
                     "/api/image?i=0", "/api/image?i=0&size=256"):
            status, headers, _ = _get(url, path)
            assert status == 200, path
            assert "default-src 'self'" in headers["Content-Security-Policy"]
            assert headers["X-Content-Type-Options"] == "nosniff"
    assert _tree(boxes_dataset) == before
    assert list(tmp_path.iterdir()) == []


def test_binds_loopback_by_default(boxes_dataset):
    from detfmt.cli import build_parser

    assert build_parser().parse_args(["view", "x"]).host == "127.0.0.1"
    viewer = Viewer(boxes_dataset)
    server = make_server(viewer)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()
        viewer.close()


def test_jpeg_served_as_stored_raw_encoded_and_cached(chess, boxes_dataset):
    ds = detfmt.open(chess)
    with serving(chess) as url:
        for size in (0, 256):
            status, headers, body = _get(url, f"/api/image?i=2&size={size}")
            assert status == 200 and headers["Content-Type"] == "image/jpeg"
            assert body == bytes(ds.payload(2))
    ds.close()
    raw = detfmt.open(boxes_dataset)
    viewer = Viewer(boxes_dataset)
    full, kind = viewer.images.get("", viewer.dataset(""), 3, 0)
    assert kind == "image/png"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(full))), raw[3].image)
    thumb, kind = viewer.images.get("", viewer.dataset(""), 3, 128)
    assert kind == "image/jpeg" and Image.open(io.BytesIO(thumb)).size == (128, 96)
    assert viewer.images.get("", viewer.dataset(""), 3, 128)[0] is thumb  # cached
    viewer.close()
    raw.close()


def test_sample_answer_has_the_fields(chess):
    ds = detfmt.open(chess)
    with serving(chess) as url:
        status, _, body = _get(url, "/api/sample?i=1")
    sample = json.loads(body)
    assert status == 200
    assert sample["image_fields"]["file_name"] == ds.string_field("file_name", 1)
    assert sample["image_fields"]["orig_size"] == ds.image_field("orig_size")[1].tolist()
    assert np.allclose(sample["boxes"], ds[1].boxes)
    assert set(sample["box_fields"]) == {f.name for f in ds.schema.box_fields}
    ds.close()


def test_cli_view_bad_path_one_line(tmp_path, capsys):
    from detfmt.cli import main

    assert main(["view", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("detfmt: ")
    assert "Traceback" not in err[0]
    assert os.listdir(tmp_path) == []


def test_remote_root(tmp_path, monkeypatch):
    """A sharded root read over HTTP (fsspec) is viewed like a local one."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from tests.datasets import make_sharded_root, varied_shapes
    from tests.scaleout.scaleout_servers import http_range_server

    monkeypatch.setenv("DETFMT_CACHE_DIR", str(tmp_path / "cache"))
    local = make_sharded_root(tmp_path / "root", varied_shapes(20))
    with http_range_server(str(tmp_path)) as base, serving(f"{base}/root") as url:
        status, _, body = _get(url, "/api/query?any=2&limit=48")
        want = [i for i in range(20) if 2 in local[i].classes]
        assert status == 200 and [t["index"] for t in json.loads(body)["items"]] == want
        status, headers, body = _get(url, "/api/image?i=13")
        assert headers["Content-Type"] == "image/png"
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(body))), local[13].image)
    local.close()


def test_file_name_filter_reads_the_names(boxes_dataset):
    with serving(boxes_dataset) as url:
        for name, want in [("img_00", [0, 2, 3, 4, 5]), ("</B>", [1]), ("005.PNG", [5]),
                           ("nothing", [])]:
            status, _, body = _get(url, f"/api/query?name={name}")
            answer = json.loads(body)
            assert status == 200 and [t["index"] for t in answer["items"]] == want, name
            assert answer["matches"] == len(want) and answer["total"] == 6
        _, _, body = _get(url, "/api/query?min=2&sort=most-boxes")
        assert [t["index"] for t in json.loads(body)["items"]] == [3, 0, 5]


def test_a_broken_sample_is_an_error_answer_not_a_crash(tmp_path):
    from tests.datasets import corrupt_payload, make_dataset, varied_shapes

    ds = make_dataset(tmp_path / "ds", varied_shapes(6), codec="zstd")
    corrupt_payload(ds, 2)
    ds.close()
    with serving(tmp_path / "ds") as url:
        status, _, body = _get(url, "/api/image?i=2")
        error = json.loads(body)["error"]
        assert status == 500 and "sample 2" in error and "[" in error  # names it, rule id
        assert _get(url, "/api/image?i=3")[0] == 200  # the others are still served
        assert _get(url, "/api/query")[0] == 200


def test_neighbour_in_the_filter_order(boxes_dataset):
    with serving(boxes_dataset) as url:
        for path, want in [("i=0&step=1&any=1", 3), ("i=3&step=1&any=1", 4),
                           ("i=4&step=1&any=1", None), ("i=0&step=-1", None),
                           ("i=0&step=1&any=1&sort=fewest-boxes", 3),
                           ("i=4&step=1&any=1&sort=fewest-boxes", 0),
                           ("i=2&step=1&any=1", None)]:  # 2 is not a match
            status, _, body = _get(url, f"/api/neighbour?{path}")
            assert status == 200 and json.loads(body) == {"index": want}, path
        assert _get(url, "/api/neighbour?i=0&step=2")[0] == 400


def test_cli_serves_until_ctrl_c(boxes_dataset):
    import re
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "detfmt", "view", str(boxes_dataset),
                             "--port", "0"], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    try:
        line = proc.stdout.readline()
        found = re.search(r"at http://localhost:(\d+)/ \(read-only", line)
        assert found, line
        status, _, body = _get(f"http://127.0.0.1:{found.group(1)}", "/api/info")
        assert status == 200 and json.loads(body)["classes"][0] == "cat"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err.strip() == "detfmt view: stopped"


def test_only_loopback_names_on_loopback(boxes_dataset):
    """DNS rebinding: a page of evil.example rebound to 127.0.0.1 gets nothing."""
    with serving(boxes_dataset) as url:
        port = int(url.rsplit(":", 1)[1])
        for host, status in [("evil.example", 403), (f"evil.example:{port}", 403),
                             (f"localhost:{port}", 200), (f"127.0.0.1:{port}", 200),
                             ("localhost", 200)]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.putrequest("GET", "/api/info", skip_host=True)
            connection.putheader("Host", host)
            connection.endheaders()
            response = connection.getresponse()
            response.read()
            connection.close()
            assert response.status == status, host


def test_remote_split_root(tmp_path, monkeypatch):
    """A split root over HTTP: its splits.json names sharded roots."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from tests.datasets import make_sharded_root, varied_shapes
    from tests.scaleout.scaleout_servers import http_range_server

    monkeypatch.setenv("DETFMT_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "root"
    make_sharded_root(root / "train-part", varied_shapes(12)).close()
    make_sharded_root(root / "val", varied_shapes(5, seed=1)).close()
    (root / "splits.json").write_text(json.dumps({
        "format": "detfmt-splits/1",
        "splits": {"train": {"path": "train-part"}, "val": {"path": "val"}}}))
    with http_range_server(str(tmp_path)) as base, serving(f"{base}/root") as url:
        info = json.loads(_get(url, "/api/info")[2])
        assert info["splits"] == ["train", "val"]
        for split, n in (("train", 12), ("val", 5)):
            status, _, body = _get(url, f"/api/query?split={split}")
            assert status == 200 and json.loads(body)["total"] == n
