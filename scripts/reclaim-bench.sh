#!/usr/bin/env bash
# Reclaim under sustained random writes: a fresh 1 GiB cache (persist-on-
# flush) in front of a 1 GiB backing file, fio 4 KiB random writes at QD32
# over SIZE (default 256M; 900M: a working set near the cache's size, so
# the log's tail meets live dirty pages) for RT seconds (default 20), with
# IOPS per second. WARM=256M first writes that much sequentially in 1 MiB.
# FMT: serve options for the format (default "--cache-format 3";
# "--cache-format 2" for format 2). Prints IOPS, p50/p99, IOPS per second, the live and dirty
# shares of the batches the log's tail met, the pages reclaim copied forward
# and the groups it destaged, and the server's exit summary
# (stalls for room, destages, flushes).
# Usage: scripts/reclaim-bench.sh WCACHE_BIN [serve options]   (BENCH_DIR=/var/tmp)
set -euo pipefail
BIN=$(realpath "${1:?usage: reclaim-bench.sh WCACHE_BIN [serve options]}"); shift
DIR=$(mktemp -d "${BENCH_DIR:-/var/tmp}/wcache-reclaim.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
fallocate -l 1G back.img
# shellcheck disable=SC2086
"$BIN" serve --cache cache.img --cache-size 1G --backing back.img --socket "$DIR/wc.sock" \
    --data-dir "$DIR" --persist-on-flush ${FMT:---cache-format 3} "$@" >serve.log 2>&1 &
SP=$!
for _ in $(seq 100); do [ -S wc.sock ] && break; sleep 0.1; done
[ -S wc.sock ] || { echo "no socket"; cat serve.log; exit 1; }
[ -n "${WARM:-}" ] && fio --name=w --ioengine=nbd --uri="nbd+unix:///disk?socket=$DIR/wc.sock" --rw=write --bs=1M --iodepth=4 --size="$WARM" >/dev/null 2>&1
fio --name=w --ioengine=nbd --uri="nbd+unix:///disk?socket=$DIR/wc.sock" --rw=randwrite --bs=4k --iodepth=32 --size="${SIZE:-256M}" \
    --time_based --runtime="${RT:-20}" --output-format=json --write_iops_log="$DIR/iops" \
    --log_avg_msec=1000 >fio.json 2>/dev/null
# The live and dirty shares of the batches the log's tail met (format 3),
# beside docs/format-v3.md's model of them.
python3 - "$DIR/wc.ctl" <<'PY' || true
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b'{"v":1,"cmd":"stats"}\n')
e = {m["name"]: m["value"] for m in json.loads(s.makefile().readline())["result"]["engine"]}
met = e.get("log_tail_pages", 0)
if met:
    print("tail met %d pages: live %.3f, dirty %.3f" % (
        met, e["log_tail_live_pages"] / met, e["log_tail_dirty_pages"] / met))
    print("reclaim copied %d pages forward, destaged %d groups; WOW picked %d groups" % (
        e.get("log_copies", 0), e["log_forced_destages"], e["destage_picks"]))
PY
kill "$SP"
wait "$SP"
python3 - <<'PY'
import json
t = open('fio.json').read(); j = json.loads(t[t.index('{'):])['jobs'][0]['write']
print("IOPS %.0f  p50 %.1f us  p99 %.1f us" % (j['iops'], j['clat_ns']['percentile']['50.000000']/1000, j['clat_ns']['percentile']['99.000000']/1000))
per = [int(l.split(',')[1]) for l in open('iops_iops.1.log')]
print("per second:", per)
PY
grep -E "destages of" serve.log | tail -1 | sed 's/.*INFO wcache_io::service::report: /   /'
