#!/usr/bin/env python3
"""Recount maj@K of a `catena eval --vote K` report of function tasks (HumanEval) by two rules.

    scripts/bench/vote-recount.py CATENA REPORT.json TASKS.jsonl

- by output: programs grouped by what they print on no input (the vote's rule before example
  calls, commit 7f2d256);
- by example calls: grouped by the values the question's example calls return, the rule that
  `catena_eval::vote` applies now; recounting it here checks the Rust implementation.

It is a port of the rule for checking, not a second implementation the product uses (the rule is
described in docs/ARCHITECTURE.md, "Samples and votes"). Every answer program is model-written,
so it runs only in Catena's sandbox (`catena sandbox --json -`), never in this Python. Chains cut
short abstain when another chain of the task answered by itself; groups are ordered by size, then
by their members' mean log-probability; the likeliest member of the first group speaks for it.
"""
import argparse
import json
import re
import subprocess

MARKER = "--- catena: the example calls ---"
CUT_SHORT = {"token_budget", "time_budget", "repetition"}
MOST_CALLS = 16
LONGEST_CALL = 400


def answer_program(answer):
    found = re.search(r"```(?:py|python)?\n(.*?)\n```", answer or "", re.S)
    return found.group(1) + "\n" if found else None


def sandboxed_stdout(catena, code):
    """The program's stdout, or how it ended when it did not exit with status 0."""
    done = subprocess.run(
        [catena, "sandbox", "--json", "-"], input=code, capture_output=True, text=True
    )
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None, "(not run)"
    if result.get("exit") != {"status": 0}:
        return None, f"(ended: {result.get('exit')})"
    return result.get("stdout", ""), None


def balanced_end(line, start):
    """The index after the parenthesised group opening at `start`, strings skipped; or None."""
    depth, quote, escaped = 0, None, False
    for i in range(start, len(line)):
        c = line[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
            continue
        if c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
            if depth < 0:
                return None
    return None


def example_calls(question, programs):
    names = sorted({n for p in programs for n in re.findall(r"^(?:async )?def (\w+)\(", p, re.M)})
    calls = []
    for line in question.splitlines():
        for name in names:
            for found in re.finditer(r"(?<![\w.])" + re.escape(name) + r"\(", line):
                if line[: found.start()].rstrip().endswith("def"):
                    continue
                end = balanced_end(line, found.end() - 1)
                call = line[found.start() : end] if end else None
                if call and len(call) <= LONGEST_CALL and call not in calls and len(calls) < MOST_CALLS:
                    calls.append(call)
    return calls


def lines_of(text):
    lines = [l.rstrip() for l in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def key(catena, program, calls):
    if not calls:
        stdout, ended = sandboxed_stdout(catena, program)
        return ended or lines_of(stdout)
    probe = program + f"\n\nprint({json.dumps(MARKER)})\n"
    for call in calls:
        probe += (
            f"try:\n    print(repr(eval({json.dumps(call)})))\n"
            "except BaseException as _catena_error:\n"
            "    print('raised', type(_catena_error).__name__)\n"
        )
    stdout, ended = sandboxed_stdout(catena, probe)
    if ended:
        return ended
    if MARKER not in stdout:
        return "(the calls did not run)"
    return lines_of(stdout[stdout.rindex(MARKER) + len(MARKER) :].lstrip("\r\n"))


def winner(catena, runs, calls):
    voters = [r for r in runs if answer_program(r.get("answer"))]
    reached = [r for r in voters if r.get("stop") not in CUT_SHORT]
    voters = reached or voters
    groups = []
    for run in voters:
        k = key(catena, answer_program(run["answer"]), calls)
        group = next((g for g in groups if g[0] == k), None)
        if group:
            group[1].append(run)
        else:
            groups.append((k, [run]))
    if not groups:
        return None
    logprob = lambda r: r["mean_logprob"] if r.get("mean_logprob") is not None else float("-inf")
    groups.sort(key=lambda g: (-len(g[1]), -sum(logprob(r) for r in g[1]) / len(g[1])))
    return max(groups[0][1], key=logprob)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catena")
    parser.add_argument("report")
    parser.add_argument("tasks")
    args = parser.parse_args()
    report = json.load(open(args.report))
    questions = {}
    for line in open(args.tasks):
        if line.strip():
            task = json.loads(line)
            questions[task["id"]] = task["question"]
    by_task = {}
    for run in report["results"]:
        by_task.setdefault(run["id"], []).append(run)
    for rule in ("by output", "by example calls"):
        solved = 0
        for task_id, runs in by_task.items():
            programs = [p for p in (answer_program(r.get("answer")) for r in runs) if p]
            calls = example_calls(questions[task_id], programs) if rule != "by output" else []
            chosen = winner(args.catena, runs, calls)
            right = bool(chosen and chosen["solved"])
            solved += right
            print(f"{rule}\t{task_id}\t{'right' if right else 'wrong'}\t{len(calls)} calls")
        print(f"maj@{report.get('samples')} {rule}: {solved} / {len(by_task)}")


if __name__ == "__main__":
    main()
