"""Regenerate the generated parts of SPEC.md: the header JSON Schema and the rule index.

    python tools/gen_schema.py          # rewrite SPEC.md in place
    python tools/gen_schema.py --check  # exit 1 if SPEC.md is not current

The JSON Schema comes from ``msgspec.json.schema(detfmt.schema.Header)``; the rule index is parsed
from SPEC.md's own requirement lines (``- **R-n** `ID` text``), which ``parse_rules`` also gives
to tests/test_spec_rules.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SPEC = Path(__file__).resolve().parents[1] / "SPEC.md"
SCHEMA_BEGIN, SCHEMA_END = "<!-- BEGIN GENERATED SCHEMA -->", "<!-- END GENERATED SCHEMA -->"
INDEX_BEGIN, INDEX_END = "<!-- BEGIN RULE INDEX -->", "<!-- END RULE INDEX -->"
_RULE = re.compile(r"^- \*\*(?P<number>[RW]-\d+)\*\*(?: `(?P<id>[A-Z][A-Z0-9_]*)`)?(?P<text>.*)$")
_HEADING = re.compile(r"^#{2,3} (?P<number>\d+(?:\.\d+)?)\.? ")
_KEYWORDS = ("MUST NOT", "MUST", "SHOULD NOT", "SHOULD", "MAY")


@dataclass(frozen=True)
class Rule:
    number: str  # "R-12"
    id: str | None  # "FILE_SIZE"
    section: str  # "13"
    text: str

    @property
    def keywords(self) -> list[str]:
        found, rest = [], self.text
        for keyword in _KEYWORDS:
            if keyword in rest:
                found.append(keyword)
                rest = rest.replace(keyword, "")
        return found


def parse_rules(text: str) -> list[Rule]:
    """Every requirement line of SPEC.md, in document order."""
    rules: list[Rule] = []
    section = ""
    current: dict | None = None
    for line in text.split("\n"):
        if line.startswith("## Appendix"):
            break
        heading = _HEADING.match(line)
        if heading:
            section = heading["number"]
        match = _RULE.match(line)
        if current is not None and (match or not line.startswith("  ")):
            rules.append(Rule(**current))
            current = None
        if match:
            current = {"number": match["number"], "id": match["id"], "section": section,
                       "text": match["text"].strip()}
        elif current is not None:
            current["text"] += " " + line.strip()
    if current is not None:
        rules.append(Rule(**current))
    return rules


def schema_block() -> str:
    sys.path.insert(0, str(SPEC.parent))
    import msgspec

    from detfmt.schema import Header

    schema = msgspec.json.schema(Header)
    return "```json\n" + json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n```"


def index_block(rules: list[Rule]) -> str:
    def key(rule: Rule) -> tuple[str, int]:
        return rule.number[0], int(rule.number[2:])

    rows = [f"| {rule.number} | {f'`{rule.id}`' if rule.id else ''} | "
            f"{', '.join(rule.keywords)} | §{rule.section} |" for rule in sorted(rules, key=key)]
    return "\n".join(["| rule | id | keywords | section |", "|---|---|---|---|", *rows])


def _replace(text: str, begin: str, end: str, body: str) -> str:
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + "\n" + body + "\n" + text[stop:]


def render(text: str) -> str:
    """SPEC.md text with both generated blocks brought up to date."""
    text = _replace(text, SCHEMA_BEGIN, SCHEMA_END, schema_block())
    return _replace(text, INDEX_BEGIN, INDEX_END, index_block(parse_rules(text)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that SPEC.md is current")
    args = parser.parse_args(argv)
    text = SPEC.read_text(encoding="utf-8")
    fresh = render(text)
    if args.check:
        if fresh != text:
            print("SPEC.md is out of date: run python tools/gen_schema.py")
            return 1
        return 0
    SPEC.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
