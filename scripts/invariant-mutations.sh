#!/usr/bin/env bash
# Mutations that break each whole-engine invariant (crates/core/src/engine/invariants.rs):
# each one removes a line of bookkeeping from the engine, runs the engine
# model (ENGINE_MODEL_CASES, default 300) and must be caught by the named
# invariant's message. The source is restored after each, also on failure
# or interrupt. Prints one line per mutation and exits non-zero if any was
# not caught. Usage: scripts/invariant-mutations.sh (about a minute each:
# every mutation rebuilds the engine).
set -euo pipefail
cd "$(dirname "$0")/.."

# file | exact line (as in the source, one occurrence) | what replaces it | expected message
mutations=(
  "crates/core/src/engine/request_table.rs|        self.live -= 1;||the live count against the table"
  "crates/core/src/engine/destage.rs|            self.candidates += 1;||candidates against the groups"
  "crates/core/src/engine/destager.rs|        self.in_flight -= 1;||destages in flight against"
  "crates/core/src/engine/bypassed.rs|        self.around -= 1;||bypass writes in flight against"
  "crates/core/src/engine/bypassed.rs|        self.through += 1;||bypassed writes through the cache in flight against"
  "crates/core/src/engine/page_counts.rs|            self.0.remove(&key.0);||at zero"
  "crates/core/src/engine/destage.rs|        self.remove_dirty(key);||in the dirty set is"
  "crates/core/src/engine/request.rs|                    self.req_mut(req).pending -= 1;||pending against"
  "crates/core/src/engine/dirty/mod.rs|        self.runs = self.runs + beside - 1;||the dirty set's runs"
  "crates/core/src/engine/write_path.rs|            WritePath::Backing(b) => std::mem::replace(&mut b.holds, true),|            WritePath::Backing(b) => b.holds,|promoted without holding its pages"
)

backup=$(mktemp)
current=""
restore() { if [ -n "$current" ]; then cp "$backup" "$current"; current=""; fi; }
trap 'restore; rm -f "$backup"' EXIT INT TERM

missed=0
for m in "${mutations[@]}"; do
  IFS='|' read -r file line replacement expected <<<"$m"
  cp "$file" "$backup"
  current=$file
  FILE=$file LINE=$line REPLACEMENT=$replacement python3 - <<'EOF'
import os, sys
path, line, new = os.environ["FILE"], os.environ["LINE"], os.environ["REPLACEMENT"]
text = open(path).read()
lines = text.split("\n")
hits = [i for i, l in enumerate(lines) if l == line]
if not hits:
    sys.exit(f"mutation target not found in {path}: {line!r}")
lines[hits[0]] = new  # the first occurrence
open(path, "w").write("\n".join(lines))
EOF
  out=$(ENGINE_MODEL_CASES=${ENGINE_MODEL_CASES:-300} cargo test --profile ci -p wcache-core --test engine_model 2>&1 || true)
  if grep -qF "$expected" <<<"$out"; then
    echo "caught:  ${file##*/}: '${line// /}' removed -> \"$expected\""
  else
    echo "MISSED:  ${file##*/}: '${line// /}' removed (expected \"$expected\")"
    grep -m3 -E "panicked|test result" <<<"$out" | sed 's/^/         /'
    missed=$((missed + 1))
  fi
  restore
done
[ "$missed" -eq 0 ] || { echo "$missed mutation(s) not caught"; exit 1; }
echo "every mutation caught"
