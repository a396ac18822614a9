"""``detfmt view DS``: look at a dataset in the browser (docs/view.md).

A local, read-only web page served from the dataset's memory mapping by the standard library's
HTTP server: a grid of samples with their boxes and filters over the labels (`index`), one
sample at a time, and the dataset's card and statistics. The front end (``static/``) ships in
the package and loads nothing from the network.
"""

from __future__ import annotations

from detfmt.view.index import LabelIndex, Query
from detfmt.view.server import Viewer, make_server

__all__ = ["LabelIndex", "Query", "Viewer", "make_server"]
