#!/usr/bin/env python3
"""Mutate valid trace lines of every format `wcache sim` replays (bytes
replaced, inserted, deleted; huge, negative and non-numeric fields) and replay
each file, as fast as possible and at a recorded speed. Any exit other than
0 or 1, or a panic message, is a failure; the failing file is kept.

Usage: scripts/fuzz/traces.py WCACHE_BINARY SEED FILES     (exit 1 on a failure)"""
import random
import subprocess
import sys
import tempfile
from pathlib import Path

wcache, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
valid = {
    "msr": "128166372003061629,web,0,Write,4096,4096,100\n128166372003061630,web,1,Read,8192,8192,50\n",
    "blkparse": "  8,0    1        1     0.000000000  1234  Q  WS 8 + 8 [fio]\n"
                "  8,0    1        2     0.000100000  1234  C   R 16 + 16 [0]\n",
    "libcachesim": "1,4096,4096,1\n2,8192,8192,0\n",
    "tencent": "1538323200,4096,8,1,1001\n1538323201,8192,16,0,1002\n",
}
alphabet = "0123456789,.-+ eEWRwrQCD\t\n:abcxyz[]\x00\xff"
work = Path(tempfile.mkdtemp(prefix="wcache-tracefuzz-"))
failures = 0
for i in range(count):
    fmt = rng.choice(sorted(valid))
    chars = list(valid[fmt] * rng.randrange(1, 4))
    for _ in range(rng.randrange(1, 6)):
        at = rng.randrange(len(chars) + 1)
        roll = rng.random()
        if roll < 0.4 and chars:
            chars[min(at, len(chars) - 1)] = rng.choice(alphabet)
        elif roll < 0.7:
            chars.insert(at, rng.choice(alphabet))
        elif roll < 0.85 and chars:
            del chars[min(at, len(chars) - 1)]
        else:
            chars[at:at] = rng.choice(["18446744073709551615", "99999999999999999999999",
                                        "-1", "1e308", "nan", "inf", ""])
    path = work / f"{i}.{fmt}"
    path.write_bytes("".join(chars).encode("utf-8", "surrogateescape"))
    failed = False
    for speed in ([], ["--trace-speed", "1000"]):
        run = subprocess.run([wcache, "sim", "--workload", "trace", "--trace", str(path),
                              "--trace-format", fmt, "--warmup", "0", "--requests", "10", *speed],
                             capture_output=True, timeout=60)
        err = run.stderr.decode(errors="replace")
        if "panicked" in err or run.returncode not in (0, 1):
            failed = True
            print(f"FAIL {path} (exit {run.returncode}): {err[-300:]}")
    failures += failed
    if not failed:
        path.unlink()
print(f"{count} files, {failures} failures" + (f" (kept in {work})" if failures else ""))
if not failures:
    work.rmdir()
sys.exit(1 if failures else 0)
