"""``detfmt gc``: remove what failed or superseded sharded writes left behind (S-16)."""

from __future__ import annotations

import argparse


def _cmd_gc(args: argparse.Namespace) -> int:
    from detfmt.shard.gc import collect
    from detfmt.storage import open_storage

    report = collect(open_storage(args.root), grace_seconds=args.grace)
    for path in report.removed:
        print(path)
    print(f"removed {len(report.removed)} unlisted file(s) or temporary director(ies)")
    if report.kept_for_writes:
        print(f"kept {len(report.kept_for_writes)} unlisted file(s): a write is in progress "
              f"({report.live_writes} live writer lease(s))")
    if report.kept_young:
        print(f"kept {len(report.kept_young)} unlisted file(s) younger than --grace "
              f"{args.grace:g} s")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    gc = commands.add_parser(
        "gc", help="delete shard files a sharded root's manifest does not list (older than --grace)"
    )
    gc.add_argument("root", help="the sharded dataset root (holds manifest.json)")
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="keep files younger than this many seconds (default: %(default)s); files of a "
        "write in progress are kept whatever their age",
    )
    gc.set_defaults(run=_cmd_gc)
