#!/usr/bin/env python3
"""One chat request to a `catena serve` started for it: what a client's first request costs after
the server starts (the desktop app's launch, a restart). Starts `catena serve` on a free loopback
port with the default model (or --model), waits for its address, sends the request in BODY (a
`/v1/chat/completions` JSON body; its `model` is replaced by the served one, and it is asked for
one token, not streamed), prints one JSON line (prompt tokens, tokens read from the prompt
cache, the request's seconds) and stops the server.

With farm-bench, against the same command under `CATENA_PROMPT_CACHE=off`, it times what the
prompt cache saves such a request (docs/BENCHMARKS.md, "The prompt cache"):

  farm-bench -n 5 --warmup 1 --vs "env CATENA_PROMPT_CACHE=off scripts/bench/served-prompt.py BODY" \\
    -- scripts/bench/served-prompt.py BODY

With --repeat N it then sends the same request N more times and adds their median seconds
(`repeat_median_seconds`): a client's requests once the server is warm, whose prompt the worker
keeps, so what else a request costs shows (docs/BENCHMARKS.md, "A chat template in a process of
its own").

Usage: scripts/bench/served-prompt.py BODY [--model PATH] [--ctx-size N] [--repeat N] (CATENA_BIN: the catena binary; default
the release build)."""
import argparse, json, os, subprocess, sys, time, urllib.request
from pathlib import Path

root = Path(__file__).resolve().parents[2]
parser = argparse.ArgumentParser()
parser.add_argument("body")
parser.add_argument("--model")
parser.add_argument("--ctx-size", type=int)
parser.add_argument("--repeat", type=int, default=0)
args = parser.parse_args()
catena = os.environ.get("CATENA_BIN") or str(
    Path(os.environ.get("CARGO_TARGET_DIR", root / "target")) / "release" / "catena")
body = json.loads(Path(args.body).read_text())
command = [catena, "serve", "--port", "0"] + (["--model", args.model] if args.model else []) \
    + (["--ctx-size", str(args.ctx_size)] if args.ctx_size else [])
env = {k: v for k, v in os.environ.items() if k != "CATENA_API_KEY"}
server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
try:
    # "Catena is serving M on http://ADDR (...)"
    line = server.stdout.readline()
    if " on " not in line:
        sys.exit(f"catena serve did not print its address: {line!r}")
    base = line.split(" on ")[1].split()[0]
    with urllib.request.urlopen(base + "/v1/models", timeout=60) as r:
        body["model"] = json.load(r)["data"][0]["id"]
    body.update({"max_tokens": 1, "stream": False})
    body.pop("stream_options", None)
    request = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    def send():
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=1800) as r:
            reply = json.load(r)
        return reply, time.perf_counter() - started
    reply, seconds = send()
    usage = reply["usage"]
    result = {
        "prompt_tokens": usage["prompt_tokens"],
        "cached_tokens": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
        "request_seconds": round(seconds, 3),
    }
    if args.repeat:
        repeats = sorted(send()[1] for _ in range(args.repeat))
        result["repeat_median_seconds"] = round(repeats[len(repeats) // 2], 4)
    print(json.dumps(result))
finally:
    server.terminate()
    server.wait(timeout=60)
