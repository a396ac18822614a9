"""Shared helpers of the reliability suite: dataset builder, mutations, and a sandboxed runner.

Malformed data is only ever opened in a child process (``run_safe`` / ``SafeWorker``) with an
address-space limit and a timeout, so a SIGBUS, an allocation bomb or a hang fails one test
instead of killing pytest. The child imports this module (it is on ``PYTHONPATH``) and calls the
``op_*`` functions by name; only a normal return or a ``DetfmtError`` is a safe outcome.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MEM_LIMIT = 1 << 30  # RLIMIT_AS of every sandboxed child
TIMEOUT_S = 10.0
TMP_PREFIX = ".detfmt-tmp-"

# ---------------------------------------------------------------------------------------------
# tiny dataset builder
# ---------------------------------------------------------------------------------------------

CODECS = ("raw", "zstd", "png", "jpeg")
CLASSES = ["cat", "dog", "bird"]


def make_samples(n: int = 5, seed: int = 0, *, lo: int = 4, hi: int = 32) -> list[dict[str, Any]]:
    """Deterministic small samples: random sizes, 0-3 boxes inside the image, every field kind."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(lo, hi + 1, size=2))
        # smooth-ish images so jpeg/png are realistic; raw bytes still random enough
        image = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        k = int(rng.integers(0, 4)) if i else 2  # sample 0 always has boxes
        x1 = rng.uniform(0, w / 2, size=k)
        y1 = rng.uniform(0, h / 2, size=k)
        x2 = np.minimum(x1 + rng.uniform(1, w / 2, size=k), w)
        y2 = np.minimum(y1 + rng.uniform(1, h / 2, size=k), h)
        boxes = np.stack([x1, y1, x2, y2], axis=1).astype(np.float32).reshape(k, 4)
        samples.append(
            {
                "image": image,
                "boxes": boxes,
                "classes": rng.integers(0, len(CLASSES), size=k).astype(np.int32),
                "iscrowd": rng.integers(0, 2, size=k).astype(np.uint8),
                "file_name": f"img_{seed}_{i}.jpg",
                "source_id": 1000 * seed + i,
            }
        )
    return samples


def build_dataset(path: str | os.PathLike[str], *, n: int = 5, seed: int = 0,
                  codec: str = "raw", overwrite: bool = False, lo: int = 4, hi: int = 32,
                  **kwargs: Any) -> Path:
    """Write a tiny valid dataset with ``detfmt.write`` and return its path."""
    import detfmt

    kwargs.setdefault("box_fields", {"iscrowd": "|u1"})
    detfmt.write(make_samples(n, seed, lo=lo, hi=hi), path, classes=CLASSES, codec=codec,
                 overwrite=overwrite, **kwargs)
    return Path(path)


def copy_dataset(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def tree_digest(path: str | os.PathLike[str]) -> str | None:
    """Hash of every file name and content below ``path`` (None when it does not exist)."""
    root = Path(path)
    if not root.exists():
        return None
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def temp_leftovers(parent: str | os.PathLike[str]) -> list[str]:
    """Names of writer temporaries left in ``parent``."""
    return sorted(n for n in os.listdir(parent) if n.startswith(TMP_PREFIX))


# ---------------------------------------------------------------------------------------------
# mutations (bytes level, .npy aware, header aware)
# ---------------------------------------------------------------------------------------------


def progressive_jpeg(extra_scans: int, side: int = 64, *, subsampling: int = -1) -> bytes:
    """A valid progressive JPEG of ``side`` x ``side`` random pixels with its smallest scan
    repeated ``extra_scans`` times (what a decoder processes scan by scan: a few hundred bytes
    each, a pass over the image each). ``subsampling`` is Pillow's (-1: its default)."""
    from PIL import Image

    pixels = np.random.default_rng(1).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", progressive=True, quality=90,
                                 subsampling=subsampling)
    data = buffer.getvalue()
    scans, position = [], 2
    while data[position + 1] != 0xD9:
        marker = data[position + 1]
        end = position + 2 + int.from_bytes(data[position + 2 : position + 4], "big")
        if marker == 0xDA:
            while data[end] != 0xFF or data[end + 1] == 0 or 0xD0 <= data[end + 1] <= 0xD7:
                end += 1
            scans.append((position, end))
        position = end
    start, end = min(scans, key=lambda s: s[1] - s[0])
    return data[:position] + data[start:end] * extra_scans + data[position:]


def bitflip(data: bytes, pos: int, bit: int = 0) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    b[pos % len(b)] ^= 1 << (bit % 8)
    return bytes(b)


def truncate(data: bytes, size: int) -> bytes:
    return data[: max(0, size)]


def append(data: bytes, extra: bytes) -> bytes:
    return data + extra


def splice(data: bytes, pos: int, chunk: bytes, *, insert: bool = False) -> bytes:
    pos = min(max(0, pos), len(data))
    return data[:pos] + chunk + data[pos + (0 if insert else len(chunk)):]


def npy_split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """Parse a .npy file into (header dict, data bytes) without numpy (tests build bad ones)."""
    import ast

    assert data[:6] == b"\x93NUMPY", "not an npy file"
    major = data[6]
    if major == 1:
        hlen = int.from_bytes(data[8:10], "little")
        start = 10
    else:
        hlen = int.from_bytes(data[8:12], "little")
        start = 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    return header, data[start + hlen:]


def npy_join(header: dict[str, Any] | str, body: bytes) -> bytes:
    """Build a v1.0 .npy file from a header (dict or raw text) and data bytes, 64-aligned."""
    text = header if isinstance(header, str) else repr(header)
    raw = text.encode("latin1")
    pad = (-(10 + len(raw) + 1)) % 64
    raw = raw + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + body


def npy_bytes(array: np.ndarray, **header_overrides: Any) -> bytes:
    """Serialize ``array`` as .npy, optionally lying in the header (descr, shape, fortran_order)."""
    header = {"descr": np.lib.format.dtype_to_descr(array.dtype),
              "fortran_order": False, "shape": tuple(array.shape)}
    header.update(header_overrides)
    return npy_join(header, np.ascontiguousarray(array).tobytes())


def read_header(ds: Path) -> dict[str, Any]:
    return json.loads((ds / "header.json").read_bytes())


def write_header(ds: Path, header: dict[str, Any] | bytes | str) -> None:
    if isinstance(header, dict):
        header = json.dumps(header, indent=1)
    if isinstance(header, str):
        header = header.encode()
    (ds / "header.json").write_bytes(header)


def reseal(ds: Path, *names: str) -> None:
    """Update header ``files`` size and xxh3 for ``names`` (default: all listed) so that a
    mutation reaches the deeper check it targets instead of FILE_SIZE / FILE_CHECKSUM."""
    import xxhash

    header = read_header(ds)
    files = header.get("files", {})
    for name in names or list(files):
        p = ds / name
        if not p.exists():
            continue
        data = p.read_bytes()
        files[name] = {"size": len(data), "xxh3_64": xxhash.xxh3_64_hexdigest(data)}
    header["files"] = files
    write_header(ds, header)


def load_npy(ds: Path, name: str) -> np.ndarray:
    return np.load(ds / name, allow_pickle=False)


def save_npy(ds: Path, name: str, array: np.ndarray, *, seal: bool = True) -> None:
    (ds / name).write_bytes(npy_bytes(array))
    if seal:
        reseal(ds, name)


def edit_npy(ds: Path, name: str, fn: Callable[[np.ndarray], np.ndarray | None], *,
             seal: bool = True) -> None:
    """Load ``name`` (writable copy), let ``fn`` modify or replace it, save it back."""
    arr = np.array(load_npy(ds, name))
    out = fn(arr)
    save_npy(ds, name, arr if out is None else out, seal=seal)


def mutate(ds: str | os.PathLike[str], file: str, op: str, *, seal: bool = False,
           **params: Any) -> None:
    """Apply one byte-level mutation ``op`` to ``ds/file`` in place.

    ops: bitflip(pos, bit) truncate(size) append(data) splice(pos, data, insert)
    set_int(field, value, index) (header key path "a.b" or index.npy field / npy shape dim).
    """
    p = Path(ds) / file
    data = p.read_bytes()
    if op == "bitflip":
        data = bitflip(data, params["pos"], params.get("bit", 0))
    elif op == "truncate":
        data = truncate(data, params["size"])
    elif op == "append":
        data = append(data, params.get("data", b"\0"))
    elif op == "splice":
        data = splice(data, params["pos"], params["data"], insert=params.get("insert", False))
    elif op == "set_int":
        data = set_int_field(file, data, params["field"], params["value"], params.get("index", 0))
    else:
        raise ValueError(f"unknown op {op}")
    p.write_bytes(data)
    if seal and file != "header.json":
        reseal(Path(ds), file)


def replace_payload(ds: Path, i: int, payload: bytes, **fields: int) -> None:
    """Put ``payload`` in place of sample ``i``'s bytes and repack images.bin: offsets, nbytes
    and checksums are recomputed (so layout and checksum checks pass and the payload itself is
    what gets tested); ``fields`` overrides other index fields (height, width, codec...)."""
    import xxhash

    index = np.array(load_npy(ds, "index.npy"))
    blob = (ds / "images.bin").read_bytes()
    payloads = [blob[int(r["offset"]):int(r["offset"]) + int(r["nbytes"])] for r in index]
    payloads[i] = payload
    out = bytearray()
    for k, data in enumerate(payloads):
        index[k]["offset"] = len(out)
        index[k]["nbytes"] = len(data)
        index[k]["checksum"] = xxhash.xxh3_64_intdigest(data)
        out += data
        out += b"\0" * (-len(out) % 64)
    for name, value in fields.items():
        index[i][name] = value
    (ds / "images.bin").write_bytes(bytes(out))
    save_npy(ds, "index.npy", index, seal=False)
    reseal(ds, "images.bin", "index.npy")


def payload_of(ds: Path, i: int) -> bytes:
    index = load_npy(ds, "index.npy")
    start, n = int(index[i]["offset"]), int(index[i]["nbytes"])
    with open(ds / "images.bin", "rb") as f:
        f.seek(start)
        return f.read(n)


INDEX_FIELDS = ("offset", "nbytes", "decoded_nbytes", "checksum", "height", "width",
                "channels", "codec", "flags", "reserved")


def set_int_field(file: str, data: bytes, fld: str, value: int, index: int = 0) -> bytes:
    """Set an integer somewhere meaningful in ``file``: a header key path (``files/images.bin/
    size``, list positions as numbers), a field of one index.npy record (value wrapped to the
    field's width, like a raw write), or a .npy shape dimension (``shape.K``)."""
    if file == "header.json":
        obj = json.loads(data)
        node: Any = obj
        keys = fld.split("/")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return json.dumps(obj).encode()
    header, body = npy_split(data)
    if fld.startswith("shape."):
        dim = int(fld.split(".")[1])
        shape = list(header["shape"])
        if shape:
            shape[dim % len(shape)] = value
        header["shape"] = tuple(shape)
        return npy_join(header, body)
    dtype = np.dtype(header["descr"])
    if dtype.names is None or fld not in dtype.names:
        raise KeyError(fld)
    n = len(body) // dtype.itemsize if dtype.itemsize else 0
    if n == 0:
        return data
    arr = np.frombuffer(body[: n * dtype.itemsize], dtype=dtype).copy()
    ftype = dtype.fields[fld][0]
    bits = ftype.itemsize * 8
    arr[fld][index % n] = int(value) % (1 << bits)  # two's complement wrap, like a raw write
    return npy_join(header, arr.tobytes() + body[n * dtype.itemsize:])


# ---------------------------------------------------------------------------------------------
# dataset content digest (run in the child on untrusted data)
# ---------------------------------------------------------------------------------------------


def _hash_value(h: Any, value: Any) -> None:
    if isinstance(value, np.ndarray):
        h.update(str(value.dtype).encode() + str(value.shape).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for k in sorted(value):
            h.update(str(k).encode())
            _hash_value(h, value[k])
    else:
        h.update(repr(value).encode())


def content_digest(path: str) -> str:
    """Open ``path`` and read every sample fully; hash images, labels and fields."""
    import detfmt

    h = hashlib.sha256()
    with detfmt.open(path) as ds:
        n = len(ds)
        h.update(str(n).encode())
        for i in range(n):
            s = ds[i]
            _hash_value(h, np.asarray(s.image))
            _hash_value(h, np.asarray(s.boxes))
            _hash_value(h, np.asarray(s.classes))
            _hash_value(h, dict(s.fields))
        if n:
            b = ds.batch(list(range(min(n, 4))))
            _hash_value(h, np.asarray(b.images))
            _hash_value(h, np.asarray(b.mask))
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# child operations (called by name inside the sandbox)
# ---------------------------------------------------------------------------------------------


def op_open(path: str) -> int:
    import detfmt

    with detfmt.open(path) as ds:
        return len(ds)


def op_open_iterate(path: str) -> str:
    return content_digest(path)


def op_verify(path: str) -> list[list[Any]]:
    """verify() without raising; violations as [rule, index] pairs."""
    import detfmt

    report = detfmt.verify(path, raise_on_error=False)
    return [[v.rule, v.index] for v in report.violations]


def _with_verify(result: dict[str, Any], path: Any) -> dict[str, Any]:
    """``result`` plus what ``detfmt.verify`` says of ``path`` (violations, or its typed error)."""
    import detfmt

    try:
        report = detfmt.verify(path, raise_on_error=False)
        result["violations"] = [[v.rule, v.index] for v in report.violations]
    except detfmt.DetfmtError as e:
        result["verify_error"] = [type(e).__name__, e.rule]
    return result


def op_check_all(path: str) -> dict[str, Any]:
    """The fuzz property in one call: open+iterate and verify, each outcome recorded.

    A DetfmtError in either is fine; what the caller checks is that nothing else escapes and
    that a dataset which verifies cleanly reads back as the original content."""
    import detfmt

    result: dict[str, Any] = {}
    try:
        result["digest"] = content_digest(path)
    except detfmt.DetfmtError as e:
        result["open_error"] = [type(e).__name__, e.rule]
    return _with_verify(result, path)


def op_flip_every_payload_byte(path: str) -> dict[str, Any]:
    """Flip each byte of each sample payload in turn (in place, restored afterwards) and run
    verify(); report any flip that is not a CHECKSUM violation naming that sample."""
    import detfmt

    ds_dir = Path(path)
    with detfmt.open(path) as ds:
        index = np.array(ds.index)
    blob = ds_dir / "images.bin"
    original = blob.read_bytes()
    misses: list[list[Any]] = []
    flips = 0
    try:
        with open(blob, "r+b") as f:
            for i, rec in enumerate(index):
                start, n = int(rec["offset"]), int(rec["nbytes"])
                for pos in range(start, start + n):
                    f.seek(pos)
                    f.write(bytes([original[pos] ^ 0xFF]))
                    f.flush()
                    flips += 1
                    report = detfmt.verify(path, raise_on_error=False)
                    named = {(v.rule, v.index) for v in report.violations}
                    if not any(idx == i for _, idx in named):
                        misses.append([i, pos, sorted(map(str, named))])
                    f.seek(pos)
                    f.write(original[pos:pos + 1])
                    f.flush()
    finally:
        blob.write_bytes(original)
    return {"flips": flips, "misses": misses[:20], "nmiss": len(misses)}


# ---------------------------------------------------------------------------------------------
# sandbox: one-shot and persistent children
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What happened in the child. ``kind``: ok | detfmt | exception | signal | timeout | died."""

    kind: str
    value: Any = None
    error: str | None = None
    rule: str | None = None
    path: str | None = None
    index: int | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def safe(self) -> bool:
        return self.kind in ("ok", "detfmt")

    def __str__(self) -> str:
        if self.kind == "ok":
            return f"ok({self.value!r})"
        if self.kind == "detfmt":
            return f"{self.error}[{self.rule}] path={self.path} index={self.index}: {self.detail}"
        return f"{self.kind}: {self.detail[-3000:]}"


def child_env(mem: int = MEM_LIMIT) -> dict[str, str]:
    env = dict(os.environ)
    env["RELHARNESS_MEM"] = str(mem)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONFAULTHANDLER="1")
    return env


def _apply_limits() -> None:
    """In the child, before anything is imported: cap the address space, no core dumps."""
    import faulthandler
    import resource

    faulthandler.enable()
    mem = int(os.environ.get("RELHARNESS_MEM", MEM_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _call(func: str, args: list[Any]) -> dict[str, Any]:
    """Run ``module:func(*args)`` and describe the outcome as JSON-able data."""
    import importlib

    try:
        import detfmt

        base = detfmt.DetfmtError
    except Exception:  # pragma: no cover - import failure is itself reported
        return {"kind": "exception", "detail": traceback.format_exc()}
    mod, _, name = func.rpartition(":")
    try:
        fn = getattr(importlib.import_module(mod or "relharness"), name)
        value = fn(*args)
        try:
            json.dumps(value)
        except TypeError:
            value = repr(value)
        return {"kind": "ok", "value": value}
    except base as e:
        return {"kind": "detfmt", "error": type(e).__name__, "rule": e.rule, "path": e.path,
                "index": e.index, "detail": str(e),
                "mro": [c.__name__ for c in type(e).__mro__],
                "cause": type(e.__cause__).__name__ if e.__cause__ else None}
    except MemoryError:
        return {"kind": "exception", "error": "MemoryError", "detail": traceback.format_exc()}
    except BaseException as e:
        return {"kind": "exception", "error": type(e).__name__, "detail": traceback.format_exc()}


def _outcome(d: dict[str, Any]) -> Outcome:
    extra = {k: d[k] for k in ("mro", "cause") if k in d}
    return Outcome(kind=d["kind"], value=d.get("value"), error=d.get("error"),
                   rule=d.get("rule"), path=d.get("path"), index=d.get("index"),
                   detail=d.get("detail", ""), extra=extra)


def _describe_exit(rc: int, stderr: str) -> Outcome:
    if rc < 0:
        return Outcome(kind="signal", detail=f"killed by {signal.Signals(-rc).name}\n{stderr}")
    return Outcome(kind="died", detail=f"exit status {rc}\n{stderr}")


def run_safe(func: str, *args: Any, timeout: float = TIMEOUT_S, mem: int = MEM_LIMIT) -> Outcome:
    """Run ``func`` ("module:name", default module relharness) in a fresh limited child."""
    cmd = [sys.executable, "-X", "faulthandler", str(HERE / "relharness.py"), "--once",
           json.dumps([func, list(args)])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=child_env(mem), start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Outcome(kind="timeout", detail=f"no answer in {timeout}s\n{err}")
    for line in reversed(out.splitlines()):
        if line.startswith("@@RESULT "):
            return _outcome(json.loads(line[9:]))
    return _describe_exit(proc.returncode, err)


class SafeWorker:
    """A persistent limited child that answers calls one by one (amortizes interpreter start).

    If the child dies or does not answer within the timeout, the call returns that outcome and
    the next call starts a fresh child."""

    def __init__(self, *, timeout: float = TIMEOUT_S, mem: int = MEM_LIMIT) -> None:
        self.timeout = timeout
        self.mem = mem
        self.proc: subprocess.Popen[bytes] | None = None
        self._err_path: Path | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        import tempfile

        fd, name = tempfile.mkstemp(prefix="relworker-", suffix=".err")
        self._err_path = Path(name)
        cmd = [sys.executable, "-X", "faulthandler", str(HERE / "relharness.py"), "--serve"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=fd, env=child_env(self.mem),
                                     start_new_session=True)
        os.close(fd)
        return self.proc

    def _stderr(self) -> str:
        if self._err_path and self._err_path.exists():
            return self._err_path.read_text(errors="replace")[-5000:]
        return ""

    def call(self, func: str, *args: Any) -> Outcome:
        proc = self.proc if self.proc and self.proc.poll() is None else self._start()
        assert proc.stdin and proc.stdout
        proc.stdin.write(json.dumps([func, list(args)]).encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + self.timeout
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return Outcome(kind="timeout", detail=f"no answer in {self.timeout}s")
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                rc = proc.wait()
                err = self._stderr()
                self.proc = None
                return _describe_exit(rc, err)
            buf += chunk
            if buf.endswith(b"\n"):
                return _outcome(json.loads(buf))

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._kill()
        self.proc = None
        if self._err_path:
            self._err_path.unlink(missing_ok=True)


def _serve() -> None:
    # answers go to a private copy of fd 1; anything the code under test prints goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    for line in sys.stdin.buffer:
        func, args = json.loads(line)
        out.write(json.dumps(_call(func, args)).encode() + b"\n")
        out.flush()


def _once(spec: str) -> None:
    func, args = json.loads(spec)
    result = _call(func, args)
    sys.stdout.write("\n@@RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# corpus (fuzz reproducers: a mutated dataset directory packed as .tar)
# ---------------------------------------------------------------------------------------------


def pack_dir(src: Path) -> bytes:
    """The regular files below ``src`` (a 1.0 dataset or a sharded root) as a deterministic
    gzipped tar (a corpus entry)."""
    import gzip

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for p in sorted(src.rglob("*"), key=lambda p: p.relative_to(src).parts):
            if p.is_file() and not p.is_symlink():
                info = tarfile.TarInfo(p.relative_to(src).as_posix())
                data = p.read_bytes()
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def unpack_dir(data: bytes, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for m in tar.getmembers():
            parts = m.name.split("/")
            if m.isfile() and all(part not in ("", ".", "..") for part in parts):
                f = tar.extractfile(m)
                assert f is not None
                (dst / m.name).parent.mkdir(parents=True, exist_ok=True)
                (dst / m.name).write_bytes(f.read())
    return dst


#: nightly fuzzing (tools/fuzz_nightly.py) sets this: findings of the mutation suites are kept
#: there as corpus entries; unset (CI), nothing is written
CORPUS_OUT_ENV = "DETFMT_FUZZ_CORPUS_OUT"


def save_finding(ds: Path, out: Path, prefix: str, note: dict[str, Any]) -> Path:
    """Keep the dataset ``ds`` that broke a fuzz property as ``<out>/<prefix>-<hash>.tar.gz``,
    with ``note`` (the problem, the mutations, ``original_digest`` when the dataset must read
    back as the original whenever it verifies) beside it as ``.json``; test_rel_corpus.py replays
    both. The same bytes found twice are kept once."""
    packed = pack_dir(ds)
    name = f"{prefix}-{hashlib.sha256(packed).hexdigest()[:16]}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.tar.gz"
    path.write_bytes(packed)
    (out / f"{name}.json").write_text(json.dumps(note, indent=1, default=_jsonable))
    return path


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, (bytes, bytearray)) else repr(value)


def iter_files(ds: Path) -> Iterable[str]:
    return sorted(p.name for p in ds.iterdir() if p.is_file())


def jitter(seed: int) -> random.Random:
    return random.Random(seed)


if __name__ == "__main__":
    _apply_limits()
    if sys.argv[1] == "--serve":
        _serve()
    elif sys.argv[1] == "--once":
        _once(sys.argv[2])


# ---------------------------------------------------------------------------------------------
# sharded (1.1) roots: builder, content digest and the child operation of the sharded suites
# ---------------------------------------------------------------------------------------------

# shards of the base sharded root: (codec, samples); raw and one compressed codec, an empty shard
SHARD_PLAN = (("raw", 3), ("zstd", 2), ("raw", 0), ("zstd", 3))


def build_sharded(root: str | os.PathLike[str], *, seed: int = 1,
                  plan: tuple[tuple[str, int], ...] = SHARD_PLAN, key_prefix: str = "",
                  write_id: str | None = None) -> Path:
    """A tiny valid sharded root: one ``write_shard`` per entry of ``plan``, then ``commit``."""
    from detfmt.shard.write import commit, write_shard

    metas = []
    for k, (codec, n) in enumerate(plan):
        samples = make_samples(n, seed * 100 + k, hi=20)
        metas.append(write_shard(samples, root, f"{key_prefix}{k:05d}", classes=CLASSES,
                                 codec=codec, box_fields={"iscrowd": "|u1"}))
    commit(root, metas, write_id=write_id or f"{seed:032x}")
    return Path(root)


def sharded_files(root: Path) -> list[str]:
    """Every file of a sharded root, relative POSIX paths (manifest.json first)."""
    files = sorted(str(p.relative_to(root)).replace(os.sep, "/") for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink())
    return sorted(files, key=lambda f: f != "manifest.json")


def sharded_digest(path: str, **options: Any) -> str:
    """Open a sharded root (``detfmt.open(path, **options)``), read every sample, one batch
    across all shards, and every batch of a shuffled ``plan()`` through ``iter_batches``; hash
    it all."""
    import detfmt

    h = hashlib.sha256()
    with detfmt.open(path, **options) as ds:
        n = len(ds)
        h.update(str(n).encode())
        h.update(repr(ds.class_names).encode())  # labels mean nothing without their names
        for i in range(n):
            s = ds[i]
            _hash_value(h, np.asarray(s.image))
            _hash_value(h, np.asarray(s.boxes))
            _hash_value(h, np.asarray(s.classes))
            _hash_value(h, dict(s.fields))
        if n:
            idx = list(range(n))[::-1]  # every shard in one batch, out of order
            b = ds.batch(idx)
            for arr in (b.images, b.sizes, b.boxes, b.classes, b.mask):
                _hash_value(h, np.asarray(arr))
            _hash_value(h, {k: np.asarray(v) for k, v in b.fields.items()})
            plan = ds.plan(seed=5, epoch=1, batch_size=3, shard_window=2, drop_last=False)
            for b in ds.iter_batches(plan):
                _hash_value(h, np.asarray(b.indices))
                _hash_value(h, np.asarray(b.images))
                _hash_value(h, np.asarray(b.boxes))
                _hash_value(h, np.asarray(b.mask))
    return h.hexdigest()


def op_sharded_iterate(path: str) -> str:
    return sharded_digest(path)


def op_check_sharded(path: str) -> dict[str, Any]:
    """The sharded fuzz property in one call (see ``op_check_all``): open + every sample + a
    cross-shard batch + plan/iter_batches, and ``detfmt.verify``, each outcome recorded."""
    import detfmt

    result: dict[str, Any] = {}
    try:
        result["digest"] = sharded_digest(path)
    except detfmt.DetfmtError as e:
        result["open_error"] = [type(e).__name__, e.rule]
    try:  # a trainer's first call: plan() sizes its arrays by the manifest's counts alone
        with detfmt.open(path) as ds:
            plan = ds.plan(seed=1, epoch=0, batch_size=2, world_size=2, rank=1, drop_last=False)
            next(iter(ds.iter_batches(plan)), None)
    except detfmt.DetfmtError as e:
        result["plan_error"] = [type(e).__name__, e.rule]
    return _with_verify(result, path)


def reseal_manifest(root: Path, *shards: str) -> None:
    """Set ``bytes`` and ``xxh3_64`` of the manifest entries of ``shards`` (all by default) to
    the files' current values, so that a damaged shard reaches the checks behind S-7."""
    import xxhash

    m = json.loads((root / "manifest.json").read_bytes())
    for entry in m.get("shards", []):
        p = root / entry["path"]
        if (shards and entry["path"] not in shards) or not p.is_file():
            continue
        data = p.read_bytes()
        entry["bytes"] = len(data)
        entry["xxh3_64"] = xxhash.xxh3_64_hexdigest(data)
    (root / "manifest.json").write_bytes(json.dumps(m, indent=1).encode())


def mutate_sharded(root: Path, file: str, op: str, **params: Any) -> None:
    """One mutation of a sharded root: the byte ops of ``mutate`` plus ``zero(pos, size)``,
    file ops ``delete``, ``swap(other)``, ``duplicate(other)`` (copy ``other`` over ``file``),
    ``set_json(path, value)`` in manifest.json, and ``set_count(shard, value)``: a shard's
    num_samples with first_index and the total adjusted so that S-5 still holds."""
    p = root / file
    if op == "delete":
        p.unlink()
    elif op == "swap":
        q = root / params["other"]
        tmp = p.with_name(p.name + ".swap")
        os.replace(p, tmp)
        os.replace(q, p)
        os.replace(tmp, q)
    elif op == "duplicate":
        shutil.copyfile(root / params["other"], p)
    elif op == "zero":
        data = bytearray(p.read_bytes())
        pos = min(params["pos"], len(data))
        end = min(len(data), pos + params["size"])
        data[pos:end] = bytes(end - pos)
        p.write_bytes(bytes(data))
    elif op == "set_u32":  # the shard prefix's pack version (8) or TOC length (12)
        data = bytearray(p.read_bytes())
        data[params["pos"]:params["pos"] + 4] = (params["value"] % 2**32).to_bytes(4, "little")
        p.write_bytes(bytes(data))
    elif op == "set_toc":  # one field of one TOC member, the TOC kept at its length if it fits
        data = p.read_bytes()
        t = int.from_bytes(data[12:16], "little")
        toc = json.loads(data[16:16 + t])
        members = toc["members"]
        members[params["index"] % len(members)][params["field"]] = params["value"]
        blob = json.dumps(toc, separators=(",", ":")).encode()
        if len(blob) <= t:
            blob = blob + b" " * (t - len(blob))
        p.write_bytes(data[:12] + len(blob).to_bytes(4, "little") + blob + data[16 + t:])
    elif op == "set_json":
        from relstrategies import set_json_path

        m = json.loads(p.read_bytes())
        set_json_path(m, params["path"], params["value"])
        p.write_bytes(json.dumps(m).encode())
    elif op == "set_count":
        m = json.loads(p.read_bytes())
        shards = m["shards"]
        k = params["shard"] % len(shards)
        shards[k]["num_samples"] = params["value"]
        first = 0
        for s in shards:
            s["first_index"] = first
            first += s["num_samples"]
        m["num_samples"] = first
        p.write_bytes(json.dumps(m).encode())
    else:
        mutate(root, file, op, **params)
    if params.get("reseal") and file != "manifest.json" and (root / "manifest.json").exists():
        reseal_manifest(root)

