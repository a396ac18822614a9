"""Which raising branch of each rule id did the test suite reach? (reads a coverage data file)

Finds every place in ``detfmt/format`` and ``detfmt/reading`` that makes a typed error for a rule
id: a ``raise`` statement, or a simple statement that builds an error (a call of ``error_for``,
``Violation`` or a ``...Error`` class), with its rule id: the string literal among its arguments
that is a rule id, else the raised class's ``default_rule``, else ``<computed>`` (the id comes
from a variable). Then reports which of those statements the coverage data recorded as executed,
and the rule ids none of whose sites ran. A report, not a gate: it always exits 0.

    python tools/rule_coverage.py [--data .coverage] [--json out.json]

(tools/coverage.sh runs the suite under coverage and then this.)
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("detfmt/format", "detfmt/reading")
RULE_ID = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^R-\d+$|^S-\d+$")
BUILDERS = ("error_for", "Violation")
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
            ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match)


@dataclass(frozen=True)
class Site:
    path: str  # relative to the repository
    line: int
    rule: str


def default_rules() -> dict[str, str]:
    """Error class name -> its default rule id (detfmt.errors)."""
    sys.path.insert(0, str(REPO))
    from detfmt import errors

    return {name: cls.default_rule for name, cls in vars(errors).items()
            if isinstance(cls, type) and getattr(cls, "default_rule", None)}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _rule_of(stmt: ast.stmt, defaults: Mapping[str, str]) -> str | None:
    """The rule id ``stmt`` raises or builds an error for; None when it makes no error."""
    calls = [node for node in ast.walk(stmt) if isinstance(node, ast.Call)
             and (_name(node.func) in BUILDERS or _name(node.func).endswith("Error"))]
    if not calls and not (isinstance(stmt, ast.Raise) and stmt.exc is not None):
        return None
    for call in calls:
        for node in [*call.args, *(k.value for k in call.keywords if k.arg in (None, "rule"))]:
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and RULE_ID.match(node.value):
                return node.value
    for call in calls:
        if any(k.arg == "rule" for k in call.keywords) or _name(call.func) in BUILDERS:
            return "<computed>"
        if _name(call.func) in defaults:
            return defaults[_name(call.func)]
    return None  # raises something that is not a detfmt error (or re-raises a variable)


def find_sites(sources: Mapping[str, str], defaults: Mapping[str, str]) -> list[Site]:
    """Rule-raising statements of ``sources`` (relative path -> Python text)."""
    sites = []
    for path, text in sorted(sources.items()):
        for stmt in ast.walk(ast.parse(text, path)):
            if not isinstance(stmt, ast.stmt) or isinstance(stmt, COMPOUND):
                continue
            rule = _rule_of(stmt, defaults)
            if rule is not None:
                sites.append(Site(path, stmt.lineno, rule))
    return sorted(sites, key=lambda s: (s.path, s.line))


def package_sources(packages: Iterable[str] = PACKAGES) -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for package in packages
            for p in sorted((REPO / package).rglob("*.py"))}


def report(sites: list[Site], executed: Mapping[str, set[int]]) -> dict[str, object]:
    """Sites not executed, and rule ids with no executed site."""
    missed = [s for s in sites if s.line not in executed.get(s.path, set())]
    rules: dict[str, list[bool]] = {}
    for site in sites:
        rules.setdefault(site.rule, []).append(site.line in executed.get(site.path, set()))
    return {"sites": len(sites), "sites_hit": len(sites) - len(missed),
            "rules": len(rules), "rules_never_raised": sorted(r for r, hit in rules.items()
                                                              if not any(hit)),
            "missed": [asdict(s) for s in missed]}


def executed_lines(data_file: str) -> dict[str, set[int]]:
    import coverage

    data = coverage.CoverageData(data_file)
    data.read()
    out = {}
    for name in data.measured_files():
        path = Path(name).resolve()
        if path.is_relative_to(REPO):
            out[str(path.relative_to(REPO))] = set(data.lines(name) or ())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=".coverage", help="coverage data file")
    parser.add_argument("--json", help="also write the full report here")
    args = parser.parse_args(argv)
    result = report(find_sites(package_sources(), default_rules()), executed_lines(args.data))
    print(f"rule-raising sites in {', '.join(PACKAGES)}: {result['sites_hit']} of "
          f"{result['sites']} reached by the tests; {result['rules']} rule ids")
    never = result["rules_never_raised"]
    print(f"rule ids with no raising site reached ({len(never)}): {', '.join(never) or '-'}")
    for site in result["missed"]:
        print(f"  not reached: {site['path']}:{site['line']} {site['rule']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
