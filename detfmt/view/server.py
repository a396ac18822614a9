"""``detfmt view``'s HTTP server: a read-only JSON API and images over one opened dataset.

The standard library's ThreadingHTTPServer (nothing to install). Only GET and HEAD are
answered; every route is a fixed name (the front end's files are read from the package once,
into memory), and the only request values that reach the dataset are a split name checked
against the dataset's own split list and integers. Nothing is written, anywhere.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import threading
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from detfmt import errors
from detfmt.format import spec
from detfmt.reading.protocol import DatasetLike
from detfmt.view.images import FULL, THUMB_SIZES, ImageCache
from detfmt.view.index import SORTS, LabelIndex, Query
from detfmt.view.predictions import Evaluation, read_results

__all__ = ["PAGE_LIMIT", "Viewer", "make_server"]

PAGE_LIMIT = 200  # samples per query answer at most
#: a query answer lists every match up to this many (the page then steps through them itself;
#: past it, it asks /api/neighbour)
MAX_INDICES = 100_000
HEATMAP_BINS = 32
#: the Host header names a server bound to loopback answers to (any port)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
_STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
           "/static/app.css": ("app.css", "text/css; charset=utf-8")}
_SECURITY = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


class Viewer:
    """What the pages show, as plain data, for one dataset path or URL (a 1.0 directory, a
    sharded root, local or remote, or a split root holding ``splits.json``). Splits are opened
    and indexed on first use; everything read is kept read-only."""

    def __init__(self, path: str | os.PathLike[str], *,
                 predictions: str | os.PathLike[str] | None = None, iou: float = 0.5,
                 min_score: float = 0.5) -> None:
        from detfmt.reading.opener import is_sharded_root, read_split_index
        from detfmt.storage import is_remote

        self.location = os.fspath(path)
        index = None  # a split root holds splits.json (a URL may be one too)
        if is_remote(self.location) or not (is_sharded_root(self.location) or os.path.lexists(
                os.path.join(self.location, spec.HEADER_FILE))):
            index = read_split_index(self.location)
        #: split name -> None until opened; "" is the dataset itself when it has no splits
        self.split_names: list[str] = sorted(index) if index else [""]
        self._open: dict[str, DatasetLike] = {}
        self._index: dict[str, LabelIndex] = {}
        self._stats: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._split_locks: dict[str, threading.RLock] = {}
        self._threads: list[threading.Thread] = []
        self._names_lock = threading.Lock()
        self.images = ImageCache()
        self.predictions = os.fspath(predictions) if predictions is not None else None
        self._results = read_results(predictions) if predictions is not None else None
        self._evaluations: dict[str, Evaluation] = {}
        self.iou, self.min_score = iou, min_score
        self.dataset(self.split_names[0])  # fail now (one line) if it cannot be opened
        self._background(self._warm, self.split_names[0])

    def dataset(self, split: str) -> DatasetLike:
        if split not in self.split_names:
            raise _HttpError(404, f"no split {split!r}")
        with self._lock:
            if split not in self._open:
                from detfmt.reading.opener import open_dataset

                self._open[split] = (open_dataset(self.location, split=split) if split
                                     else open_dataset(self.location))
            return self._open[split]

    def _split_lock(self, split: str) -> threading.RLock:
        with self._lock:
            return self._split_locks.setdefault(split, threading.RLock())

    def index(self, split: str, names: bool = False) -> LabelIndex:
        """The label index of ``split`` (read on first use, under that split's own lock, so
        images and other splits are served meanwhile); ``names``: with its file names (read in
        the background once the index is made, or now if asked before that ends)."""
        ds = self.dataset(split)
        with self._split_lock(split):
            index = self._index.get(split)
            if index is None:
                index = LabelIndex.from_dataset(ds)
                evaluation = self.evaluation(split)
                if evaluation is not None:
                    index.errors = evaluation.counts[:, 1] + evaluation.counts[:, 2]
                self._index[split] = index
                if index.has_names:
                    self._background(self._load_names, index, ds, True)
        if names:
            self._load_names(index, ds)
        return index

    def evaluation(self, split: str) -> Evaluation | None:
        """The predictions matched to ``split`` (None without predictions)."""
        if self._results is None:
            return None
        ds = self.dataset(split)
        with self._split_lock(split):
            if split not in self._evaluations:
                self._evaluations[split] = Evaluation.build(
                    ds, self._results, iou=self.iou, min_score=self.min_score)
            return self._evaluations[split]

    def _warm(self, split: str) -> None:
        """Read ``split``'s labels ahead of the first filter (errors wait for that request)."""
        with contextlib.suppress(errors.DetfmtError):
            self.index(split)

    def _background(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _load_names(self, index: LabelIndex, ds: DatasetLike, background: bool = False) -> None:
        with self._names_lock:
            try:
                index.load_names(ds)
            except errors.DetfmtError:
                if not background:  # the request that needs them reports it
                    raise

    def close(self) -> None:
        """Close the datasets, once the background reads of their labels have ended."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
        with self._lock:
            for ds in self._open.values():
                ds.close()
            self._open.clear()

    # ---- what each route answers ----

    def info(self) -> dict[str, Any]:
        from detfmt.render import PALETTE

        ds = self.dataset(self.split_names[0])
        schema = ds.schema
        predictions = None
        if self.predictions is not None:
            predictions = {"file": os.path.basename(self.predictions), "iou": self.iou,
                           "min_score": self.min_score}
        return {"location": self.location, "splits": self.split_names,
                "classes": schema.class_names, "palette": [_hex(c) for c in PALETTE],
                "box_fields": [f.name for f in schema.box_fields],
                "image_fields": list(schema.image_fields), "predictions": predictions,
                "sorts": [s for s in SORTS if s != "worst" or predictions is not None],
                "thumb_sizes": [s for s in THUMB_SIZES if s != FULL]}

    def _matches(self, split: str, query: Query) -> np.ndarray:
        if query == Query() and split not in self._index:  # everything: no index needed yet
            return np.arange(len(self.dataset(split)), dtype=np.int64)
        return self.index(split, names=bool(query.name)).select(query)

    def neighbour(self, split: str, query: Query, i: int, step: int) -> dict[str, Any]:
        """The match ``step`` (+1 or -1) places from sample ``i`` in ``query``'s order."""
        found = self._matches(split, query)
        at = np.flatnonzero(found == i)
        if not len(at) or not 0 <= int(at[0]) + step < len(found):
            return {"index": None}
        return {"index": int(found[int(at[0]) + step])}

    def query(self, split: str, query: Query, offset: int, limit: int) -> dict[str, Any]:
        ds = self.dataset(split)
        found = self._matches(split, query)
        page = found[offset : offset + min(limit, PAGE_LIMIT)]
        evaluation = self.evaluation(split)
        items = [self._tile(ds, int(i), evaluation) for i in page]
        return {"total": len(ds), "matches": len(found), "offset": offset, "items": items,
                "indices": found.tolist() if len(found) <= MAX_INDICES else None}

    def _tile(self, ds: DatasetLike, i: int, evaluation: Evaluation | None) -> dict[str, Any]:
        labels = ds.labels(np.array([i], np.int64))
        mask = labels.mask[0]
        h, w = (int(v) for v in ds.sizes[i])
        return {"index": i, "height": h, "width": w,
                "predictions": evaluation.of(i) if evaluation is not None else None,
                "file_name": (ds.string_field("file_name", i)
                              if "file_name" in ds.schema.image_fields else ""),
                "boxes": labels.boxes[0][mask].round(2).tolist(),
                "classes": labels.classes[0][mask].tolist()}

    def sample(self, split: str, i: int) -> dict[str, Any]:
        ds = self.dataset(split)
        if not 0 <= i < len(ds):
            raise _HttpError(404, f"no sample {i} (the dataset has {len(ds)})")
        labels = ds.labels(np.array([i], np.int64))
        mask = labels.mask[0]
        fields: dict[str, Any] = {}
        for name in ds.schema.image_fields:
            if name == "file_name":
                fields[name] = ds.string_field(name, i)
            else:
                fields[name] = np.asarray(ds.image_field(name)[i]).tolist()
        h, w = (int(v) for v in ds.sizes[i])
        evaluation = self.evaluation(split)
        return {"index": i, "count": len(ds), "height": h, "width": w, "codec": ds.codec(i),
                "predictions": evaluation.of(i) if evaluation is not None else None,
                "boxes": labels.boxes[0][mask].tolist(),
                "classes": labels.classes[0][mask].tolist(),
                "box_fields": {name: np.asarray(values[0][mask]).tolist()
                               for name, values in labels.fields.items()},
                "image_fields": fields}

    def stats(self, split: str) -> dict[str, Any]:
        with self._lock:
            if split in self._stats:
                return self._stats[split]
        from detfmt.convert.card import card_lines, read_card
        from detfmt.workflows.stats import BoxTable, compute_stats

        ds = self.dataset(split)
        table = BoxTable.read(ds)
        data = compute_stats(ds, table)
        files = ds.disk_usage()
        card = read_card(ds.metadata)
        data.update(
            location=ds.location, version=ds.format_version, codecs=ds.codec_counts(),
            bytes={"total": sum(files.values()), "files": files},
            card_lines=[line.strip() for line in card_lines(ds.metadata)],
            lineage=card.get("lineage", []), metadata=dict(ds.metadata),
            heatmaps=_heatmaps(table))
        with self._lock:
            self._stats[split] = data
        return data


def _heatmaps(table: Any) -> dict[str, Any]:
    """Box centres and sizes as fractions of their image, binned HEATMAP_BINS² (counts)."""
    if not len(table.classes):
        empty = np.zeros((HEATMAP_BINS, HEATMAP_BINS), np.int64).tolist()
        return {"bins": HEATMAP_BINS, "centre": empty, "size": empty}
    hw = table.sizes[table.image].astype(np.float64)
    b = table.boxes.astype(np.float64)
    cx = (b[:, 0] + b[:, 2]) / 2 / hw[:, 1]
    cy = (b[:, 1] + b[:, 3]) / 2 / hw[:, 0]
    bw = (b[:, 2] - b[:, 0]) / hw[:, 1]
    bh = (b[:, 3] - b[:, 1]) / hw[:, 0]
    edges = np.linspace(0, 1, HEATMAP_BINS + 1)
    centre = np.histogram2d(cy.clip(0, 1), cx.clip(0, 1), bins=(edges, edges))[0]
    size = np.histogram2d(bh.clip(0, 1), bw.clip(0, 1), bins=(edges, edges))[0]
    return {"bins": HEATMAP_BINS, "centre": centre.astype(np.int64).tolist(),
            "size": size.astype(np.int64).tolist()}


def _one(params: dict[str, list[str]], name: str, default: str = "") -> str:
    values = params.get(name)
    return values[-1] if values else default


def _int(params: dict[str, list[str]], name: str, default: int | None = None,
         low: int = 0) -> int | None:
    text = _one(params, name)
    if text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise _HttpError(400, f"{name} must be an integer, got {text!r}") from None
    if value < low:
        raise _HttpError(400, f"{name} must be {low} or more, got {value}")
    return value


def _ids(params: dict[str, list[str]], name: str) -> tuple[int, ...]:
    text = _one(params, name)
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise _HttpError(400, f"{name} must be class ids separated by commas") from None


def _query(params: dict[str, list[str]]) -> Query:
    size = _one(params, "size") or None
    return Query(any_of=_ids(params, "any"), all_of=_ids(params, "all"),
                 none_of=_ids(params, "none"), min_boxes=_int(params, "min"),
                 max_boxes=_int(params, "max"), size=size,  # type: ignore[arg-type]
                 name=_one(params, "name")[:256], sort=_one(params, "sort", "index"))


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "detfmt-view"
    viewer: Viewer
    static: dict[str, tuple[bytes, str]]
    allowed_hosts: frozenset[str] | None = None
    quiet = True

    def log_message(self, format: str, *args: Any) -> None:
        if not self.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in _SECURITY.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value, ensure_ascii=False).encode(),
                   "application/json; charset=utf-8")

    def _refuse(self) -> None:
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

    def do_HEAD(self) -> None:
        self.do_GET()

    def _host_allowed(self) -> bool:
        """On loopback, only requests addressed to a loopback name: a web page whose domain
        is rebound to 127.0.0.1 (DNS rebinding) cannot read the dataset through the browser."""
        if self.allowed_hosts is None:
            return True
        host = (self.headers.get("Host") or "").strip().lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in self.allowed_hosts

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        params = parse_qs(url.query, keep_blank_values=True)
        try:
            if not self._host_allowed():
                raise _HttpError(403, "this viewer answers requests to localhost only")
            if url.path in self.static:
                body, content_type = self.static[url.path]
                self._send(200, body, content_type)
            elif url.path.startswith("/api/"):
                self._api(url.path[len("/api/"):], params)
            else:
                raise _HttpError(404, "not found")
        except _HttpError as error:
            self._json(error.status, {"error": str(error)})
        except errors.UsageError as error:
            self._json(400, {"error": str(error)})
        except errors.DetfmtError as error:  # a broken sample: say so, keep serving
            self._json(500, {"error": str(error)})
        except (BrokenPipeError, ConnectionResetError):  # pragma: no cover - client left
            pass

    def _api(self, route: str, params: dict[str, list[str]]) -> None:
        viewer = self.viewer
        split = _one(params, "split", viewer.split_names[0])
        if route == "info":
            self._json(200, viewer.info())
        elif route == "query":
            limit = _int(params, "limit", 48)
            self._json(200, viewer.query(split, _query(params), _int(params, "offset", 0),
                                         limit))
        elif route == "neighbour":
            step = _one(params, "step", "1")
            if step not in ("1", "-1"):
                raise _HttpError(400, "step must be 1 or -1")
            self._json(200, viewer.neighbour(split, _query(params), _int(params, "i", 0),
                                             int(step)))
        elif route == "sample":
            self._json(200, viewer.sample(split, _int(params, "i", 0)))
        elif route == "stats":
            self._json(200, viewer.stats(split))
        elif route == "image":
            i, size = _int(params, "i", 0), _int(params, "size", FULL)
            if size not in THUMB_SIZES:
                raise _HttpError(400, f"size must be one of {list(THUMB_SIZES)}")
            ds = viewer.dataset(split)
            if not 0 <= i < len(ds):
                raise _HttpError(404, f"no sample {i} (the dataset has {len(ds)})")
            body, content_type = viewer.images.get(split, ds, i, size)
            self._send(200, body, content_type)
        else:
            raise _HttpError(404, "not found")


def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("detfmt.view") / "static"
    return {route: ((folder / name).read_bytes(), content_type)
            for route, (name, content_type) in _STATIC.items()}


def make_server(viewer: Viewer, host: str = "127.0.0.1", port: int = 0
                ) -> http.server.ThreadingHTTPServer:
    """A server for ``viewer`` bound to ``host:port`` (port 0: a free one); call
    ``serve_forever`` on it (``server.server_address`` tells the port)."""
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    allowed = LOOPBACK_NAMES | {host.lower()} if loopback else None
    handler = type("Handler", (_Handler,), {"viewer": viewer, "static": _static_files(),
                                             "allowed_hosts": allowed})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server

