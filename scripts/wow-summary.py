#!/usr/bin/env python3
"""Summarize a `wcache sim wow-*` CSV: mean (min-max over seeds) IOPS per policy
and the ratios the WOW paper reports. Usage: scripts/wow-summary.py FILE.csv"""
import csv
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
exp = rows[0]["experiment"]
sweep = "target_iops" if exp == "wow-latency" else "nvs_pages"
cells = defaultdict(list)
for r in rows:
    key = (r["backend"], r["footprint"], float(r[sweep]) if sweep == "target_iops" else int(r[sweep]), r["policy"])
    cells[key].append(r)

def mean(xs):
    return sum(xs) / len(xs)

print(f"| backend | footprint | {sweep} | LRW IOPS | CSCAN IOPS | WOW IOPS | WOW/LRW | WOW/CSCAN | hit LRW/CSCAN/WOW | resp ms LRW/CSCAN/WOW | seeds |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (b, f, x) in sorted({k[:3] for k in cells}):
    v = {p: cells[(b, f, x, p)] for p in ("lrw", "cscan", "wow")}
    iops = {p: [float(r["iops"]) for r in v[p]] for p in v}
    m = {p: mean(iops[p]) for p in iops}
    rng = lambda p: f"{m[p]:.0f} ({min(iops[p]):.0f}-{max(iops[p]):.0f})" if len(iops[p]) > 1 else f"{m[p]:.0f}"
    hit = "/".join(f"{mean([float(r['write_hit_ratio']) for r in v[p]]):.3f}" for p in v)
    resp = "/".join(f"{mean([float(r['response_ms_mean']) for r in v[p]]):.1f}" for p in v)
    print(f"| {b} | {f} | {x:g} | {rng('lrw')} | {rng('cscan')} | {rng('wow')} | {m['wow']/m['lrw']:.2f} | {m['wow']/m['cscan']:.3f} | {hit} | {resp} | {len(iops['wow'])} |")

if "disk_write_position_ms" in rows[0]:
    # Rows written since the CSV carries the disks' mechanism time (mean over seeds).
    print()
    print(f"| backend | footprint | {sweep} | member write ms (positioning) LRW / CSCAN / WOW | member read ms (positioning) LRW / CSCAN / WOW | WOW skips per destage |")
    print("|---|---|---|---|---|---|")
    for (b, f, x) in sorted({k[:3] for k in cells}):
        v = {p: cells[(b, f, x, p)] for p in ("lrw", "cscan", "wow")}
        col = lambda p, c: mean([float(r[c]) for r in v[p]])
        both = lambda kind: " / ".join(f"{col(p, f'disk_{kind}_ms'):.2f} ({col(p, f'disk_{kind}_position_ms'):.2f})" for p in v)
        skips = col("wow", "destage_skips") / max(col("wow", "destages"), 1)
        print(f"| {b} | {f} | {x:g} | {both('write')} | {both('read')} | {skips:.2f} |")
