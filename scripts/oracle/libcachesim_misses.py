#!/usr/bin/env python3
"""Miss counts of libCacheSim's LRU, Clock and ARC on a trace, as JSON.

This is the oracle for wcache's clean-page replacement policies
(crates/core/tests/oracle_libcachesim.rs): the same trace is replayed by our
policies and by libCacheSim, and the miss counts must be equal.

Trace format: one object id per line, a non-negative decimal integer; blank
lines and lines starting with '#' are skipped. Every object has size 1, so a
cache size is a number of objects (pages).

Cache semantics used (libCacheSim's `cache_get_base`): on a hit update the
policy; on a miss evict while full, then insert. Clock uses the binding's
defaults spelled out: a 1-bit counter and initial frequency 0, which is the
textbook second-chance CLOCK.

Exit status: 0 with JSON on stdout; 2 if libcachesim cannot be imported
(the Rust test tells "oracle missing" from "oracle broken" by it); 1 on any
other error.

Usage:
  libcachesim_misses.py --trace FILE --sizes 64,256,1024 [--policies lru,clock,arc]
"""

import argparse
import json
import sys

EXIT_ORACLE_MISSING = 2


def read_trace(path):
    ids = []
    with open(path, "r", encoding="ascii") as trace:
        for line_number, line in enumerate(trace, start=1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                value = int(text)
            except ValueError:
                raise SystemExit(f"{path}:{line_number}: not an integer object id: {text!r}")
            if value < 0:
                raise SystemExit(f"{path}:{line_number}: negative object id {value}")
            ids.append(value)
    return ids


def build(lcs, policy, size_objects):
    # hashpower only sizes libCacheSim's hash table; it does not change results.
    common = dict(cache_size=size_objects, hashpower=16)
    if policy == "lru":
        return lcs.LRU(**common)
    if policy == "clock":
        return lcs.Clock(init_freq=0, n_bit_counter=1, **common)
    if policy == "arc":
        return lcs.ARC(**common)
    raise SystemExit(f"unknown policy {policy!r} (valid: lru, clock, arc)")


def count_misses(lcs, policy, size_objects, ids):
    cache = build(lcs, policy, size_objects)
    request = lcs.Request()
    request.obj_size = 1
    misses = 0
    for object_id in ids:
        request.obj_id = object_id
        if not cache.get(request):
            misses += 1
    return misses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="file of object ids, one per line")
    parser.add_argument("--sizes", required=True, help="comma-separated cache sizes in objects")
    parser.add_argument("--policies", default="lru,clock,arc", help="comma-separated subset of lru,clock,arc")
    args = parser.parse_args()

    try:
        import libcachesim as lcs
    except ImportError as error:
        print(f"libcachesim is not importable: {error}", file=sys.stderr)
        return EXIT_ORACLE_MISSING

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not sizes or any(s <= 0 for s in sizes):
        raise SystemExit("--sizes must list positive integers")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    ids = read_trace(args.trace)

    try:
        from importlib.metadata import version

        lcs_version = version("libcachesim")
    except Exception:  # metadata may be absent in a source checkout
        lcs_version = "unknown"

    misses = {p: {str(size): count_misses(lcs, p, size, ids) for size in sizes} for p in policies}
    json.dump(
        {
            "libcachesim_version": lcs_version,
            "requests": len(ids),
            "distinct_objects": len(set(ids)),
            "misses": misses,
        },
        sys.stdout,
        sort_keys=True,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
