#!/usr/bin/env python3
"""Constrained decoding's cost: tokens/s of the same request with a JSON schema in force
(`response_format`, held by llguidance token by token) against without, on a running
`catena serve`, alternating the two and taking each one's median. Prints the ratio
(constrained / free; the goal is at least 0.9).

usage: scripts/bench/constrained-cost.py BASE_URL MODEL [API_KEY] [--runs N]
"""

import json
import statistics
import sys
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {
        "fruits": {
            "type": "array",
            "minItems": 25,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "color": {"type": "string"}},
                "required": ["name", "color"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["fruits"],
    "additionalProperties": False,
}
PROMPT = "List 25 fruits with their colours as JSON: {\"fruits\": [{\"name\": ..., \"color\": ...}, ...]}."
MAX_TOKENS = 256


def run(base, model, key, constrained):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        # Both runs generate to the same length, so the figure is decoding speed alone.
        "stop": [],
    }
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "fruits", "schema": SCHEMA}}
    request = urllib.request.Request(
        base + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.loads(response.read(4 << 20))
    seconds = time.perf_counter() - start
    tokens = reply["usage"]["completion_tokens"]
    return tokens / seconds, tokens


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
    if "--runs" in sys.argv:
        args.remove(str(runs))
    base, model = args[0], args[1]
    key = args[2] if len(args) > 2 else "none"
    run(base, model, key, False)  # warm the prompt's cache
    free, held = [], []
    for _ in range(runs):
        free.append(run(base, model, key, False))
        held.append(run(base, model, key, True))
    f = statistics.median(r for r, _ in free)
    c = statistics.median(r for r, _ in held)
    print(f"free:        {f:6.1f} tokens/s  (tokens: {[t for _, t in free]})")
    print(f"constrained: {c:6.1f} tokens/s  (tokens: {[t for _, t in held]})")
    print(f"ratio constrained/free: {c / f:.3f}")


if __name__ == "__main__":
    main()
