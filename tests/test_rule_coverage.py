"""tools/rule_coverage.py finds every rule-raising statement and reports those no test reached."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import rule_coverage  # noqa: E402

SOURCE = '''
from detfmt import errors

def check(x, rule):
    if x == 1:
        raise errors.LayoutError("literal", rule="OFFSETS_BOUNDS", path="p")
    if x == 2:
        raise errors.HeaderError("default rule of the class")
    if x == 3:
        raise ValueError("not a detfmt error")
    if x == 4:
        problems.append(Violation("BOX_INVALID", "built, raised later"))
    if x == 5:
        raise errors.error_for(rule, "computed")
    try:
        pass
    except OSError:
        raise
    return errors.LayoutError(
        "over lines",
        rule="BLOB_SIZE")
'''


def test_sites_are_found_with_their_rule() -> None:
    sites = rule_coverage.find_sites({"m.py": SOURCE}, rule_coverage.default_rules())
    assert [(s.line, s.rule) for s in sites] == [
        (6, "OFFSETS_BOUNDS"), (8, "HEADER_SCHEMA"), (12, "BOX_INVALID"), (14, "<computed>"),
        (19, "BLOB_SIZE")]


def test_report_names_unreached_sites_and_rules() -> None:
    sites = rule_coverage.find_sites({"m.py": SOURCE}, rule_coverage.default_rules())
    result = rule_coverage.report(sites, {"m.py": {6, 12, 14}})
    assert result["sites"] == 5 and result["sites_hit"] == 3
    assert result["rules_never_raised"] == ["BLOB_SIZE", "HEADER_SCHEMA"]
    assert [m["line"] for m in result["missed"]] == [8, 19]


def test_the_check_paths_have_their_rule_sites() -> None:
    sites = rule_coverage.find_sites(rule_coverage.package_sources(),
                                     rule_coverage.default_rules())
    rules = {s.rule for s in sites}
    assert {"PACK_MAGIC", "ZSTD_WINDOW", "OFFSETS_BOUNDS", "BOX_OUT_OF_IMAGE",
            "HEADER_TOO_LARGE", "SHARD_SIZE"} <= rules
    assert len(sites) > 150
