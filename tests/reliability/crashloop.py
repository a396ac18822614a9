"""kill -9 loop and concurrent-writer driver.

A child process writes a ~1.5 MB dataset (raw, one small write per sample) while the parent
SIGKILLs it at a random moment. The writer's renames, exchanges and deletes are slowed down in
the child (``--slow``) so that a switch made of two steps (move the old dataset away, then move
the new one in) leaves a window wide enough for the kill, and for an observer thread polling the
path, to land in. Afterwards the target must be absent (fresh write) or hold the old dataset,
verifying, or the new one, complete; never anything else.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import relharness

SLOW_WORDS = ("rename", "exchange", "replace", "rmtree", "unlink", "remove", "fsync_dir")
N_SAMPLES = 32
SIDE = 64  # 32 x 64x64x3 = 0.4 MB of raw pixels, one write per sample


def _slowed(fn: Any, delay: float) -> Any:
    """``fn`` sleeping ``delay`` before and after the real call (widens the kill windows)."""
    import functools

    @functools.wraps(fn)
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay)
        try:
            return fn(*args, **kwargs)
        finally:
            time.sleep(delay)

    return slow


def slow_down_io(delay: float) -> list[str]:
    """Wrap every function of detfmt.fileio whose name says it moves or deletes things so it sleeps
    ``delay`` before and after the real call; returns the wrapped names."""
    from detfmt import fileio

    wrapped = []
    for name in dir(fileio):
        fn = getattr(fileio, name)
        if name.startswith("_") or not callable(fn) or isinstance(fn, type):
            continue
        if not any(w in name for w in SLOW_WORDS):
            continue

        setattr(fileio, name, _slowed(fn, delay))
        wrapped.append(name)
    return wrapped


def child_write(target: str, seed: int, overwrite: bool, delay: float,
                nonatomic: bool = False) -> int:
    """Writer side: slow the I/O down, write, report the outcome as one JSON line on stdout.

    ``nonatomic`` (the loop's self-test) takes RENAME_EXCHANGE away, so the writer falls back to
    two renames: the loop must catch the moment the path does not exist."""
    import detfmt

    samples = relharness.make_samples(N_SAMPLES, seed, lo=SIDE, hi=SIDE)
    if nonatomic:
        import errno

        from detfmt import fileio

        def no_exchange(source: str, target: str) -> None:
            raise OSError(errno.ENOSYS, "no RENAME_EXCHANGE (test)")

        fileio.rename_exchange = no_exchange
    if delay > 0:
        slow_down_io(delay)
    try:
        detfmt.write(samples, target, classes=relharness.CLASSES, codec="raw",
                     overwrite=overwrite, box_fields={"iscrowd": "|u1"}, progress=False)
    except detfmt.DetfmtError as e:
        print(json.dumps({"error": type(e).__name__, "rule": e.rule, "msg": str(e)}), flush=True)
        return 3
    print(json.dumps({"ok": True}), flush=True)
    return 0


def slow_down_os(delay: float) -> None:
    """In a writer child: make ``os.replace`` and ``os.fsync`` (what write_shard and commit use
    to publish a shard file or the manifest) sleep ``delay`` before and after the real call."""

    for name in ("replace", "fsync"):
        setattr(os, name, _slowed(getattr(os, name), delay))


def shard_generation(seed: int) -> dict[str, Any]:
    """Options of generation ``seed`` of the sharded kill loop: its own keys and write id (a
    new generation never reuses a published shard's key, see docs/reliability.md)."""
    return {"seed": seed, "key_prefix": f"g{seed}-", "write_id": f"{seed:032x}",
            "plan": (("raw", 3), ("zstd", 2), ("raw", 3))}


def child_shard_write(root: str, seed: int, delay: float) -> int:
    """Writer side of the sharded loop: write_shard per shard, then commit, with replace and
    fsync slowed down; prints a ``phase`` line before the commit and the outcome at the end."""
    import detfmt
    from detfmt.shard.write import commit, write_shard

    gen = shard_generation(seed)
    if delay > 0:
        slow_down_os(delay)
    t0 = time.monotonic()
    try:
        metas = []
        for k, (codec, n) in enumerate(gen["plan"]):
            samples = relharness.make_samples(n, seed * 100 + k, hi=20)
            metas.append(write_shard(samples, root, f"{gen['key_prefix']}{k:05d}",
                                     classes=relharness.CLASSES, codec=codec,
                                     box_fields={"iscrowd": "|u1"}))
        t1 = time.monotonic()
        print(json.dumps({"phase": "commit", "t_shards": t1 - t0}), flush=True)
        commit(root, metas, write_id=gen["write_id"])
    except detfmt.DetfmtError as e:
        print(json.dumps({"error": type(e).__name__, "rule": e.rule, "msg": str(e)}), flush=True)
        return 3
    print(json.dumps({"ok": True, "t_shards": t1 - t0, "t_commit": time.monotonic() - t1}),
          flush=True)
    return 0


def build_generation(root: Path, seed: int) -> Path:
    """The committed root a generation's writer produces, built in this process."""
    gen = shard_generation(seed)
    return relharness.build_sharded(root, seed=seed, plan=gen["plan"],
                                    key_prefix=gen["key_prefix"], write_id=gen["write_id"])


def zygote_main() -> None:
    """A process that imported detfmt once and forks one writer per request (a fresh
    interpreter per kill would cost a second each). Requests and answers are JSON lines."""
    import detfmt  # noqa: F401 - the point is to import it before forking

    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "spawn":
            pid = os.fork()
            if pid == 0:  # the writer
                rc = 1
                try:
                    fd = os.open(req["result"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(fd, 1)
                    sys.stdout = os.fdopen(1, "w")
                    if req.get("kind") == "sharded":
                        rc = child_shard_write(req["target"], req["seed"], req["delay"])
                    else:
                        rc = child_write(req["target"], req["seed"], req["overwrite"],
                                         req["delay"], req.get("nonatomic", False))
                finally:
                    os._exit(rc)
            out.write(json.dumps({"pid": pid}) + "\n")
        else:  # wait
            _, status = os.waitpid(req["pid"], 0)
            rc = os.waitstatus_to_exitcode(status)
            out.write(json.dumps({"rc": rc}) + "\n")
        out.flush()


class Zygote:
    """Client of ``zygote_main``: spawn writers, kill them, collect their outcome."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__)), "--zygote"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=relharness.child_env(), start_new_session=True)

    def _ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the zygote died")
        return json.loads(line)

    def spawn(self, target: Path, seed: int, *, overwrite: bool, delay: float,
              nonatomic: bool = False) -> Writer:
        self.count += 1
        result = self.root / f"writer-{self.count}.out"
        pid = self._ask({"cmd": "spawn", "target": str(target), "seed": seed,
                         "overwrite": overwrite, "delay": delay, "result": str(result),
                         "nonatomic": nonatomic})["pid"]
        return Writer(self, pid, result)

    def spawn_sharded(self, root: Path, seed: int, *, delay: float) -> Writer:
        """A writer of generation ``seed`` of a sharded root (see ``child_shard_write``)."""
        self.count += 1
        result = self.root / f"writer-{self.count}.out"
        pid = self._ask({"cmd": "spawn", "kind": "sharded", "target": str(root), "seed": seed,
                         "overwrite": False, "delay": delay, "result": str(result)})["pid"]
        return Writer(self, pid, result)

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Writer:
    zygote: Zygote
    pid: int
    result: Path
    rc: int | None = None

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def alive(self) -> bool:
        """Still running (not yet exited or killed): /proc/<pid>/stat state is not Z."""
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")

    def wait(self) -> dict[str, Any]:
        if self.rc is None:
            self.rc = self.zygote._ask({"cmd": "wait", "pid": self.pid})["rc"]
        text = self.result.read_text() if self.result.exists() else ""
        lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
        out = dict(lines[-1]) if lines else {}
        out["rc"] = self.rc
        return out


class Observer(threading.Thread):
    """Polls a path while a writer runs; counts the moments it did not exist."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()
        self.polls = 0
        self.missing = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.polls += 1
            if not os.path.lexists(self.path):
                self.missing += 1
            time.sleep(0.0002)


@dataclass
class LoopReport:
    iterations: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        states = Counter(f"{it['mode']}:{it['state']}" for it in self.iterations)
        return {"iterations": len(self.iterations), "states": dict(states),
                "killed": sum(it["killed"] for it in self.iterations),
                "temps_left": sum(it["temps"] for it in self.iterations),
                "observer_polls": sum(it.get("polls", 0) for it in self.iterations),
                "problems": self.problems[:10]}


def classify(target: Path, worker: relharness.SafeWorker, digests: dict[str, str]) -> str:
    """absent | old | new | or a description of what is wrong (opened in the sandbox)."""
    if not os.path.lexists(target):
        return "absent"
    return _verified_version(target, worker, digests, "op_open_iterate")


def _verified_version(target: Path, worker: relharness.SafeWorker, digests: dict[str, str],
                      iterate: str) -> str:
    """The name of the digest ``target`` verifies and reads back as, or what is wrong."""
    verify = worker.call("op_verify", str(target))
    if verify.kind != "ok" or verify.value:
        return f"BAD verify: {verify}"
    content = worker.call(iterate, str(target))
    if content.kind != "ok":
        return f"BAD open: {content}"
    for name, digest in digests.items():
        if content.value == digest:
            return name
    return "BAD content: neither old nor new"


def cleanup(parent: Path) -> None:
    import detfmt

    detfmt.cleanup(parent)


def calibrate(root: Path, zygote: Zygote, worker: relharness.SafeWorker, delay: float,
              nonatomic: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """Write the old and the new dataset once, then time a full fresh write and a full
    overwrite (the first spawn also pays for the zygote's start, so it is not timed)."""
    import shutil

    digests = {}
    for name, seed in (("old", 1), ("new", 2)):
        target = root / f"calib-{name}"
        res = zygote.spawn(target, seed, overwrite=False, delay=delay).wait()
        if res["rc"] != 0:
            raise RuntimeError(f"calibration write failed: {res}")
        out = worker.call("op_open_iterate", str(target))
        assert out.kind == "ok", str(out)
        digests[name] = out.value
    times = {}
    for mode in ("fresh", "overwrite"):
        target = root / f"calib-{mode}"
        if mode == "overwrite":
            shutil.copytree(root / "calib-old", target)
        t0 = time.monotonic()
        res = zygote.spawn(target, 2, overwrite=mode == "overwrite", delay=delay,
                           nonatomic=nonatomic).wait()
        times[mode] = time.monotonic() - t0
        if res["rc"] != 0:
            raise RuntimeError(f"calibration write failed: {res}")
    return times, {"digests": digests, "old_path": root / "calib-old"}


def kill_loop(root: Path, iterations: int = 50, *, seed: int = 0, delay: float = 0.02,
              worker: relharness.SafeWorker | None = None, nonatomic: bool = False,
              modes: tuple[str, ...] = ("fresh", "overwrite"),
              kill_window: tuple[float, float] = (0.0, 1.1)) -> LoopReport:
    """The kill -9 loop; iterations alternate between ``modes`` (by default half of them
    overwrite an existing, old dataset). Kill times are uniform in ``kill_window`` times the
    duration of a full write. ``nonatomic`` is the self-test (see child_write)."""
    import shutil

    own = worker is None
    worker = worker or relharness.SafeWorker(timeout=30)
    rng = random.Random(seed)
    report = LoopReport()
    zygote = Zygote(root)
    try:
        t_full, cal = calibrate(root, zygote, worker, delay, nonatomic)
        digests = cal["digests"]
        parent = root / "loop"
        parent.mkdir()
        target = parent / "ds"
        for i in range(iterations):
            mode = modes[i % len(modes)]
            if os.path.lexists(target):
                shutil.rmtree(target)
            if mode == "overwrite":
                shutil.copytree(cal["old_path"], target)
            observer = Observer(target) if mode == "overwrite" else None
            if observer:
                observer.start()
            writer = zygote.spawn(target, 2, overwrite=mode == "overwrite", delay=delay,
                                  nonatomic=nonatomic)
            kill_at = rng.uniform(*kill_window) * t_full[mode]
            time.sleep(kill_at)
            killed = writer.alive()
            if killed:
                writer.kill()
            res = writer.wait()
            if observer:
                observer.stop.set()
                observer.join()
            if not killed and res["rc"] != 0:
                report.problems.append(f"iteration {i}: writer failed on its own: {res}")
            state = classify(target, worker, digests)
            allowed = {"fresh": {"absent", "new"}, "overwrite": {"old", "new"}}[mode]
            if state not in allowed:
                report.problems.append(f"iteration {i} ({mode}, kill at {kill_at:.3f}s): {state}")
            if observer and observer.missing:
                report.problems.append(f"iteration {i}: path missing in {observer.missing} of "
                                       f"{observer.polls} polls during the overwrite")
            temps = len(relharness.temp_leftovers(parent))
            cleanup(parent)
            if relharness.temp_leftovers(parent):
                report.problems.append(f"iteration {i}: cleanup left "
                                       f"{relharness.temp_leftovers(parent)}")
            after = classify(target, worker, digests)
            if after != state:
                report.problems.append(f"iteration {i}: cleanup changed the target: {after}")
            report.iterations.append({"mode": mode, "kill_at": round(kill_at, 4),
                                      "killed": killed, "state": state, "temps": temps,
                                      "polls": observer.polls if observer else 0})
    finally:
        zygote.close()
        if own:
            worker.close()
    return report


def race(root: Path, rounds: int = 4, *, overwrite: bool, delay: float = 0.02,
         worker: relharness.SafeWorker | None = None) -> LoopReport:
    """Two writers (seeds 2 and 3) start together on one path. Without overwrite exactly one
    must win; with overwrite, one wins and the other gets TARGET_LOCKED, or they serialize.
    The result is always exactly one writer's complete dataset."""
    import shutil

    own = worker is None
    worker = worker or relharness.SafeWorker(timeout=30)
    report = LoopReport()
    zygote = Zygote(root)
    try:
        digests = {}
        for name, s in (("A", 2), ("B", 3)):
            p = root / f"race-calib-{name}"
            res = zygote.spawn(p, s, overwrite=False, delay=0).wait()
            assert res["rc"] == 0, res
            digests[name] = worker.call("op_open_iterate", str(p)).value
        parent = root / ("race-ow" if overwrite else "race")
        parent.mkdir()
        for r in range(rounds):
            target = parent / f"ds{r}"
            if overwrite:
                shutil.copytree(root / "race-calib-A", target)
            writers = [zygote.spawn(target, s, overwrite=overwrite, delay=delay) for s in (2, 3)]
            results = [w.wait() for w in writers]
            winners = [i for i, res in enumerate(results) if res["rc"] == 0]
            losers = [res for res in results if res["rc"] != 0]
            state = classify(target, worker, digests)
            bad_loser = [x for x in losers
                         if x.get("rule") not in ("TARGET_EXISTS", "TARGET_LOCKED")]
            if bad_loser:
                report.problems.append(f"round {r}: loser without a typed error: {bad_loser}")
            if not overwrite and len(winners) != 1:
                report.problems.append(f"round {r}: {len(winners)} winners: {results}")
            if not winners:
                report.problems.append(f"round {r}: nobody won: {results}")
            elif len(winners) == 1 and state != "AB"[winners[0]]:
                report.problems.append(f"round {r}: winner {'AB'[winners[0]]} but target {state}")
            elif state not in ("A", "B"):
                report.problems.append(f"round {r}: target is {state}")
            if relharness.temp_leftovers(parent):
                report.problems.append(f"round {r}: temporaries left after both writers ended")
            report.iterations.append({"mode": "race-ow" if overwrite else "race",
                                      "state": state, "killed": False, "temps": 0,
                                      "winners": len(winners),
                                      "loser_rules": [x.get("rule") for x in losers]})
    finally:
        zygote.close()
        if own:
            worker.close()
    return report


def classify_sharded(root: Path, worker: relharness.SafeWorker, digests: dict[str, str]
                     ) -> str:
    """absent (no manifest, and the root does not open) | old | new | what is wrong."""
    if not os.path.lexists(root / "manifest.json"):
        out = worker.call("op_sharded_iterate", str(root))
        return "absent" if out.kind == "detfmt" else f"BAD no manifest but open gave {out}"
    return _verified_version(root, worker, digests, "op_sharded_iterate")


def wait_for_phase(writer: Writer, phase: str, timeout: float = 20.0) -> bool:
    """Poll the writer's output until it prints ``{"phase": phase}`` or ends."""
    deadline = time.monotonic() + timeout
    needle = f'"phase": "{phase}"'
    while time.monotonic() < deadline and writer.alive():
        if writer.result.exists() and needle in writer.result.read_text():
            return True
        time.sleep(0.001)
    return False


def shard_kill_loop(root: Path, iterations: int = 30, *, seed: int = 0, delay: float = 0.01,
                    worker: relharness.SafeWorker | None = None) -> LoopReport:
    """SIGKILL a sharded writer (write_shard x3, then commit) at random moments.

    Iterations alternate between a fresh root and an update of a root holding a committed
    older generation (seed 1; the writer writes generation 2 with its own keys); every second
    iteration of each kind kills during the commit (after the writer announced it), the others
    at a uniform time over the whole write. Afterwards the root must be: fresh -> no manifest
    and not openable (typed error), or the new generation, verifying; update -> the old or the
    new generation, verifying, never a manifest naming a missing or partial shard. ``detfmt
    gc`` (grace 0) must then leave the state as it was."""
    import shutil

    from detfmt.shard.write import gc

    own = worker is None
    worker = worker or relharness.SafeWorker(timeout=30)
    rng = random.Random(seed)
    report = LoopReport()
    zygote = Zygote(root)
    try:
        digests = {}
        for name, s in (("old", 1), ("new", 2)):
            ref = build_generation(root / f"ref-{name}", s)
            out = worker.call("op_sharded_iterate", str(ref))
            assert out.kind == "ok", str(out)
            digests[name] = out.value
        calib = root / "calib"
        shutil.copytree(root / "ref-old", calib)
        zygote.spawn_sharded(calib, 2, delay=delay).wait()  # pays for the zygote's start
        shutil.rmtree(calib)
        shutil.copytree(root / "ref-old", calib)
        t0 = time.monotonic()
        res = zygote.spawn_sharded(calib, 2, delay=delay).wait()
        t_full = time.monotonic() - t0
        if res["rc"] != 0 or classify_sharded(calib, worker, digests) != "new":
            raise RuntimeError(f"calibration write failed: {res}")
        t_commit = res["t_commit"]
        target = root / "loop"
        for i in range(iterations):
            mode = ("fresh", "update")[i % 2]
            phase = ("any", "commit")[(i // 2) % 2]
            if os.path.lexists(target):
                shutil.rmtree(target)
            if mode == "update":
                shutil.copytree(root / "ref-old", target)
            else:
                target.mkdir()
            writer = zygote.spawn_sharded(target, 2, delay=delay)
            if phase == "commit":
                wait_for_phase(writer, "commit")
                kill_at = rng.uniform(0.0, 1.3) * t_commit
            else:
                kill_at = rng.uniform(0.0, 1.1) * t_full
            time.sleep(kill_at)
            killed = writer.alive()
            if killed:
                writer.kill()
            res = writer.wait()
            if not killed and res["rc"] != 0:
                report.problems.append(f"iteration {i}: writer failed on its own: {res}")
            state = classify_sharded(target, worker, digests)
            allowed = {"fresh": {"absent", "new"}, "update": {"old", "new"}}[mode]
            if state not in allowed:
                report.problems.append(f"iteration {i} ({mode}, {phase}, kill at "
                                       f"{kill_at:.3f}s): {state}")
            temps = sum(1 for p in target.rglob("*") if p.name.startswith((".tmp-", ".manifest.")))
            try:
                gc(target, grace_seconds=0)
            except Exception as e:  # a gc that cannot read the root is a finding, unless the
                # writer died before it created anything: an empty directory is no root to clean
                if any(target.iterdir()) or getattr(e, "rule", None) != "NOT_DETFMT":
                    report.problems.append(f"iteration {i}: gc failed: {e!r}")
            after = classify_sharded(target, worker, digests)
            if after != state:
                report.problems.append(f"iteration {i}: gc changed the root: {state} -> {after}")
            report.iterations.append({"mode": f"{mode}-{phase}", "kill_at": round(kill_at, 4),
                                      "killed": killed, "state": state, "temps": temps})
    finally:
        zygote.close()
        if own:
            worker.close()
    return report


def main() -> None:
    if sys.argv[1] == "--zygote":
        zygote_main()


if __name__ == "__main__":
    main()
