#!/usr/bin/env bash
# Request-oriented admission on real applications: PostgreSQL (pgbench)
# and Redis (redis-benchmark, appendfsync always, background saves) on
# `wcache mount` over an emulated HDD (docs/experiments/rdc-real.md).
# Installs what it needs (postgresql, redis, bindfs), builds wcache, then
# for each application, cache size and policy: a fresh mount (cache on
# tmpfs as NV-DRAM), the application started and loaded under admission
# `all`, the policy set online, critical processes named by the mechanism,
# a timed run; the figures go to $OUT/results.csv and a markdown table on
# stdout. Also pgbench and Redis on a plain FUSE passthrough (bindfs) of tmpfs, the
# FUSE limit of this machine.
#
#   scripts/rdc-real.sh                 # the matrix below
#   APPS=redis SIZES="32M" RUNS="all cp-pi-ioi:pid" SECS=30 scripts/rdc-real.sh
#
# RUNS: POLICY[:MECHANISM] with MECHANISM one of
#   pid     `wcache critical --pid` for each of the application's request
#           processes: PostgreSQL's client backends and WAL writer, Redis's
#           server process (not its save and rewrite children)
#   ionice  `ionice -c1 -p` for the same processes (--realtime-io-critical;
#           a child forked later inherits the class)
#   auto    automatic identification (`wcache critical --auto` once the
#           data is loaded); its precision and recall against those
#           processes go to $OUT/auto.csv
#   (none)  no process is critical
# POLICY `volume` mounts with the log's directory as the critical volume
# (`--critical-dir`: PostgreSQL's pg_wal, Redis's appendonlydir).
set -euo pipefail
cd "$(dirname "$0")/.."

APPS=${APPS:-"postgresql redis"}
SIZES=${SIZES:-"32M 1G"}
RUNS=${RUNS:-"all sync volume cp:pid cp-pi:pid cp-pi-ioi:pid cp-pi-ioi:ionice cp-pi-ioi:auto"}
SECS=${SECS:-60}
SCALE=${SCALE:-10}
CLIENTS=${CLIENTS:-8}
# PostgreSQL's checkpoint_timeout (30s puts checkpoints, the paper's
# background writes, inside a run; PostgreSQL's default is 5min).
CHECKPOINT=${CHECKPOINT:-30s}
# PostgreSQL's log (pg_wal) on an emulated HDD of its own (`apart`, as the
# paper ran it: its log and its tables on two HDDs) or beside the tables
# on the one emulated HDD (`shared`, every run before 2026-11-29's last).
WAL_DISK=${WAL_DISK:-apart}
# The cache: a file on tmpfs with no syncs (the paper's NV-DRAM stand-in),
# or e.g. CACHE=/var/tmp/rdc-real-cache.img CACHE_SYNC=fdatasync for a
# file on the disk, as a user's SSD would hold it.
CACHE=${CACHE:-/dev/shm/rdc-real-cache.img}
CACHE_SYNC=${CACHE_SYNC:-nvram}
# More options for every `wcache mount` (e.g. "--dirty-max 2G").
MOUNT_ARGS=${MOUNT_ARGS:-}
# PostgreSQL's latency percentiles leave out the transactions that ended
# in the first WARMUP seconds of each run (tps counts them): the hinted
# rows' backends are named 2 s in, and before that their WAL fsyncs are
# not critical (the p99.9 of every hinted row at 1 GiB until 2026-11-29).
WARMUP=${WARMUP:-3}
# Redis: keys loaded and overwritten, value bytes, SETs per run.
REDIS_KEYS=${REDIS_KEYS:-100000}
REDIS_VALUE=${REDIS_VALUE:-512}
REDIS_SETS=${REDIS_SETS:-300000}
OUT=${OUT:-/var/tmp/rdc-real}
# SAMPLE=1: the engine's counters every half second of each timed run, to
# $OUT/samples/APP-SIZE-POLICY-MECHANISM.csv (what stalls wait for).
SAMPLE=${SAMPLE:-0}
# PROBE=1 (PostgreSQL): what each backend waits for, every second of each
# timed run (pg_stat_activity's wait events, and the kernel's wchan of every
# postgres process and of the mount's threads), to $OUT/probes/.
PROBE=${PROBE:-0}
PORT=54331
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

need=()
[ -n "$PGBIN" ] || need+=(postgresql)
command -v bindfs >/dev/null || need+=(bindfs)
command -v redis-server >/dev/null || need+=(redis-server)
command -v bc >/dev/null || need+=(bc)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
cargo build --release -q -p wcache-cli
W=$PWD/target/release/wcache

mkdir -p "$OUT"
chmod o+x "$OUT"
D=$OUT/run
as_pg() { runuser -u postgres -- "$@"; }

cleanup() {
  [ -f "$D/sock/redis.pid" ] && kill -9 "$(cat "$D/sock/redis.pid")" 2>/dev/null || true
  pkill -9 -f "redis-server unixsocket:$D/sock" 2>/dev/null || true
  [ -d "$D/mnt/pg" ] && as_pg "$PGBIN/pg_ctl" -D "$D/mnt/pg" -m immediate -w stop >/dev/null 2>&1 || true
  # A server whose stop could not be asked (its mount gone) is killed.
  pkill -9 -u postgres -f "postgres -D $D/mnt/pg" 2>/dev/null || true
  pkill -TERM -f "wcache mount $D/b" 2>/dev/null || true
  sleep 0.5
  umount -l "$D/mnt" 2>/dev/null || true
  rm -f "$CACHE"
}
trap cleanup EXIT

# mount_wcache SIZE [extra args]: the mount, cache on tmpfs (NV-DRAM).
mount_wcache() {
  local size=$1
  shift
  "$W" mount "$D/b" "$D/mnt" --cache "$CACHE" --cache-size "$size" \
    --cache-sync "$CACHE_SYNC" --emulate hdd --admission all --control "$D/ctl" $MOUNT_ARGS "$@" >"$D/mount.log" 2>&1 &
  for _ in $(seq 300); do grep -q "Unmount with" "$D/mount.log" && return 0; sleep 0.1; done
  cat "$D/mount.log"
  return 1
}

fresh() {
  cleanup
  rm -rf "$D"
  mkdir -p "$D/b" "$D/mnt" "$D/sock"
  chmod 777 "$D/sock"
  chmod o+x "$D"
}

# pg_start: initdb on the mount, the server, pgbench's tables.
pg_start() {
  mkdir "$D/mnt/pg"
  chown postgres:postgres "$D/mnt/pg"
  as_pg "$PGBIN/initdb" -D "$D/mnt/pg" -A trust -U postgres >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$D/mnt/pg" -l "$D/sock/pg.log" -w start \
    -o "-k $D/sock -p $PORT -c listen_addresses='' -c shared_buffers=32MB -c checkpoint_timeout=$CHECKPOINT" >/dev/null
  as_pg "$PGBIN/pgbench" -h "$D/sock" -p $PORT -i -s "$SCALE" -q postgres >/dev/null 2>&1
}

# pg_writes: PostgreSQL's own count of what it wrote so far, "TABLE WAL
# WAL_WRITES WAL_SYNCS": bytes of table and SLRU pages written (8 KiB
# each: checkpointer, background writer, backends) and of WAL records,
# and its WAL write(2)s and syncs.
pg_writes() {
  as_pg "$PGBIN/psql" -h "$D/sock" -p $PORT -At -F ' ' -c \
    "select (select (buffers_checkpoint + buffers_clean + buffers_backend) * 8192 from pg_stat_bgwriter)
          + (select coalesce(sum(blks_written), 0) * 8192 from pg_stat_slru),
            wal_bytes, wal_write, wal_sync from pg_stat_wal" postgres
}

engine() { # NAME: the engine's counter
  "$W" stats --json --control "$D/ctl" | python3 -c \
    "import json,sys; s=json.load(sys.stdin); print({m['name']:m['value'] for m in s['engine']}.get('$1',0))"
}

# sample FILE: until killed, the engine's counters and gauges every 0.5 s.
sample() {
  exec python3 - "$W" "$D/ctl" "$1" <<'PY'
import json, subprocess, sys, time
w, ctl, path = sys.argv[1:4]
names = ["writes", "stalls", "stall_ns_total", "stalled_requests", "dirty_pages", "free_slots",
         "destages_in_flight", "destaged_pages", "write_bypassed_pages", "log_forced_destages",
         "log_copies", "log_tail_dirty_pages", "log_batches", "reads", "read_hits", "evictions",
         "flushes", "reissued_writes", "clean_pages", "write_page_hits_destaging", "destages",
         "mount_held_bytes", "mount_throttled_writes", "mount_throttle_ns_total",
         "mount_inode_lock_lends"]
with open(path, "w") as out:
    out.write("t_s," + ",".join(names) + "\n")
    start = time.monotonic()
    while True:
        got = subprocess.run([w, "stats", "--json", "--control", ctl], capture_output=True, text=True)
        if got.returncode == 0:
            snap = json.loads(got.stdout)
            m = {e["name"]: e["value"] for e in snap["engine"] + snap.get("front", [])}
            row = [f"{time.monotonic() - start:.2f}"] + [str(m.get(n, "")) for n in names]
            out.write(",".join(row) + "\n")
            out.flush()
        time.sleep(0.5)
PY
}

# probe FILE: until killed, PostgreSQL's wait events and the kernel's
# wait channels every second (one psql session, so it needs no new backend
# while the mount is slow).
probe() {
  local out=$1 mount_pid
  mount_pid=$(pgrep -f "wcache mount $D/b" | head -1)
  (while true; do
     echo "select now()::time(0), pid, backend_type, coalesce(wait_event_type,'-'), coalesce(wait_event,'-'), state from pg_stat_activity where pid <> pg_backend_pid() order by backend_type;"
     sleep 1
   done | PGAPPNAME=wcache-probe as_pg "$PGBIN/psql" -h "$D/sock" -p $PORT -At -F ' ' postgres >"$out.pg" 2>&1) &
  local psql=$!
  trap 'kill $psql 2>/dev/null; exit 0' TERM
  while true; do
    {
      date +%T
      for p in $(pgrep -u postgres postgres); do
        echo "pg $p $(cat /proc/$p/wchan 2>/dev/null) $(tr '\0' ' ' 2>/dev/null </proc/$p/cmdline | cut -c1-60)"
      done
      for t in /proc/"$mount_pid"/task/*; do
        echo "mount ${t##*/} $(cat "$t/comm" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
      done
    } >>"$out.wchan"
    sleep 1
  done
}

# explicit_postgresql: the request processes of PostgreSQL (its client backends
# and the WAL writer) into $D/explicit.
explicit_postgresql() {
  as_pg "$PGBIN/psql" -h "$D/sock" -p $PORT -At -c \
    "select pid from pg_stat_activity where backend_type in ('client backend','walwriter') and pid <> pg_backend_pid() and application_name <> 'wcache-probe'" \
    postgres >"$D/explicit"
}

# explicit_redis: Redis's request process, the server (not its children).
explicit_redis() {
  cat "$D/sock/redis.pid" >"$D/explicit"
}

# name_critical APP MECHANISM: the app's request processes, PostgreSQL's
# once the clients connected (its backends are theirs). Redis's server is
# named before the run: it was named 2 s into it, and its first 2 s of
# fsyncs, not yet critical, went to the HDD (the 24 ms p99.9 of every
# hinted run at 1 GiB until 2026-11-29).
name_critical() {
  local app=$1 mech=$2 p
  [ "$app" = postgresql ] && sleep 2
  "explicit_$app"
  for p in $(cat "$D/explicit"); do
    case $mech in
      pid) "$W" critical --control "$D/ctl" --pid "$p" >/dev/null ;;
      ionice) ionice -c1 -n0 -p "$p" ;;
    esac
  done
}

# redis_start: the server on the mount (every write fsynced before its
# reply; a background save after each 1000 changes within 10 s), loaded.
redis_start() {
  mkdir "$D/mnt/redis"
  redis-server --port 0 --unixsocket "$D/sock/redis.sock" --unixsocketperm 777 \
    --dir "$D/mnt/redis" --appendonly yes --appendfsync always --save "10 1000" \
    --daemonize yes --pidfile "$D/sock/redis.pid" --logfile "$D/sock/redis.log" >/dev/null
  for _ in $(seq 100); do [ -S "$D/sock/redis.sock" ] && break; sleep 0.1; done
  redis-benchmark -s "$D/sock/redis.sock" -t set -n "$REDIS_KEYS" -r "$REDIS_KEYS" \
    -d "$REDIS_VALUE" -c 16 -q >/dev/null
}

# bench_redis: SETs over the loaded keys; prints "ops/s p50 p99 p999 p9999" (ms)
# from redis-benchmark's percentile distribution.
bench_redis() {
  redis-benchmark -s "$D/sock/redis.sock" -t set -n "$REDIS_SETS" -r "$REDIS_KEYS" \
    -d "$REDIS_VALUE" -c "$CLIENTS" >"$D/redis-bench.txt" 2>&1
  python3 - "$D/redis-bench.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ops = re.search(r"([0-9.]+) requests per second", text).group(1)
dist = [(float(p), float(ms)) for p, ms in re.findall(r"([0-9.]+)% <= ([0-9.]+) milliseconds", text)]
def q(pct):
    return next((ms for p, ms in dist if p >= pct), dist[-1][1])
print(ops, q(50), q(99), q(99.9), q(99.99))
PY
}

# bench_postgresql: a timed pgbench run; prints "tps p50 p99 p999 p9999" from its per-transaction log.
bench_postgresql() {
  rm -f "$D"/sock/pgbench_log.*
  (cd "$D/sock" && as_pg "$PGBIN/pgbench" -h "$D/sock" -p $PORT -c "$CLIENTS" -j 2 -T "$SECS" \
    -l --log-prefix="$D/sock/pgbench_log" postgres 2>&1) | grep -E "^tps" | sed 's/.*= \([0-9.]*\).*/\1/' >"$D/tps"
  # Latencies from WARMUP s on (every row alike): the script names
  # PostgreSQL's backends 2 s in, once pgbench has connected them.
  cat "$D"/sock/pgbench_log.* | awk -v w="$WARMUP" '{t[NR] = $5 + $6 / 1e6; l[NR] = $3; if (NR == 1 || t[NR] < m) m = t[NR]}
    END {for (i = 1; i <= NR; i++) if (t[i] >= m + w) print l[i]}' | sort -n >"$D/lat"
  local n
  n=$(wc -l <"$D/lat")
  q() { sed -n "$(( (n * $1 + 9999) / 10000 ))p" "$D/lat"; }
  echo "$(cat "$D/tps") $(( $(q 5000) / 1000 )) $(( $(q 9900) / 1000 )) $(( $(q 9990) / 1000 )) $(( $(q 9999) / 1000 ))"
}

echo "application,backend,cache,policy,mechanism,tps,p50_ms,p99_ms,p999_ms,p9999_ms,writes,cached_fraction,cached_pages,stalls" >"$OUT/results.csv"
echo "application,cache,policy,found,explicit,both,precision,recall" >"$OUT/auto.csv"
echo "cache,policy,mechanism,engine_mib,table_mib,wal_record_mib,wal_writes,wal_syncs,wal_pages_mib_least,bypassable_at_most" >"$OUT/pg-writes.csv"

# judge_auto APP SIZE POLICY: automatic identification against the explicit processes.
judge_auto() {
  "$W" critical --control "$D/ctl" --auto | sed 's/.*rules now: //' >"$D/found.json"
  python3 - "$D/found.json" "$D/explicit" "$@" >>"$OUT/auto.csv" <<'PY'
import json, sys
found = set(json.load(open(sys.argv[1]))["found_automatically"])
explicit = {int(l) for l in open(sys.argv[2]) if l.strip()}
hit = len(found & explicit)
precision = hit / len(found) if found else 0.0
recall = hit / len(explicit) if explicit else 0.0
print(f"{sys.argv[3]},{sys.argv[4]},{sys.argv[5]},{len(found)},{len(explicit)},{hit},{precision:.2f},{recall:.2f}")
PY
}

# split_writes SIZE POLICY MECHANISM BEFORE AFTER ENGINE_PAGES: one row of
# pg-writes.csv. PostgreSQL writes its WAL in whole 8 KiB pages, each
# write(2) then synced (a commit waits for it), so its WAL gave the engine
# at least WAL_WRITES × 8 KiB: every request waits for those, and no
# admission keeps out more than the rest of the engine's bytes (the
# "bypassable at most" share; the tables' own count is larger, as the
# mount's held pages merge rewrites of a page).
split_writes() {
  local page
  page=$("$W" status --json --control "$D/ctl" | python3 -c \
    "import json,sys; print(json.load(sys.stdin)['page_size_bytes'])")
  python3 - "$@" "$page" >>"$OUT/pg-writes.csv" <<'PY'
import sys
size, policy, mech, before, after, pages, page = sys.argv[1:8]
t0, w0, ww0, ws0 = map(int, before.split())
t1, w1, ww1, ws1 = map(int, after.split())
engine = int(pages) * int(page)
table = t1 - t0
mib = lambda b: f"{b / 2**20:.0f}"
wal_least = (ww1 - ww0) * 8192
print(f"{size},{policy},{mech},{mib(engine)},{mib(table)},{mib(w1 - w0)},{ww1 - ww0},{ws1 - ws0},{mib(wal_least)},{1 - wal_least / engine if engine else 0:.3f}")
PY
}

# run_one APP SIZE POLICY MECHANISM: one row of results.csv.
run_one() {
  local app=$1 size=$2 policy=$3 mech=$4 extra=() namer="" w0 b0 s0 p0 bp0 w b st frac pages
  fresh
  [ "$mech" = ionice ] && extra=(--realtime-io-critical)
  local backing=wcache-hdd
  if [ "$app" = postgresql ] && [ "$WAL_DISK" = apart ]; then
    extra+=(--emulate-own-disk pg/pg_wal)
    backing=wcache-hdd-wal-apart
  fi
  [ "$CACHE_SYNC" != nvram ] && backing+="-cache-$CACHE_SYNC"
  # `volume`: the log's directory is the critical volume (the paper's WAL
  # policy); PostgreSQL's pg_wal, Redis's AOF directory (Redis 7).
  if [ "$policy" = volume ]; then
    case $app in
      postgresql) extra+=(--critical-dir pg/pg_wal) ;;
      redis) extra+=(--critical-dir redis/appendonlydir) ;;
    esac
  fi
  mount_wcache "$size" "${extra[@]}"
  case $app in
    postgresql) pg_start ;;
    redis) redis_start ;;
  esac
  "$W" set --control "$D/ctl" admission "$policy" >/dev/null
  # Automatic identification from now on (the loading is not judged).
  [ "$mech" = auto ] && "$W" critical --control "$D/ctl" --auto >/dev/null
  w0=$(engine writes)
  b0=$(engine write_bypasses)
  s0=$(engine stalls)
  p0=$(engine write_pages)
  bp0=$(engine write_bypassed_pages)
  local pgw0=""
  [ "$app" = postgresql ] && pgw0=$(pg_writes)
  if [ "$mech" != none ] && [ "$app" = redis ]; then
    name_critical "$app" "$mech"
  elif [ "$mech" != none ]; then
    name_critical "$app" "$mech" &
    namer=$!
  fi
  local sampler=""
  if [ "$SAMPLE" = 1 ]; then
    mkdir -p "$OUT/samples"
    sample "$OUT/samples/$app-$size-$policy-$mech.csv" &
    sampler=$!
  fi
  local prober=""
  if [ "$PROBE" = 1 ] && [ "$app" = postgresql ]; then
    mkdir -p "$OUT/probes"
    probe "$OUT/probes/$app-$size-$policy-$mech" &
    prober=$!
  fi
  read -r tps p50 p99 p999 p9999 < <("bench_$app")
  if [ -n "$prober" ]; then kill "$prober" 2>/dev/null || true; wait "$prober" 2>/dev/null || true; fi
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
  if [ -n "$namer" ]; then wait "$namer"; fi
  w=$(( $(engine writes) - w0 ))
  b=$(( $(engine write_bypasses) - b0 ))
  st=$(( $(engine stalls) - s0 ))
  frac=$(echo "scale=3; ($w - $b) / ($w + 0.0001)" | bc)
  pages=$(echo "scale=3; 1 - ($(engine write_bypassed_pages) - bp0) / ($(engine write_pages) - p0 + 0.0001)" | bc)
  [ "$mech" = auto ] && judge_auto "$app" "$size" "$policy"
  [ -n "$pgw0" ] && split_writes "$size" "$policy" "$mech" "$pgw0" "$(pg_writes)" $(( $(engine write_pages) - p0 ))
  mkdir -p "$OUT/logs"
  cp "$D/mount.log" "$OUT/logs/$app-$size-$policy-$mech.log"
  echo "$app,$backing,$size,$policy,$mech,$tps,$p50,$p99,$p999,$p9999,$w,$frac,$pages,$st" | tee -a "$OUT/results.csv"
}

for app in $APPS; do
  for size in $SIZES; do
    for run in $RUNS; do
      policy=${run%%:*}
      mech=${run#*:}
      [ "$mech" = "$run" ] && mech=none
      run_one "$app" "$size" "$policy" "$mech"
    done
  done
done

# The FUSE limit: each application on a plain passthrough (bindfs) of
# tmpfs, no cache and no disk (for Redis, what the two cores, FUSE and the
# save child's fork cost: its floor here).
for app in $APPS; do
  fresh
  rm -rf /dev/shm/rdc-real-plain
  mkdir -p /dev/shm/rdc-real-plain
  bindfs -o allow_other /dev/shm/rdc-real-plain "$D/mnt"
  case $app in
    postgresql) pg_start ;;
    redis) redis_start ;;
  esac
  read -r tps p50 p99 p999 p9999 < <("bench_$app")
  echo "$app,bindfs-tmpfs,-,-,-,$tps,$p50,$p99,$p999,$p9999,-,-,-,-" | tee -a "$OUT/results.csv"
  cleanup
done
rm -rf /dev/shm/rdc-real-plain

echo
echo "| application | backing | cache | policy | critical by | tps (ops/s) | p50 ms | p99 ms | p99.9 ms | p99.99 ms | writes | cached | cached pages | stalls |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
tail -n +2 "$OUT/results.csv" | tr ',' '|' | sed 's/^/| /; s/$/ |/'
echo
echo "| application | cache | policy | found | explicit | both | precision | recall |"
echo "|---|---|---|---|---|---|---|---|"
tail -n +2 "$OUT/auto.csv" | tr ',' '|' | sed 's/^/| /; s/$/ |/'
if [ "$(wc -l <"$OUT/pg-writes.csv")" -gt 1 ]; then
  echo
  echo "| cache | policy | critical by | MiB to the engine | table MiB | WAL record MiB | WAL writes | WAL syncs | WAL pages MiB, at least | bypassable at most |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  tail -n +2 "$OUT/pg-writes.csv" | tr ',' '|' | sed 's/^/| /; s/$/ |/'
fi
