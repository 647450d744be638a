#!/usr/bin/env bash
# Memory under many connections: `wcache serve` (cache file and backing file
# on BENCH_DIR), then CONNECTIONS NBD connections one after another, each
# doing 20 reads or writes of 4 KiB, 64 KiB, 1 MiB or 4 MiB at random
# offsets (libnbd's Python binding); prints the server's RSS every tenth of
# the way. A bounded server levels off; the last line is the ratio of the
# final RSS to the RSS after the first tenth.
#
# Usage: scripts/rss-soak.sh   (CONNECTIONS=10000 BENCH_DIR=/var/tmp)
# Needs /usr/bin/python3 with python3-libnbd (apt-get install -y python3-libnbd).
set -euo pipefail
CONNECTIONS=${CONNECTIONS:-10000}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
/usr/bin/python3 -c 'import nbd' 2>/dev/null || { echo "missing python3-libnbd (apt-get install -y python3-libnbd)"; exit 1; }
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WORK=$(mktemp -d "$BENCH_DIR/wcache-rss.XXXXXX")
PID=
trap '[ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
"$TARGET/release/wcache" serve --cache "$WORK/cache.img" --cache-size 256M \
    --export "disk=$WORK/backing.img" --backing-size 1G --socket "$WORK/w.sock" >"$WORK/log" 2>&1 &
PID=$!
for _ in $(seq 200); do [ -S "$WORK/w.sock" ] && break; sleep 0.05; done
/usr/bin/python3 - "nbd+unix:///disk?socket=$WORK/w.sock" "$CONNECTIONS" "$PID" <<'PY'
import nbd, os, random, sys
uri, n, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(1)
def rss_mib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
print("connections  rss_mib")
print(f"{0:11d}  {rss_mib():7.1f}", flush=True)
first = None
for i in range(1, n + 1):
    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    for _ in range(20):
        length = rnd.choice([4096, 65536, 1 << 20, 4 << 20])
        offset = rnd.randrange(0, (size - length) // 4096) * 4096
        if rnd.random() < 0.5:
            h.pwrite(os.urandom(16) * (length // 16), offset)
        else:
            h.pread(length, offset)
    h.shutdown()
    del h
    if i % max(1, n // 10) == 0:
        rss = rss_mib()
        first = first or rss
        print(f"{i:11d}  {rss:7.1f}", flush=True)
print(f"RSS after {n} connections / after the first tenth: {rss_mib() / first:.2f}")
PY
