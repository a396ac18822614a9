"""``detfmt gc``: remove what failed or superseded sharded writes left behind (S-16)."""

from __future__ import annotations

import argparse


def _cmd_gc(args: argparse.Namespace) -> int:
    from detfmt.shard.write import gc

    removed = gc(args.root, grace_seconds=args.grace)
    for path in removed:
        print(path)
    print(f"removed {len(removed)} unlisted file(s) or temporary director(ies)")
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
        help="keep files younger than this many seconds (default 3600: a write in "
        "progress is not collected)",
    )
    gc.set_defaults(run=_cmd_gc)
