#!/usr/bin/env bash
# Cache-loss trials on a real filesystem: ext4 (formatted on the backing
# file first) served by `wcache serve` with a cache file, attached with
# nbdfuse + a loop device and mounted; four writers churn files with fsync
# (create, append, rename, unlink, mkdir) while destages run; then
# `kill -9` of wcache and the cache file is deleted. The backing file alone
# must then mount (ext4 replays its journal), unmount, and pass
# `e2fsck -fn` with no errors. Each policy runs TRIALS times; the last
# lines count the clean trials per policy.
#
# Usage (root): scripts/cache-loss-trials.sh
#   TRIALS=20 POLICIES="write-back-ordered write-back-journaled write-back" LOAD_SECONDS=6
#   JOURNAL_SIZE=16777216 (bytes; write-back-journaled, or write-back-journaled:flush
#   for consistency points at every FLUSH)
#   BENCH_DIR=/var/tmp SERVE_ARGS="--max-dirty-age 1s" (extra serve options)
# Needs: nbdfuse (libnbd-bin), fuse3, e2fsprogs, util-linux, python3.
set -euo pipefail

TRIALS=${TRIALS:-20}
POLICIES=${POLICIES:-"write-back-ordered write-back-journaled write-back"}
JOURNAL_SIZE=${JOURNAL_SIZE:-16777216}
LOAD_SECONDS=${LOAD_SECONDS:-6}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
SERVE_ARGS=${SERVE_ARGS:---max-dirty-age 1s}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
[ "$(id -u)" = 0 ] || { echo "needs root (loop devices, mount)"; exit 1; }
for tool in nbdfuse fusermount3 losetup mkfs.ext4 e2fsck python3 mount umount; do
    command -v "$tool" >/dev/null || { echo "missing $tool"; exit 1; }
done
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache
WORK=$(mktemp -d "$BENCH_DIR/wcache-trials.XXXXXX")
FUSE=$WORK/fuse MNT=$WORK/mnt
mkdir -p "$FUSE" "$MNT"
WC_PID= FUSE_PID= LOAD_PID= LOOP=

# Undo whatever one trial set up; safe to call twice.
teardown() {
    [ -n "$LOAD_PID" ] && kill -9 "$LOAD_PID" 2>/dev/null || true
    [ -n "$WC_PID" ] && kill -9 "$WC_PID" 2>/dev/null || true
    umount -l "$MNT" 2>/dev/null || true
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
    fusermount3 -u -z "$FUSE" 2>/dev/null || true
    [ -n "$FUSE_PID" ] && kill -9 "$FUSE_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    WC_PID= FUSE_PID= LOAD_PID= LOOP=
}
trap 'teardown; rm -rf "$WORK"' EXIT

# Four writers, each in its own directory, until killed.
LOAD='
import os, random, sys, threading
root = sys.argv[1]
def churn(n):
    rnd = random.Random(n)
    d = os.path.join(root, "w%d" % n)
    os.makedirs(d, exist_ok=True)
    names = []
    while True:
        op = rnd.random()
        try:
            if op < 0.45 or not names:
                name = os.path.join(d, "f%d" % rnd.randrange(1 << 30))
                with open(name, "wb") as f:
                    f.write(os.urandom(rnd.randrange(1, 64) * 1024))
                    f.flush(); os.fsync(f.fileno())
                names.append(name)
            elif op < 0.65:
                with open(rnd.choice(names), "ab") as f:
                    f.write(os.urandom(rnd.randrange(1, 16) * 1024))
                    f.flush(); os.fsync(f.fileno())
            elif op < 0.8:
                old = names.pop(rnd.randrange(len(names)))
                new = os.path.join(d, "r%d" % rnd.randrange(1 << 30))
                os.rename(old, new); names.append(new)
            elif op < 0.95:
                os.unlink(names.pop(rnd.randrange(len(names))))
            else:
                os.makedirs(os.path.join(d, "d%d" % rnd.randrange(1 << 30)), exist_ok=True)
            if rnd.random() < 0.1:
                fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
        except OSError:
            return
for n in range(4):
    threading.Thread(target=churn, args=(n,), daemon=True).start()
threading.Event().wait()
'

# One trial: prints "clean" or what failed. A policy `write-back-journaled`
# may carry its consistency points after a colon (`...:flush`); its backing
# keeps a JOURNAL_SIZE journal at its end, so ext4 is made to end before it,
# and after the loss `wcache backing-recover` replays it first.
trial() {
    local policy=${1%%:*} points=${1#*:} log=$WORK/serve.log
    local fs_bytes=$((256 << 20)) extra=()
    if [ "$policy" = write-back-journaled ]; then
        local pages=$((JOURNAL_SIZE / 4096))
        local region=$((4096 + (pages * 16 + 4095) / 4096 * 4096 + pages * 4096))
        fs_bytes=$(((fs_bytes - region) / 4096 * 4096))
        extra=(--journal-size "$JOURNAL_SIZE" --journal disk=backing-end)
        [ "$points" != "$1" ] && extra+=(--consistency-points "$points")
    fi
    rm -f "$WORK/cache.img" "$WORK/w.sock"
    truncate -s 0 "$WORK/backing.img"
    truncate -s 256M "$WORK/backing.img"
    mkfs.ext4 -q -F "$WORK/backing.img" "$((fs_bytes / 1024))k"
    # shellcheck disable=SC2086
    "$WCACHE" serve --cache "$WORK/cache.img" --cache-size 64M \
        --export "disk=$WORK/backing.img" --write-policy "$policy" "${extra[@]}" \
        --socket "$WORK/w.sock" $SERVE_ARGS >"$log" 2>&1 &
    WC_PID=$!
    for _ in $(seq 200); do [ -S "$WORK/w.sock" ] && break; sleep 0.05; done
    [ -S "$WORK/w.sock" ] || { echo "serve did not start: $(tail -3 "$log")"; return; }
    nbdfuse "$FUSE" "nbd+unix:///disk?socket=$WORK/w.sock" 2>>"$WORK/nbdfuse.log" &
    FUSE_PID=$!
    for _ in $(seq 200); do [ -e "$FUSE/nbd" ] && break; sleep 0.05; done
    LOOP=$(losetup -f --show "$FUSE/nbd")
    mount "$LOOP" "$MNT"
    python3 -c "$LOAD" "$MNT" 2>/dev/null &
    LOAD_PID=$!
    sleep "$LOAD_SECONDS"
    kill -9 "$WC_PID"
    teardown
    rm -f "$WORK/cache.img"
    if [ "$policy" = write-back-journaled ] &&
        ! "$WCACHE" backing-recover "$WORK/backing.img" --journal-size "$JOURNAL_SIZE" --journal backing-end >>"$log" 2>&1; then
        echo "backing-recover failed: $(tail -1 "$log")"
        return
    fi
    # The backing alone: mount (journal replay), unmount, check.
    if ! mount -o loop "$WORK/backing.img" "$MNT" 2>"$WORK/mount.err"; then
        echo "mount failed: $(head -1 "$WORK/mount.err")"
        return
    fi
    # What reached the backing (so that a clean check is not of an empty disk).
    local files
    files=$(find "$MNT" -type f | wc -l)
    umount "$MNT"
    if e2fsck -fn "$WORK/backing.img" >"$WORK/fsck.log" 2>&1; then
        echo "clean ($files files)"
    else
        echo "e2fsck found errors: $(grep -iE 'error|fix|illegal|wrong|inconsisten' "$WORK/fsck.log" | head -1)"
    fi
}

exec 3>&2 2>>"$WORK/shell.log" # the shell's notes on killed jobs
declare -A CLEAN
for policy in $POLICIES; do
    CLEAN[$policy]=0
    for t in $(seq "$TRIALS"); do
        trial "$policy" >"$WORK/result" # in this shell: teardown sees its pids
        teardown
        result=$(cat "$WORK/result")
        echo "$policy trial $t: $result"
        case $result in clean*) CLEAN[$policy]=$((CLEAN[$policy] + 1)) ;; esac
    done
done
echo "== cache lost after kill -9 mid-load, ext4 on the backing alone (mount, umount, e2fsck -fn):"
for policy in $POLICIES; do
    echo "$policy: ${CLEAN[$policy]}/$TRIALS clean"
done
