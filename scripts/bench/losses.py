#!/usr/bin/env python3
"""Where an evaluation's runs were lost: how each run ended, and why each wrong one was wrong.

Usage: losses.py OUT_DIR [OUT_DIR ...]

OUT_DIR is a `catena eval --out` folder: its report.json gives each run's expected answer and
score, its runs.jsonl each run's trajectory. A run ended by answering by itself, by the token,
tool or time budget, by the loop watch, or by ending its turn; a chain cut short was asked for its
answer (the last word, docs/PROTOCOL.md §2). A wrong run is then put in the first class that fits:

- no answer: it wrote no `<answer>` at all;
- no program ran: it answered without a tool call;
- the right value seen, a wrong answer: an observation shows the expected value (math tasks: a
  number in the observation equal to the expected one, read with Python's Fraction; other tasks:
  the expected text in the observation), yet the answer is wrong;
- wrong programs: its programs ran, and none showed the expected value (for code tasks every
  wrong answer with a tool call is here: its tests hold the expected values, not its output).

The first three are where the protocol lost a task; the last is where the model did. For numeric
answers after a tool call it also counts those already written before the first observation (in
the plan or a thought): a chain that decided before its program ran. This is a
reading of the runs for a person, not a verifier: the scoring stays `catena_eval`'s.
"""

import json
import re
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

CUT = {"token_budget": "cut by the budget", "tool_budget": "cut by the budget",
       "time_budget": "cut by the clock", "context_full": "cut by the context",
       "repetition": "stopped in a loop", "answer": "answered by itself",
       "end_of_turn": "ended its turn", "cancelled": "cancelled"}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
OBSERVATION = re.compile(r"<observation>(.*?)</observation>", re.S)
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def value(text):
    """The number `text` writes (1,440, 0.5, 3/4), or None."""
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def seen(expected, observations):
    """Whether an observation shows the expected answer."""
    target = value(expected.strip())
    for text in observations:
        if target is None:
            if expected.strip() and expected.strip() in text:
                return True
        elif any(value(n) == target for n in NUMBER.findall(text)):
            return True
    return False


def classify(result, line, chat):
    """Why a wrong run was wrong (`chat`: a plain chat turn, which has no tools to call)."""
    if not result.get("answer"):
        return "no answer"
    if chat:
        return "a wrong answer"
    observations = OBSERVATION.findall(line["trajectory"])
    if not observations:
        return "no program ran"
    if seen(result["expected"], observations):
        return "the right value seen, a wrong answer"
    return "wrong programs"


def decided_before(result, line):
    """For a numeric answer after a tool call: whether its value is written before the first
    observation. None when the run called no tool or its answer is not a number."""
    trajectory, answer = line["trajectory"], result.get("answer") or ""
    if "<observation>" not in trajectory:
        return None
    boxed = BOXED.search(answer)
    target = value((boxed.group(1) if boxed else answer).strip())
    if target is None:
        return None
    before = trajectory.split("<observation>", 1)[0]
    return any(value(n) == target for n in NUMBER.findall(before))


def main(folder):
    folder = Path(folder)
    report = json.loads((folder / "report.json").read_text())
    lines = {}
    for text in (folder / "runs.jsonl").read_text().splitlines():
        line = json.loads(text)
        lines[(line["id"], line["sample"])] = line
    ended, right_after, lost, decided = Counter(), Counter(), Counter(), Counter()
    for result in report["results"]:
        line = lines.get((result["id"], result["sample"]))
        if line is None:
            sys.exit(f"{folder}: run {result['id']} sample {result['sample']} is not in runs.jsonl")
        how = CUT.get(result["stop"], result["stop"])
        ended[how] += 1
        early = decided_before(result, line)
        if early is not None:
            decided[result["solved"], early] += 1
        if result["solved"]:
            right_after[how] += 1
        else:
            lost[classify(result, line, report.get("mode") == "chat")] += 1
    runs = len(report["results"])
    print(f"{folder}: {runs} runs, {sum(right_after.values())} right")
    for how, count in ended.most_common():
        print(f"  {how}: {count} ({right_after[how]} right)")
    print("  the wrong ones:")
    for why, count in lost.most_common():
        print(f"    {why}: {count}")
    for solved, name in ((True, "right"), (False, "wrong")):
        numeric = decided[solved, True] + decided[solved, False]
        if numeric:
            print(f"  {name} numeric answers after a tool call: {numeric}, "
                  f"{decided[solved, True]} already written before the first observation")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        main(arg)
