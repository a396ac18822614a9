"""The nightly fuzzing profile in one command, within a time budget.

    python tools/fuzz_nightly.py --seconds 3600

1. ``tools/fuzz_open.py`` (atheris if installed, else Hypothesis with each input checked in a
   limited child) for ``--open-share`` of the budget; then libFuzzer's own reproducers (crash,
   timeout, oom) are turned into corpus entries;
2. the Hypothesis mutation suites (1.0 and sharded) in the ``nightly`` profile
   (``DETFMT_FUZZ_PROFILE=nightly``: 3000 examples, the example database kept in .hypothesis/)
   until the budget is spent (``DETFMT_FUZZ_DEADLINE``: each test then ends, skipped, unless it
   found something), keeping what breaks a property in the corpus (``DETFMT_FUZZ_CORPUS_OUT``);
3. the corpus replay (tests/reliability/test_rel_corpus.py), new entries included.

Every finding is a ``.tar.gz`` dataset plus a ``.json`` note in ``--corpus-out`` (default
tests/corpus/): commit them, and CI replays them from then on. Exit status 0 when nothing was
found and every step passed; 1 otherwise (the summary line names the new entries).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MUTATION_SUITES = ("tests/reliability/test_rel_mutation.py",
                   "tests/reliability/test_rel_sharded_mutation.py")
GRACE_S = 120  # a step may overrun its share by one slow input, or by shrinking a finding


def run_step(name: str, cmd: list[str], env: dict[str, str], limit: float) -> dict[str, object]:
    started = time.monotonic()
    try:
        rc = subprocess.run(cmd, cwd=REPO, env=env, timeout=max(1.0, limit)).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    return {"step": name, "rc": rc, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=3600, help="the whole run's budget")
    ap.add_argument("--open-share", type=float, default=0.4,
                    help="part of the budget for tools/fuzz_open.py (the rest: mutation suites)")
    ap.add_argument("--engine", choices=("auto", "atheris", "hypothesis"), default="auto")
    ap.add_argument("--corpus-out", type=Path, default=REPO / "tests" / "corpus")
    args = ap.parse_args(argv)
    started = time.time()
    corpus = args.corpus_out.resolve()
    before = set(corpus.glob("*.tar.gz"))
    work = tempfile.mkdtemp(prefix="detfmt-fuzz-work-")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    py = sys.executable
    open_s = int(args.seconds * args.open_share)
    fuzz = [py, "tools/fuzz_open.py", "--corpus-out", str(corpus), "--work", work]
    steps = [run_step("fuzz_open", [*fuzz, "--seconds", str(open_s), "--engine", args.engine],
                      env, open_s + GRACE_S),
             run_step("export", [*fuzz, "--export-artifacts"], env, GRACE_S)]
    deadline = started + args.seconds
    mutation_env = dict(env, DETFMT_FUZZ_PROFILE="nightly", DETFMT_FUZZ_DEADLINE=str(deadline),
                        DETFMT_FUZZ_CORPUS_OUT=str(corpus))
    steps.append(run_step("mutation", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                       "-rs", *MUTATION_SUITES], mutation_env,
                          deadline - time.time() + GRACE_S))
    steps.append(run_step("replay", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                     "tests/reliability/test_rel_corpus.py"],
                          dict(env, DETFMT_CORPUS_DIR=str(corpus)), 600))
    new = sorted(p.name for p in set(corpus.glob("*.tar.gz")) - before)
    summary = {"seconds": round(time.time() - started, 1), "budget": args.seconds,
               "steps": steps, "new_corpus_entries": new}
    print("FUZZ NIGHTLY " + json.dumps(summary))
    # pytest exit 5 = no tests collected; fuzz_open exits 0 or with libFuzzer's code on a finding
    failed = [s for s in steps if s["rc"] not in (0,)]
    return 1 if new or failed else 0


if __name__ == "__main__":
    sys.exit(main())
