#!/usr/bin/env bash
# pgbench on ext4 on a Ceph RBD image, bare and behind wcache, in one run on
# the cluster of scripts/ceph-cluster.sh. This host has no rbd or nbd
# kernel module, so each target is an NBD export made a block device with
# nbdfuse and a loop device (the same path for both):
#   rbd        qemu-nbd of the image (qemu's rbd driver, cache=none:
#              librbd's cache off, a write durable on the OSD when done;
#              flushes pass)
#   rbd-cache  the same with cache=writeback (librbd's cache on: volatile
#              until a flush, lost with the process before it)
#   wcache     `wcache serve` of the image (rbd: backing), write-back, its
#              cache a file on BENCH_DIR (persist-on-write)
#   wcache-pof the same with --persist-on-flush
# Each: mkfs.ext4, PostgreSQL (shared_buffers 32MB), pgbench -i -s SCALE,
# then pgbench -c CLIENTS -j 2 -T SECS (TPC-B-like); tps and latency.
#
# Usage: scripts/bench-ceph-pgbench.sh  (SECS=60 SCALE=10 CLIENTS=8
#        CACHE_SIZE=1G BENCH_DIR=/var/tmp TARGETS="rbd rbd-cache wcache
#        wcache-pof"; root)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${SECS:-60}
SCALE=${SCALE:-10}
CLIENTS=${CLIENTS:-8}
CACHE_SIZE=${CACHE_SIZE:-1G}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
read -r -a TARGETS <<<"${TARGETS:-rbd rbd-cache wcache wcache-pof}"
PORT=54341

need=()
command -v qemu-nbd >/dev/null || need+=(qemu-utils)
[ -e /usr/lib/x86_64-linux-gnu/qemu/block-rbd.so ] || need+=(qemu-block-extra)
command -v nbdfuse >/dev/null || need+=(nbdfuse)
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$PGBIN" ] || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
(cd "$ROOT" && cargo build --release -q -p wcache-cli)
WCACHE=${CARGO_TARGET_DIR:-$ROOT/target}/release/wcache

started=0
"$ROOT/scripts/ceph-cluster.sh" status >/dev/null 2>&1 || started=1
images=""
for t in "${TARGETS[@]}"; do images+="pg-$t:4G "; done
eval "$(IMAGES="$images" "$ROOT/scripts/ceph-cluster.sh" start)"

WORK=$(mktemp -d "$BENCH_DIR/wcache-bench-ceph-pg.XXXXXX")
chmod o+x "$WORK"
# PostgreSQL's socket, its log and pgbench's logs: the postgres user's.
S=$WORK/sock
mkdir "$S" && chown postgres "$S"
as_pg() { runuser -u postgres -- "$@"; }
SERVER=""
LOOP=""
cleanup() {
  [ -d "$WORK/fs/pg" ] && as_pg "$PGBIN/pg_ctl" -D "$WORK/fs/pg" -m immediate -w stop >/dev/null 2>&1 || true
  umount "$WORK/fs" 2>/dev/null || true
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
  fusermount3 -u "$WORK/nbd" 2>/dev/null || umount -l "$WORK/nbd" 2>/dev/null || true
  [ -n "$SERVER" ] && { kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; }
  SERVER="" LOOP=""
}
finish() {
  cleanup
  rm -rf "$WORK"
  if [ "$started" = 1 ] && [ "${KEEP:-0}" != 1 ]; then "$ROOT/scripts/ceph-cluster.sh" purge >/dev/null 2>&1 || true; fi
}
trap finish EXIT

wait_socket() { for _ in $(seq 600); do [ -S "$1" ] && return 0; sleep 0.1; done; echo "no socket $1"; exit 1; }

export_target() { # target: an NBD server of its image on $WORK/$t.sock
  local t=$1
  local cache=none pof=()
  case $t in
    rbd | rbd-cache)
      [ "$t" = rbd-cache ] && cache=writeback
      qemu-nbd --socket="$WORK/$t.sock" --cache=$cache --persistent --shared=4 \
        --image-opts "driver=raw,file.driver=rbd,file.pool=$CEPH_POOL,file.image=pg-$t,file.conf=$CEPH_CONF,file.user=admin" \
        >"$WORK/$t.log" 2>&1 &
      ;;
    wcache | wcache-pof)
      [ "$t" = wcache-pof ] && pof=(--persist-on-flush)
      "$WCACHE" serve --socket "$WORK/$t.sock" --cache "$WORK/$t-cache.img" --cache-size "$CACHE_SIZE" \
        --export "disk=rbd:$CEPH_POOL/pg-$t:conf=$CEPH_CONF:keyring=$CEPH_KEYRING" \
        --control "$WORK/$t.ctl" "${pof[@]}" >"$WORK/$t.log" 2>&1 &
      ;;
    *) echo "unknown target $t (rbd rbd-cache wcache wcache-pof)"; exit 2 ;;
  esac
  SERVER=$!
  wait_socket "$WORK/$t.sock"
}

run_target() { # target: prints "tps p50 p99"
  local t=$1 uri
  export_target "$t"
  uri="nbd+unix:///?socket=$WORK/$t.sock"
  [[ "$t" == wcache* ]] && uri="nbd+unix:///disk?socket=$WORK/$t.sock"
  mkdir -p "$WORK/nbd" "$WORK/fs"
  nbdfuse "$WORK/nbd" "$uri" &
  for _ in $(seq 100); do [ -e "$WORK/nbd/nbd" ] && break; sleep 0.1; done
  LOOP=$(losetup -f --show --direct-io=on "$WORK/nbd/nbd")
  mkfs.ext4 -q -F "$LOOP"
  mount -o noatime "$LOOP" "$WORK/fs"
  mkdir "$WORK/fs/pg" && chown postgres "$WORK/fs/pg" && chmod 700 "$WORK/fs/pg"
  as_pg "$PGBIN/initdb" -D "$WORK/fs/pg" -A trust -U postgres >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$WORK/fs/pg" -l "$S/$t-pg.log" -w start \
    -o "-k $S -p $PORT -c listen_addresses='' -c shared_buffers=32MB" >/dev/null
  as_pg "$PGBIN/pgbench" -h "$S" -p $PORT -i -s "$SCALE" -q postgres >/dev/null 2>&1
  (cd "$S" && as_pg "$PGBIN/pgbench" -h "$S" -p $PORT -c "$CLIENTS" -j 2 -T "$SECS" \
    -l --log-prefix="$S/$t-log" postgres 2>&1) | sed -n 's/^tps = \([0-9.]*\).*/\1/p' >"$WORK/$t.tps"
  cat "$S/$t"-log.* | awk '{print $3}' | sort -n >"$WORK/$t.lat"
  local n p50 p99
  n=$(wc -l <"$WORK/$t.lat")
  p50=$(sed -n "$((n / 2 + 1))p" "$WORK/$t.lat")
  p99=$(sed -n "$((n * 99 / 100 + 1))p" "$WORK/$t.lat")
  echo "$(cat "$WORK/$t.tps") $((p50 / 1000)) $((p99 / 1000))" >"$WORK/$t.result"
  cleanup
}

for t in "${TARGETS[@]}"; do
  echo "pgbench on $t"
  run_target "$t"
done
echo "pgbench -c $CLIENTS -j 2 -T $SECS, scale $SCALE, shared_buffers 32MB, ext4 on the image through NBD, nbdfuse and a loop device"
echo "| target | tps | p50 ms | p99 ms |"
echo "|---|---|---|---|"
for t in "${TARGETS[@]}"; do
  read -r tps p50 p99 <"$WORK/$t.result"
  printf '| %s | %.0f | %s | %s |\n' "$t" "$tps" "$p50" "$p99"
done
ratio() { # a b: b's tps over a's
  [ -s "$WORK/$1.result" ] && [ -s "$WORK/$2.result" ] || return 0
  python3 -c "import sys; print(f'{sys.argv[2]} / {sys.argv[1]}: {float(sys.argv[4]) / float(sys.argv[3]):.2f}x tps')" \
    "$1" "$2" "$(cut -d' ' -f1 "$WORK/$1.result")" "$(cut -d' ' -f1 "$WORK/$2.result")"
}
ratio rbd wcache
ratio rbd-cache wcache-pof
