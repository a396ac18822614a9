"""Dataset workflows: split, filter, remap, merge, statistics and export to YOLO / VOC.

Every copying workflow writes a new 1.0 dataset whose image payloads are the source's bytes as
stored (no decode, no re-encode; `detfmt.writing.writer.write_stored`) with every per-box and
per-image
field, records the step in the dataset card's lineage, and takes any dataset (1.0 directory,
sharded root, URL or opened dataset) as input. The CLI names are ``detfmt split | filter |
remap | merge | stats | export yolo | export voc`` (docs/workflows.md).
"""

from typing import Any

from detfmt.workflows.export_voc import VocExport, export_voc
from detfmt.workflows.export_yolo import YoloExport, export_yolo
from detfmt.workflows.merge import MergePlan, MergeReport, merge, plan_merge
from detfmt.workflows.remap import RemapReport, plan_remap, remap
from detfmt.workflows.select import FilterReport, filter_dataset, select_indices
from detfmt.workflows.split import SplitReport, split, split_indices
from detfmt.workflows.stats import compute_stats, format_stats, stats

__all__ = [
    "FilterReport",
    "MergePlan",
    "MergeReport",
    "RemapReport",
    "SplitReport",
    "VocExport",
    "YoloExport",
    "compute_stats",
    "export_voc",
    "export_yolo",
    "filter_dataset",
    "format_stats",
    "merge",
    "plan_merge",
    "plan_remap",
    "remap",
    "select_indices",
    "split",
    "split_indices",
    "stats",
]


def plot_stats(*args: Any, **kwargs: Any) -> Any:
    """`detfmt.workflows.plot.plot_stats` (imported on first use: matplotlib is optional)."""
    from detfmt.workflows.plot import plot_stats as draw

    return draw(*args, **kwargs)


__all__ += ["plot_stats"]
