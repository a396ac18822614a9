"""Run the conformance suite against any reader: ``python -m conformance --reader "CMD"``.

CMD is split like a shell command line and run once per case with the dataset directory appended
as its last argument. See conformance/README.md for what CMD must print.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

from conformance.runner import Case, check_dump, load_cases, materialize


def run_case(command: list[str], case: Case, timeout: float) -> list[str]:
    """Problems with the reader's answer for one case (empty: the case passes)."""
    with materialize(case) as path:
        try:
            done = subprocess.run([*command, str(path)], capture_output=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            return [f"no answer within {timeout} s"]
    try:
        answer = json.loads(done.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        return [f"exit {done.returncode} without a JSON answer {tail}"]
    if case.kind == "valid":
        if done.returncode != 0:
            return [f"rejected a valid dataset: {answer!r}"]
        return check_dump(answer, json.loads(case.expected.read_text(encoding="utf-8")))
    if done.returncode != 1 or not isinstance(answer, dict) or "error" not in answer:
        return [f"accepted an invalid dataset (exit {done.returncode})"]
    if answer["error"] != case.rule:
        return [f"reported {answer['error']!r}, expected {case.rule!r}"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description=__doc__)
    parser.add_argument("--reader", required=True, help='command, e.g. "./myreader dump"')
    parser.add_argument("--case", action="append", default=[], help="run only these case ids")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    args = parser.parse_args(argv)
    command = shlex.split(args.reader)
    cases = [c for c in load_cases() if not args.case or c.id in args.case]
    results = {case.id: run_case(command, case, args.timeout) for case in cases}
    failed = {key: value for key, value in results.items() if value}
    if args.json:
        print(json.dumps({"passed": len(results) - len(failed), "failed": failed}, indent=1))
    else:
        for case in cases:
            problems = results[case.id]
            status = "FAIL" if problems else "ok"
            print(f"{status:4} {case.kind:7} {case.id}" + (f": {'; '.join(problems)}"
                                                             if problems else ""))
        print(f"{len(results) - len(failed)}/{len(results)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
