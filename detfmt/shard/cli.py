"""``detfmt gc`` (remove what failed or superseded sharded writes left behind, S-16) and
``detfmt append`` (add datasets to a sharded root in one commit)."""

from __future__ import annotations

import argparse


def _cmd_gc(args: argparse.Namespace) -> int:
    from detfmt.shard.gc import collect
    from detfmt.storage import open_storage

    report = collect(open_storage(args.root), grace_seconds=args.grace)
    for path in report.removed:
        print(path)
    print(f"removed {len(report.removed)} unlisted file(s) or temporary director(ies)")
    for path in report.future_leases:
        print(f"ignored lease {path}: dated more than its ttl in the future (wrong clock?)")
    if report.kept_for_writes:
        print(f"kept {len(report.kept_for_writes)} unlisted file(s): a write is in progress "
              f"({report.live_writes} live writer lease(s))")
        for path in report.honoured_leases:
            print(f"honoured lease {path}")
    if report.kept_young:
        print(f"kept {len(report.kept_young)} unlisted file(s) younger than --grace "
              f"{args.grace:g} s")
    return 0


def _cmd_append(args: argparse.Namespace) -> int:
    from detfmt.shard.append import append

    before = _count(args.root)
    manifest = append(args.root, args.sources, allow_duplicates=args.allow_duplicates)
    added = manifest.num_samples - before
    print(f"appended {added} sample(s) to {args.root}: {manifest.num_samples} sample(s) in "
          f"{len(manifest.shards)} shard(s)")
    return 0


def _count(root: str) -> int:
    from detfmt.format.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, decode_manifest
    from detfmt.storage import open_storage

    storage = open_storage(root)
    try:
        data = storage.read(MANIFEST_NAME, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return 0
    return decode_manifest(data, storage.where(MANIFEST_NAME)).num_samples


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
    append = commands.add_parser(
        "append",
        help="add datasets (1.0 directories or sharded roots) to a sharded root as new shards, "
        "in one atomic commit",
    )
    append.add_argument("root", help="the sharded dataset root to grow (holds manifest.json)")
    append.add_argument("sources", nargs="+", metavar="SRC",
                        help="a 1.0 dataset directory or a sharded root, with the same classes")
    append.add_argument("--allow-duplicates", action="store_true",
                        help="append samples whose image bytes are already in the root or an "
                        "earlier source (refused otherwise)")
    append.set_defaults(run=_cmd_append)
