#!/usr/bin/env python3
"""A bounded load test of `catena serve` on loopback: CLIENTS concurrent clients, each sending
REQUESTS chat completions one after another with the official OpenAI client. Every request's
outcome and latency is written as one JSON line to --out; a summary (counts by outcome,
latency percentiles) is printed as JSON.

The only acceptable failure is the server's documented queue-full refusal (HTTP 429,
code `queue_full`); anything else is counted as an error.

usage: scripts/bench/loadtest.py --base-url URL --model ID [--api-key K] [--clients 16]
                                 [--requests 4] [--max-tokens 16] [--out FILE]
"""

import argparse
import asyncio
import json
import statistics
import time

import openai


async def client_loop(client, args, index, records):
    for n in range(args.requests):
        started = time.perf_counter()
        record = {"client": index, "request": n}
        try:
            reply = await client.chat.completions.create(
                model=args.model,
                messages=[{"role": "user", "content": f"Client {index}, request {n}: name a prime number."}],
                max_tokens=args.max_tokens,
                temperature=0,
            )
            record["outcome"] = "ok"
            record["completion_tokens"] = reply.usage.completion_tokens
            details = reply.usage.prompt_tokens_details
            record["cached_tokens"] = details.cached_tokens if details else 0
        except openai.APIStatusError as e:
            code = (e.body or {}).get("code") if isinstance(e.body, dict) else None
            record["outcome"] = "queue_full" if e.status_code == 429 and code == "queue_full" else "error"
            record["status"] = e.status_code
            record["body"] = e.body
        except Exception as e:  # connection failures and the like
            record["outcome"] = "error"
            record["exception"] = repr(e)
        record["latency_s"] = time.perf_counter() - started
        records.append(record)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--out")
    args = parser.parse_args()
    client = openai.AsyncOpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=600)
    records = []
    started = time.perf_counter()
    await asyncio.gather(*(client_loop(client, args, i, records) for i in range(args.clients)))
    wall = time.perf_counter() - started
    if args.out:
        with open(args.out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    ok = sorted(r["latency_s"] for r in records if r["outcome"] == "ok")
    refused = sorted(r["latency_s"] for r in records if r["outcome"] == "queue_full")

    def pct(xs, p):
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else None

    summary = {
        "clients": args.clients,
        "requests": len(records),
        "ok": len(ok),
        "queue_full": len(refused),
        "errors": sum(1 for r in records if r["outcome"] == "error"),
        "wall_s": wall,
        "ok_latency_s": {
            "min": ok[0] if ok else None,
            "p50": pct(ok, 50),
            "p90": pct(ok, 90),
            "max": ok[-1] if ok else None,
            "mean": statistics.mean(ok) if ok else None,
        },
        "refused_latency_s": {"p50": pct(refused, 50), "max": refused[-1] if refused else None},
        "completions_per_s": len(ok) / wall if wall > 0 else None,
        "first_errors": [r for r in records if r["outcome"] == "error"][:3],
    }
    print(json.dumps(summary))


asyncio.run(main())
