#!/usr/bin/env bash
# What synchronous replication costs, in one run: `wcache serve` with its
# cache mirrored to a `wcache replica` in another network namespace (a veth
# pair between two namespaces this script makes), against the same server
# unreplicated under write-back and write-through, and replicated over TLS.
# fio's nbd engine on the primary's Unix socket: 4 KiB random writes at QD1
# (p50, p99) and QD32, 1 MiB sequential writes at QD4. Default persistence
# (persist-on-write): a write is acknowledged once durable, so a replicated
# write's latency holds the link's round trip and the peer's cache write.
# Beside them, measured here: the link's round trip (ping) and the peer's
# cache write (a 4 KiB write and fdatasync on the peer's file system).
#
# The cache files, the peer's copy and the backing are files under
# /var/tmp (the disk): both "hosts" share this machine's disk and cores.
# PEER_DIR puts the peer's copy elsewhere (/dev/shm: a peer whose cache
# write costs no device flush, to see the link's own cost).
#
# Usage: scripts/bench-replication.sh   (RUNTIME=10 SIZE=256M by default; root)
# Last lines: the issue's two checks, measured.
set -euo pipefail

RUNTIME=${RUNTIME:-10}
SIZE=${SIZE:-256M}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
for tool in fio openssl ip ping jq; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio openssl iproute2 iputils-ping jq)"; exit 1; }
done
(cd "$ROOT" && CARGO_TARGET_DIR=$TARGET cargo build --release -q -p wcache-cli)
WCACHE=$TARGET/release/wcache

WORK=$(mktemp -d /var/tmp/wcache-bench-repl.XXXXXX)
PEER_DIR=${PEER_DIR:-$WORK}
PEER_WORK=$(mktemp -d "$PEER_DIR/wcache-bench-peer.XXXXXX")
NS_A=wcbench-a
NS_B=wcbench-b
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip netns del $NS_A 2>/dev/null || true
    ip netns del $NS_B 2>/dev/null || true
    rm -rf "$WORK" "$PEER_WORK"
}
trap cleanup EXIT
ip netns del $NS_A 2>/dev/null || true
ip netns del $NS_B 2>/dev/null || true
ip netns add $NS_A
ip netns add $NS_B
ip link add wcbva type veth peer name wcbvb
ip link set wcbva netns $NS_A
ip link set wcbvb netns $NS_B
ip -n $NS_A addr add 10.78.0.1/24 dev wcbva
ip -n $NS_B addr add 10.78.0.2/24 dev wcbvb
for ns in $NS_A $NS_B; do ip -n $ns link set lo up; done
ip -n $NS_A link set wcbva up
ip -n $NS_B link set wcbvb up

# Certificates for the TLS run: a CA, the peer's server certificate, the primary's client one.
CERTS=$WORK/certs
mkdir -p "$CERTS"
(
    cd "$CERTS"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
        -subj /CN=bench-ca -keyout ca-key.pem -out ca-cert.pem \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    for side in server client; do
        usage=$([ $side = server ] && echo serverAuth || echo clientAuth)
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=$side \
            -keyout $side-key.pem -out $side.csr
        printf 'subjectAltName=IP:10.78.0.2,IP:10.78.0.1\nextendedKeyUsage=%s\n' $usage >$side.ext
        openssl x509 -req -in $side.csr -CA ca-cert.pem -CAkey ca-key.pem -set_serial 2 \
            -days 30 -extfile $side.ext -out $side-cert.pem
    done
) >/dev/null 2>&1

wait_for() { # FILE TEXT
    for _ in $(seq 1 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
    echo "no '$2' in $1:"; cat "$1"; exit 1
}

# fio on the primary's socket; prints "iops p50_us p99_us MiB/s".
run_fio() { # SOCKET RW BS DEPTH
    local out=$WORK/fio.json
    fio --name=b --ioengine=nbd --uri="nbd+unix:///disk?socket=$1" --rw="$2" --bs="$3" \
        --iodepth="$4" --size="$SIZE" --time_based --runtime="$RUNTIME" --randrepeat=0 \
        --lat_percentiles=1 --output-format=json --output="$out" >/dev/null
    jq -r '.jobs[0].write | "\(.iops) \(.lat_ns.percentile["50.000000"]/1000) \(.lat_ns.percentile["99.000000"]/1000) \(.bw_bytes/1048576)"' "$out"
}

# One configuration: NAME, then `wcache serve` options; the replica when --replicate-to.
bench() {
    local name=$1; shift
    local dir=$WORK/$name
    mkdir -p "$dir"
    local rep=
    if [[ " $* " == *" --replicate-to "* ]]; then
        local tls=()
        [[ " $* " == *" --replicate-tls-certificates "* ]] && tls=(--tls-certificates "$CERTS")
        ip netns exec $NS_B "$WCACHE" replica --cache "$PEER_WORK/$name.img" --listen 10.78.0.2:10899 \
            "${tls[@]}" >"$dir/replica.log" 2>&1 &
        rep=$!
        PIDS+=("$rep")
        wait_for "$dir/replica.log" "listening on"
    fi
    ip netns exec $NS_A "$WCACHE" serve --cache "$dir/cache.img" --cache-size 1G \
        --backing "$dir/backing.img" --backing-size 1G --socket "$dir/s.sock" "$@" \
        >"$dir/serve.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    wait_for "$dir/serve.log" "serving 1 export"
    local r1 r32 r1m
    r1=$(run_fio "$dir/s.sock" randwrite 4k 1)
    r32=$(run_fio "$dir/s.sock" randwrite 4k 32)
    r1m=$(run_fio "$dir/s.sock" write 1M 4)
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
    [ -n "$rep" ] && { kill -TERM "$rep"; wait "$rep" 2>/dev/null || true; }
    read -r _ p50 p99 _ <<<"$r1"
    read -r iops32 _ _ _ <<<"$r32"
    read -r _ _ _ mib <<<"$r1m"
    printf '%-28s %10.1f %10.1f %12.0f %12.1f\n' "$name" "$p50" "$p99" "$iops32" "$mib" | tee -a "$WORK/table"
    echo "$name $p50 $p99 $iops32 $mib" >>"$WORK/figures"
}

# The link's round trip, and the peer's cache write (4 KiB + fdatasync).
RTT_US=$(ip netns exec $NS_A ping -q -c 50 -i 0.02 10.78.0.2 | awk -F/ '/rtt/ {print $5 * 1000}')
fio --name=p --filename="$PEER_WORK/peer-probe" --rw=randwrite --bs=4k --size=64M --fdatasync=1 \
    --time_based --runtime=5 --output-format=json --output="$WORK/probe.json" >/dev/null
PEER_US=$(jq -r '1000000 / .jobs[0].write.iops' "$WORK/probe.json")
rm -f "$PEER_WORK/peer-probe"

echo "$(date -u +%F\ %H:%M) $(git -C "$ROOT" rev-parse --short HEAD): ${RUNTIME}s per job, fio nbd on the primary's socket"
printf 'link round trip %.1f us (ping); peer cache write %.1f us (4 KiB + fdatasync)\n' "$RTT_US" "$PEER_US"
printf '%-28s %10s %10s %12s %12s\n' configuration "QD1 p50 us" "QD1 p99 us" "QD32 IOPS" "1M QD4 MiB/s"
bench local-write-back --write-policy write-back
bench replicated-write-back --write-policy write-back --replicate-to 10.78.0.2:10899
bench replicated-write-back-tls --write-policy write-back --replicate-to 10.78.0.2:10899 \
    --replicate-tls-certificates "$CERTS"
bench local-write-through --write-policy write-through

awk -v rtt="$RTT_US" -v peer="$PEER_US" '
    { p50[$1] = $2; iops[$1] = $4 }
    END {
        bound = p50["local-write-back"] + rtt + peer
        printf "check QD1 p50: replicated %.1f us against local %.1f + round trip %.1f + peer write %.1f = %.1f us: %s\n",
            p50["replicated-write-back"], p50["local-write-back"], rtt, peer, bound,
            (p50["replicated-write-back"] <= bound ? "met" : "NOT met")
        r = iops["replicated-write-back"] / iops["local-write-back"]
        printf "check QD32: replicated/local write-back %.2f (target >= 0.80): %s\n", r, (r >= 0.8 ? "met" : "NOT met")
        printf "TLS/plaintext replication at QD32: %.2f\n", iops["replicated-write-back-tls"] / iops["replicated-write-back"]
    }' "$WORK/figures"
