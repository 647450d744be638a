#!/usr/bin/env python3
"""Print the tables of docs/experiments/rdc.md from an rdc CSV
(`wcache sim rdc-capacity|rdc-ssd|rdc-redis --seeds N`): per point and
policy, the mean over seeds with the min-max range where seeds differ."""

import csv
import sys
from collections import defaultdict


def fmt(values, digits):
    mean = sum(values) / len(values)
    lo, hi = min(values), max(values)
    text = f"{mean:,.{digits}f}"
    if len(values) > 1 and f"{lo:.{digits}f}" != f"{hi:.{digits}f}":
        text += f" ({lo:,.{digits}f}–{hi:,.{digits}f})"
    return text, mean


def main(path):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        sys.exit(f"{path}: no rows")
    experiment = rows[0]["experiment"]
    if experiment == "rdc-capacity":
        key, key_name = "cache_mib", "cache MiB"
    elif experiment == "rdc-ssd":
        key, key_name = "clients", "clients"
    else:
        key, key_name = "cache_device", "cache"
    groups = defaultdict(list)
    order = []
    for r in rows:
        k = (r[key], r["policy"])
        if k not in groups:
            order.append(k)
        groups[k].append(r)
    base = {}
    for (x, policy) in order:
        if policy == "all":
            base[x] = sum(float(r["app_per_s"]) for r in groups[(x, policy)]) / len(groups[(x, policy)])
    print(f"| {key_name} | policy | app/s | / all | p99 ms | p99.9 ms | p99.99 ms | cached writes | cached pages | stalls | inherits | reissued |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (x, policy) in order:
        g = groups[(x, policy)]
        per_s, mean = fmt([float(r["app_per_s"]) for r in g], 1)
        cols = [fmt([float(r[c]) for r in g], 1)[0] for c in
                ("latency_ms_p99", "latency_ms_p999", "latency_ms_p9999")]
        cached = fmt([float(r["cached_fraction"]) for r in g], 3)[0]
        pages = fmt([float(r["cached_pages_fraction"]) for r in g], 3)[0]
        stalls = fmt([float(r["stalls"]) for r in g], 0)[0]
        inherits = fmt([float(r["inherits"]) for r in g], 0)[0]
        reissued = fmt([float(r["reissued_writes"]) for r in g], 0)[0]
        ratio = f"{mean / base[x]:.2f}" if base.get(x) else ""
        print(f"| {x} | {policy} | {per_s} | {ratio} | {' | '.join(cols)} | {cached} | {pages} | {stalls} | {inherits} | {reissued} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: rdc-summary.py FILE.csv")
    main(sys.argv[1])
