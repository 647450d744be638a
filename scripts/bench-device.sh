#!/usr/bin/env bash
# Cache-device benchmark: wcache with its cache file on a DISK filesystem
# (not tmpfs), against the same disk used directly at equal durability, in one
# run (side by side: the machine and its disk are shared; read the ratios).
#
# Targets, every one through the same fio job:
#   dev      fio directly on a file of the same filesystem: io_uring, O_DIRECT,
#            and O_DSYNC for writes (persist-on-write: durable when done)
#   wcache   `wcache serve`, write-back, cache file on that filesystem in the
#            default sync mode (fdatasync; persist-on-write: every acknowledged
#            write is durable), backing a file on the same filesystem
#   kitmem   nbdkit's memory plugin (the NBD path's own limit)
#   kitfile  nbdkit's file plugin on a file of the same filesystem (persists
#            on flush; fio sends no flush here): persist-on-flush's yardstick
#   kitfua   nbdkit's file plugin behind its fua filter with fuamode=force
#            (every write made durable before its reply): persist-on-write's
#            yardstick
# NBD targets are driven by fio's nbd engine over a Unix socket.
#
# Jobs: 4 KiB random write QD1 (p50 latency) and QD32; 1 MiB sequential write
# QD4; 4 KiB random read QD32 of data written before (cached in wcache);
# 1 MiB sequential read QD4, once, of a region never read or written through
# wcache (read misses; the backing files were written with O_DIRECT, so the
# page cache does not hold them either).
#
# Each target starts with no dirty page-cache pages left by the one before
# (a `sync` between targets). Every file is written in full before its
# server starts (fio lays out the device file the same way), so no side
# pays for block allocation. Each wcache job runs on a server started for
# it on the same cache file (the dirty pages of earlier jobs are
# recovered), so that its exit summary gives the cache flushes per request
# of that job alone.
#
# Usage: scripts/bench-device.sh   (RUNTIME=5 SIZE=256M READ_SIZE=512M
#        CACHE_SIZE=1G BENCH_DIR=/var/tmp; WCACHE_ARGS adds serve options,
#        e.g. "--cache-sync fdatasync"; WCACHE_B_ARGS, when set, adds a
#        second wcache target "wcache-b" with these serve options (its own
#        cache and backing files) run in the same invocation, for an A/B of
#        two configurations; WCACHE_BIN and WCACHE_B_BIN run other builds of
#        `wcache` for the two targets, for an A/B of two builds;
#        WCACHE_B_LOOP=1 puts wcache-b's cache on a loop device over its
#        cache file, a real block device (root; add --direct to
#        WCACHE_B_ARGS for O_DIRECT on it); JOBS picks
#        some of the jobs; LOG_DIR keeps the servers' logs)
# Each row also gives the server's own CPU time per request (user + system
# of the server process, /proc/PID/stat around the fio run; none for the
# device), the whole machine's busy CPU time per request during the job
# (/proc/stat: fio, the server, the kernel) and the share of the cores busy; a line before the ratios turns it into the
# cores a wcache job would need at each write target's rate.
# Last lines: the ratios.
set -euo pipefail

RUNTIME=${RUNTIME:-5}
SIZE=${SIZE:-256M}
READ_SIZE=${READ_SIZE:-512M}
CACHE_SIZE=${CACHE_SIZE:-1G}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
WCACHE_ARGS=${WCACHE_ARGS:-}
WCACHE_B_ARGS=${WCACHE_B_ARGS-}
WCACHE_TARGETS="wcache"
[ -n "${WCACHE_B_ARGS}" ] && WCACHE_TARGETS="wcache wcache-b"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
for tool in fio nbdkit python3 stat; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio nbdkit)"; exit 1; }
done
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=${WCACHE_BIN:-$TARGET/release/wcache}
WCACHE_B=${WCACHE_B_BIN:-$TARGET/release/wcache}

WORK=$(mktemp -d "$BENCH_DIR/wcache-bench-device.XXXXXX")
FSTYPE=$(df --output=fstype "$WORK" | tail -1)
case "$FSTYPE" in
    tmpfs | ramfs) echo "$BENCH_DIR is $FSTYPE: give BENCH_DIR on a disk"; rm -rf "$WORK"; exit 1 ;;
esac
PIDS=()
WC_PID=
LOOP_B=
cleanup() {
    [ -n "$WC_PID" ] && kill -TERM "$WC_PID" 2>/dev/null
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "$LOOP_B" ] && losetup -d "$LOOP_B"
    [ -n "${LOG_DIR:-}" ] && cp "$WORK"/*.log "$LOG_DIR"/ 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

bytes() { python3 -c "import sys; u={'K':10,'M':20,'G':30}; s=sys.argv[1]; print(int(s[:-1])<<u[s[-1]] if s[-1] in u else int(s))" "$1"; }
SIZE_B=$(bytes "$SIZE")
READ_B=$(bytes "$READ_SIZE")
TOTAL_B=$((SIZE_B + READ_B))

fill() { # file bytes: written in full with O_DIRECT (allocated, not in the page cache)
    truncate -s "$2" "$1"
    fio --name=fill --filename="$1" --rw=write --bs=1M --size="$2" --direct=1 --ioengine=psync \
        --output-format=terse >/dev/null
}
echo "files on $(df --output=source "$WORK" | tail -1) ($FSTYPE), in $WORK"
fill "$WORK/dev.img" "$TOTAL_B"
fill "$WORK/backing.img" "$TOTAL_B"
fill "$WORK/kit.img" "$TOTAL_B"
fill "$WORK/kitfua.img" "$TOTAL_B"
for t in $WCACHE_TARGETS; do
    [ "$t" = wcache-b ] && fill "$WORK/backing-b.img" "$TOTAL_B"
    truncate -s "$CACHE_SIZE" "$WORK/cache-$t.img"
    fio --name=zero --filename="$WORK/cache-$t.img" --rw=write --bs=1M --size="$CACHE_SIZE" --direct=1 \
        --ioengine=psync --zero_buffers --output-format=terse >/dev/null
done
if [ "${WCACHE_B_LOOP:-0}" = 1 ]; then
    [ -n "${WCACHE_B_ARGS}" ] || { echo "WCACHE_B_LOOP=1 needs WCACHE_B_ARGS (e.g. --direct)"; exit 2; }
    LOOP_B=$(losetup --find --show --direct-io=on "$WORK/cache-wcache-b.img")
    echo "wcache-b: cache on $LOOP_B (loop device over $WORK/cache-wcache-b.img)"
fi

wait_socket() { for _ in $(seq 400); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1"; exit 1; }

nbdkit -f -U "$WORK/kitmem.sock" --exportname=disk memory "$TOTAL_B" >"$WORK/kitmem.log" 2>&1 &
PIDS+=($!)
nbdkit -f -U "$WORK/kitfile.sock" --exportname=disk file "$WORK/kit.img" >"$WORK/kitfile.log" 2>&1 &
PIDS+=($!)
nbdkit -f -U "$WORK/kitfua.sock" --exportname=disk --filter=fua file "$WORK/kitfua.img" fuamode=force \
    >"$WORK/kitfua.log" 2>&1 &
PIDS+=($!)
declare -A SERVER_PID=([kitmem]=${PIDS[0]} [kitfile]=${PIDS[1]} [kitfua]=${PIDS[2]})
wait_socket "$WORK/kitmem.sock"
wait_socket "$WORK/kitfile.sock"
wait_socket "$WORK/kitfua.sock"

wc_start() { # target job
    local args=$WCACHE_ARGS backing=$WORK/backing.img bin=$WCACHE cache=$WORK/cache-$1.img
    [ "$1" = wcache-b ] && args=$WCACHE_B_ARGS && backing=$WORK/backing-b.img && bin=$WCACHE_B
    [ "$1" = wcache-b ] && [ -n "$LOOP_B" ] && cache=$LOOP_B
    # Write-back unless the arguments name a policy.
    case " $args " in *" --write-policy "*) ;; *) args="--write-policy write-back $args" ;; esac
    # shellcheck disable=SC2086
    "$bin" serve --socket "$WORK/$1.sock" --cache "$cache" --cache-size "$CACHE_SIZE" \
        --backing "$backing" $args >"$WORK/$1-$2.log" 2>&1 &
    WC_PID=$!
    SERVER_PID[$1]=$WC_PID
    wait_socket "$WORK/$1.sock"
}
wc_stop() { # target
    kill -TERM "$WC_PID"
    local rc=0
    wait "$WC_PID" || rc=$?
    WC_PID=
    [ "$rc" = 0 ] || { echo "wcache serve exited $rc"; cat "$WORK"/wcache*.log; exit 1; }
    rm -f "$WORK/$1.sock"
}

# fio_on TARGET JOB ARGS...: one fio job against a target, JSON into WORK/TARGET-JOB.json
fio_on() {
    local t=$1 job=$2; shift 2
    local where=()
    case "$t" in
        dev) where=(--ioengine=io_uring --filename="$WORK/dev.img" --direct=1) ;;
        *) where=(--ioengine=nbd --uri="nbd+unix:///disk?socket=$WORK/$t.sock") ;;
    esac
    local before after pid=${SERVER_PID[$t]:-} own_before=0 own_after=0
    # The server's own CPU: utime + stime (clock ticks), fields 14 and 15
    # of /proc/PID/stat (after the command name, which may hold spaces).
    own() { [ -n "$pid" ] && sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}' || echo 0; }
    own_before=$(own)
    before=$(head -1 /proc/stat)
    fio --name="$job" "${where[@]}" "$@" --randrepeat=0 --lat_percentiles=1 \
        --output-format=json --output="$WORK/$t-$job.json" >/dev/null
    after=$(head -1 /proc/stat)
    own_after=$(own)
    printf '%s\n%s\nown %s\n' "$before" "$after" "$((own_after - own_before))" >"$WORK/$t-$job.cpu"
}

TIMED=(--time_based --runtime="$RUNTIME")
WRITE_REGION=(--offset=0 --size="$SIZE_B")
READ_REGION=(--offset="$SIZE_B" --size="$READ_B")
# job name, then its fio options (the device side adds O_DSYNC to writes)
read -r -a JOBS <<<"${JOBS:-w4k-qd1 w4k-qd32 w1m-qd4 r4k-qd32 r1m-qd4-cold}"
job_args() {
    case "$1" in
        warm) echo "--rw=write --bs=1m --iodepth=8" ;;
        w4k-qd1) echo "--rw=randwrite --bs=4k --iodepth=1" ;;
        w4k-qd32) echo "--rw=randwrite --bs=4k --iodepth=32" ;;
        w1m-qd4) echo "--rw=write --bs=1m --iodepth=4" ;;
        r4k-qd32) echo "--rw=randread --bs=4k --iodepth=32" ;;
        r1m-qd4-cold) echo "--rw=read --bs=1m --iodepth=4" ;;
        *) return 1 ;;
    esac
}
for job in "${JOBS[@]}"; do
    job_args "$job" >/dev/null || {
        echo "unknown job '$job' in JOBS (known: w4k-qd1 w4k-qd32 w1m-qd4 r4k-qd32 r1m-qd4-cold)" >&2
        exit 2
    }
done

run_job() { # job
    local job=$1 t
    # shellcheck disable=SC2207
    local args=($(job_args "$job"))
    local extent=("${WRITE_REGION[@]}" "${TIMED[@]}")
    [ "$job" = r1m-qd4-cold ] && extent=("${READ_REGION[@]}")
    [ "$job" = warm ] && extent=("${WRITE_REGION[@]}")
    for t in dev kitmem kitfile kitfua $WCACHE_TARGETS; do
        local extra=()
        [ "$t" = dev ] && [[ "$job" == w* ]] && extra=(--sync=dsync)
        # The target before may have left dirty page-cache pages (nbdkit
        # file's buffered writes, wcache's clean copies of read misses):
        # write them back now, not during this target's run.
        sync
        [[ "$t" == wcache* ]] && wc_start "$t" "$job"
        fio_on "$t" "$job" "${args[@]}" "${extent[@]}" "${extra[@]}"
        [[ "$t" == wcache* ]] && wc_stop "$t"
    done
}

echo "warm-up: sequential 1 MiB writes over the $SIZE write region of every target"
run_job warm
for job in "${JOBS[@]}"; do
    echo "job $job ($RUNTIME s each; the cold read once over $READ_SIZE)"
    run_job "$job"
done

python3 - "$WORK" "$RUNTIME" "$SIZE" "$READ_SIZE" "$FSTYPE" "$WCACHE_TARGETS" "$WCACHE_ARGS" "${WCACHE_B_ARGS}" "${JOBS[@]}" <<'PY'
import json, os, re, sys
work, runtime, size, read_size, fstype = sys.argv[1:6]
wtargets, wargs, bargs, jobs = sys.argv[6].split(), sys.argv[7], sys.argv[8], sys.argv[9:]
targets = ["dev", "kitmem", "kitfile", "kitfua"] + wtargets
names = {"dev": f"device: {fstype} file, io_uring O_DIRECT(+O_DSYNC)",
         "kitmem": "nbdkit memory", "kitfile": f"nbdkit file ({fstype})",
         "kitfua": f"nbdkit file ({fstype}), every write FUA",
         "wcache": f"wcache write-back, cache on {fstype}", "wcache-b": "wcache-b (WCACHE_B_ARGS)"}
print(f"wcache: serve {wargs or '(defaults)'}")
if bargs:
    print(f"wcache-b: serve {bargs}")
for t in wtargets:
    log = open(f"{work}/{t}-{jobs[0]}.log").read()
    path = re.search(r"data path: ([^(\n]*)", log)
    print(f"{t}: data path {path.group(1).strip() if path else '(not printed)'}")
def get(t, job):
    j = json.load(open(f"{work}/{t}-{job}.json"))["jobs"][0]
    side = j["write" if job.startswith("w") else "read"]
    pct = side["lat_ns"].get("percentile", {}) or side["clat_ns"].get("percentile", {})
    return {"iops": side["iops"], "mibs": side["bw_bytes"] / 2**20, "ios": side["total_ios"],
            "p50": pct.get("50.000000", 0) / 1000, "p99": pct.get("99.000000", 0) / 1000}
CORES = os.cpu_count()
def cpu(t, job):
    """The whole machine's busy CPU time per request during the job (µs:
    fio, the server and the kernel's work for both), and the share of the
    cores that were busy, from /proc/stat around the fio run."""
    rows = [list(map(int, l.split()[1:])) for l in open(f"{work}/{t}-{job}.cpu").readlines()[:2]]
    d = [b - a for a, b in zip(*rows)]
    total, idle = sum(d[:8]), d[3] + d[4]  # user..steal; idle + iowait
    ios = r[(t, job)]["ios"]
    busy_s = (total - idle) / os.sysconf("SC_CLK_TCK")  # summed over the cores
    return (busy_s * 1e6 / ios if ios else float("nan"), (total - idle) / total if total else float("nan"))
def own_cpu(t, job):
    """The server process's own CPU time per request (µs; user + system),
    NaN for the device (no server)."""
    if t == "dev":
        return float("nan")
    ticks = int(open(f"{work}/{t}-{job}.cpu").readlines()[2].split()[1])
    ios = r[(t, job)]["ios"]
    return ticks / os.sysconf("SC_CLK_TCK") * 1e6 / ios if ios else float("nan")
def flushes(t, job):
    log = open(f"{work}/{t}-{job}.log").read()
    req = re.search(r"stopped after (\d+) requests", log)
    fl = re.search(r"(\d+) cache flushes", log)
    return (int(req.group(1)), int(fl.group(1))) if req and fl else (0, 0)
r = {(t, job): get(t, job) for t in targets for job in jobs}
print(f"\nfio, {runtime} s per timed job, write region {size}, cold read {read_size} once; Unix sockets for NBD")
print(f"{'job':<14}{'target':<46}{'IOPS':>10}{'MiB/s':>9}{'p50 us':>9}{'p99 us':>10}{'flushes/req':>13}"
      f"{'server CPU us/req':>19}{'CPU us/req':>12}{'busy':>6}")
for job in jobs:
    for t in targets:
        x = r[(t, job)]
        fl = ""
        if t.startswith("wcache"):
            req, n = flushes(t, job)
            fl = f"{n / req:.3f}" if req else "?"
        us, busy = cpu(t, job)
        own = own_cpu(t, job)
        own = "" if own != own else f"{own:.1f}"
        print(f"{job:<14}{names[t]:<46}{x['iops']:>10.0f}{x['mibs']:>9.1f}{x['p50']:>9.1f}{x['p99']:>10.1f}{fl:>13}"
              f"{own:>19}{us:>12.1f}{busy:>6.0%}")
g = lambda t, job, k: r[(t, job)][k] if (t, job) in r else float("nan")
div = lambda a, b: a / b if b else float("nan")
budget = g("dev", "w4k-qd1", "p50") + g("kitmem", "w4k-qd1", "p50")
slower = min(g("dev", "w1m-qd4", "mibs"), g("kitmem", "w1m-qd4", "mibs"))
# Whether a write target fits this machine at all: the cores the whole
# machine would need to run a wcache job at the target's rate, at the CPU
# time per request this run measured (fio's share included).
for w in wtargets:
    need = lambda job, rate: rate * cpu(w, job)[0] / 1e6 if (w, job) in r else float("nan")
    print(f"cores needed by {w} at its CPU per request: 4k QD32 at 0.9 x device "
          f"{need('w4k-qd32', 0.9 * g('dev', 'w4k-qd32', 'iops')):.2f}, at 1.0 x nbdkit file "
          f"{need('w4k-qd32', g('kitfile', 'w4k-qd32', 'iops')):.2f}; 1M write at 0.5 x min(device, nbdkit memory) "
          f"{need('w1m-qd4', 0.5 * slower):.2f}, at 1.0 x nbdkit file {need('w1m-qd4', g('kitfile', 'w1m-qd4', 'mibs')):.2f} "
          f"(this machine: {CORES})")
for w in wtargets:
    print(f"ratio 4k randwrite QD1 p50 latency {w}/device: {div(g(w, 'w4k-qd1', 'p50'), g('dev', 'w4k-qd1', 'p50')):.2f} "
          f"({w}/(device + nbdkit memory round trip): {div(g(w, 'w4k-qd1', 'p50'), budget):.2f})")
    print(f"ratio 4k randwrite QD32 IOPS {w}/device: {div(g(w, 'w4k-qd32', 'iops'), g('dev', 'w4k-qd32', 'iops')):.2f}")
    print(f"ratio 1M write QD4 MiB/s {w}/min(device, nbdkit memory): {div(g(w, 'w1m-qd4', 'mibs'), slower):.3f}")
    print(f"ratio 4k randread QD32 cached IOPS {w}/nbdkit memory: {div(g(w, 'r4k-qd32', 'iops'), g('kitmem', 'r4k-qd32', 'iops')):.2f} "
          f"({w}/device: {div(g(w, 'r4k-qd32', 'iops'), g('dev', 'r4k-qd32', 'iops')):.2f})")
    print(f"ratio 4k randwrite QD32 IOPS / 1M write QD4 MiB/s {w}/nbdkit file (persist-on-flush's yardstick): "
          f"{div(g(w, 'w4k-qd32', 'iops'), g('kitfile', 'w4k-qd32', 'iops')):.2f} / {div(g(w, 'w1m-qd4', 'mibs'), g('kitfile', 'w1m-qd4', 'mibs')):.2f}")
    print(f"ratio 1M read QD4 uncached MiB/s {w}/nbdkit file: {div(g(w, 'r1m-qd4-cold', 'mibs'), g('kitfile', 'r1m-qd4-cold', 'mibs')):.2f}")
# Each wcache target against the nbdkit yardstick of its persistence mode:
# persist-on-flush against nbdkit file, persist-on-write (the default)
# against nbdkit file with every write FUA.
for w, a in zip(wtargets, [wargs, bargs]):
    k = "kitfile" if "--persist-on-flush" in a.split() else "kitfua"
    mode = "persist-on-flush" if k == "kitfile" else "persist-on-write"
    c = lambda t, job: own_cpu(t, job) if (t, job) in r else float("nan")
    print(f"yardstick {w} ({mode}) / {names[k]}: 4k QD1 p50 {div(g(w, 'w4k-qd1', 'p50'), g(k, 'w4k-qd1', 'p50')):.2f}, "
          f"4k QD32 IOPS {div(g(w, 'w4k-qd32', 'iops'), g(k, 'w4k-qd32', 'iops')):.2f}, "
          f"1M QD4 MiB/s {div(g(w, 'w1m-qd4', 'mibs'), g(k, 'w1m-qd4', 'mibs')):.2f}, "
          f"server CPU per 4k write {div(c(w, 'w4k-qd32'), c(k, 'w4k-qd32')):.2f}, "
          f"per 1M write {div(c(w, 'w1m-qd4'), c(k, 'w1m-qd4')):.2f}")
PY
