#!/usr/bin/env bash
# NBD server benchmark: fio's nbd engine, 4 KiB random write and random read
# at QD1 and QD32, against `wcache serve` and nbdkit's memory plugin in the
# same run (side by side: the machine is shared and noisy; read the ratios).
#
# wcache runs write-back with a persistent cache (slot records, crash
# recovery) and, in a second row, write-through; the cache AND the backing are
# files on /dev/shm (sync mode nvram: tmpfs stands in for NV-DRAM; the cache
# file is mapped), so every side serves from memory. wcache polls a busy
# connection's socket before sleeping (--poll-us, default 50); the last column,
# each server's CPU time per request during the job, shows what that costs.
#
# Statistics are always on (request counts and latency histograms per
# export and kind); the write-back server also serves Prometheus metrics
# (--metrics), scraped once a second while fio runs (SCRAPE=0: not scraped).
#
# Usage: scripts/bench-nbd.sh            (RUNTIME=5 SIZE=256M SCRAPE=1 by default;
#        WCACHE_ARGS adds serve options to both wcache servers, e.g.
#        "--cache-format 2")
# Last line: the QD32 random-write IOPS ratio wcache(write-back)/nbdkit.
set -euo pipefail

RUNTIME=${RUNTIME:-5}
SIZE=${SIZE:-256M}
SCRAPE=${SCRAPE:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
for tool in fio nbdkit python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio nbdkit)"; exit 1; }
done
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache

WORK=$(mktemp -d /dev/shm/wcache-bench.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

wait_socket() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1"; exit 1; }

"$WCACHE" serve --socket "$WORK/wb.sock" --cache "$WORK/wb-cache.img" --cache-size "$SIZE" \
    --cache-sync nvram --backing "$WORK/wb-backing.img" --backing-size "$SIZE" --backing-sync nvram \
    --write-policy write-back --metrics 127.0.0.1:0 ${WCACHE_ARGS:-} >"$WORK/wb.log" 2>&1 &
PIDS+=($!)
"$WCACHE" serve --socket "$WORK/wt.sock" --cache "$WORK/wt-cache.img" --cache-size "$SIZE" \
    --cache-sync nvram --backing "$WORK/wt-backing.img" --backing-size "$SIZE" --backing-sync nvram \
    --write-policy write-through ${WCACHE_ARGS:-} >"$WORK/wt.log" 2>&1 &
PIDS+=($!)
nbdkit -f -U "$WORK/kit.sock" --exportname=disk memory "$SIZE" >"$WORK/kit.log" 2>&1 &
PIDS+=($!)
for s in wt wb kit; do wait_socket "$WORK/$s.sock"; done
METRICS_URL=$(sed -n 's/.*metrics: \(http:[^ ]*\).*/\1/p' "$WORK/wb.log")
if [ "$SCRAPE" = 1 ]; then
    [ -n "$METRICS_URL" ] || { echo "no metrics address in $WORK/wb.log"; exit 1; }
    python3 -c '
import sys, time, urllib.request
while True:
    urllib.request.urlopen(sys.argv[1]).read()
    time.sleep(1)
' "$METRICS_URL" >/dev/null 2>&1 &
    PIDS+=($!)
fi

uri() { echo "nbd+unix:///disk?socket=$WORK/$1.sock"; }

declare -A PID_OF=([wb]=${PIDS[0]} [wt]=${PIDS[1]} [kit]=${PIDS[2]})
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system, all threads

run_fio() { # target rw qd -> json file, and the server's CPU ticks during the job
    local out="$WORK/$1-$2-$3.json" before
    before=$(cpu_ticks "${PID_OF[$1]}")
    fio --name=b --ioengine=nbd --uri="$(uri "$1")" --rw="$2" --bs=4k --size="$SIZE" \
        --iodepth="$3" --time_based --runtime="$RUNTIME" --randrepeat=0 --lat_percentiles=1 \
        --output-format=json --output="$out" >/dev/null
    echo $(($(cpu_ticks "${PID_OF[$1]}") - before)) >"$WORK/$1-$2-$3.ticks"
}

echo "warm-up: sequential write of $SIZE to each target"
for t in wt wb kit; do
    fio --name=w --ioengine=nbd --uri="$(uri $t)" --rw=write --bs=1m --size="$SIZE" --iodepth=8 \
        --output-format=terse >/dev/null
done

for rw in randwrite randread; do
    for qd in 1 32; do
        for t in kit wt wb; do run_fio "$t" "$rw" "$qd"; done
    done
done

python3 - "$WORK" "$RUNTIME" "$SIZE" "$(getconf CLK_TCK)" <<'PY'
import json, sys
work, runtime, size, tck = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def get(t, rw, qd):
    j = json.load(open(f"{work}/{t}-{rw}-{qd}.json"))["jobs"][0]
    side = j["write" if rw == "randwrite" else "read"]
    pct = side["lat_ns"].get("percentile", {})
    ticks = int(open(f"{work}/{t}-{rw}-{qd}.ticks").read())
    cpu_us = ticks * 1e6 / tck / side["total_ios"] if side["total_ios"] else float("nan")
    return side["iops"], pct.get("50.000000", 0) / 1000, pct.get("99.000000", 0) / 1000, cpu_us
names = {"kit": "nbdkit memory", "wb": "wcache write-back (persistent, /dev/shm)", "wt": "wcache write-through (/dev/shm)"}
print(f"\nfio nbd engine, 4 KiB, {runtime} s per job, {size} export, Unix sockets")
print(f"{'workload':<15}{'target':<42}{'IOPS':>10}{'p50 us':>9}{'p99 us':>9}{'IOPS/nbdkit':>13}{'p50/nbdkit':>12}{'server CPU us/op':>18}")
ratio_line = None
for rw in ("randwrite", "randread"):
    for qd in (1, 32):
        kit = get("kit", rw, qd)
        for t in ("kit", "wt", "wb"):
            iops, p50, p99, cpu = get(t, rw, qd)
            r_iops = iops / kit[0] if kit[0] else float("nan")
            r_p50 = p50 / kit[1] if kit[1] else float("nan")
            print(f"{rw + ' QD' + str(qd):<15}{names[t]:<42}{iops:>10.0f}{p50:>9.1f}{p99:>9.1f}{r_iops:>13.2f}{r_p50:>12.2f}{cpu:>18.1f}")
            if rw == "randwrite" and qd == 32 and t == "wb":
                ratio_line = r_iops
print(f"QD32 randwrite IOPS ratio wcache(write-back)/nbdkit: {ratio_line:.2f}")
PY
