#!/usr/bin/env bash
# What TLS costs NBD over TCP: fio's nbd engine, 4 KiB random writes at
# QD32 (one connection), against one `wcache serve --tls on` (plaintext and
# TLS clients both allowed), plaintext and TLS alternating, ROUNDS times each;
# and, for reference, the same against nbdkit's memory plugin with --tls=on
# (its TLS is GnuTLS's), when nbdkit is installed.
#
# fio's engine is libnbd's: an nbds:// URI makes it upgrade with STARTTLS.
# fio cannot pass tls-certificates= in the URI (libnbd refuses local files
# in URIs unless the program allows them), so the client's certificates go
# where libnbd looks without it: $HOME/.pki/libnbd (HOME is a temporary
# directory here). The server asks for no client certificate.
#
# The cache and the backing are files on /dev/shm (sync mode nvram, as in
# scripts/bench-nbd.sh), write-back: every side serves from memory, so the
# cost of TLS is not hidden behind a device. Client and server share the
# machine's cores: each side's crypto counts.
#
# Usage: scripts/bench-tls.sh      (RUNTIME=5 SIZE=256M ROUNDS=3 by default)
# Last line: wcache's ratio TLS/plaintext of the median IOPS (the target: >= 0.80).
set -euo pipefail

RUNTIME=${RUNTIME:-5}
SIZE=${SIZE:-256M}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
for tool in fio openssl; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio openssl)"; exit 1; }
done
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache

WORK=$(mktemp -d /dev/shm/wcache-bench-tls.XXXXXX)
PID=
KIT=
cleanup() {
    [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null || true
    [ -n "$KIT" ] && kill -TERM "$KIT" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# A CA, the server's certificate and key, and the client's CA file.
CERTS=$WORK/certs
mkdir -p "$CERTS" "$WORK/home/.pki/libnbd"
(
    cd "$CERTS"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
        -subj /CN=bench-ca -keyout ca-key.pem -out ca-cert.pem \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=server \
        -keyout server-key.pem -out server.csr
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -set_serial 2 \
        -days 30 -extfile server.ext -out server-cert.pem
) >/dev/null 2>&1
cp "$CERTS/ca-cert.pem" "$WORK/home/.pki/libnbd/"

"$WCACHE" serve --data-dir "$WORK" --listen 127.0.0.1:0 --tls on --tls-certificates "$CERTS" \
    --cache "$WORK/cache.img" --cache-size "$SIZE" --cache-sync nvram \
    --backing "$WORK/backing.img" --backing-size "$SIZE" --backing-sync nvram \
    --write-policy write-back >"$WORK/serve.log" 2>&1 &
PID=$!
ADDR=
for _ in $(seq 200); do
    ADDR=$(sed -n 's|.*NBD URI: nbds://\([^/]*\)/.*|\1|p' "$WORK/serve.log")
    [ -n "$ADDR" ] && break
    sleep 0.05
done
[ -n "$ADDR" ] || { echo "wcache serve did not start:"; cat "$WORK/serve.log"; exit 1; }
KIT_ADDR=
if command -v nbdkit >/dev/null; then
    KIT_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    nbdkit -f -i 127.0.0.1 -p "$KIT_PORT" --tls=on --tls-certificates="$CERTS" --exportname=disk \
        memory "$SIZE" >"$WORK/nbdkit.log" 2>&1 &
    KIT=$!
    KIT_ADDR=127.0.0.1:$KIT_PORT
    sleep 0.5
fi

# IOPS of one fio job against URI $1.
iops() {
    HOME=$WORK/home fio --name=tls --ioengine=nbd --uri="$1" --rw=randwrite --bs=4k \
        --iodepth=32 --size="$SIZE" --runtime="$RUNTIME" --time_based --ramp_time=1 \
        --output-format=json 2>"$WORK/fio.err" | python3 -c '
import json, sys
text = sys.stdin.read()  # fio says "connected to NBD server" before the JSON
job = json.loads(text[text.index("{"):])["jobs"][0]
assert job["error"] == 0, job["error"]
print(round(job["write"]["iops"]))'
}

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "fio nbd engine, 4 KiB random write, QD32, one connection, ${RUNTIME}s per job, $ROUNDS rounds"
plain=() tls=() kit_plain=() kit_tls=()
for round in $(seq "$ROUNDS"); do
    p=$(iops "nbd://$ADDR/disk")
    t=$(iops "nbds://$ADDR/disk")
    plain+=("$p") tls+=("$t")
    printf 'round %d: wcache plaintext %7d IOPS   TLS %7d IOPS\n' "$round" "$p" "$t"
    if [ -n "$KIT_ADDR" ]; then
        p=$(iops "nbd://$KIT_ADDR/disk")
        t=$(iops "nbds://$KIT_ADDR/disk")
        kit_plain+=("$p") kit_tls+=("$t")
        printf 'round %d: nbdkit plaintext %7d IOPS   TLS %7d IOPS\n' "$round" "$p" "$t"
    fi
done
grep -q "NBD TLS handshake failed" "$WORK/serve.log" && { echo "a TLS handshake failed:"; cat "$WORK/serve.log"; exit 1; }
if [ -n "$KIT_ADDR" ]; then
    P=$(median "${kit_plain[@]}")
    T=$(median "${kit_tls[@]}")
    python3 -c "print(f'nbdkit median: plaintext $P IOPS, TLS $T IOPS, TLS/plaintext {$T / $P:.2f}')"
fi
P=$(median "${plain[@]}")
T=$(median "${tls[@]}")
python3 -c "print(f'wcache median: plaintext $P IOPS, TLS $T IOPS')"
python3 -c "print(f'wcache TLS/plaintext 4 KiB QD32 random-write IOPS: {$T / $P:.2f}')"
