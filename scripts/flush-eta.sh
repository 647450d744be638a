#!/usr/bin/env bash
# How right the online flush's ETA turns out: writes scattered 4 KiB pages
# into a write-back cache in front of an emulated 10K RPM disk (fio, nbd
# engine), then drains online through the control socket, recording every
# progress line, and compares each ETA with the time the drain really took
# from that moment. Prints the ETA error at 10 %, 25 %, 50 % and 75 % of the
# drain's duration (error = (ETA - actual) / actual).
#
# Usage: scripts/flush-eta.sh      (WRITES=20000 pages over FOOTPRINT=1G by default)
#        LOAD_IOPS=N: a steady load of N random 4 KiB writes a second over the
#        same footprint goes on during the drain (default 0: none); its
#        offsets are drawn afresh (fio's randrepeat=0: by default fio would
#        replay the fill's offsets in the fill's order)
set -euo pipefail
WRITES=${WRITES:-20000}
FOOTPRINT=${FOOTPRINT:-1G}
LOAD_IOPS=${LOAD_IOPS:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache
WORK=$(mktemp -d)
cleanup() {
    [ -n "${LOAD:-}" ] && kill -TERM "$LOAD" 2>/dev/null
    [ -n "${PID:-}" ] && kill -TERM "$PID" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
"$WCACHE" serve --data-dir "$WORK" --cache-size 512M >"$WORK/serve.log" 2>&1 &
PID=$!
for _ in $(seq 200); do [ -S "$WORK/wcache.sock" ] && break; sleep 0.05; done
fio --name=fill --ioengine=nbd --uri="nbd+unix:///disk?socket=$WORK/wcache.sock" --rw=randwrite \
    --bs=4k --size="$FOOTPRINT" --number_ios="$WRITES" --iodepth=16 --norandommap \
    --output-format=terse >/dev/null
if [ "$LOAD_IOPS" -gt 0 ]; then
    echo "a steady load of $LOAD_IOPS random 4 KiB writes/s goes on during the drain"
    fio --name=load --ioengine=nbd --uri="nbd+unix:///disk?socket=$WORK/wcache.sock" --rw=randwrite \
        --bs=4k --size="$FOOTPRINT" --iodepth=1 --norandommap --rate_iops="$LOAD_IOPS" --randrepeat=0 \
        --time_based --runtime=3600 --output-format=terse >/dev/null 2>&1 &
    LOAD=$!
    sleep 2
fi
python3 - "$WORK/wcache.ctl" ${CURVE:+curve} <<'PY'
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"v":1,"cmd":"flush"}\n')
lines, f = [], s.makefile()
for line in f:
    m = json.loads(line)
    if "progress" in m:
        lines.append((time.monotonic(), m["progress"]))
    else:
        end = time.monotonic()
        assert m.get("ok"), m
        break
start = lines[0][0]
total = end - start
dirty0 = lines[0][1]["dirty_pages_start"]
print(f"drained {dirty0} dirty pages in {total:.1f} s (online, through the control socket)")
print(f"{'at':>5} {'elapsed s':>10} {'dirty':>8} {'rate p/s':>9} {'ETA s':>8} {'actual s':>9} {'error':>7} {'pages/rate error':>17}")
for frac in (0.10, 0.25, 0.50, 0.75):
    t, p = min(lines, key=lambda l: abs((l[0] - start) - frac * total))
    actual = end - t
    eta = p.get("eta_s")
    err = f"{(eta - actual) / actual:+.0%}" if eta is not None and actual > 0 else "n/a"
    naive = p["dirty_pages"] / p["rate_pages_per_s"] if p["rate_pages_per_s"] > 0 else None
    naive_err = f"{(naive - actual) / actual:+.0%}" if naive is not None and actual > 0 else "n/a"
    print(f"{frac:>5.0%} {t - start:>10.1f} {p['dirty_pages']:>8} {p['rate_pages_per_s']:>9.0f} "
          f"{eta if eta is None else round(eta, 1)!s:>8} {actual:>9.1f} {err:>7} {naive_err:>17}")
if len(sys.argv) > 2:
    print("curve (every 5 s): elapsed s, dirty pages, dirty groups, rate pages/s, ETA s")
    nxt = 0.0
    for t, p in lines:
        if t - start >= nxt:
            print(f"  {t - start:6.1f} {p['dirty_pages']:8} {p.get('dirty_groups', 0):8} "
                  f"{p['rate_pages_per_s']:8.0f} {p.get('eta_s') or 0:8.1f}")
            nxt += 5
PY
