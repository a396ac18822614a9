"""SPEC 1.2.1 choices that the conformance suite cannot see (it runs full verification and dumps
sample by sample): which id a lazy reader reports for ragged counts at first use (R-49), and the
label width of a batch (§10.2, batch width)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import detfmt
from detfmt import DetfmtError

SUITE = Path(__file__).resolve().parents[2] / "conformance"


@pytest.mark.parametrize(("case", "rule"), [
    ("order_ragged_records_before_sum", "COUNT_RANGE"),
    ("order_ragged_record_before_sum", "CODEC_UNKNOWN"),
    ("ragged_count_sum", "COUNT_SUM"),
])
def test_lazy_first_use_reports_records_before_the_sum(case: str, rule: str) -> None:
    """Sample 0 is intact; its ragged rows need the sum, so a reader that defers the record
    checks runs step 4c over every record before it (R-49): whether it fails at open or at the
    first access, the broken count or record wins over COUNT_SUM."""
    with pytest.raises(DetfmtError) as caught:
        detfmt.open(SUITE / "v1_2" / "invalid" / case)[0]
    assert caught.value.rule == rule, str(caught.value)


def test_padded_batch_is_as_wide_as_its_largest_count() -> None:
    """A padded dataset's batch is not M wide: its width is its samples' largest count."""
    ds = detfmt.open(SUITE / "v1" / "valid" / "box_fields")
    counts = np.asarray([len(ds[i].classes) for i in range(len(ds))])
    small = np.flatnonzero(counts < ds.max_boxes)
    assert len(small) and ds.max_boxes > int(counts[small].max())
    batch = ds.batch(small)
    assert batch.boxes.shape == (len(small), int(counts[small].max()), 4)
    assert batch.classes.shape == batch.mask.shape == (len(small), int(counts[small].max()))
    wide = ds.batch(small, max_boxes=ds.max_boxes)  # a fixed width, asked for
    assert wide.boxes.shape[1] == ds.max_boxes
    with pytest.raises(DetfmtError):
        ds.batch(np.arange(len(ds)), max_boxes=int(counts.max()) - 1)


def test_manifest_metadata_over_the_header_limit_is_valid(tmp_path: Path) -> None:
    """§19.3: a manifest's metadata has no limit of its own (the case
    manifest_writer_metadata_large pins the member count; a value over 65,536 code points is
    built here rather than committed). Both readers of the repository accept it."""
    sys.path.insert(0, str(SUITE.parent / "tools"))
    import conformance_pins as pins

    from conformance import spec_reader
    from conformance.dump import canonical_dump

    root = pins.small_root()
    root.manifest["metadata"] = {"note": "m" * 65537}
    root.write(tmp_path / "root")
    for dump in (canonical_dump, spec_reader.dump):
        assert dump(str(tmp_path / "root"))["manifest"]["metadata"] == root.manifest["metadata"]
