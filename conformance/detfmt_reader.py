"""detfmt's reader speaking the conformance protocol: ``python -m conformance.detfmt_reader PATH``.

Prints the canonical dump and exits 0, or prints {"error": RULE} and exits 1.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m conformance.detfmt_reader DATASET", file=sys.stderr)
        return 2
    from conformance.dump import canonical_dump
    from detfmt import DetfmtError

    try:
        dump = canonical_dump(args[0])
    except DetfmtError as error:
        print(json.dumps({"error": error.rule, "message": str(error)}, ensure_ascii=False))
        return 1
    print(json.dumps(dump, ensure_ascii=False, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
