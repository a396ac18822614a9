#!/usr/bin/env bash
# The README's first hour, as a newcomer meets it: a fresh clone of this repository, the
# README's install lines, then every code block of its "Your first hour" section in order (the
# blocks between the `first-hour: begin` and `first-hour: end` markers: convert, inspect, split,
# train), on the bundled sample. Exit 0 when every command succeeded; otherwise the failing
# command's status, with the command printed above its output.
#
# Usage: bash tools/first_hour.sh [WORKDIR]   (default: a new temporary folder, removed on success)
# The clone is of the committed state (HEAD): commit README edits before checking them here.
# Offline (download.pytorch.org unreachable), the README's CPU-torch line installs
# ${FIRST_HOUR_TORCH:-torch==2.13.0} from pip's configured index instead, and says so.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
if [ $# -ge 1 ]; then
  WORK=$1
  mkdir -p "$WORK"
  KEEP=1
else
  WORK=$(mktemp -d)
  KEEP=0
fi
WORK=$(cd "$WORK" && pwd)
rm -rf "$WORK/detfmt"
git clone -q "$SRC" "$WORK/detfmt"
cd "$WORK/detfmt"

# The README's blocks, in order, as one bash script: the install section's bash block, then the
# first-hour section's bash and python blocks (python ones through `python -`).
"$PY" - README.md "${FIRST_HOUR_TORCH:-torch==2.13.0}" > "$WORK/first_hour_run.sh" <<'PY'
import re
import shlex
import sys
import urllib.request

text = open(sys.argv[1], encoding="utf-8").read()
fallback = sys.argv[2]
fence = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)
install = text[text.index("\n## Install"):]
install = install[: install.index("\n## ", 1)]
begin, end = text.index("<!-- first-hour: begin -->"), text.index("<!-- first-hour: end -->")
blocks = fence.findall(install)[:1] + fence.findall(text[begin:end])
if len(blocks) < 2 or not any(kind == "python" for kind, _ in blocks):
    sys.exit("tools/first_hour.sh: the README's install or first-hour blocks were not found")


def reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10).close()
        return True
    except OSError:
        return False


print("set -euo pipefail")
for n, (kind, body) in enumerate(blocks):
    if kind == "python":
        print(f"echo '$ python - <<EOF (README first-hour python block {n})'")
        print(f"python - <<'DETFMT_FIRST_HOUR_{n}'\n{body}DETFMT_FIRST_HOUR_{n}")
        continue
    for line in body.splitlines():
        command = line.split("  #")[0].strip()
        if not command:
            continue
        index = re.search(r"--index-url (\S+)", command)
        if index and not reachable(index.group(1)):
            note = (f"(offline: {index.group(1)} unreachable; installing {fallback} from "
                    f"pip's configured index instead)")
            print(f"echo {shlex.quote(note)}")
            command = f"pip install '{fallback}'"
        print(f"printf '$ %s\\n' {shlex.quote(command)}")
        print(command)
PY
bash "$WORK/first_hour_run.sh"
echo "first hour: every README command ran (in $WORK/detfmt)"
if [ "$KEEP" = 0 ]; then
  cd / && rm -rf "$WORK"
fi
