"""Long-running fuzzer for detfmt.open / iteration / verify (nightly, not CI).

Each input picks one of four tiny valid seed datasets (raw, zstd, png, jpeg) and a few mutations
(bit flip, truncate, append, splice, extreme integer in the header, in an index record or in a
.npy shape) decoded from the fuzzer's bytes. The mutated dataset is opened, every sample is read
and batched, and ``verify()`` runs. A finding is any exception other than DetfmtError, or a
dataset that verifies cleanly but reads back differently from its seed; crashes, hangs and memory
blow-ups are caught by libFuzzer's ``-timeout`` / ``-rss_limit_mb``. Each finding is saved as the
mutated dataset packed as ``.tar.gz`` in ``--corpus-out`` (default tests/corpus/), which CI replays.

    python tools/fuzz_open.py --seconds 600                 # atheris if installed
    python tools/fuzz_open.py --seconds 600 --engine hypothesis
    python tools/fuzz_open.py --replay crash-XXXX          # re-run one libFuzzer input
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "reliability"))
sys.path.insert(0, str(REPO))

import relharness  # noqa: E402

MISFIT = (KeyError, ValueError, AssertionError, SyntaxError, IndexError, TypeError,
          ZeroDivisionError)
OPS = ("bitflip", "truncate", "append", "splice", "set_int", "zero_fill")
EXTREMES = (-1, 0, 1, 64, 2**31 - 1, 2**32, 2**63 - 1, 2**64 - 1)
HEADER_KEYS = ("num_samples", "max_boxes", "image/max_side", "files/images.bin/size",
               "arrays/boxes.npy/shape/0", "arrays/index.npy/shape/0")


class Finding(Exception):
    """The property failed: the input is a reproducer."""


class State:
    """Seeds, scratch directory and counters of one fuzzing process."""

    def __init__(self, corpus_out: Path) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="detfmt-fuzz-", dir=_scratch_parent()))
        self.seeds: dict[str, Path] = {}
        self.digests: dict[str, str] = {}
        for codec in relharness.CODECS:
            path = relharness.build_dataset(self.root / f"seed-{codec}", n=4, seed=7, codec=codec)
            self.seeds[codec] = path
            self.digests[codec] = relharness.content_digest(str(path))
        self.corpus_out = corpus_out
        self.execs = 0
        self.findings = 0
        self.outcomes: dict[str, int] = {}
        self.started = time.monotonic()
        self.stats_path: Path | None = None
        self.engine = "?"
        #: the Hypothesis engine checks each input in a limited child (relharness.SafeWorker:
        #: 1 GiB, 10 s); atheris checks in-process (its coverage feedback needs that) and relies
        #: on libFuzzer's -timeout and -rss_limit_mb
        self.worker: relharness.SafeWorker | None = None

    def stats(self) -> dict[str, Any]:
        return {"engine": self.engine, "seconds": round(time.monotonic() - self.started, 1),
                "execs": self.execs, "findings": self.findings, "outcomes": self.outcomes}

    def write_stats(self) -> None:
        """libFuzzer leaves through exit(): keep the numbers on disk as we go."""
        if self.stats_path is not None:
            self.stats_path.write_text(json.dumps(self.stats(), indent=1))


def _scratch_parent() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def decode_mutations(data: bytes, state: State) -> tuple[str, list[dict[str, Any]]]:
    """Turn fuzzer bytes into (seed codec, mutations) deterministically."""
    buf = memoryview(data)
    pos = 0

    def take(n: int) -> int:
        nonlocal pos
        chunk = bytes(buf[pos:pos + n])
        pos += n
        return int.from_bytes(chunk.ljust(n, b"\0"), "little")

    codec = relharness.CODECS[take(1) % len(relharness.CODECS)]
    seed = state.seeds[codec]
    files = list(relharness.iter_files(seed))
    mutations = []
    for _ in range(1 + take(1) % 3):
        file = files[take(1) % len(files)]
        size = (seed / file).stat().st_size
        op = OPS[take(1) % len(OPS)]
        at = take(4) % max(1, size)
        if op == "bitflip":
            params: dict[str, Any] = {"pos": at, "bit": take(1) % 8}
        elif op == "truncate":
            params = {"size": at}
        elif op == "append":
            n = 1 + take(1) % 128
            params = {"data": bytes(buf[pos:pos + n])}
            pos += n
        elif op == "splice":
            n = 1 + take(1) % 64
            params = {"pos": at, "data": bytes(buf[pos:pos + n]), "insert": bool(take(1) & 1)}
            pos += n
        elif op == "zero_fill":
            op, params = "splice", {"pos": at, "data": b"\0" * (1 + take(1) % 64)}
        else:
            choice = take(1)
            value = [*EXTREMES, size, size + 1][take(1) % (len(EXTREMES) + 2)]
            if file == "header.json":
                fld = HEADER_KEYS[choice % len(HEADER_KEYS)]
            elif file == "index.npy":
                fld = relharness.INDEX_FIELDS[choice % len(relharness.INDEX_FIELDS)]
            elif file.endswith(".npy"):
                fld = f"shape.{choice % 3}"
            else:
                op, params = "splice", {"pos": at, "data": (value % 2**64).to_bytes(8, "little")}
                mutations.append({"file": file, "op": op, "params": params})
                continue
            params = {"field": fld, "value": value, "index": take(1)}
        mutations.append({"file": file, "op": op, "params": params})
    return codec, mutations


def check_one(data: bytes, state: State) -> None:
    """Materialize one input and check the property; raise Finding on a violation."""
    import detfmt

    codec, mutations, ds = materialize(data, state)
    state.execs += 1
    problem = None
    try:
        if state.worker is not None:  # sandboxed: a hang or a memory bomb is a finding
            outcome = state.worker.call("op_check_all", str(ds))
            if outcome.kind != "ok":
                raise Finding(str(outcome))
            result = outcome.value
        else:
            result = relharness.op_check_all(str(ds))
        clean = not result.get("violations") and "verify_error" not in result
        if clean and result.get("digest") != state.digests[codec]:
            problem = f"verify passed but content differs: {result}"
        key = "clean" if clean else (result.get("open_error") or ["open-ok"])[-1]
        state.outcomes[str(key)] = state.outcomes.get(str(key), 0) + 1
    except detfmt.DetfmtError:  # op_check_all catches these; kept for safety
        pass
    except Finding as e:
        problem = str(e)
    except Exception as e:
        problem = f"{type(e).__name__}: {e}"
    if state.execs % 500 == 0:
        state.write_stats()
    if problem:
        save_finding(ds, state, problem, mutations, codec)
        state.write_stats()
        raise Finding(problem)


def save_finding(ds: Path, state: State, problem: str, mutations: list[dict[str, Any]],
                 codec: str) -> Path:
    out = relharness.save_finding(ds, state.corpus_out, "fuzz", {
        "problem": problem[:2000], "codec": codec, "mutations": mutations,
        "original_digest": state.digests[codec]})
    state.findings += 1
    print(f"FINDING saved to {out}: {problem[:300]}", file=sys.stderr, flush=True)
    return out


def materialize(data: bytes, state: State) -> tuple[str, list[dict[str, Any]], Path]:
    """The mutated dataset an input describes, built without opening it."""
    codec, mutations = decode_mutations(data, state)
    ds = state.root / "case"
    shutil.rmtree(ds, ignore_errors=True)
    shutil.copytree(state.seeds[codec], ds)
    for m in mutations:
        with contextlib.suppress(*MISFIT):
            relharness.mutate(ds, m["file"], m["op"], **m["params"])
    return codec, mutations, ds


ARTIFACTS = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


def export_artifacts(work: Path, state: State) -> list[Path]:
    """libFuzzer's reproducers in ``work`` (a crash, hang or memory blow-up it caught itself:
    the process died, so `check_one` saved nothing) become corpus entries too."""
    kept = []
    for artifact in sorted(work.iterdir()):
        if artifact.is_file() and artifact.name.startswith(ARTIFACTS):
            codec, mutations, ds = materialize(artifact.read_bytes(), state)
            kept.append(save_finding(ds, state, f"libFuzzer {artifact.name}", mutations, codec))
    return kept


def run_atheris(args: argparse.Namespace, state: State) -> None:
    import atheris

    def one(data: bytes) -> None:
        try:
            check_one(data, state)
        except Finding:
            if args.stop_on_finding:
                raise

    corpus_dir = Path(args.work) / "corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    for i in range(64):  # seed inputs: every codec x a few ops
        head = bytes([i % 4, i % 3, i % 13, i % 6])
        (corpus_dir / f"seed-{i}").write_bytes(head + os.urandom(16))
    argv = [sys.argv[0], str(corpus_dir), f"-max_total_time={args.seconds}", "-timeout=10",
            "-rss_limit_mb=2048", f"-artifact_prefix={args.work}/", "-print_final_stats=1",
            "-max_len=600"]
    atheris.Setup(argv, one)
    atheris.Fuzz()


def run_hypothesis(args: argparse.Namespace, state: State) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=10**9, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.binary(min_size=4, max_size=512))
    def prop(data: bytes) -> None:
        check_one(data, state)

    deadline = time.monotonic() + args.seconds
    fuzz = prop.hypothesis.fuzz_one_input
    import random

    rng = random.Random(args.seed)
    while time.monotonic() < deadline:
        with contextlib.suppress(Finding):
            fuzz(rng.randbytes(rng.randint(4, 512)))


def seed_corpus_from_cases(out: Path, max_bytes: int = 96 << 10) -> list[Path]:
    """Pack the damaged datasets of tests/reliability/test_rel_cases.py into ``out`` as
    regression inputs (cases whose damage is not a plain file, e.g. a FIFO, are skipped)."""
    import test_rel_cases

    written = []
    root = Path(tempfile.mkdtemp(prefix="detfmt-cases-"))
    try:
        bases = {c: relharness.build_dataset(root / f"base-{c}", n=5, seed=1, codec=c)
                 for c in relharness.CODECS}
        for case in test_rel_cases.CASES:
            if any(word in case.id for word in ("symlink", "fifo", "directory")):
                continue
            ds = root / case.id
            shutil.copytree(bases[case.codec], ds)
            case.damage(ds)
            packed = relharness.pack_dir(ds)
            if len(packed) > max_bytes:
                continue
            path = out / f"case-{case.id}.tar.gz"
            path.write_bytes(packed)
            written.append(path)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--engine", choices=("auto", "atheris", "hypothesis"), default="auto")
    ap.add_argument("--corpus-out", type=Path, default=REPO / "tests" / "corpus")
    ap.add_argument("--work", default=tempfile.gettempdir() + "/detfmt-fuzz-work")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replay", type=Path, help="run one saved libFuzzer input and report")
    ap.add_argument("--stop-on-finding", action="store_true")
    ap.add_argument("--export-artifacts", action="store_true",
                    help="turn libFuzzer's crash/timeout/oom inputs in --work into corpus "
                         "entries (--corpus-out) and exit")
    ap.add_argument("--seed-corpus-from-cases", action="store_true",
                    help="write the adversarial cases' datasets into --corpus-out and exit")
    args = ap.parse_args()
    if args.seed_corpus_from_cases:
        args.corpus_out.mkdir(parents=True, exist_ok=True)
        paths = seed_corpus_from_cases(args.corpus_out)
        print(f"{len(paths)} cases written to {args.corpus_out}")
        return
    Path(args.work).mkdir(parents=True, exist_ok=True)
    engine = args.engine
    if engine == "auto":
        try:
            import atheris

            engine = "atheris"
        except ImportError:
            engine = "hypothesis"
    if engine == "atheris" and not args.replay:
        import atheris

        with atheris.instrument_imports():  # coverage feedback from the reader's code
            import detfmt
            import detfmt.format.rules
            import detfmt.reading.dataset  # noqa: F401
    state = State(args.corpus_out)
    state.engine = engine
    state.stats_path = Path(args.work) / "stats.json"

    def report() -> None:
        state.write_stats()
        print("STATS " + json.dumps(state.stats()), file=sys.stderr, flush=True)
        shutil.rmtree(state.root, ignore_errors=True)

    atexit.register(report)
    if args.export_artifacts:
        kept = export_artifacts(Path(args.work), state)
        print(f"{len(kept)} libFuzzer artifacts kept in {args.corpus_out}")
        return
    if engine == "hypothesis" and not args.replay:
        state.worker = relharness.SafeWorker()
        atexit.register(state.worker.close)
    if args.replay:
        check_one(args.replay.read_bytes(), state)
        print("replay: no finding")
        return
    print(f"engine={engine}", file=sys.stderr, flush=True)
    if engine == "atheris":
        run_atheris(args, state)
    else:
        run_hypothesis(args, state)


if __name__ == "__main__":
    main()
