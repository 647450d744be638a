#!/usr/bin/env bash
# A/B comparison of two wcache-bench binaries: runs one part of each in turn,
# ROUNDS times (A, B, A, B, ...), and prints per figure the median of each
# and the ratio B/A. Single runs on a shared machine move by up to 2x; the
# medians of alternating rounds are the figures to record.
#
# Usage: scripts/ab-bench.sh OLD_BIN NEW_BIN [PART] [ROUNDS]
#   PART: engine (default) | sim | memory | replay;  ROUNDS: default 5
# Build OLD_BIN from a second worktree, e.g.
#   git worktree add /tmp/wc-old <commit>
#   (cd /tmp/wc-old && CARGO_TARGET_DIR=/tmp/wc-old-target cargo build --release -p wcache-bench)
set -euo pipefail

A=${1:?usage: ab-bench.sh OLD_BIN NEW_BIN [PART] [ROUNDS]}
B=${2:?usage: ab-bench.sh OLD_BIN NEW_BIN [PART] [ROUNDS]}
PART=${3:-engine}
ROUNDS=${4:-5}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

for i in $(seq "$ROUNDS"); do
    "$A" "$PART" > "$OUT/a.$i" 2>&1
    "$B" "$PART" > "$OUT/b.$i" 2>&1
done

python3 - "$OUT" "$ROUNDS" <<'EOF'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
# A figure: a line's label and the number before a unit.
unit = re.compile(r"^\s*(.+?)\s+([0-9][0-9.]*)\s+(ns/op|req/s|B/page|B/slot)")
figures = {}
for side in "ab":
    for i in range(1, rounds + 1):
        for line in open(f"{out}/{side}.{i}"):
            m = unit.match(line)
            if m:
                label = f"{m.group(1)} [{m.group(3)}]"
                figures.setdefault(label, {"a": [], "b": []})[side].append(float(m.group(2)))
if not figures:
    sys.exit("no figures found: is the part name right?")
print(f"{'figure':<60} {'A median':>11} {'B median':>11} {'B/A':>6}")
for label, v in figures.items():
    if not v["a"] or not v["b"]:
        continue
    a, b = statistics.median(v["a"]), statistics.median(v["b"])
    print(f"{label[:60]:<60} {a:>11.1f} {b:>11.1f} {b / a:>6.2f}")
EOF
