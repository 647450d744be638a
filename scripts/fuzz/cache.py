#!/usr/bin/env python3
"""Corrupt a real cache device and open it: `wcache serve` writes a small
persistent cache (write-back, 1 MiB, 4 KiB groups) and stops; then each round
copies it, overwrites a few random bytes (mostly the superblock and the slot
records, some data), and runs `wcache inspect`, `wcache check` and a serve
start, a full read of the export (nbdcopy) and a stop. Any exit other than
0 or 1, a panic, or a hang is a failure; the failing image is kept.

Usage: scripts/fuzz/cache.py WCACHE_BINARY SEED ROUNDS   (needs nbdcopy; exit 1 on a failure)"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

wcache, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
work = Path(tempfile.mkdtemp(prefix="wcache-cachefuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
sock, cache, backing = work / "s.sock", work / "c.img", work / "b.img"
uri = f"nbd+unix:///disk?socket={sock}"


def serve():
    proc = subprocess.Popen([wcache, "serve", "--socket", str(sock), "--cache", str(cache),
                             "--cache-size", "1M", "--group-size", "4096", "--backing", str(backing),
                             "--backing-size", "4M"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start = time.time()
    while not sock.exists() and proc.poll() is None and time.time() - start < 10:
        time.sleep(0.02)
    return proc


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return out, True
    if sock.exists():
        sock.unlink()
    return out, False


# A cache with dirty pages in it.
(work / "data").write_bytes(os.urandom(2 << 20))
proc = serve()
subprocess.run(["nbdcopy", str(work / "data"), uri], check=True, timeout=60)
stop(proc)
original = cache.read_bytes()
failures = 0
for r in range(rounds):
    image = bytearray(original)
    for _ in range(rng.choice([1, 2, 4, 16])):
        roll = rng.random()
        at = (rng.randrange(0, 4096) if roll < 0.4 else
              rng.randrange(4096, 12288) if roll < 0.9 else rng.randrange(12288, len(image)))
        for i in range(rng.choice([1, 1, 4, 8])):
            if at + i < len(image):
                image[at + i] = rng.randrange(256)
    cache.write_bytes(image)
    bad = []
    for tool in ("inspect", "check"):
        run = subprocess.run([wcache, tool, "--cache", str(cache)], capture_output=True, text=True, timeout=60)
        if "panicked" in run.stderr or run.returncode not in (0, 1):
            bad.append(f"{tool} exit {run.returncode}: {run.stderr[-300:]}")
    proc = serve()
    if proc.poll() is None:
        subprocess.run(["nbdcopy", uri, str(work / "out")], capture_output=True, timeout=60)
    out, hung = stop(proc)
    if hung or "panicked" in out or proc.returncode not in (0, 1):
        bad.append(f"serve exit {proc.returncode}{' (hung)' if hung else ''}: {out[-300:]}")
    if bad:
        failures += 1
        kept = work / f"failing-{r}.img"
        shutil.copy(cache, kept)
        print(f"FAIL round {r} ({kept}): " + "; ".join(bad))
print(f"{rounds} rounds, {failures} failures" + (f" (kept in {work})" if failures else ""))
if not failures:
    shutil.rmtree(work)
sys.exit(1 if failures else 0)
