#!/usr/bin/env bash
# A small real Ceph cluster on this one machine, from the Debian packages
# (ceph-mon, ceph-osd, ceph-mgr, ceph-common), for the tests and benchmarks
# that put wcache in front of RBD images (crates/cli/tests/ceph.rs). One
# monitor on 127.0.0.1 (msgr2, port $MON_PORT), one manager, $OSDS
# bluestore OSDs on sparse files, cephx on, one copy of everything, every
# path under $CEPH_DIR; the daemons run as the caller (root), daemonized,
# with pid files in $CEPH_DIR/run. Progress goes to stderr; `start` and
# `env` print on stdout the lines a caller evals:
#   CEPH_CONF=...  CEPH_KEYRING=...  CEPH_POOL=...
#
#   scripts/ceph-cluster.sh start          # install, create or start; wait clean
#   eval "$(scripts/ceph-cluster.sh env)"
#   rbd -c "$CEPH_CONF" -k "$CEPH_KEYRING" ls "$CEPH_POOL"
#   scripts/ceph-cluster.sh restart-osd 0  # kill -9 osd.0, start it, wait clean
#   scripts/ceph-cluster.sh stop           # data kept; `start` resumes it
#   scripts/ceph-cluster.sh purge          # stop and delete $CEPH_DIR
#
# Subcommands: start, stop, purge, status, env, wait (all PGs active+clean),
# stop-osd N / start-osd N / restart-osd N, stop-mon / start-mon /
# restart-mon. stop-* and restart-* kill with SIGKILL (a crash, for fault
# tests); `stop` asks each daemon to exit and kills it after $STOP_SECS.
# Every subcommand can be repeated. Settings (environment, defaults):
#   CEPH_DIR=/var/tmp/wcache-ceph  OSDS=1  OSD_SIZE=8G  POOL=wcache
#   IMAGES="img0:1G" (NAME:SIZE ..., created with layering,exclusive-lock)
#   PG_NUM=32  MON_PORT=13300  OSD_MEMORY=1G  WAIT_SECS=180  STOP_SECS=20
#   WAIT=1 (0: start-osd, restart-osd and start-mon do not wait for clean)
#   EXTRA_CONF="key = value" lines added to [global] when the cluster is
#   created (e.g. "debug_osd = 10"). Settings made at creation (ports,
#   memory, PG_NUM) stay with the cluster; `start` adds missing OSDs, the
#   pool and the images named at each run.
set -Eeuo pipefail
# What `env` prints would steer the daemons too (an OSD given the admin
# keyring by CEPH_KEYRING cannot authenticate): every path is named here.
unset CEPH_CONF CEPH_KEYRING CEPH_ARGS

CEPH_DIR=${CEPH_DIR:-/var/tmp/wcache-ceph}
OSDS=${OSDS:-1}
OSD_SIZE=${OSD_SIZE:-8G}
POOL=${POOL:-wcache}
IMAGES=${IMAGES:-img0:1G}
PG_NUM=${PG_NUM:-32}
MON_PORT=${MON_PORT:-13300}
OSD_MEMORY=${OSD_MEMORY:-1G}
WAIT_SECS=${WAIT_SECS:-180}
STOP_SECS=${STOP_SECS:-20}
WAIT=${WAIT:-1}
EXTRA_CONF=${EXTRA_CONF:-}

CONF=$CEPH_DIR/ceph.conf
KEYRING=$CEPH_DIR/ceph.client.admin.keyring
RUN=$CEPH_DIR/run
LOG=$CEPH_DIR/log
MON=a
MGR=x
# The first line of our ceph.conf: purge deletes only a directory holding it.
MARK="# wcache ceph-cluster.sh"

say() { echo "ceph-cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }
trap 'say "error: line $LINENO failed: $BASH_COMMAND"' ERR

# The CLIs against this cluster, bounded (a CLI waits forever for a
# monitor that is down).
ceph_() { timeout "${T:-60}" ceph -c "$CONF" -k "$KEYRING" "$@"; }
rbd_() { timeout "${T:-120}" rbd -c "$CONF" -k "$KEYRING" "$@"; }

# die_log MESSAGE FILE...: dies showing the end of each FILE (daemon logs).
die_log() {
  local msg=$1 f
  shift
  for f in "$@"; do
    [ -s "$f" ] || continue
    say "$f:"
    tail -n 10 "$f" | cut -c1-300 | sed 's/^/  | /' >&2
  done
  die "$msg"
}

print_env() {
  printf 'CEPH_CONF=%q\nCEPH_KEYRING=%q\nCEPH_POOL=%q\n' "$CONF" "$KEYRING" "$POOL"
}

# --- packages ---------------------------------------------------------------

install_packages() {
  local p need=()
  for p in ceph-mon ceph-osd ceph-mgr ceph-common; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return
  [ "$(id -u)" = 0 ] || die "not root: cannot install ${need[*]}"
  say "installing ${need[*]}"
  # Without recommends: they would add ceph-mds and a time daemon.
  { apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } \
    >"/tmp/ceph-cluster-apt.$$.log" 2>&1 ||
    { tail -n 20 "/tmp/ceph-cluster-apt.$$.log" >&2; die "apt-get install ${need[*]} failed"; }
  rm -f "/tmp/ceph-cluster-apt.$$.log"
}

# --- daemons ----------------------------------------------------------------

# pid_of TYPE ID: prints the pid of our daemon TYPE.ID if it runs: the pid
# file's, else one found in /proc; either way its command line must be the
# one start_daemon ran (a stale pid file names nothing).
pid_of() {
  local t=$1 i=$2 pid comm f
  if [ -f "$RUN/$t.$i.pid" ]; then
    pid=$(cat "$RUN/$t.$i.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && ours "$pid" "$t" "$i"; then echo "$pid"; return 0; fi
  fi
  for f in /proc/[0-9]*; do
    read -r comm 2>/dev/null <"$f/comm" || continue
    [ "$comm" = "ceph-$t" ] || continue
    if ours "${f#/proc/}" "$t" "$i"; then echo "${f#/proc/}"; return 0; fi
  done
  return 1
}

# ours PID TYPE ID
ours() { [ "$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" = "ceph-$2 -c $CONF -i $3 " ]; }

# gone PID: the process has exited: no such process, or a zombie whose
# threads all ended (until the last one does, its files and locks are held).
gone() {
  local st
  st=$(awk '/^State:/ { s = $2 } /^Threads:/ { t = $2 } END { print s t }' \
    "/proc/$1/status" 2>/dev/null) || return 0
  [ -z "$st" ] || [ "$st" = Z1 ]
}

# wait_gone PID SECS
wait_gone() {
  local n=$(($2 * 10))
  while ! gone "$1"; do
    [ $n -gt 0 ] || return 1
    n=$((n - 1))
    sleep 0.1
  done
}

# stop_daemon TYPE ID TERM|KILL: TERM asks it to exit and kills it after
# $STOP_SECS; KILL is a crash. Quiet when it is not running.
stop_daemon() {
  local t=$1 i=$2 sig=$3 pid
  pid=$(pid_of "$t" "$i") || return 0
  say "stopping $t.$i (pid $pid, SIG$sig)"
  kill -s "$sig" "$pid" 2>/dev/null || true
  if [ "$sig" = TERM ] && ! wait_gone "$pid" "$STOP_SECS"; then
    say "$t.$i did not exit in ${STOP_SECS}s: SIGKILL"
    kill -s KILL "$pid" 2>/dev/null || true
  fi
  wait_gone "$pid" 30 || die "$t.$i (pid $pid) survived SIGKILL"
}

# start_daemon TYPE ID: the daemon forks and its parent returns once it
# started (ceph-mon and ceph-osd report their initialization's status).
start_daemon() {
  local t=$1 i=$2 pid
  if pid=$(pid_of "$t" "$i"); then return 0; fi
  say "starting $t.$i"
  STARTED=1
  "ceph-$t" -c "$CONF" -i "$i" >"$LOG/$t.$i.out" 2>&1 ||
    die_log "ceph-$t -i $i failed to start" "$LOG/$t.$i.log" "$LOG/$t.$i.out"
  sleep 0.2
  pid_of "$t" "$i" >/dev/null ||
    die_log "ceph-$t -i $i exited after starting" "$LOG/$t.$i.log" "$LOG/$t.$i.out"
}

# The ids of the OSDs created under $CEPH_DIR.
osd_ids() {
  local f
  for f in "$CEPH_DIR"/osd.*/created; do
    [ -e "$f" ] || continue
    f=${f%/created}
    echo "${f##*/osd.}"
  done | sort -n
}

# --- waits ------------------------------------------------------------------

# until_ok SECS WHAT COMMAND...: polls COMMAND each second; dies naming
# WHAT, with `ceph -s`, after SECS.
until_ok() {
  local secs=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@"; do
    if [ $((SECONDS - t0)) -ge "$secs" ]; then
      say "$what: not after ${secs}s; ceph -s:"
      T=15 ceph_ -s >&2 || say "(ceph -s failed: no monitor?)"
      die "timed out waiting for $what"
    fi
    sleep 1
  done
}

mon_up() { T=10 ceph_ mon stat >/dev/null 2>&1; }
mgr_up() { T=10 ceph_ mgr stat 2>/dev/null | grep -q '"available": true'; }

# py CODE ARGS...: CODE on the JSON on stdin (d) and the ARGS (a), false
# without JSON (a CLI that failed); the system's python3, which ceph-common
# needs anyway.
py() {
  local code=$1
  shift
  /usr/bin/python3 -c "import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(1)
a = sys.argv[1:]
$code" "$@"
}

osdmap_epoch() { T=15 ceph_ osd dump -f json 2>/dev/null | py 'print(d["epoch"])'; }

# booted ID EPOCH: osd.ID is up in the OSD map since after EPOCH (the
# instance started then, not a killed one the monitor still thinks up).
booted() {
  T=15 ceph_ osd dump -f json 2>/dev/null | py '
o = [x for x in d["osds"] if x["osd"] == int(a[0])]
sys.exit(0 if o and o[0]["up"] == 1 and o[0]["up_from"] > int(a[1]) else 1)' "$1" "$2"
}

# clean WANT POOL_ID [ID:EPOCH...]: every PG active+clean, WANT of them in
# the pool, and those on each restarted osd.ID reported after EPOCH (not
# the manager's figures from before the restart).
clean() {
  T=15 ceph_ pg dump pgs -f json 2>/dev/null | py '
pgs = d["pg_stats"] if isinstance(d, dict) else d
want, pool = int(a[0]), a[1]
since = dict(map(int, s.split(":")) for s in a[2:])
mine = [p for p in pgs if p["pgid"].split(".")[0] == pool]
fresh = all(p["reported_epoch"] > since[o] for p in pgs for o in p["acting"] if o in since)
ok = (pgs or want == 0) and len(mine) >= want and fresh
sys.exit(0 if ok and all(p["state"] == "active+clean" for p in pgs) else 1)' "$@"
}

pool_id() { T=15 ceph_ osd pool ls detail 2>/dev/null | awk -v p="'$POOL'" '$1 == "pool" && $3 == p { print $2 }'; }
pool_pgs() { T=15 ceph_ osd pool get "$POOL" pg_num 2>/dev/null | awk '{ print $2 }'; }

# OSDs started by this run, as ID:EPOCH (the OSD map's epoch before).
SINCE=()

# start_osd ID EPOCH
start_osd() {
  STARTED=0
  start_daemon osd "$1"
  [ "$STARTED" = 0 ] || SINCE+=("$1:$2")
}

# Waits (bounded) for the OSDs this run started to be up, then for all PGs
# to be active+clean.
wait_clean() {
  local s pool want=0
  until_ok 60 "the monitor" mon_up
  for s in "${SINCE[@]}"; do
    until_ok "$WAIT_SECS" "osd.${s%:*} up" booted "${s%:*}" "${s#*:}"
  done
  pool=$(pool_id)
  [ -z "$pool" ] || want=$(pool_pgs)
  until_ok "$WAIT_SECS" "all PGs active+clean" clean "$want" "${pool:--}" "${SINCE[@]}"
}

# The OSD map's epoch, needed to wait for an OSD started now.
epoch_now() {
  if [ "$WAIT" = 0 ]; then echo 0; return; fi
  osdmap_epoch || die "cannot read the OSD map (is mon.$MON running? $0 status)"
}

# --- creation ---------------------------------------------------------------

make_conf() {
  local fsid
  fsid=$(cat /proc/sys/kernel/random/uuid)
  say "creating a cluster in $CEPH_DIR (fsid $fsid)"
  mkdir -p "$CEPH_DIR"
  # \$ stays for Ceph, which expands $cluster, $name, $id itself.
  cat >"$CONF" <<EOF
$MARK (fsid $fsid, created $(date -u +%FT%TZ))
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$MON_PORT]
# msgr2 only: one port for the monitor.
ms_bind_msgr1 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = $RUN
crash_dir = $CEPH_DIR/crash
# One copy on one host: size 1 allowed and not warned about; OSDs of one
# host may hold the copies of a pool of size > 1.
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = $PG_NUM
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_allow_pool_delete = true
# A down OSD is never marked out (with one OSD that would stall its PGs),
# and that is not a warning.
mon_osd_down_out_interval = 0
mon_warn_on_osd_down_out_interval_zero = false
# The host's free space is not the cluster's health (default: warn < 30%).
mon_data_avail_warn = 10
# No module with a web server (restful); iostat for \`ceph iostat\`.
mgr_initial_modules = iostat
$EXTRA_CONF

[mon]
mon_data = $CEPH_DIR/mon.\$id
keyring = $CEPH_DIR/mon.\$id/keyring
log_file = $LOG/\$type.\$id.log
mon_cluster_log_file = $LOG/\$cluster.\$channel.log
pid_file = $RUN/\$type.\$id.pid
admin_socket = $RUN/\$type.\$id.asok

[mgr]
mgr_data = $CEPH_DIR/mgr.\$id
keyring = $CEPH_DIR/mgr.\$id/keyring
log_file = $LOG/\$type.\$id.log
pid_file = $RUN/\$type.\$id.pid
admin_socket = $RUN/\$type.\$id.asok
public_addr = 127.0.0.1
# The daemons report to the manager each second (default 5): PG states in
# \`ceph -s\` and the waits here are current sooner after a restart.
mgr_stats_period = 1

[osd]
osd_data = $CEPH_DIR/osd.\$id
keyring = $CEPH_DIR/osd.\$id/keyring
log_file = $LOG/\$type.\$id.log
pid_file = $RUN/\$type.\$id.pid
admin_socket = $RUN/\$type.\$id.asok
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
osd_objectstore = bluestore
# The block device: osd_data/block, a sparse file the script makes (not
# one of the default 100G, nor a symlink: bluestore_block_path stays unset).
bluestore_block_create = false
# Memory: the cache autotuner keeps the OSD near this (default 4G).
osd_memory_target = $OSD_MEMORY
# The aio thread's wait (default 250ms) is paid at each of the ~8 opens and
# closes of the block file while an OSD starts.
bdev_aio_poll_ms = 50

[client]
keyring = $KEYRING
EOF
  # The admin's key; the monitor's, with the admin's imported, for mkfs.
  ceph-authtool --create-keyring "$KEYRING" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
  chmod 600 "$KEYRING"
}

make_mon() {
  local d=$CEPH_DIR/mon.$MON tmp=$CEPH_DIR/mon-mkfs
  say "creating mon.$MON on 127.0.0.1:$MON_PORT"
  rm -rf "$d" "$tmp"
  mkdir -p "$d" "$tmp"
  ceph-authtool --create-keyring "$tmp/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$tmp/keyring" --import-keyring "$KEYRING" >/dev/null
  monmaptool --create --fsid "$(fsid)" --addv "$MON" "[v2:127.0.0.1:$MON_PORT]" "$tmp/monmap" >/dev/null
  ceph-mon -c "$CONF" --mkfs -i "$MON" --monmap "$tmp/monmap" --keyring "$tmp/keyring" \
    >"$LOG/mon.$MON.mkfs.log" 2>&1 || die_log "ceph-mon --mkfs failed" "$LOG/mon.$MON.mkfs.log"
  rm -rf "$tmp"
  touch "$d/created"
}

fsid() { awk '$1 == "fsid" { print $3; exit }' "$CONF"; }

make_mgr() {
  local d=$CEPH_DIR/mgr.$MGR
  say "creating mgr.$MGR"
  mkdir -p "$d"
  ceph_ auth get-or-create "mgr.$MGR" mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
    -o "$d/keyring" 2>/dev/null || die "ceph auth get-or-create mgr.$MGR failed"
  # Device health scraping needs smartctl and is noise here.
  T=15 ceph_ config set mgr mgr/devicehealth/enable_monitoring false --force >/dev/null 2>&1 ||
    say "warning: could not turn device health monitoring off"
  touch "$d/created"
}

# make_osd ID: registers osd.ID (ceph osd new, with its key) and makes its
# bluestore on a sparse file of $OSD_SIZE. A retry after a failure reuses
# the uuid and key, so `osd new` is idempotent.
make_osd() {
  local i=$1 d=$CEPH_DIR/osd.$1 uuid key
  say "creating osd.$i (bluestore on a sparse $OSD_SIZE file)"
  mkdir -p "$d"
  [ -s "$d/uuid.new" ] || cat /proc/sys/kernel/random/uuid >"$d/uuid.new"
  [ -s "$d/key.new" ] || ceph-authtool --gen-print-key >"$d/key.new"
  uuid=$(cat "$d/uuid.new")
  key=$(cat "$d/key.new")
  find "$d" -mindepth 1 -maxdepth 1 ! -name uuid.new ! -name key.new -exec rm -rf {} +
  printf '{"cephx_secret": "%s"}\n' "$key" >"$d/new.json"
  ceph_ osd new "$uuid" "$i" -i "$d/new.json" >/dev/null || die "ceph osd new $uuid $i failed"
  rm -f "$d/new.json"
  ceph-authtool --create-keyring "$d/keyring" -n "osd.$i" --add-key "$key" >/dev/null
  truncate -s "$OSD_SIZE" "$d/block"
  ceph-osd -c "$CONF" -i "$i" --mkfs --osd-uuid "$uuid" >"$LOG/osd.$i.mkfs.log" 2>&1 ||
    die_log "ceph-osd --mkfs -i $i failed" "$LOG/osd.$i.mkfs.log"
  rm -f "$d/uuid.new" "$d/key.new"
  touch "$d/created"
}

ensure_pool() {
  if ! pool_id | grep -q .; then
    say "creating pool $POOL ($PG_NUM PGs)"
    ceph_ osd pool create "$POOL" "$PG_NUM" "$PG_NUM" replicated >/dev/null 2>&1 ||
      die "ceph osd pool create $POOL failed"
  fi
  wait_clean
  if ! T=15 ceph_ osd pool application get "$POOL" 2>/dev/null | grep -q '"rbd"'; then
    rbd_ pool init "$POOL" || die "rbd pool init $POOL failed"
  fi
}

ensure_images() {
  local spec name size have
  have=$(rbd_ ls "$POOL") || die "rbd ls $POOL failed"
  for spec in $IMAGES; do
    name=${spec%%:*}
    size=${spec#*:}
    [ "$name" != "$spec" ] && [ -n "$name" ] && [ -n "$size" ] || die "IMAGES: '$spec' is not NAME:SIZE"
    grep -qx -- "$name" <<<"$have" && continue
    say "creating image $POOL/$name ($size)"
    rbd_ create --size "$size" --image-feature layering,exclusive-lock "$POOL/$name" ||
      die "rbd create $POOL/$name failed"
  done
}

# --- subcommands ------------------------------------------------------------

need_cluster() { [ -f "$CONF" ] || die "no cluster in $CEPH_DIR (run: $0 start)"; }

cmd_start() {
  local i epoch t0=$SECONDS
  install_packages
  [ -f "$CONF" ] || make_conf
  grep -qF "$MARK" "$CONF" || die "$CONF was not made by this script"
  [ -f "$KEYRING" ] || die "$KEYRING is missing (purge and start again)"
  mkdir -p "$RUN" "$LOG" "$CEPH_DIR/crash"
  [ -f "$CEPH_DIR/mon.$MON/created" ] || make_mon
  start_daemon mon "$MON"
  until_ok 60 "the monitor" mon_up
  [ -f "$CEPH_DIR/mgr.$MGR/created" ] || make_mgr
  start_daemon mgr "$MGR"
  for ((i = 0; i < OSDS; i++)); do
    [ -f "$CEPH_DIR/osd.$i/created" ] || make_osd "$i"
  done
  epoch=$(osdmap_epoch) || die "cannot read the OSD map"
  for i in $(osd_ids); do start_osd "$i" "$epoch"; done
  until_ok 60 "an active manager" mgr_up
  ensure_pool
  ensure_images
  say "ready in $((SECONDS - t0))s"
  print_env
}

cmd_stop() {
  local i
  [ -f "$CONF" ] || return 0
  # OSDs first: each tells the monitor it goes down.
  for i in $(osd_ids); do stop_daemon osd "$i" TERM; done
  stop_daemon mgr "$MGR" TERM
  stop_daemon mon "$MON" TERM
}

cmd_purge() {
  [ -e "$CEPH_DIR" ] || return 0
  if [ -n "$(ls -A "$CEPH_DIR")" ] && ! grep -qsF "$MARK" "$CONF"; then
    die "$CEPH_DIR holds no ceph.conf of this script: not deleting it"
  fi
  cmd_stop
  say "deleting $CEPH_DIR"
  rm -rf "$CEPH_DIR"
}

show() {
  local pid
  if pid=$(pid_of "$1" "$2"); then say "$1.$2: running (pid $pid)"; else say "$1.$2: stopped"; fi
}

cmd_status() {
  local i
  need_cluster
  show mon "$MON"
  show mgr "$MGR"
  for i in $(osd_ids); do show osd "$i"; done
  pid_of mon "$MON" >/dev/null || die "mon.$MON is not running: no cluster status (run: $0 start)"
  T=15 ceph_ -s || die "ceph -s failed"
}

# osd_arg VERB N: N names an OSD of this cluster.
osd_arg() {
  need_cluster
  [[ $2 =~ ^[0-9]+$ ]] || die "usage: $0 $1-osd N"
  [ -f "$CEPH_DIR/osd.$2/created" ] || die "no osd.$2 in $CEPH_DIR"
}

maybe_wait() { [ "$WAIT" = 0 ] || wait_clean; }

main() {
  local epoch
  case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    purge) cmd_purge ;;
    status) cmd_status ;;
    env)
      [ -f "$CONF" ] || say "note: no cluster in $CEPH_DIR yet (run: $0 start)"
      print_env
      ;;
    wait) need_cluster; wait_clean ;;
    stop-osd)
      osd_arg stop "${2:-}"
      stop_daemon osd "$2" KILL
      # No peer reports it: the monitor would see it down after 15 min.
      T=15 ceph_ osd down "$2" >/dev/null 2>&1 || say "warning: ceph osd down $2 failed"
      ;;
    start-osd)
      osd_arg start "${2:-}"
      epoch=$(epoch_now)
      start_osd "$2" "$epoch"
      maybe_wait
      ;;
    restart-osd)
      osd_arg restart "${2:-}"
      epoch=$(epoch_now)
      stop_daemon osd "$2" KILL
      start_osd "$2" "$epoch"
      maybe_wait
      ;;
    stop-mon) need_cluster; stop_daemon mon "$MON" KILL ;;
    start-mon) need_cluster; start_daemon mon "$MON"; maybe_wait ;;
    restart-mon)
      need_cluster
      stop_daemon mon "$MON" KILL
      start_daemon mon "$MON"
      maybe_wait
      ;;
    -h | --help | help) sed -n '2,/^set -Eeuo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *) die "usage: $0 start|stop|purge|status|env|wait|stop-osd N|start-osd N|restart-osd N|stop-mon|start-mon|restart-mon (--help)" ;;
  esac
}

main "$@"
