#!/usr/bin/env bash
# Write policies over cache sizes in the simulator (the write-policies
# paper's Fig. 13, in shape): write-through, write-back and
# write-back-ordered, a closed loop of 16 outstanding requests, 30 % reads,
# random 4 KiB over a 256 MiB footprint, on the HDD model, for cache sizes
# from 1 K to 64 K pages. Prints a markdown table: IOPS, and for each
# write-back policy its IOPS over write-through's.
#
# WORKLOAD=fileserver runs the file-server workload instead (PostMark-like:
# FILES files of about 100 KiB, 16 streams, creates, deletes, appends,
# whole-file reads, journal commits; docs/workloads.md), on the same HDD
# model, by default over 2 K to 128 K pages.
#
# Usage: scripts/write-policies-sweep.sh   (REQUESTS=40000 SIZES="1024 4096 16384 65536"
#        WORKLOAD=random|fileserver FILES=2000
#        POLICIES="write-through write-back write-back-ordered": any --write-policy
#        names, ratios over the first)
set -euo pipefail
REQUESTS=${REQUESTS:-40000}
POLICIES=${POLICIES:-"write-through write-back write-back-ordered"}
WORKLOAD=${WORKLOAD:-random}
FILES=${FILES:-2000}
case $WORKLOAD in
random)
    WORKLOAD_ARGS=(--workload random --footprint 256M --read-fraction 0.3)
    SIZES=${SIZES:-"1024 4096 16384 65536"}
    ;;
fileserver)
    WORKLOAD_ARGS=(--workload fileserver --files "$FILES")
    SIZES=${SIZES:-"2048 8192 32768 131072"}
    ;;
*)
    echo "unknown WORKLOAD $WORKLOAD (random, fileserver)" >&2
    exit 1
    ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache
run() { # policy pages -> IOPS over the measured window
    "$WCACHE" sim --backend hdd "${WORKLOAD_ARGS[@]}" \
        --outstanding 16 --requests "$REQUESTS" --cache-pages "$2" --write-policy "$1" |
        awk '/^iops/ {print $2}'
}
base=${POLICIES%% *}
header="| cache pages |" rule="|---:|"
for policy in $POLICIES; do header="$header $policy IOPS |" rule="$rule---:|"; done
for policy in ${POLICIES#"$base"}; do header="$header $policy / $base |" rule="$rule---:|"; done
echo "$header"
echo "$rule"
for pages in $SIZES; do
    declare -A IOPS=()
    row="| $pages |"
    for policy in $POLICIES; do
        IOPS[$policy]=$(run "$policy" "$pages")
        row="$row ${IOPS[$policy]} |"
    done
    for policy in ${POLICIES#"$base"}; do
        row="$row $(awk -v a="${IOPS[$policy]}" -v b="${IOPS[$base]}" 'BEGIN {printf "%.2f", a / b}') |"
    done
    echo "$row"
done
