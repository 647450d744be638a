#!/usr/bin/env bash
# The test command: installs what the tests need (idempotent), then checks
# formatting, lints, runs every test and a quick simulation, all with the
# `ci` profile's assertions on (Cargo.toml). Fails on any
# error and when no tests ran.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

log "dependencies"
need_apt=()
command -v fio >/dev/null || need_apt+=(fio)
command -v nbdkit >/dev/null || need_apt+=(nbdkit)
command -v nbdinfo >/dev/null && command -v nbdcopy >/dev/null || need_apt+=(libnbd-bin)
# Certificates for the NBD TLS test (crates/cli/tests/nbd_tls.rs).
command -v openssl >/dev/null || need_apt+=(openssl)
# Network namespaces and veth pairs for the replication tests (crates/cli/tests/replication.rs).
command -v ip >/dev/null || need_apt+=(iproute2)
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v tmux >/dev/null || need_apt+=(tmux)
# A real program on wcache mount (crates/fuse/tests/mount.rs).
command -v sqlite3 >/dev/null || need_apt+=(sqlite3)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql)
command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || need_apt+=(e2fsprogs)
# The systemd unit's security score (crates/cli/tests/systemd.rs).
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") >/dev/null \
      || echo "warning: apt-get could not install ${need_apt[*]}"
  else
    echo "warning: not root, cannot install ${need_apt[*]}"
  fi
fi
PYTHON=${WCACHE_PYTHON:-python3}
if ! "$PYTHON" -c 'import libcachesim' 2>/dev/null; then
  "$PYTHON" -m pip install -q libcachesim==0.3.5
fi
# The metrics test parses /metrics with the reference parser (it fails without it).
if ! "$PYTHON" -c 'import prometheus_client' 2>/dev/null; then
  "$PYTHON" -m pip install -q prometheus_client
fi
export WCACHE_PYTHON="$PYTHON"
# The oracle and the real-tool tests must run here, not skip.
export WCACHE_REQUIRE_ORACLE=1
if command -v fio >/dev/null && command -v nbdinfo >/dev/null && command -v nbdkit >/dev/null; then
  export WCACHE_REQUIRE_TOOLS=1
fi

# A real Ceph cluster for wcache in front of RBD images (crates/cli/tests/ceph.rs):
# installed and started by its script, named to the tests, purged at the end.
log "ceph cluster"
cleanup() { rm -f "${out:-}"; scripts/ceph-cluster.sh purge >/dev/null 2>&1 || true; }
trap cleanup EXIT
if [ "$(id -u)" = 0 ]; then
  eval "$(scripts/ceph-cluster.sh start)"
  export CEPH_CONF CEPH_KEYRING CEPH_POOL WCACHE_REQUIRE_CEPH=1
else
  echo "warning: not root, cannot start a Ceph cluster: its tests skip"
fi

log "format"
cargo fmt --all -- --check

log "lints"
cargo clippy --workspace --all-targets --profile ci -- -D warnings

log "tests (profile ci: optimized, with debug assertions and overflow checks)"
out=$(mktemp)
cargo test --workspace --profile ci 2>&1 | tee "$out"
passed=$(grep -E '^test result: ok\.' "$out" | awk '{s += $4} END {print s + 0}')
if grep -qE '^test result: FAILED' "$out"; then
  echo "FAILED: some tests failed"; exit 1
fi
if [ "$passed" -lt 1 ]; then
  echo "FAILED: no tests ran"; exit 1
fi
echo "tests passed: $passed"

log "quick simulation"
tmp=$(mktemp -d)
"${CARGO_TARGET_DIR:-./target}"/ci/wcache sim wow-random --quick --out "$tmp"
test -s "$tmp/wow-random.csv" || { echo "FAILED: no CSV written"; exit 1; }
rows=$(($(wc -l < "$tmp/wow-random.csv") - 1))
[ "$rows" -gt 0 ] || { echo "FAILED: empty CSV"; exit 1; }
"${CARGO_TARGET_DIR:-./target}"/ci/wcache sim rdc-capacity --quick --out "$tmp"
test -s "$tmp/rdc-capacity.csv" || { echo "FAILED: no rdc CSV written"; exit 1; }
rm -rf "$tmp"

log "all checks passed ($passed tests)"
