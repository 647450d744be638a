#!/usr/bin/env bash
# wcache in front of Ceph RBD, side by side in one run on the one-host
# cluster of scripts/ceph-cluster.sh (started if it is not; the machine is
# shared and noisy: read the ratios). Targets, each on an image of its own:
#   rbd        fio's rbd engine on the bare image, librbd's cache off: a
#              write is durable on the OSD when it completes
#   rbd-cache  the same with librbd's own write-back cache (rbd_cache=true):
#              volatile, a write is durable at the next flush (fio sends
#              none), lost with the client process or host before it
#   wcache     `wcache serve` of the image (rbd: backing), write-back, the
#              cache file on BENCH_DIR (a disk filesystem): persist-on-write,
#              a write is durable in the cache when it completes
#   wcache-pof the same with --persist-on-flush: a write survives the
#              process's crash when it completes, a power loss after the
#              next flush (the NBD minimum; rbd-cache's durability and more)
#   wcache-qemu wcache as `wcache`, its backing qemu-nbd's export of the
#              image (nbd+unix:, qemu's rbd driver, cache=none) instead of
#              librbd in wcache itself: the other way to reach an image
# wcache targets are driven by fio's nbd engine over a Unix socket.
# Jobs: 4 KiB random write QD1 (p50, p99) and QD32, 1 MiB sequential write
# QD4, 4 KiB random read QD32 of the data written before (the wcache
# targets drained first, so that no destage runs beside the reads); each
# after a sequential warm-up write of the region on every target.
#
# Usage: scripts/bench-ceph.sh  (RUNTIME=10 SIZE=256M CACHE_SIZE=1G
#        BENCH_DIR=/var/tmp; JOBS picks some jobs; KEEP=1 leaves the
#        cluster running, else a cluster this script started is purged)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNTIME=${RUNTIME:-10}
SIZE=${SIZE:-256M}
CACHE_SIZE=${CACHE_SIZE:-1G}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
read -r -a JOBS <<<"${JOBS:-w4k-qd1 w4k-qd32 w1m-qd4 r4k-qd32}"
TARGETS=(rbd rbd-cache wcache wcache-pof wcache-qemu)
command -v qemu-nbd >/dev/null && [ -e /usr/lib/x86_64-linux-gnu/qemu/block-rbd.so ] ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-utils qemu-block-extra >/dev/null; }
for tool in fio python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio)"; exit 1; }
done
(cd "$ROOT" && cargo build --release -q -p wcache-cli)
WCACHE=${CARGO_TARGET_DIR:-$ROOT/target}/release/wcache

started=0
if ! "$ROOT/scripts/ceph-cluster.sh" status >/dev/null 2>&1; then started=1; fi
images=""
for t in "${TARGETS[@]}"; do images+="bench-$t:1G "; done
eval "$(IMAGES="$images" "$ROOT/scripts/ceph-cluster.sh" start)"

WORK=$(mktemp -d "$BENCH_DIR/wcache-bench-ceph.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
  if [ "$started" = 1 ] && [ "${KEEP:-0}" != 1 ]; then "$ROOT/scripts/ceph-cluster.sh" purge >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# librbd's configuration for fio: the cluster's, with its cache off or on.
for cache in false true; do
  sed "s/^\[client\]$/[client]\nrbd_cache = $cache/" "$CEPH_CONF" >"$WORK/rbd-cache-$cache.conf"
done

serve() { # target extra-args...
  local t=$1
  shift
  local spec="rbd:$CEPH_POOL/bench-$t:conf=$CEPH_CONF:keyring=$CEPH_KEYRING"
  if [ "$t" = wcache-qemu ]; then
    qemu-nbd --socket="$WORK/qemu.sock" --cache=none --persistent --shared=8 \
      --image-opts "driver=raw,file.driver=rbd,file.pool=$CEPH_POOL,file.image=bench-$t,file.conf=$CEPH_CONF,file.user=admin" \
      >"$WORK/qemu.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do [ -S "$WORK/qemu.sock" ] && break; sleep 0.1; done
    spec="nbd+unix:///?socket=$WORK/qemu.sock"
  fi
  "$WCACHE" serve --socket "$WORK/$t.sock" --cache "$WORK/$t-cache.img" --cache-size "$CACHE_SIZE" \
    --export "disk=$spec" --control "$WORK/$t.ctl" "$@" >"$WORK/$t.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 600); do [ -S "$WORK/$t.sock" ] && return 0; sleep 0.1; done
  echo "wcache serve ($t) did not start:"; tail -5 "$WORK/$t.log"; exit 1
}
serve wcache
serve wcache-pof --persist-on-flush
serve wcache-qemu

job_args() {
  case $1 in
    warm) echo "--rw=write --bs=1m --iodepth=8" ;;
    w4k-qd1) echo "--rw=randwrite --bs=4k --iodepth=1" ;;
    w4k-qd32) echo "--rw=randwrite --bs=4k --iodepth=32" ;;
    w1m-qd4) echo "--rw=write --bs=1m --iodepth=4" ;;
    r4k-qd32) echo "--rw=randread --bs=4k --iodepth=32" ;;
    *) return 1 ;;
  esac
}

fio_on() { # target job args...
  local t=$1 job=$2
  shift 2
  local engine=()
  case $t in
    rbd) engine=(--ioengine=rbd --clientname=admin "--pool=$CEPH_POOL" "--rbdname=bench-$t") ;;
    rbd-cache) engine=(--ioengine=rbd --clientname=admin "--pool=$CEPH_POOL" "--rbdname=bench-$t") ;;
    *) engine=(--ioengine=nbd "--uri=nbd+unix:///disk?socket=$WORK/$t.sock") ;;
  esac
  local conf=$WORK/rbd-cache-false.conf
  [ "$t" = rbd-cache ] && conf=$WORK/rbd-cache-true.conf
  local timed=(--time_based "--runtime=$RUNTIME")
  [ "$job" = warm ] && timed=()
  CEPH_CONF=$conf fio --name="$t-$job" "${engine[@]}" "$@" "--size=$SIZE" "${timed[@]}" \
    --randrepeat=0 --output-format=json --output="$WORK/$t-$job.json" >/dev/null 2>"$WORK/$t-$job.err" ||
    { echo "fio $t $job failed:"; cat "$WORK/$t-$job.err"; exit 1; }
}

for job in warm "${JOBS[@]}"; do
  # shellcheck disable=SC2207
  args=($(job_args "$job")) || { echo "unknown job $job (w4k-qd1 w4k-qd32 w1m-qd4 r4k-qd32)"; exit 2; }
  echo "job $job"
  if [[ "$job" == r* ]]; then
    # Reads of cached data, not reads beside the destage of the writes
    # before (which keeps the OSD and wcache busy for tens of seconds).
    for t in wcache wcache-pof wcache-qemu; do "$WCACHE" flush --control "$WORK/$t.ctl" >/dev/null; done
  fi
  for t in "${TARGETS[@]}"; do fio_on "$t" "$job" "${args[@]}"; done
done
# What the wcache targets' reads found in their caches (since their start).
for t in wcache wcache-pof wcache-qemu; do
  echo "$t: $("$WCACHE" status --control "$WORK/$t.ctl" | grep -o 'page hits reads [0-9.]* %' || true)"
done

python3 - "$WORK" "$RUNTIME" "$SIZE" "$CACHE_SIZE" "${JOBS[@]}" <<'PY'
import json, sys
work, runtime, size, cache_size, jobs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
targets = ["rbd", "rbd-cache", "wcache", "wcache-pof", "wcache-qemu"]
names = {"rbd": "bare RBD (librbd, cache off: durable when done)",
         "rbd-cache": "RBD with rbd_cache=true (volatile until flush)",
         "wcache": f"wcache write-back, {cache_size} cache on a disk file (durable when done)",
         "wcache-pof": "wcache --persist-on-flush (crash-safe when done, durable at flush)",
         "wcache-qemu": "wcache as wcache, its backing qemu-nbd's export of the image"}
def get(t, job):
    j = json.load(open(f"{work}/{t}-{job}.json"))["jobs"][0]
    side = j["write" if job.startswith("w") else "read"]
    pct = side["clat_ns"].get("percentile", {})
    return {"iops": side["iops"], "mibs": side["bw_bytes"] / 2**20,
            "p50": pct.get("50.000000", 0) / 1000, "p99": pct.get("99.000000", 0) / 1000}
print(f"fio {runtime} s per job over {size} of each image; one OSD (bluestore on a file)")
for t in targets:
    print(f"  {t}: {names[t]}")
print("| job | " + " | ".join(targets) + " | wcache / rbd | wcache-pof / rbd-cache | wcache-qemu / wcache |")
print("|---|" + "---|" * (len(targets) + 3))
for job in jobs:
    r = {t: get(t, job) for t in targets}
    if job == "w4k-qd1":
        for key in ("p50", "p99"):
            cells = [f"{r[t][key]:,.0f} µs" for t in targets]
            print(f"| {job} {key} | " + " | ".join(cells) +
                  f" | {r['wcache'][key] / r['rbd'][key]:.3f} | {r['wcache-pof'][key] / r['rbd-cache'][key]:.3f}"
                  f" | {r['wcache-qemu'][key] / r['wcache'][key]:.3f} |")
    key, unit = ("mibs", "MiB/s") if job == "w1m-qd4" else ("iops", "IOPS")
    cells = [f"{r[t][key]:,.0f} {unit}" for t in targets]
    print(f"| {job} | " + " | ".join(cells) +
          f" | {r['wcache'][key] / r['rbd'][key]:.2f} | {r['wcache-pof'][key] / r['rbd-cache'][key]:.2f}"
          f" | {r['wcache-qemu'][key] / r['wcache'][key]:.2f} |")
PY
