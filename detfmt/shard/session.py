"""Write sessions of a sharded root: a lease that keeps `gc` away from a write in progress, and
the manifest generation the write started from (what its commit compares and swaps).

A *lease* is a small file ``.detfmt-lease-<token>.json`` in the root naming its writer (host,
boot, PID namespace, PID and start time). A thread of the writer rewrites its mtime every
``ttl / 4`` seconds; `gc` collects nothing unlisted while a live lease exists. A lease is dead
when its writer is gone: on the same host, the process no longer exists (checked at once, no
timer); elsewhere, its mtime is older than its ``ttl``, or more than its ``ttl`` in the future
(a wrong clock or a restored archive, never a heartbeat). So a slow write is never collected,
however long it takes, and a killed one does not block gc for long.

``write_shard`` joins the session of its root in this process, or starts an implicit one that
the process's next successful `commit` to that root closes. Processes forked from a session's
owner join it without a lease of their own (the owner keeps it fresh); engines whose tasks are
not forked (Ray) pass the session on with `adopt`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec

from detfmt import errors
from detfmt.format.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES
from detfmt.storage import Storage, StoredEntry, open_storage

__all__ = [
    "DEFAULT_LEASE_TTL",
    "LEASE_PATTERN",
    "Lease",
    "WriteSession",
    "adopt",
    "begin_write",
    "current_session",
    "end_write",
    "lease_is_live",
    "lease_state",
    "remove_dead_leases",
]

DEFAULT_LEASE_TTL = 600.0
MAX_LEASE_TTL = 86400.0
LEASE_PATTERN = re.compile(r"\.detfmt-lease-([0-9a-f]{32})\.json\Z")
_MAX_LEASE_BYTES = 4096


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a lease file holds: who writes, and how long a silent lease stays valid."""

    token: str
    host: str
    boot_id: str = ""
    pid_ns: str = ""
    pid: int
    start: int | None = None
    ttl: float = DEFAULT_LEASE_TTL
    created: float = 0.0


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return ""


def _boot_id() -> str:
    return _read_text("/proc/sys/kernel/random/boot_id")


def _pid_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused PID apart)."""
    text = _read_text(f"/proc/{pid}/stat")
    try:
        return int(text.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _process_alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    if start is not None:
        now = _process_start(pid)
        if now is not None and now != start:
            return False  # the PID was reused by another process
    return True


def lease_name(token: str) -> str:
    return f".detfmt-lease-{token}.json"


class Lease:
    """A live writer's marker in the root, refreshed by a daemon thread until `release`."""

    def __init__(self, storage: Storage, ttl: float = DEFAULT_LEASE_TTL) -> None:
        self.storage = storage
        self.ttl = float(ttl)
        self.token = uuid.uuid4().hex
        self.rel = lease_name(self.token)
        record = LeaseRecord(token=self.token, host=socket.gethostname(), boot_id=_boot_id(),
                             pid_ns=_pid_ns(), pid=os.getpid(),
                             start=_process_start(os.getpid()), ttl=self.ttl, created=time.time())
        self._data = msgspec.json.encode(record)
        try:
            storage.put_bytes(self._data, self.rel, durable=False)
        except errors.DetfmtError:
            raise
        except Exception as error:  # OSError, or a read-only back end's NotImplementedError
            raise errors.WriteError(
                f"cannot write the write lease ({type(error).__name__}: {str(error)[:200]}); "
                "is the root writable?",
                path=storage.where(self.rel), errno=getattr(error, "errno", None)) from error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="detfmt-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            with contextlib.suppress(Exception):  # a missed beat is retried; ttl covers three
                self.storage.refresh(self.rel, self._data)

    def release(self) -> None:
        """Stop refreshing and remove the lease (best effort: a leftover one dies by itself)."""
        if self._stop.is_set():
            return
        self._stop.set()
        with contextlib.suppress(Exception):
            self.storage.delete(self.rel)


def lease_is_live(storage: Storage, entry: StoredEntry, now: float | None = None) -> bool:
    """True while the lease's writer may still be writing (see the module docstring)."""
    return lease_state(storage, entry, now) == "live"


def lease_state(storage: Storage, entry: StoredEntry, now: float | None = None) -> str:
    """``"live"``, ``"dead"`` (its writer is gone or silent for its ttl) or ``"future"``: a lease
    of another host dated more than its ttl ahead of this clock. No heartbeat makes that (the
    clocks of hosts sharing a root agree within a ttl); a wrong clock or a restored archive
    does, and it would keep `gc` away for years, so it counts as dead."""
    now = time.time() if now is None else now
    try:
        record = msgspec.json.decode(storage.read(entry.rel, _MAX_LEASE_BYTES), type=LeaseRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        record = None  # unreadable: judged by its age alone
    ttl = DEFAULT_LEASE_TTL if record is None else min(max(record.ttl, 1.0), MAX_LEASE_TTL)
    if (record is not None and record.host == socket.gethostname() and record.boot_id
            and record.boot_id == _boot_id() and record.pid_ns == _pid_ns()):
        return "live" if _process_alive(record.pid, record.start) else "dead"
    age = now - entry.mtime
    if age < -ttl:
        return "future"
    return "dead" if age >= ttl else "live"  # an unknown mtime (nan) counts as live


def remove_dead_leases(storage: Storage) -> list[str]:
    """Delete the leases whose writers are gone (e.g. pool workers that ended without running
    exit handlers); returns their paths. Best effort: a lease that cannot be read or removed
    stays for `gc`."""
    removed = []
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in storage.list_dir(""):
            if entry.is_file and LEASE_PATTERN.match(entry.rel) and not lease_is_live(
                    storage, entry, now):
                with contextlib.suppress(OSError):
                    storage.delete(entry.rel)
                    removed.append(storage.where(entry.rel))
    return removed


class WriteSession:
    """One write to a sharded root: its base generation and (if it owns one) its lease.

    ``base`` is the generation of the manifest when the write began (None: no manifest);
    `commit` publishes only if the root still has it, so a commit never drops the shards of
    another commit it did not see."""

    def __init__(self, storage: Storage, base: str | None, lease: Lease | None, *,
                 implicit: bool) -> None:
        self.storage = storage
        self.base = base
        self.lease = lease
        self.implicit = implicit
        self.pid = os.getpid()
        self.closed = False

    @property
    def token(self) -> str | None:
        return self.lease.token if self.lease is not None else None

    def committed(self, generation: str) -> None:
        """After a successful commit: the new manifest is the base; an implicit session ends."""
        self.base = generation
        if self.implicit:
            self.close()

    def close(self) -> None:
        """Release the lease and forget the session (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self.lease is not None and self.pid == os.getpid():
            self.lease.release()
        with _registry_lock:
            key = _key(self.storage)
            if _registry.get(key) is self:
                del _registry[key]

    def __enter__(self) -> WriteSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state(self) -> dict[str, Any]:
        """What another process needs to `adopt` this session (picklable)."""
        return {"url": self.storage.url, "base": self.base, "token": self.token}


_registry: dict[str, WriteSession] = {}
_registry_lock = threading.Lock()


def _key(storage: Storage) -> str:
    local = storage.local_path("")
    return os.path.realpath(local) if local is not None else storage.url.rstrip("/")


def _current_generation(storage: Storage) -> str | None:
    return storage.read_generation(MANIFEST_NAME, MAX_MANIFEST_BYTES)[1]


def current_session(storage: Storage) -> WriteSession | None:
    """This process's open session for the root, if any."""
    with _registry_lock:
        session = _registry.get(_key(storage))
    return None if session is None or session.closed else session


_READ_NOW: Any = object()


def begin_write(root: str | os.PathLike[str] | Storage, *,
                storage_options: dict[str, Any] | None = None,
                lease_ttl: float = DEFAULT_LEASE_TTL, implicit: bool = False,
                base: str | Any | None = _READ_NOW) -> WriteSession:
    """Start a write: take a lease and note the base generation (a context manager).

    Shards written by this process (and processes it forks) while the session is open are
    protected from `gc`; `commit` to the root compares against the session's base (by
    default the root's generation now; pass the one of a manifest already read)."""
    storage = root if isinstance(root, Storage) else open_storage(root, storage_options)
    if base is _READ_NOW:
        base = _current_generation(storage)
    session = WriteSession(storage, base, Lease(storage, lease_ttl), implicit=implicit)
    with _registry_lock:
        old = _registry.get(_key(storage))
        _registry[_key(storage)] = session
    if old is not None and old is not session:
        old.close()
    return session


def end_write(root: str | os.PathLike[str] | Storage, *,
              storage_options: dict[str, Any] | None = None) -> None:
    """End this process's write session of the root without committing (release its lease):
    what it wrote and did not commit becomes garbage for `gc`."""
    storage = root if isinstance(root, Storage) else open_storage(root, storage_options)
    session = current_session(storage)
    if session is not None:
        session.close()


def ensure_session(storage: Storage) -> WriteSession:
    """The session ``write_shard`` joins: the open one, or a new implicit one."""
    return current_session(storage) or begin_write(storage, implicit=True)


@contextlib.contextmanager
def adopt(state: dict[str, Any], storage: Storage) -> Iterator[WriteSession]:
    """Join another process's session (its owner keeps the lease) for the duration."""
    session = WriteSession(storage, state.get("base"), None, implicit=False)
    key = _key(storage)
    with _registry_lock:
        previous = _registry.get(key)
        _registry[key] = session
    try:
        yield session
    finally:
        with _registry_lock:
            if _registry.get(key) is session:
                if previous is None:
                    del _registry[key]
                else:
                    _registry[key] = previous


def _after_fork_in_child() -> None:
    """A forked child joins its parent's sessions; the parent keeps their leases fresh."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for key, session in list(_registry.items()):
        _registry[key] = WriteSession(session.storage, session.base, None, implicit=False)


def _release_all() -> None:
    for session in list(_registry.values()):
        with contextlib.suppress(Exception):
            session.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_release_all)
