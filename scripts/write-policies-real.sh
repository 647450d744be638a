#!/usr/bin/env bash
# Write policies on a real filesystem (the write-policies paper's Fig. 12,
# in shape): ext4 on `wcache serve` (cache file on the disk under
# BENCH_DIR, backing an emulated HDD so that it is slow like the paper's
# RAID-1 of 7.2K disks), attached with nbdfuse + a loop device, running
# (a) PostMark and (b) pgbench on PostgreSQL with its data directory on the
# ext4, once per write policy and cache size. Each run starts from a fresh
# ext4 (formatted on the backing file before serve starts) and an empty
# cache. Prints a markdown table per benchmark: throughput per policy and
# over the first policy's (write-through's by default).
#
# Usage (root): scripts/write-policies-real.sh
#   POLICIES="write-through write-back write-back-ordered"  any --write-policy names
#   PM_CACHE_SIZES="2G 256M" PG_CACHE_SIZES="1G 64M"   cache sizes per
#       benchmark: the first holds the working set, the others are smaller
#   BENCHMARKS="postmark pgbench"   BENCH_DIR=/var/tmp   BACKING=emulated-hdd
#   BACKING_SIZE=8G   MEM_LIMIT=512M (memory cgroup of the benchmark; "" none)
#   PM_FILES=10000 PM_SIZE="51200 153600" PM_TRANSACTIONS=6000 PM_SEED=42
#   PG_SCALE=10 PG_CLIENTS=8 PG_SECONDS=60   SERVE_ARGS= (extra serve options)
#   JOURNAL_SIZE=256M (write-back-journaled's --journal-size; its backing
#       keeps a journal that large at its end, so ext4 ends before it);
#       a policy written NAME:SIZE (e.g. wb-j:1G) takes SIZE instead, so one
#       run sweeps the journal size beside the other policies (Fig. 14)
#   KEEP_LOGS=DIR (copy each run's logs there)
# Cleanup (unmount, loop device, nbdfuse, serve, postgres, cgroup) runs on
# any exit; after SIGTERM, once the step in progress returns.
# Needs util-linux; installs the Debian packages libnbd-bin (nbdfuse),
# fuse3, e2fsprogs, postmark and postgresql when their tools are missing.
set -euo pipefail

POLICIES=${POLICIES:-"write-through write-back write-back-ordered"}
PM_CACHE_SIZES=${PM_CACHE_SIZES:-"2G 256M"}
PG_CACHE_SIZES=${PG_CACHE_SIZES:-"1G 64M"}
BENCHMARKS=${BENCHMARKS:-"postmark pgbench"}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
BACKING=${BACKING:-emulated-hdd}
BACKING_SIZE=${BACKING_SIZE:-8G}
MEM_LIMIT=${MEM_LIMIT-512M}
PM_FILES=${PM_FILES:-10000}
PM_SIZE=${PM_SIZE:-"51200 153600"}
PM_TRANSACTIONS=${PM_TRANSACTIONS:-6000}
PM_SEED=${PM_SEED:-42}
PG_SCALE=${PG_SCALE:-10}
PG_CLIENTS=${PG_CLIENTS:-8}
PG_SECONDS=${PG_SECONDS:-60}
SERVE_ARGS=${SERVE_ARGS:-}
JOURNAL_SIZE=${JOURNAL_SIZE:-256M}
KEEP_LOGS=${KEEP_LOGS:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

die() { echo "write-policies-real: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (loop devices, mount, memory cgroup)"
for tool in cargo losetup mount umount mountpoint runuser awk numfmt; do
    command -v "$tool" >/dev/null || die "missing $tool (cargo: the Rust toolchain; Debian: util-linux, mount, mawk, coreutils)"
done

# Install a Debian package only when its tool is missing.
need_package() { # package test-command...
    local package=$1
    shift
    "$@" >/dev/null 2>&1 && return
    echo "installing $package" >&2
    command -v apt-get >/dev/null || die "missing $package and no apt-get to install it"
    apt-get install -y -q "$package" >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$package" >/dev/null 2>&1; } ||
        die "cannot install $package"
    "$@" >/dev/null 2>&1 || die "$package installed but still missing"
}
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
need_package libnbd-bin command -v nbdfuse
need_package fuse3 command -v fusermount3
need_package e2fsprogs command -v mkfs.ext4
for bench in $BENCHMARKS; do
    case $bench in
    postmark) need_package postmark command -v postmark ;;
    pgbench)
        need_package postgresql test -x "$(pg_bin)/initdb"
        need_package postgresql test -x "$(pg_bin)/pgbench"
        ;;
    *) die "unknown benchmark $bench (postmark, pgbench)" ;;
    esac
done
PG_BIN=$(pg_bin)

(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET nice cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache
# An unknown policy is an error of serve's own (it names the choices): ask
# it before any run, with a throwaway cache in memory.
for policy in $POLICIES; do
    out=$("$WCACHE" serve --cache mem --backing mem:1M --write-policy "${policy%%:*}" \
        --socket /nonexistent/dir/w.sock 2>&1 || true)
    if echo "$out" | grep -qi "unknown write policy"; then
        die "$(echo "$out" | grep -i "unknown write policy" | head -1)"
    fi
done

WORK=$(mktemp -d "$BENCH_DIR/wcache-realexp.XXXXXX")
chmod 755 "$WORK"
FUSE=$WORK/fuse MNT=$WORK/mnt
mkdir -p "$FUSE" "$MNT"
WC_PID= FUSE_PID= LOOP= PG_DATA= CGROUP=

# Undo whatever one run set up; safe to call twice.
teardown() {
    if [ -n "$PG_DATA" ]; then
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    if mountpoint -q "$MNT"; then umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; fi
    [ -n "$LOOP" ] && { losetup -d "$LOOP" 2>/dev/null || true; }
    fusermount3 -u -z "$FUSE" 2>/dev/null || true
    [ -n "$FUSE_PID" ] && { kill "$FUSE_PID" 2>/dev/null || true; }
    if [ -n "$WC_PID" ] && kill -0 "$WC_PID" 2>/dev/null; then
        kill -TERM "$WC_PID" 2>/dev/null || true
        for _ in $(seq 300); do kill -0 "$WC_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$WC_PID" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    WC_PID= FUSE_PID= LOOP= PG_DATA=
}
cleanup() {
    teardown
    if [ -n "$KEEP_LOGS" ] && [ -d "$WORK/logs" ]; then
        mkdir -p "$KEEP_LOGS" && cp "$WORK"/logs/*.log "$WORK"/*.log "$KEEP_LOGS"/ 2>/dev/null || true
    fi
    [ -n "$CGROUP" ] && { rmdir "$CGROUP" 2>/dev/null || true; }
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The benchmark runs in a memory cgroup of MEM_LIMIT, as the paper's host
# had 512 MB: otherwise this machine's page cache holds every file and the
# policies are seen only through fsync and the kernel's writeback.
CG_PROCS=
if [ -n "$MEM_LIMIT" ]; then
    limit_bytes=$(numfmt --from=iec "$MEM_LIMIT")
    if [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/wcache-realexp-$$" 2>/dev/null; then
        CGROUP=/sys/fs/cgroup/memory/wcache-realexp-$$
        echo "$limit_bytes" >"$CGROUP/memory.limit_in_bytes"
    elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
        mkdir "/sys/fs/cgroup/wcache-realexp-$$" 2>/dev/null; then
        CGROUP=/sys/fs/cgroup/wcache-realexp-$$
        echo "$limit_bytes" >"$CGROUP/memory.max"
    else
        echo "note: no memory cgroup here; the benchmark gets the whole page cache" >&2
    fi
    [ -n "$CGROUP" ] && CG_PROCS=$CGROUP/cgroup.procs
fi
in_cgroup() { # command... (as is, in the benchmark's memory cgroup if any)
    if [ -n "$CG_PROCS" ]; then
        sh -c 'echo $$ >"$0" && exec "$@"' "$CG_PROCS" "$@"
    else
        "$@"
    fi
}

now() { date +%s.%N; }

# Fresh ext4 on the backing file, an empty cache, serve, attach, mount.
attach() { # policy[:journal-size] cache-size
    local policy=${1%%:*} journal_size=$JOURNAL_SIZE cache_size=$2
    [ "$1" = "$policy" ] || journal_size=${1#*:}
    rm -f "$WORK/cache.img" "$WORK/w.sock" "$WORK/w.ctl"
    truncate -s 0 "$WORK/backing.img"
    truncate -s "$BACKING_SIZE" "$WORK/backing.img"
    # write-back-journaled keeps a journal of journal_size at the backing's
    # end: ext4 is made to end before it.
    local fs_kib="" extra=()
    if [ "$policy" = write-back-journaled ] || [ "$policy" = wb-j ]; then
        local bytes pages region
        bytes=$(numfmt --from=iec "$journal_size")
        pages=$((bytes / 4096))
        region=$((4096 + (pages * 16 + 4095) / 4096 * 4096 + pages * 4096))
        fs_kib=$((($(stat -c %s "$WORK/backing.img") - region) / 4096 * 4))
        extra=(--journal-size "$journal_size" --journal disk=backing-end)
    fi
    # shellcheck disable=SC2086
    mkfs.ext4 -q -F "$WORK/backing.img" ${fs_kib:+${fs_kib}k}
    # shellcheck disable=SC2086
    "$WCACHE" serve --cache "$WORK/cache.img" --cache-size "$cache_size" \
        --backing "$BACKING:$WORK/backing.img" --write-policy "$policy" "${extra[@]}" \
        --socket "$WORK/w.sock" $SERVE_ARGS >"$WORK/serve.log" 2>&1 &
    WC_PID=$!
    for _ in $(seq 300); do [ -S "$WORK/w.sock" ] && break; sleep 0.1; done
    [ -S "$WORK/w.sock" ] || die "serve did not start: $(tail -3 "$WORK/serve.log")"
    nbdfuse "$FUSE" "nbd+unix:///disk?socket=$WORK/w.sock" 2>>"$WORK/nbdfuse.log" &
    FUSE_PID=$!
    for _ in $(seq 300); do [ -e "$FUSE/nbd" ] && break; sleep 0.1; done
    [ -e "$FUSE/nbd" ] || die "nbdfuse did not start: $(tail -3 "$WORK/nbdfuse.log")"
    # Direct I/O: the loop device adds no page cache of its own (outside
    # the benchmark's memory cgroup) between ext4 and the NBD export.
    LOOP=$(losetup -f --show --direct-io=on "$FUSE/nbd")
    mount "$LOOP" "$MNT"
}

# Counters of the run (backing traffic, destages, stalls) into the log.
record_stats() { # log
    "$WCACHE" stats --control "$WORK/w.ctl" >>"$1" 2>&1 || true
}

# PostMark: prints transactions per second over the whole run (create the
# file set, the transactions, delete the set) plus a final sync, then
# PostMark's own transactions-per-second figure.
run_postmark() { # log
    local log=$1 start end
    mkdir -p "$MNT/pm"
    cat >"$WORK/pm.cfg" <<EOF
set location $MNT/pm
set number $PM_FILES
set size $PM_SIZE
set read 4096
set write 4096
set bias read 5
set bias create 5
set buffering true
set transactions $PM_TRANSACTIONS
set seed $PM_SEED
run
quit
EOF
    start=$(now)
    in_cgroup postmark "$WORK/pm.cfg" >"$WORK/pm.out" 2>&1
    sync -f "$MNT"
    end=$(now)
    cat "$WORK/pm.out" >>"$log"
    awk -v t="$PM_TRANSACTIONS" -v s="$start" -v e="$end" 'BEGIN {printf "%.1f", t / (e - s)}'
    printf ' %s\n' "$(sed -n 's/.*seconds of transactions (\([0-9.]*\) per second).*/\1/p' "$WORK/pm.out" | head -1)"
}

# pgbench (TPC-B-like, PG_CLIENTS clients for PG_SECONDS) on PostgreSQL
# with its data directory on the ext4; prints tps (without connection time).
run_pgbench() { # log
    local log=$1 sock=$WORK/pgsock port=$((54000 + $$ % 1000))
    mkdir -p "$MNT/pg" "$sock"
    chown postgres: "$MNT/pg" "$sock"
    PG_DATA=$MNT/pg/data
    runuser -u postgres -- "$PG_BIN/initdb" -D "$PG_DATA" -A trust >>"$log" 2>&1
    in_cgroup runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -w -l "$sock/pg.log" \
        -o "-k $sock -p $port -c listen_addresses=''" start >>"$log" 2>&1 ||
        die "postgres did not start: $(tail -3 "$log" "$sock/pg.log" 2>&1)"
    local pg=("$PG_BIN/pgbench" -h "$sock" -p "$port" -U postgres)
    runuser -u postgres -- "${pg[@]}" -i -q -s "$PG_SCALE" postgres >>"$log" 2>&1
    runuser -u postgres -- "$PG_BIN/psql" -h "$sock" -p "$port" -U postgres -qc checkpoint postgres >>"$log" 2>&1
    sync -f "$MNT"
    in_cgroup runuser -u postgres -- "${pg[@]}" -c "$PG_CLIENTS" -j 2 -T "$PG_SECONDS" postgres \
        >"$WORK/pgbench.out" 2>&1
    cat "$WORK/pgbench.out" >>"$log"
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >>"$log" 2>&1 || true
    PG_DATA=
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench.out" | head -1 | awk '{printf "%.1f\n", $1}'
}

LOGS=$WORK/logs
mkdir -p "$LOGS"
declare -A RESULT OWN
cache_sizes() { # benchmark
    case $1 in
    postmark) echo "$PM_CACHE_SIZES" ;;
    pgbench) echo "$PG_CACHE_SIZES" ;;
    esac
}
for bench in $BENCHMARKS; do
    for cache_size in $(cache_sizes "$bench"); do
        for policy in $POLICIES; do
            log=$LOGS/$bench-$cache_size-$policy.log
            attach "$policy" "$cache_size"
            case $bench in
            postmark) read -r value own < <(run_postmark "$log") ;;
            pgbench) value=$(run_pgbench "$log") own= ;;
            esac
            record_stats "$log"
            teardown
            cat "$WORK/serve.log" >>"$log"
            [ -n "$value" ] || die "$bench under $policy gave no figure: see $log"
            RESULT[$bench $cache_size $policy]=$value
            OWN[$bench $cache_size $policy]=${own:-}
            echo "$bench cache $cache_size $policy: $value ${own:+(PostMark: $own tx/s)}" >&2
        done
    done
done

base=${POLICIES%% *}
for bench in $BENCHMARKS; do
    case $bench in
    postmark) unit="transactions/s (whole run + sync; PostMark's own tx/s in brackets)" ;;
    pgbench) unit="tps" ;;
    esac
    echo
    echo "$bench, $unit, normalized to $base:"
    echo
    header="| cache |" rule="|---:|"
    for policy in $POLICIES; do header="$header $policy |" rule="$rule---:|"; done
    for policy in ${POLICIES#"$base"}; do header="$header $policy / $base |" rule="$rule---:|"; done
    echo "$header"
    echo "$rule"
    for cache_size in $(cache_sizes "$bench"); do
        row="| $cache_size |"
        for policy in $POLICIES; do
            own=${OWN[$bench $cache_size $policy]}
            row="$row ${RESULT[$bench $cache_size $policy]}${own:+ ($own)} |"
        done
        for policy in ${POLICIES#"$base"}; do
            row="$row $(awk -v a="${RESULT[$bench $cache_size $policy]}" -v b="${RESULT[$bench $cache_size $base]}" \
                'BEGIN {printf "%.2f", a / b}') |"
        done
        echo "$row"
    done
done
echo
echo "Paper (Koller et al., FAST'13, Fig. 12: PostMark, Filebench, TPC-C, YCSB on ext3,"
echo "cache ~80 % of the working set, normalized to write-through): write-through lowest;"
echo "ordered write-back +10 % ... 8x and journaled +50 % ... 10x across its benchmarks."
