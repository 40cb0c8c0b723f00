#!/usr/bin/env python3
"""Which recorded chains the loop stop would have stopped, and where.

Reads the raw output folder `scripts/bench/first-example.sh` leaves (it prints "raw output: DIR"),
cuts each chain's trajectory at its observations into the segments the model wrote, tokenises
them with the default model's own tokenizer, and applies the rule of `RepetitionWatch`
(crates/engine-api/src/repetition.rs) to each segment: a port for reading back runs recorded
without the stop, kept to its constants. One line per chain: its stop reason, generated tokens,
answer, and where the rule fires.

Needs transformers and gguf (the bench venv: `scripts/setup/packages.sh --bench`, then
`~/.cache/catena-bench/venv/bin/python scripts/bench/loop-scan.py DIR [MODEL.gguf]`).
"""
import glob
import json
import os
import re
import sys

from transformers import AutoTokenizer

MAX_PERIOD = 512
MIN_WINDOW = 384
OBSERVATION = re.compile(r"<observation>.*?</observation>", re.S)


def window(period):
    return max(3 * period, MIN_WINDOW)


def first_loop(ids):
    """(tokens seen, period) when the rule first fires on `ids`, else None."""
    agreeing = [0] * MAX_PERIOD
    for n in range(len(ids)):
        for p in range(1, MAX_PERIOD + 1):
            if n >= p and ids[n] == ids[n - p]:
                agreeing[p - 1] += 1
            old = n - window(p)
            if old >= p and ids[old] == ids[old - p]:
                agreeing[p - 1] -= 1
        for p in range(1, MAX_PERIOD + 1):
            span = window(p)
            if n + 1 >= span + p and agreeing[p - 1] + span // 16 >= span:
                return n + 1, p
    return None


def chains(path):
    name = os.path.basename(path)
    samples = 0
    for line in open(path):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("type") == "summary":
            yield name, event
        elif event.get("type") == "sample":
            samples += 1
            yield f"{name} chain {samples}", event["summary"]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: loop-scan.py RAW_DIR [MODEL.gguf]")
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser(
        "~/.local/share/catena/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    tokenizer = AutoTokenizer.from_pretrained(os.path.dirname(model),
                                              gguf_file=os.path.basename(model))
    # (stop reason, whether the rule fires) -> chains
    counts = {}
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
        for name, summary in chains(path):
            hit = None
            for segment in OBSERVATION.split(summary["trajectory"]):
                ids = tokenizer.encode(segment, add_special_tokens=False)
                found = first_loop(ids)
                if found:
                    hit = (found, len(ids))
                    break
            key = (summary["stop_reason"], hit is not None)
            counts[key] = counts.get(key, 0) + 1
            where = f"stopped after {hit[0][0]} of {hit[1]} tokens, period {hit[0][1]}" if hit else "-"
            print(f"{name}\t{summary['stop_reason']}\t{summary['generated_tokens']}\t"
                  f"{summary.get('answer')}\t{where}")
    for reason in sorted({r for r, _ in counts}):
        stopped, kept = counts.get((reason, True), 0), counts.get((reason, False), 0)
        print(f"{reason}: {stopped + kept} chains, {stopped} stopped by the rule")


if __name__ == "__main__":
    main()
