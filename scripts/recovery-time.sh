#!/usr/bin/env bash
# Recovery time: a cache of CACHE_SIZE filled with WRITE_SIZE of dirty pages
# (1 MiB sequential writes ending with a FLUSH, persist-on-flush, destage thresholds at 99/100 %,
# no age or idle drain), the server killed with SIGKILL, the page cache
# dropped (root), and the time until the restarted server listens again.
# Usage: scripts/recovery-time.sh FORMAT CACHE_SIZE WRITE_SIZE   (e.g. 3 1G 900M;
#        DIR=/var/tmp/wcache-recovery; SETTLE=S: wait S seconds after the
#        fill before the kill, so that format 3's last checkpoint is current;
#        EXTRA=SIZE: then write SIZE more (over the start, ending with a
#        FLUSH) before the kill: format 3's log after its last checkpoint,
#        up to the checkpoint's interval (a 16th of the ring);
#        WCACHE_BIN: another build of wcache;
#        needs fio, bc, root for drop_caches)
set -uo pipefail
FMT=$1; CS=$2; WS=$3
D=${DIR:-/var/tmp/wcache-recovery}; mkdir -p "$D"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
(cd "$ROOT" && cargo build --release -q -p wcache-cli)
W=${WCACHE_BIN:-$ROOT/target/release/wcache}
rm -f $D/c.img $D/b.img $D/s.sock $D/s.ctl
truncate -s 32G $D/b.img
ARGS="--socket $D/s.sock --cache $D/c.img --cache-size $CS --backing $D/b.img --backing-size 32G --write-policy write-back --cache-format $FMT --persist-on-flush --low-threshold 99 --high-threshold 100 --max-dirty-age 0 --idle-after 1h"
$W serve $ARGS > $D/s1.log 2>&1 &
P=$!
for i in $(seq 600); do [ -S $D/s.sock ] && break; sleep 0.1; done
fio --name=fill --ioengine=nbd --uri="nbd+unix:///disk?socket=$D/s.sock" --rw=write --bs=1m --iodepth=4 --size=$WS --end_fsync=1 --output-format=terse > /dev/null 2>&1
sleep "${SETTLE:-0}"
if [ -n "${EXTRA:-}" ]; then
    fio --name=extra --ioengine=nbd --uri="nbd+unix:///disk?socket=$D/s.sock" --rw=write --bs=1m --iodepth=4 --size=$EXTRA --end_fsync=1 --output-format=terse > /dev/null 2>&1
fi
kill -9 $P; wait $P 2>/dev/null
rm -f $D/s.sock
sync; echo 3 > /proc/sys/vm/drop_caches
T0=$(date +%s.%N)
$W serve $ARGS > $D/s2.log 2>&1 &
P=$!
for i in $(seq 6000); do [ -S $D/s.sock ] && break; sleep 0.01; done
T1=$(date +%s.%N)
kill -9 $P; wait $P 2>/dev/null
echo "format $FMT cache $CS written $WS, settled ${SETTLE:-0} s, then ${EXTRA:-nothing} more: start after kill -9 took $(echo "$T1 - $T0" | bc) s; $(grep -E 'recovering|read back' $D/s2.log | head -2 | sed "s/.*(checkpoint/(checkpoint/" | tr '\n' ' ')"
if [ "$FMT" = 3 ]; then
    # Without the checkpoint: `check` reads the whole log from the tail,
    # every batch's checksum verified, as recovery did before checkpoints.
    sync; echo 3 > /proc/sys/vm/drop_caches
    T0=$(date +%s.%N)
    $W check --cache $D/c.img > $D/check.log 2>&1
    T1=$(date +%s.%N)
    echo "  the whole log read by check: $(echo "$T1 - $T0" | bc) s; $(grep -oE 'a log of [0-9]+ batches' $D/check.log)"
fi
rm -f $D/c.img $D/b.img
