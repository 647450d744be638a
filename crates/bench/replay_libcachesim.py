#!/usr/bin/env python3
"""Replay a libCacheSim block CSV trace (version,time,op,size,lbn; header
line) through libcachesim's LRU and time it, for wcache-bench's replay
comparison.

Two ways, both with an LRU of `slots` 4 KiB objects (object id = lbn, every
request 4096 bytes, so bytes and objects agree):
  lcs_reader    libcachesim's own CSV TraceReader + cache.process_trace (C loop)
  plain_reader  a plain Python line reader calling cache.get per request

Output, one line each: `version V`, then `NAME requests misses seconds`.
Exit status 2 if libcachesim cannot be imported, 1 on other errors.

Usage: replay_libcachesim.py TRACE SLOTS
"""

import sys
import time

EXIT_MISSING = 2
PAGE_BYTES = 4096


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 1
    path, slots = sys.argv[1], int(sys.argv[2])
    try:
        import libcachesim as lcs
    except ImportError as error:
        print(f"libcachesim is not importable: {error}", file=sys.stderr)
        return EXIT_MISSING
    try:
        from importlib.metadata import version

        print("version", version("libcachesim"))
    except Exception:
        print("version unknown")

    # libCacheSim's own reader: fields are 1-based; time, size, lbn as object id.
    start = time.perf_counter()
    params = lcs.ReaderInitParam(has_header=True, has_header_set=True, delimiter=",")
    params.time_field = 2
    params.obj_size_field = 4
    params.obj_id_field = 5
    reader = lcs.TraceReader(path, lcs.TraceType.CSV_TRACE, params)
    cache = lcs.LRU(cache_size=slots * PAGE_BYTES)
    miss_ratio, _ = cache.process_trace(reader)
    seconds = time.perf_counter() - start
    requests = reader.get_num_of_req()
    print("lcs_reader", requests, round(miss_ratio * requests), f"{seconds:.6f}")

    # A plain reader: the same requests, one cache.get per line.
    start = time.perf_counter()
    cache = lcs.LRU(cache_size=slots * PAGE_BYTES)
    request = lcs.Request()
    request.obj_size = PAGE_BYTES
    requests = misses = 0
    with open(path, "r", encoding="ascii") as trace:
        next(trace)  # header
        for line in trace:
            fields = line.split(",")
            request.obj_id = int(fields[4])
            requests += 1
            if not cache.get(request):
                misses += 1
    seconds = time.perf_counter() - start
    print("plain_reader", requests, misses, f"{seconds:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
