#!/usr/bin/env bash
# The engine-model soak: N random operation sequences (default 20,000) fed to
# the engine and to its reference model, with the `ci` profile's debug
# assertions and overflow checks on. Usage: scripts/soak.sh [CASES]
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE_MODEL_CASES=${1:-20000} cargo test --profile ci -p wcache-core --test engine_model 2>&1 | tee /dev/stderr | grep -qE '^test result: ok\. [1-9]'
