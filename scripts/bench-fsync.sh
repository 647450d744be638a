#!/usr/bin/env bash
# ext4 fsync benchmark: a 4 KiB fsync-per-write fio job on ext4 mounted from
#   (b) the emulated 10K RPM HDD alone, served with no caching, and
#   (a) wcache serve in front of the same emulated HDD,
# in the same run (side by side: the machine is shared and noisy; read the ratio).
#
# Every target is attached the README's way: nbdfuse (NBD export as a FUSE
# file) + losetup + mkfs.ext4 + mount. Needs root, /dev/fuse, loop devices,
# fio, nbdfuse, fusermount3, e2fsprogs, python3.
#
# "HDD alone" = `wcache serve --write-policy write-around --cache mem
# --cache-size 1M`: every write bypasses the cache and is acknowledged only
# when the emulated HDD has completed it (the engine's WriteBacking command,
# completed by the driver after the model's service time); reads barely touch
# a 1 MiB cache. Its only overhead over a bare disk server is the engine's
# metadata work (microseconds against milliseconds of disk time). The emulated
# HDD (the simulator's 10K RPM model in real time, no volatile write cache)
# keeps its bytes in a sparse file on /dev/shm with --backing-sync nvram, so the
# model's service time is the only disk time on both sides (no host fdatasync).
#
# wcache: a 1 GiB cache file on /dev/shm (--cache-sync nvram: tmpfs standing in
# for NV-DRAM) with write-back when this binary accepts it for a file cache
# (durable: acknowledged once data and record are on the cache device). A
# binary that refuses write-back (as before crash recovery existed) gets
# write-through instead, which acknowledges a write only once the HDD has it
# too: for fsync'd writes it cannot be faster than the disk (ratio near 1).
# The job dirties at most SIZE plus the journal, far below the 1 GiB cache:
# this measures a burst the cache absorbs, not a sustained rate, which a full
# cache would bring down to what destaging to the HDD can keep up with.
# For context only, a third row runs write-through when write-back is the
# main row (what a cache that acknowledges only after the disk gives), or the
# volatile write-back benchmark mode (--volatile-write-back-for-benchmarks
# --cache mem, NOT durable) when write-back is refused.
#
# Usage: sudo scripts/bench-fsync.sh      (RUNTIME=20 SIZE=64M by default)
# Last line: the fsync'd 4 KiB write IOPS ratio wcache/HDD-alone.
set -euo pipefail

RUNTIME=${RUNTIME:-20}
SIZE=${SIZE:-64M}
DISK_SIZE=${DISK_SIZE:-1G}
CACHE_SIZE=${CACHE_SIZE:-1G}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

[ "$(id -u)" = 0 ] || { echo "needs root (losetup, mount)"; exit 1; }
[ -e /dev/fuse ] || { echo "no /dev/fuse"; exit 1; }
for tool in fio nbdfuse fusermount3 losetup mkfs.ext4 mount umount python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio nbdfuse fuse3 e2fsprogs)"; exit 1; }
done
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache

WORK=$(mktemp -d /dev/shm/wcache-fsync.XXXXXX)
SERVER_PIDS=()
FUSE_PIDS=()
cleanup() {
    set +e
    for m in "$WORK"/*-mnt; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
    for f in "$WORK"/*-fuse; do
        [ -e "$f/nbd" ] || continue
        for d in $(losetup -j "$f/nbd" -O NAME -n 2>/dev/null); do losetup -d "$d"; done
        fusermount3 -u "$f" 2>/dev/null || fusermount3 -u -z "$f" 2>/dev/null
    done
    for p in "${FUSE_PIDS[@]}" "${SERVER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# start_server NAME ARGS... ; sets SERVER_PID; returns 1 if it exits before listening
start_server() {
    local name=$1; shift
    "$WCACHE" serve --socket "$WORK/$name.sock" "$@" >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 400); do
        [ -S "$WORK/$name.sock" ] && { SERVER_PIDS+=("$SERVER_PID"); return 0; }
        kill -0 "$SERVER_PID" 2>/dev/null || { wait "$SERVER_PID" || true; return 1; }
        sleep 0.05
    done
    echo "wcache serve ($name) did not listen"; cat "$WORK/$name.log"; exit 1
}

stop_server() { # pid name: SIGTERM, must exit 0
    kill -TERM "$1"
    local rc=0
    wait "$1" || rc=$?
    [ "$rc" = 0 ] || { echo "wcache serve ($2) exited $rc"; cat "$WORK/$2.log"; exit 1; }
}

# run_target NAME SERVE-ARGS... : serve, attach, mkfs, mount, fio, detach, stop
run_target() {
    local name=$1; shift
    start_server "$name" "$@" || { echo "wcache serve ($name) refused:"; cat "$WORK/$name.log"; exit 1; }
    local pid=$SERVER_PID fuse=$WORK/$name-fuse mnt=$WORK/$name-mnt
    mkdir -p "$fuse" "$mnt"
    nbdfuse -P "$WORK/$name-fuse.pid" "$fuse" "nbd+unix:///disk?socket=$WORK/$name.sock" \
        >"$WORK/$name-fuse.log" 2>&1 &
    local fpid=$!
    FUSE_PIDS+=("$fpid")
    for _ in $(seq 400); do [ -e "$WORK/$name-fuse.pid" ] && break; sleep 0.05; done
    [ -e "$WORK/$name-fuse.pid" ] || { echo "nbdfuse ($name) not ready"; cat "$WORK/$name-fuse.log"; exit 1; }
    local dev
    dev=$(losetup -f --show "$fuse/nbd")
    mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$dev"
    mount -t ext4 -o noinit_itable "$dev" "$mnt"
    # fio lays the file out (untimed), then runs the timed fsync-per-write job.
    fio --name=fsync4k --directory="$mnt" --ioengine=psync --rw=randwrite --bs=4k --fsync=1 \
        --size="$SIZE" --runtime="$RUNTIME" --time_based --randrepeat=0 --lat_percentiles=1 \
        --output-format=json --output="$WORK/$name.json" >/dev/null
    umount "$mnt"
    losetup -d "$dev"
    fusermount3 -u "$fuse"
    wait "$fpid" || true
    stop_server "$pid" "$name"
}

DISK="--backing-size $DISK_SIZE --backing-sync nvram"
echo "HDD alone: wcache serve --write-policy write-around --cache mem --cache-size 1M, emulated-hdd"
# shellcheck disable=SC2086
run_target hdd --write-policy write-around --cache mem --cache-size 1M \
    --backing "emulated-hdd:$WORK/hdd-backing.img" $DISK

WC_ARGS=(--cache "$WORK/wc-cache.img" --cache-size "$CACHE_SIZE" --cache-sync nvram
    --backing "emulated-hdd:$WORK/wc-backing.img" --backing-size "$DISK_SIZE" --backing-sync nvram)
if start_server probe --write-policy write-back "${WC_ARGS[@]}"; then
    stop_server "$SERVER_PID" probe
    rm -f "$WORK/wc-cache.img" "$WORK/wc-backing.img"
    POLICY=write-back
else
    echo "write-back refused for a file cache by this binary: $(grep -m1 -o 'write-back is refused[^.]*' "$WORK/probe.log" || head -1 "$WORK/probe.log")"
    POLICY=write-through
fi
echo "wcache: --write-policy $POLICY, 1 GiB cache file on /dev/shm (nvram), emulated-hdd"
run_target wcache --write-policy "$POLICY" "${WC_ARGS[@]}"

TARGETS="hdd wcache"
if [ "$POLICY" = write-back ]; then
    echo "context: --write-policy write-through, same cache and disk"
    run_target wt --write-policy write-through --cache "$WORK/wt-cache.img" --cache-size "$CACHE_SIZE" \
        --cache-sync nvram --backing "emulated-hdd:$WORK/wt-backing.img" --backing-size "$DISK_SIZE" \
        --backing-sync nvram
    TARGETS="hdd wcache wt"
else
    echo "context: --volatile-write-back-for-benchmarks (NOT durable), same cache and disk"
    # shellcheck disable=SC2086
    run_target volwb --volatile-write-back-for-benchmarks --cache mem \
        --cache-size "$CACHE_SIZE" --backing "emulated-hdd:$WORK/vwb-backing.img" $DISK
    TARGETS="hdd wcache volwb"
fi

python3 - "$WORK" "$RUNTIME" "$SIZE" "$POLICY" $TARGETS <<'PY'
import json, sys
work, runtime, size, policy, targets = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
names = {"hdd": "emulated HDD alone (write-around)",
         "wcache": f"wcache {policy}",
         "volwb": "wcache volatile write-back (context)",
         "wt": "wcache write-through (context)"}
def get(t):
    j = json.load(open(f"{work}/{t}.json"))["jobs"][0]
    w, s = j["write"], j["sync"]
    wp, sp = w["lat_ns"].get("percentile", {}), s["lat_ns"].get("percentile", {})
    us = lambda p, k: p.get(k, 0) / 1000
    return (w["iops"], us(wp, "50.000000"), us(wp, "99.000000"),
            us(sp, "50.000000"), us(sp, "99.000000"), w["total_ios"])
rows = {t: get(t) for t in targets}
print(f"\next4 via nbdfuse + loop, fio psync randwrite 4k, fsync after every write, {size} file, {runtime} s")
print(f"{'target':<40}{'IOPS':>9}{'write p50 us':>14}{'write p99 us':>14}{'fsync p50 us':>14}{'fsync p99 us':>14}{'writes':>9}{'x HDD':>8}")
hdd = rows["hdd"][0]
for t in targets:
    iops, wp50, wp99, sp50, sp99, n = rows[t]
    print(f"{names[t]:<40}{iops:>9.1f}{wp50:>14.1f}{wp99:>14.1f}{sp50:>14.1f}{sp99:>14.1f}{n:>9}{iops / hdd:>8.2f}")
print(f"fsync'd 4 KiB write IOPS ratio wcache({policy})/HDD-alone: {rows['wcache'][0] / hdd:.2f}")
PY
