#!/usr/bin/env python3
"""Math word problems from OpenAI Evals' registry (MIT licence) as Catena math tasks: a public
math benchmark nobody here wrote, for `catena eval` (profile `math`).

The problems come from the `evals` package on PyPI: version 3.0.1.post1 ships its registry's data
in the wheel. Three sets with one numeric answer each are taken whole: `math_for_5th-grader` (20
problems), `multistep-word-problems` (15; answers may be simple fractions) and
`algebra_word_problems` (6). Each problem's user message becomes the question and its `ideal`
(without the square brackets some sets wrap it in) the answer, which `catena eval` compares with
the `\\boxed{}` answer as an exact number. The sets' own system messages, which ask for bare
numbers or brackets, are left out (the math profile says how to answer), except what
`multistep-word-problems` asks of the answer itself (a whole number or a simple fraction, in the
question's units), which is added to its questions in our words.

usage: scripts/tasks/openai-evals-math.py OUT.jsonl [--wheel PATH]
Without --wheel, `pip download --no-deps evals==3.0.1.post1` fetches the wheel (46 MB) into a
temporary folder.
"""

import argparse
import json
import sys
import tempfile
import zipfile

from pypi_wheel import wheel_path

PACKAGE = "evals==3.0.1.post1"
SETS = ("math_for_5th-grader", "multistep-word-problems", "algebra_word_problems")


def tasks(wheel):
    with zipfile.ZipFile(wheel) as z:
        for name in SETS:
            members = sorted(
                m for m in z.namelist()
                if m.startswith(f"evals/registry/data/{name}/") and m.endswith(".jsonl")
            )
            if len(members) != 1:
                sys.exit(f"{wheel}: expected one data file for {name}, found {members}")
            lines = z.read(members[0]).decode().splitlines()
            for n, line in enumerate(l for l in lines if l.strip()):
                sample = json.loads(line)
                question = [m["content"] for m in sample["input"] if m["role"] == "user"]
                answer = str(sample["ideal"]).strip().removeprefix("[").removesuffix("]").strip()
                if len(question) != 1 or not answer:
                    sys.exit(f"{name} sample {n}: not one question with one answer")
                text = question[0].strip()
                if name == "multistep-word-problems":
                    text += (" Give the answer as a whole number or a simple fraction, in the"
                             " units the question uses.")
                yield {
                    "id": f"{name}-{n}",
                    "family": name,
                    "kind": "math",
                    "question": text,
                    "answer": answer,
                }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--wheel")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        chosen = list(tasks(wheel_path(PACKAGE, args.wheel, scratch)))
    with open(args.out, "w") as out:
        for t in chosen:
            out.write(json.dumps(t) + "\n")
    counts = {}
    for t in chosen:
        counts[t["family"]] = counts.get(t["family"], 0) + 1
    print(f"{len(chosen)} tasks in {args.out}: {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
