#!/usr/bin/env python3
"""Decode rate of one streamed chat completion from `catena serve`: generated tokens per second
between the first and the last streamed chunk (prompt processing excluded), so it compares with
`catena bench -p 0 -n N`. Usage: scripts/bench/stream-rate.py BASE_URL MAX_TOKENS [MODEL]"""
import json, sys, time, urllib.request

base, n = sys.argv[1], int(sys.argv[2])
model = sys.argv[3] if len(sys.argv) > 3 else "qwen2.5-coder-0.5b-instruct-q4_k_m"
body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Write a long essay about rivers."}],
                   "max_tokens": n, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
times, usage = [], None
with urllib.request.urlopen(req) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data:") or line.endswith("[DONE]"):
            continue
        ev = json.loads(line[5:])
        if ev.get("usage"):
            usage = ev["usage"]
        if ev.get("choices") and ev["choices"][0]["delta"].get("content"):
            times.append(time.perf_counter())
toks = usage["completion_tokens"]
print(f"{(toks - 1) / (times[-1] - times[0]):.2f}")
