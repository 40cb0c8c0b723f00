#!/usr/bin/env python3
"""What enforcing the protocol costs per token: `catena run` on the same prompt and seeds, free
(`--free`) and constrained (the default), alternated, with the decode rate each run reports.
Prints each run and the ratio constrained / free of tokens per second of decoding (the goal is
at least 0.9), and the same over the run's whole time less its tool calls, which also counts
building each segment's grammar before its generation.

    scripts/bench/protocol-cost.py [--catena BIN] [--seeds 3] [--max-tokens 300]
"""
import argparse
import json
import subprocess

TASK = "How many primes are there below 10000?"


def run(catena, seed, max_tokens, free):
    args = [catena, "run", TASK, "--seed", str(seed), "--max-tokens", str(max_tokens),
            "--no-store", "--json"] + (["--free"] if free else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    t = summary["timings"]
    whole = (t["total_ms"] - t["tools_ms"]) / 1e3
    return summary["generated_tokens"], t["decode_ms"] / 1e3, whole, summary["stop_reason"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--catena", default="catena")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=300)
    args = parser.parse_args()
    totals = {True: [0, 0.0, 0.0], False: [0, 0.0, 0.0]}
    for seed in range(1, args.seeds + 1):
        for free in (True, False):
            tokens, seconds, whole, stop = run(args.catena, seed, args.max_tokens, free)
            totals[free][0] += tokens
            totals[free][1] += seconds
            totals[free][2] += whole
            name = "free" if free else "protocol"
            print(f"seed {seed} {name:8} {tokens:5} tokens {seconds:7.2f} s decoding "
                  f"{tokens / seconds:6.2f} tok/s ({stop})")
    free = totals[True][0] / totals[True][1]
    constrained = totals[False][0] / totals[False][1]
    print(f"free {free:.2f} tok/s, protocol {constrained:.2f} tok/s, "
          f"ratio {constrained / free:.3f}")
    free_whole = totals[True][0] / totals[True][2]
    constrained_whole = totals[False][0] / totals[False][2]
    print(f"whole runs less tools: free {free_whole:.2f} tok/s, protocol "
          f"{constrained_whole:.2f} tok/s, ratio {constrained_whole / free_whole:.3f}")


if __name__ == "__main__":
    main()
