"""Instructions per tiny sample of `detfmt.write` (callgrind: independent of the machine's load).

Runs this script under ``valgrind --tool=callgrind`` at two sample counts and prints the slope
(instructions per added sample) of each mode minus the slope of ``build`` (making the samples,
which every mode does first). Modes: ``write`` (detfmt.write), ``plain`` (bench_write's plain
loop), ``read`` (only the block reader of `detfmt.writing.blocks`). OPENBLAS_NUM_THREADS=1:
OpenBLAS's
idle threads spin for a time-dependent number of instructions.

Usage: python tools/callgrind_write.py [--impl DIR] [--modes write,plain] [--counts 2000,6000]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TOOLS = Path(__file__).resolve().parent


def run_mode(mode: str, count: int) -> None:
    sys.path.insert(0, str(TOOLS))
    from bench_write import CLASSES, _plain_tiny, _tiny_samples

    samples = _tiny_samples(count)
    with tempfile.TemporaryDirectory() as directory:
        if mode == "write":
            import detfmt

            detfmt.write(iter(samples), Path(directory) / "out", classes=CLASSES, progress=False)
        elif mode == "plain":
            _plain_tiny(samples, Path(directory) / "out")
        elif mode == "read":
            from detfmt.writing import blocks
            from detfmt.writing.options import WriteOptions
            from detfmt.writing.prepare import Rules

            rules = Rules(WriteOptions.from_kwargs(), len(CLASSES))
            for _ in blocks.blocked_stream(iter(samples), rules):
                pass


def instructions(impl: str, mode: str, count: int) -> int:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=impl + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as directory:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={directory}/cg.out",
             sys.executable, __file__, "--child", mode, "--count", str(count)],
            env=env, capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", default=str(TOOLS.parent), help="a detfmt package directory")
    parser.add_argument("--modes", default="write,plain")
    parser.add_argument("--counts", default="2000,6000")
    parser.add_argument("--child")
    parser.add_argument("--count", type=int)
    args = parser.parse_args()
    if args.child:
        run_mode(args.child, args.count)
        return
    low, high = (int(v) for v in args.counts.split(","))

    def slope(mode: str) -> float:
        return (instructions(args.impl, mode, high) - instructions(args.impl, mode, low)) / \
            (high - low)

    build = slope("build")
    print(f"build (subtracted): {build:,.0f} instructions per sample ({args.impl})")
    for mode in args.modes.split(","):
        print(f"{mode}: {slope(mode) - build:,.0f} instructions per sample")


if __name__ == "__main__":
    main()
