"""``detfmt view DS``: serve the viewer (registered into the main CLI by detfmt/cli.py)."""

from __future__ import annotations

import argparse
import ipaddress
import sys

__all__ = ["register"]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0: any free one), got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cmd_view(args: argparse.Namespace) -> int:
    from detfmt.view.server import Viewer, make_server

    viewer = Viewer(args.path, predictions=args.predictions, iou=args.iou,
                    min_score=args.min_score)
    try:
        server = make_server(viewer, args.host, args.port)
    except OSError as error:
        args.parser.error(f"cannot listen on {args.host}:{args.port} ({error.strerror})")
    host, port = server.server_address[:2]
    url = f"http://{'localhost' if _loopback(str(host)) else host}:{port}/"
    print(f"detfmt view: {args.path} at {url} (read-only; Ctrl-C stops)", flush=True)
    if not _loopback(args.host):
        print(f"detfmt view: warning: listening on {args.host}, reachable from other machines",
              file=sys.stderr)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("detfmt view: stopped", file=sys.stderr)
    finally:
        server.server_close()
        viewer.close()
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    view = commands.add_parser("view", help="look at a dataset in the browser (local, read-only)")
    view.add_argument("path", help="the dataset: a 1.0 directory, a sharded root or URL, or a "
                      "split root (splits.json)")
    view.add_argument("--host", default="127.0.0.1",
                      help="address to listen on; anything but loopback exposes the dataset")
    view.add_argument("--port", type=_port, default=8765, help="port (0: any free one)")
    view.add_argument("--open", action="store_true", help="open the page in the web browser")
    view.add_argument("--predictions", metavar="JSON",
                      help="model predictions in COCO results format, drawn beside the boxes "
                      "with per-sample true/false positives and misses")
    view.add_argument("--iou", type=_fraction, default=0.5,
                      help="IoU at which a prediction matches a box of its class")
    view.add_argument("--min-score", type=_fraction, default=0.5,
                      help="predictions scored below this are not shown or counted")
    view.set_defaults(run=_cmd_view)
