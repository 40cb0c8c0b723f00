#!/usr/bin/env python3
"""How much memory `catena serve` takes to send an export: `/v1/export` of a big store.

    scripts/bench/export-memory.py STORE CATENA [CATENA...]

STORE is a session store (make one with scripts/dev/big_store.py). Each binary serves it on a
free loopback port with the default model; once it is serving, its peak memory is reset
(/proc/PID/clear_refs), the export is downloaded with the Python standard library's HTTP client,
and the growth of the server's peak (VmHWM less VmRSS at the reset) is printed with the export's
size and the time it took. Linux only (it reads /proc).
"""
import os
import subprocess
import sys
import time
import urllib.request


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise SystemExit(f"no {field} for {pid}")


def measure(catena, store):
    model = subprocess.run([catena, "assets", "fetch", "model"], check=True, capture_output=True,
                           text=True).stdout.strip().split(": ", 1)[-1]
    env = {**os.environ, "CATENA_STORE_DIR": store}
    env.pop("CATENA_API_KEY", None)
    server = subprocess.Popen([catena, "serve", "--port", "0", "--model", model],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = server.stdout.readline()
        base = line.split(" on ")[1].split()[0]
        with open(f"/proc/{server.pid}/clear_refs", "w") as f:
            f.write("5")
        before = status_kib(server.pid, "VmRSS:")
        started = time.monotonic()
        size = 0
        with urllib.request.urlopen(f"{base}/v1/export", timeout=600) as response:
            while piece := response.read(1 << 20):
                size += len(piece)
        seconds = time.monotonic() - started
        grown = status_kib(server.pid, "VmHWM:") - before
    finally:
        server.kill()
        server.wait()
    print(f"{catena}: {size:,} bytes in {seconds:.1f} s; the server's peak grew by "
          f"{grown / 1024:.0f} MiB")


if len(sys.argv) < 3:
    raise SystemExit(__doc__)
for binary in sys.argv[2:]:
    measure(binary, sys.argv[1])
