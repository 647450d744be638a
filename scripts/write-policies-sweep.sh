#!/usr/bin/env bash
# Write policies over cache sizes in the simulator (the write-policies
# paper's Fig. 13, in shape): write-through, write-back and
# write-back-ordered, a closed loop of 16 outstanding requests, 30 % reads,
# random 4 KiB over a 256 MiB footprint, on the HDD model, for cache sizes
# from 1 K to 64 K pages. Prints a markdown table: IOPS, and for each
# write-back policy its IOPS over write-through's.
#
# Usage: scripts/write-policies-sweep.sh   (REQUESTS=40000 SIZES="1024 4096 16384 65536")
set -euo pipefail
REQUESTS=${REQUESTS:-40000}
SIZES=${SIZES:-"1024 4096 16384 65536"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache
run() { # policy pages -> IOPS over the measured window
    "$WCACHE" sim --backend hdd --workload random --footprint 256M --read-fraction 0.3 \
        --outstanding 16 --requests "$REQUESTS" --cache-pages "$2" --write-policy "$1" |
        awk '/^iops/ {print $2}'
}
echo "| cache pages | write-through IOPS | write-back IOPS | write-back-ordered IOPS | WB / WT | WB-O / WT |"
echo "|---:|---:|---:|---:|---:|---:|"
for pages in $SIZES; do
    wt=$(run write-through "$pages")
    wb=$(run write-back "$pages")
    wbo=$(run write-back-ordered "$pages")
    echo "| $pages | $wt | $wb | $wbo | $(awk "BEGIN {printf \"%.2f\", $wb / $wt}") | $(awk "BEGIN {printf \"%.2f\", $wbo / $wt}") |"
done
