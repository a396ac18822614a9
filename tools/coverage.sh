#!/usr/bin/env bash
# Branch coverage of the check paths (detfmt/format, detfmt/reading), reported, never a gate:
# the suite (or the tests named in "$@") under pytest-cov, child processes included, then which
# rule ids' raising statements no test reached (tools/rule_coverage.py). A separate command,
# not part of tools/test.sh: measured, it costs more than a fifth of the suite's time
# (docs/reliability.md, "Coverage of the check paths").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${DETFMT_PYTHON:-.venv/bin/python}  # the environment tools/test.sh made
[ -x "$PY" ] || { echo "no $PY: run tools/test.sh once first (or set DETFMT_PYTHON)" >&2; exit 2; }
# the extras of tools/test.sh, plus coverage
"$PY" -m pip install -q --disable-pip-version-check \
  -e '.[test,torch,fast,plot,scale,augment-test,coverage]'
rm -f .coverage .coverage.*
status=0
# deselected: its child runs under RLIMIT_FSIZE, where coverage cannot save its own data and
# prints a traceback into the one line the test checks (it passes without coverage)
"$PY" -m pytest -q -p no:cacheprovider --cov --cov-branch --cov-report=term \
  --cov-report=xml:coverage.xml "${@:-tests}" --deselect \
  tests/reliability/test_rel_issue25.py::test_append_on_a_full_disk_is_one_typed_line_and_changes_nothing \
  || status=$?
"$PY" tools/rule_coverage.py --data .coverage --json rule-coverage.json
exit "$status"
