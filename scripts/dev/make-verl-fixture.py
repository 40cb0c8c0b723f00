#!/usr/bin/env python3
"""Writes crates/eval/tests/fixtures/verl_tasks.parquet: a few RL tasks in verl's parquet layout.

The rows are built the way verl's data preprocessing scripts build theirs (a list of dicts, one
per task, handed to pandas and written with `DataFrame.to_parquet`, so pyarrow picks the schema
and snappy compression), with one task of each verifier Catena has: math, code (stdin/stdout
tests and a functional assert snippet) and multi-hop QA. catena-eval's parquet reader is tested
against this file.

Usage: scripts/dev/make-verl-fixture.py [OUT]   (needs pandas and pyarrow)
"""

import json
import sys
from pathlib import Path

import pandas as pd

INSTRUCTION = "Solve the task. Put the final answer in <answer></answer>."


def row(source, ability, question, truth, index, system=None):
    prompt = [{"role": "user", "content": f"{INSTRUCTION}\n\nTask:\n{question}"}]
    if system is not None:
        prompt.insert(0, {"role": "system", "content": system})
    return {
        "data_source": source,
        "prompt": prompt,
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": "test", "index": index},
    }


def main():
    root = Path(__file__).resolve().parents[2]
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "crates/eval/tests/fixtures/verl_tasks.parquet"
    rows = [
        row("lighteval/MATH", "math", "What is 1/4 + 1/4?", "\\frac{1}{2}", 0,
            system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
        row("livecodebench", "code", "Read two integers and print their sum.",
            json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7\n"]}), 1),
        row("codecontests", "code", "Write add(a, b) returning a + b.",
            "assert add(1, 2) == 3\nassert add(-1, 1) == 0", 2),
        row("hotpotqa", "qa", "Which city is the Eiffel Tower in?",
            json.dumps(["Paris", "City of Paris"]), 3),
        row("aime24", "math", "What is 2^10?", "1024", None),
    ]
    pd.DataFrame(rows).to_parquet(out, index=False)
    print(f"wrote {out} ({out.stat().st_size} bytes, {len(rows)} rows)")


if __name__ == "__main__":
    main()
