#!/usr/bin/env python3
"""Throw random and malformed NBD sessions at a running `wcache serve`: garbage
during option haggling, options with odd types and lengths, requests with bad
magic, flags, commands, offsets and lengths, and truncated payloads. The server
must survive, not panic, and keep serving; check its log and RSS afterwards.

Usage: scripts/fuzz/nbd.py SOCKET SEED SESSIONS     (export name "disk")
Prints how many sessions ran to their end and how many the server cut short."""
import os
import random
import socket
import struct
import sys

sock_path, seed, sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def handshake(s):
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 1 | 2))
    name = b"disk"
    s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, 4 + len(name) + 2)
              + struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
    while True:
        head = recv_exact(s, 20)
        reply, length = struct.unpack(">II", head[12:20])
        recv_exact(s, length)
        if reply == 1:
            return
        if reply & 0x80000000:
            raise RuntimeError("export refused")


def request(s):
    magic = 0x25609513 if rng.random() < 0.9 else rng.randrange(1 << 32)
    flags = rng.choice([0, 1, 2, 4, 8, 16, rng.randrange(1 << 16)])
    kind = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, rng.randrange(1 << 16)])
    offset = rng.choice([0, 512, 4096, 1 << 20, (1 << 64) - 512, rng.randrange(1 << 64)])
    length = rng.choice([0, 1, 512, 4096, 1 << 20, 1 << 25, (1 << 32) - 1, rng.randrange(1 << 32)])
    s.sendall(struct.pack(">IHHQQI", magic, flags, kind, rng.randrange(1 << 64), offset, length))
    if kind == 1 and length <= 65536 and rng.random() < 0.8:
        s.sendall(os.urandom(length if rng.random() < 0.7 else rng.randrange(length + 1)))


finished = cut = 0
for _ in range(sessions):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(sock_path)
        mode = rng.random()
        if mode < 0.25:
            recv_exact(s, 18)
            s.sendall(struct.pack(">I", rng.choice([0, 1, 3, 0xFFFFFFFF])))
            s.sendall(os.urandom(rng.randrange(1, 200)))
        elif mode < 0.4:
            recv_exact(s, 18)
            s.sendall(struct.pack(">I", 3))
            length = rng.choice([0, 1, 4, 100, 0xFFFFFFFF, 1 << 20])
            s.sendall(b"IHAVEOPT" + struct.pack(">II", rng.randrange(20), length)
                      + os.urandom(min(length, 300)))
        else:
            handshake(s)
            for _ in range(rng.randrange(1, 8)):
                if rng.random() < 0.3:
                    s.sendall(os.urandom(rng.randrange(1, 64)))
                else:
                    request(s)
                try:
                    s.settimeout(0.05)
                    s.recv(65536)
                except OSError:
                    pass
        finished += 1
    except (OSError, EOFError, RuntimeError):
        cut += 1
    finally:
        s.close()
print(f"sessions: {finished} ran to their end, {cut} cut short by the server")
