#!/usr/bin/env bash
# Request-oriented admission in the simulator: all, sync and cp side by side
# on one request stream (random 4 KiB writes over 1 GiB from 8 issuers, 2 of
# them hinted critical, half of the writes sync; NV-DRAM cache), over
# backings, cache sizes and loads. Prints one markdown table row per run:
# IOPS, writes cached of all writes, stalls, and response times (ms) of the
# critical writes (sync writes of critical issuers) and of the others.
# The figures in docs/experiments/admission.md come from this script.
#
# Usage: scripts/admission-sweep.sh [WCACHE_BIN]   (default target/ci/wcache)
set -euo pipefail

BIN=${1:-target/ci/wcache}
echo "| backing | cache pages | load | admission | IOPS | cached / writes | stalls | critical mean / p99 / p99.9 | other mean / p99 / p99.9 |"
echo "|---|---|---|---|---|---|---|---|---|"
run() { # backing pages load admission
    local out
    # shellcheck disable=SC2086  # $3 is two words on purpose
    out=$("$BIN" sim --backend "$1" --cache-pages "$2" --footprint 1G --workload random $3 \
        --issuers 8 --critical-issuers 2 --sync-fraction 0.5 --admission "$4" \
        --requests 20000 --warmup 5000 --seed 1)
    awk -v b="$1" -v p="$2" -v l="$3" -v a="$4" '
        /^iops/ { iops = $2 }
        /^stalls/ { stalls = $2 }
        /^admission/ { cached = $3 " / " $5 }
        /^critical|^other/ {
            gsub(/[(),]/, " ")
            t = sprintf("%s / %s / %s", $6, $10, $12)
            if ($1 == "critical") crit = t; else other = t
        }
        END { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", b, p, l, a, iops, cached, stalls, crit, other }
    ' <<<"$out"
}
for load in "--target-iops 300" "--target-iops 600" "--outstanding 32"; do
    for a in all sync cp; do run hdd 4096 "$load" "$a"; done
done
for pages in 256 4096; do
    for a in all sync cp; do run raid10 "$pages" "--target-iops 1000" "$a"; done
done
