#!/usr/bin/env bash
# Engine and simulator benchmarks (docs/benchmarks.md, "Engine and simulator").
# Builds crates/bench in release mode and runs every part in one process, so
# that the ratios it prints are measured side by side on the same machine.
# The last line is a one-line summary of the key ratios.
#
# Usage: scripts/bench-engine.sh [engine|memory|sim|replay|all]   (default: all)
# Env:   CARGO_TARGET_DIR (default /work/target-bench if unset),
#        WCACHE_BENCH_PYTHON (python with libcachesim==0.3.5; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-bench}"
which="${1:-all}"

cargo build --release -p wcache-bench --quiet
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r); commit $(git rev-parse --short HEAD)"
"$CARGO_TARGET_DIR/release/wcache-bench" "$which" | tee "$out" | grep -v "^SUMMARY:"
if [ "$which" = all ]; then
    grep '^SUMMARY:' "$out" | tail -n 1
fi
