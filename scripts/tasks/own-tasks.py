#!/usr/bin/env python3
"""Verifiable tasks of Catena's own making, for training the default model's adapter: word
problems (math tasks, one whole-number answer) and functions to complete (code tasks, checked by
asserts). Every task is drawn from a template with its own numbers, names and inputs, so a seed
gives a reproducible set and another seed a different one.

Nothing here comes from an evaluation set. The word problems are shopping, travel, ages, work,
sharing, areas, percentages, savings and linear equations; the functions are list, string and
number utilities. Two families are deliberately absent because an evaluation asks them: primes
(the README's first example counts the primes below 10000) and dates (the tool questions).
The code tasks are phrased the way scripts/tasks/humaneval.py phrases HumanEval's (a function
stub with a docstring and examples, answered with the whole function), because that is the form
`catena eval --profile code` asks in; the functions themselves are our own.

Each answer is computed here by a reference: the word problem's formula, the function's reference
implementation run on the test inputs. With --check CATENA, every code task's reference runs with
its asserts in Catena's own sandbox (`catena sandbox`), and every word problem's formula is
computed again there by a program; a task that does not pass is left out and named.

usage: scripts/tasks/own-tasks.py OUT.jsonl --kind math|code [--count N] [--seed S]
                                  [--check CATENA]
"""

import argparse
import json
import random
import subprocess
import sys

NAMES = ["Maya", "Tom", "Aisha", "Lucas", "Mei", "Omar", "Sofia", "Ivan", "Nora", "Ravi"]
ITEMS = [("notebook", "notebooks"), ("pen", "pens"), ("apple", "apples"), ("ticket", "tickets"),
         ("sticker", "stickers"), ("cup", "cups"), ("candle", "candles"), ("ball", "balls")]


# ---------------------------------------------------------------- word problems (kind math) --

def shopping(r):
    (a, a_pl), (b, b_pl) = r.sample(ITEMS, 2)
    pa, pb, x, y = r.randint(2, 15), r.randint(1, 9), r.randint(2, 9), r.randint(2, 12)
    cost = pa * x + pb * y
    bill = next(v for v in (20, 50, 100, 200, 500) if v > cost)
    who = r.choice(NAMES)
    q = (f"A {a} costs ${pa} and a {b} costs ${pb}. {who} buys {x} {a_pl} and {y} {b_pl} and "
         f"pays with a ${bill} bill. How many dollars of change does {who} get?")
    return q, bill - cost, f"print({bill} - ({pa} * {x} + {pb} * {y}))"


def travel(r):
    s1, h1, s2, h2 = r.randint(30, 120), r.randint(1, 5), r.randint(20, 90), r.randint(1, 4)
    q = (f"A train travels at {s1} km per hour for {h1} hours, then at {s2} km per hour for {h2} "
         f"hours. How many kilometres does it travel in total?")
    return q, s1 * h1 + s2 * h2, f"print({s1} * {h1} + {s2} * {h2})"


def ages(r):
    a, b = r.sample(NAMES, 2)
    s, k, n = r.randint(3, 20), r.randint(1, 9), r.randint(2, 15)
    q = (f"{a} is {k} years older than twice {b}'s age. {b} is {s} years old now. How old will "
         f"{a} be in {n} years?")
    return q, 2 * s + k + n, f"print(2 * {s} + {k} + {n})"


def factory(r):
    p, h, d = r.randint(20, 90), r.randint(4, 12), r.randint(3, 30)
    pct = r.choice([2, 4, 5, 10, 20, 25])
    total = p * h * d
    while total * pct % 100:
        d += 1
        total = p * h * d
    q = (f"A machine makes {p} parts an hour and runs {h} hours a day for {d} days. {pct}% of the "
         f"parts are faulty. How many parts are not faulty?")
    return q, total - total * pct // 100, f"total = {p} * {h} * {d}\nprint(total - total * {pct} // 100)"


def sharing(r):
    _, plural = r.choice(ITEMS)
    n, each = r.randint(3, 12), r.randint(2, 15)
    rest = r.randint(1, n - 1)
    total = n * each + rest
    q = (f"{total} {plural} are shared equally among {n} children, each getting as many as "
         f"possible. The {plural} left over go to the teacher. How many does the teacher get?")
    return q, total % n, f"print({total} % {n})"


def path_area(r):
    a, b, w = r.randint(4, 30), r.randint(4, 30), r.randint(1, 3)
    q = (f"A rectangular garden is {a} m long and {b} m wide. A path {w} m wide runs all around "
         f"the outside of it. What is the area of the path in square metres?")
    return q, (a + 2 * w) * (b + 2 * w) - a * b, f"print(({a} + 2 * {w}) * ({b} + 2 * {w}) - {a} * {b})"


def discount(r):
    pct = r.choice([10, 15, 20, 25, 30, 40, 50])
    price = r.randint(2, 40) * 20
    n = r.randint(1, 4)
    q = (f"A jacket costs ${price}. In a sale everything is {pct}% off. How many dollars do {n} "
         f"jackets cost in the sale?")
    return q, n * price * (100 - pct) // 100, f"print({n} * {price} * (100 - {pct}) // 100)"


def savings(r):
    who = r.choice(NAMES)
    have, per, goal = r.randint(0, 50), r.randint(5, 30), r.randint(100, 600)
    q = (f"{who} has ${have} and saves ${per} every week. After how many weeks will {who} first "
         f"have at least ${goal}?")
    weeks = max(0, -(-(goal - have) // per))
    return q, weeks, f"import math\nprint(max(0, math.ceil(({goal} - {have}) / {per})))"


def two_numbers(r):
    big, small = r.randint(20, 200), r.randint(1, 19)
    q = (f"The sum of two numbers is {big + small} and their difference is {big - small}. What is "
         f"the product of the two numbers?")
    return q, big * small, f"s, d = {big + small}, {big - small}\nprint(((s + d) // 2) * ((s - d) // 2))"


def linear(r):
    a, x, b = r.randint(2, 12), r.randint(-20, 30), r.randint(-50, 50)
    c = a * x + b
    sign = "+" if b >= 0 else "-"
    q = f"Solve for x: {a}x {sign} {abs(b)} = {c}. What is x?"
    return q, x, f"print(({c} - ({b})) // {a})"


WORD_FAMILIES = {f.__name__: f for f in (shopping, travel, ages, factory, sharing, path_area,
                                         discount, savings, two_numbers, linear)}


def word_task(r, index):
    family = r.choice(sorted(WORD_FAMILIES))
    question, answer, program = WORD_FAMILIES[family](r)
    return {"id": f"word-{family}-{index}", "family": f"word_{family}", "kind": "math",
            "question": question, "answer": str(answer)}, program


# ------------------------------------------------------------ functions to complete (code) --
# Each template: (name, signature, docstring, reference source, input generator). The docstring
# may name the template's constants; the reference is formatted with the same constants.

def _ints(r, lo=-20, hi=50, n=None):
    return [r.randint(lo, hi) for _ in range(n if n is not None else r.randint(0, 9))]


WORDS = ["river", "stone", "level", "Garden", "noon", "rocket", "banana", "Anna", "kayak",
         "pencil", "bridge", "moon", "racecar", "table", "letter", "Apple"]


def _text(r, n=None):
    return " ".join(r.choice(WORDS) for _ in range(n if n is not None else r.randint(1, 6)))


CODE_FAMILIES = [
    dict(family="scale", name="scale_{k}", params="xs: list",
         doc="Return a new list with every number of xs multiplied by {k}.",
         src="def scale_{k}(xs):\n    return [x * {k} for x in xs]",
         consts=lambda r: {"k": r.randint(2, 9)}, args=lambda r, c: (_ints(r),)),
    dict(family="count_char", name="count_{ch}", params="text: str",
         doc="Return how many times the letter '{ch}' occurs in text, upper or lower case.",
         src="def count_{ch}(text):\n    return text.lower().count('{ch}')",
         consts=lambda r: {"ch": r.choice("aeinorst")}, args=lambda r, c: (_text(r),)),
    dict(family="multiples", name="sum_multiples", params="n: int",
         doc="Return the sum of all positive integers below n that are divisible by {a} or {b}.",
         src="def sum_multiples(n):\n    return sum(i for i in range(1, n) if i % {a} == 0 or i % {b} == 0)",
         consts=lambda r: dict(zip("ab", r.sample(range(2, 12), 2))),
         args=lambda r, c: (r.randint(0, 500),)),
    dict(family="palindrome", name="is_palindrome", params="text: str",
         doc="Return True if text reads the same backwards, ignoring case and every character "
             "that is not a letter, and False otherwise.",
         src="def is_palindrome(text):\n    s = [ch.lower() for ch in text if ch.isalpha()]\n    return s == s[::-1]",
         consts=lambda r: {}, args=lambda r, c: (r.choice([_text(r, 1), _text(r, 2), "Never odd or even", "A man, a plan"]),)),
    dict(family="running_sum", name="running_total", params="xs: list",
         doc="Return the list of running totals of xs: element i is the sum of xs[0] .. xs[i].",
         src="def running_total(xs):\n    out, t = [], 0\n    for x in xs:\n        t += x\n        out.append(t)\n    return out",
         consts=lambda r: {}, args=lambda r, c: (_ints(r),)),
    dict(family="rotate", name="rotate_left", params="xs: list",
         doc="Return xs rotated left by {k} places (the first {k} elements move to the end, "
             "wrapping around for short lists); an empty list stays empty.",
         src="def rotate_left(xs):\n    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[k:] + xs[:k]",
         consts=lambda r: {"k": r.randint(1, 5)}, args=lambda r, c: (_ints(r),)),
    dict(family="caesar", name="shift_letters", params="text: str",
         doc="Return text with every lower-case letter moved {k} places forward in the alphabet, "
             "z wrapping round to a; other characters stay as they are.",
         src="def shift_letters(text):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in text)",
         consts=lambda r: {"k": r.randint(1, 25)}, args=lambda r, c: (_text(r),)),
    dict(family="dedupe", name="unique_in_order", params="xs: list",
         doc="Return the elements of xs without repeats, each kept where it first appears.",
         src="def unique_in_order(xs):\n    seen, out = set(), []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out",
         consts=lambda r: {}, args=lambda r, c: (_ints(r, 0, 6),)),
    dict(family="second_largest", name="second_largest", params="xs: list",
         doc="Return the second largest distinct value in xs, or None when xs has fewer than two "
             "distinct values.",
         src="def second_largest(xs):\n    s = sorted(set(xs))\n    return s[-2] if len(s) > 1 else None",
         consts=lambda r: {}, args=lambda r, c: (_ints(r, 0, 9),)),
    dict(family="word_lengths", name="word_lengths", params="sentence: str",
         doc="Return the lengths of the words of sentence (words are separated by spaces), in "
             "order.",
         src="def word_lengths(sentence):\n    return [len(w) for w in sentence.split()]",
         consts=lambda r: {}, args=lambda r, c: (_text(r),)),
    dict(family="digit_sum", name="digit_sum", params="n: int",
         doc="Return the sum of the decimal digits of n (the digits of its absolute value).",
         src="def digit_sum(n):\n    return sum(int(d) for d in str(abs(n)))",
         consts=lambda r: {}, args=lambda r, c: (r.randint(-10**6, 10**9),)),
    dict(family="collatz", name="collatz_steps", params="n: int",
         doc="Return how many steps take n to 1, where a step halves an even number and turns an "
             "odd number m into 3 * m + 1. n is at least 1.",
         src="def collatz_steps(n):\n    steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        steps += 1\n    return steps",
         consts=lambda r: {}, args=lambda r, c: (r.randint(1, 300),)),
    dict(family="gcd_list", name="gcd_of", params="xs: list",
         doc="Return the greatest common divisor of the positive integers in xs (xs is not "
             "empty).",
         src="import math\n\ndef gcd_of(xs):\n    g = 0\n    for x in xs:\n        g = math.gcd(g, x)\n    return g",
         consts=lambda r: {}, args=lambda r, c: ([r.choice([2, 3, 4, 6]) * r.randint(1, 30) for _ in range(r.randint(1, 6))],)),
    dict(family="longest_run", name="longest_run", params="xs: list",
         doc="Return the length of the longest stretch of equal neighbouring values in xs (0 for "
             "an empty list).",
         src="def longest_run(xs):\n    best = run = 0\n    for i, x in enumerate(xs):\n        run = run + 1 if i and xs[i - 1] == x else 1\n        best = max(best, run)\n    return best",
         consts=lambda r: {}, args=lambda r, c: (_ints(r, 0, 2),)),
    dict(family="binary", name="to_base_{b}", params="n: int",
         doc="Return the digits of the non-negative integer n written in base {b}, as a string "
             "('0' for 0).",
         src="def to_base_{b}(n):\n    digits = ''\n    while n:\n        digits = str(n % {b}) + digits\n        n //= {b}\n    return digits or '0'",
         consts=lambda r: {"b": r.randint(2, 9)}, args=lambda r, c: (r.randint(0, 5000),)),
    dict(family="merge", name="merge_sorted", params="a: list, b: list",
         doc="Return one sorted list holding every element of the sorted lists a and b.",
         src="def merge_sorted(a, b):\n    return sorted(a + b)",
         consts=lambda r: {}, args=lambda r, c: (sorted(_ints(r)), sorted(_ints(r)))),
    dict(family="fizz", name="label", params="n: int",
         doc="Return '{w1}{w2}' if n is divisible by both {a} and {b}, '{w1}' if only by {a}, "
             "'{w2}' if only by {b}, and otherwise n written as a string.",
         src="def label(n):\n    if n % {a} == 0 and n % {b} == 0:\n        return '{w1}{w2}'\n    if n % {a} == 0:\n        return '{w1}'\n    if n % {b} == 0:\n        return '{w2}'\n    return str(n)",
         consts=lambda r: {**dict(zip("ab", r.sample([2, 3, 5, 7], 2))),
                           **dict(zip(("w1", "w2"), r.sample(["Ping", "Pong", "Fizz", "Buzz", "Zap"], 2)))},
         args=lambda r, c: (r.randint(1, 120),)),
    dict(family="anagram", name="are_anagrams", params="a: str, b: str",
         doc="Return True if a and b use the same letters the same number of times, ignoring "
             "case and spaces.",
         src="def are_anagrams(a, b):\n    f = lambda s: sorted(s.replace(' ', '').lower())\n    return f(a) == f(b)",
         consts=lambda r: {}, args=lambda r, c: (lambda w: (w, r.choice([w[::-1].upper(), _text(r, 1)])))(_text(r, 1))),
    dict(family="word_count", name="count_words", params="text: str",
         doc="Return a dict mapping each word of text (lower-cased, split on spaces) to how many "
             "times it occurs.",
         src="def count_words(text):\n    counts = {{}}\n    for w in text.lower().split():\n        counts[w] = counts.get(w, 0) + 1\n    return counts",
         consts=lambda r: {}, args=lambda r, c: (_text(r),)),
    dict(family="transpose", name="transpose", params="rows: list",
         doc="Return the transpose of a matrix given as a list of rows of equal length (an empty "
             "matrix gives []).",
         src="def transpose(rows):\n    return [list(col) for col in zip(*rows)]",
         consts=lambda r: {},
         args=lambda r, c: ((lambda w: [_ints(r, 0, 9, w) for _ in range(r.randint(0, 4))])(r.randint(1, 4)),)),
    dict(family="fibonacci", name="fib_mod", params="n: int",
         doc="Return the n-th Fibonacci number modulo {m}, where fib(0) = 0 and fib(1) = 1.",
         src="def fib_mod(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, (a + b) % {m}\n    return a",
         consts=lambda r: {"m": r.choice([7, 10, 97, 1000, 10007])}, args=lambda r, c: (r.randint(0, 400),)),
    dict(family="clamp", name="clamp_all", params="xs: list",
         doc="Return xs with every value below {lo} replaced by {lo} and every value above {hi} "
             "replaced by {hi}.",
         src="def clamp_all(xs):\n    return [min(max(x, {lo}), {hi}) for x in xs]",
         consts=lambda r: (lambda lo: {"lo": lo, "hi": lo + r.randint(5, 30)})(r.randint(-10, 10)),
         args=lambda r, c: (_ints(r),)),
    dict(family="initials", name="initials", params="name: str",
         doc="Return the upper-case first letters of the words of name, joined by '{sep}'.",
         src="def initials(name):\n    return '{sep}'.join(w[0].upper() for w in name.split())",
         consts=lambda r: {"sep": r.choice([".", "", "-"])}, args=lambda r, c: (_text(r),)),
    dict(family="pairs_sum", name="count_pairs", params="xs: list",
         doc="Return how many pairs of positions i < j have xs[i] + xs[j] == {t}.",
         src="def count_pairs(xs):\n    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] + xs[j] == {t})",
         consts=lambda r: {"t": r.randint(0, 12)}, args=lambda r, c: (_ints(r, 0, 10),)),
]


def code_task(r, index):
    t = r.choice(CODE_FAMILIES)
    consts = t["consts"](r)
    name = t["name"].format(**consts)
    doc = t["doc"].format(**consts)
    src = t["src"].format(**consts)
    scope = {}
    exec(src, scope)
    reference = scope[name]
    # Up to 30 distinct inputs; the six tests take as many different expected values as there
    # are first, so that no constant answer passes them.
    pool, seen = [], set()
    for _ in range(200):
        args = t["args"](r, consts)
        if repr(args) not in seen:
            seen.add(repr(args))
            pool.append((args, reference(*args)))
        if len(pool) == 30:
            break
    cases, outputs = [], set()
    for case in pool:
        if repr(case[1]) not in outputs and len(cases) < 6:
            outputs.add(repr(case[1]))
            cases.append(case)
    cases += [case for case in pool if case not in cases][: 6 - len(cases)]
    if len(outputs) < 2:
        return None, None
    examples = "\n".join(f"    >>> {name}({', '.join(map(repr, a))})\n    {e!r}"
                         for a, e in cases[:2])
    stub = f"def {name}({t['params']}):\n    \"\"\"{doc}\n{examples}\n    \"\"\"\n"
    question = (
        "Complete the Python function below. Answer with the whole function (and the imports "
        "it needs) in one program; the tests import nothing from you but call the function "
        f"`{name}`.\n\n```python\n{stub}```")
    snippet = "".join(f"assert {name}({', '.join(map(repr, a))}) == {e!r}\n" for a, e in cases)
    task = {"id": f"code-{t['family']}-{index}", "family": f"code_{t['family']}", "kind": "code",
            "question": question, "answer": "the task's asserts",
            "tests": {"assert": snippet}}
    return task, f"{src}\n\n{snippet}"


# ---------------------------------------------------------------------------------- checks --

def sandbox(catena, program):
    run = subprocess.run([catena, "sandbox", "--json", program], capture_output=True, text=True)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        return {"observation": (run.stderr or run.stdout).strip()[-200:]}


def passes(catena, task, program):
    result = sandbox(catena, program)
    if result.get("exit") != {"status": 0}:
        return False, result.get("observation", "")[-200:]
    if task["kind"] == "math":
        out = result.get("stdout", result.get("observation", ""))
        if task["answer"] not in out.split():
            return False, f"the program printed {out.strip()[-80:]!r}, not {task['answer']}"
    return True, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--kind", choices=("math", "code"), required=True)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", metavar="CATENA")
    args = parser.parse_args()
    r = random.Random(args.seed)
    make = word_task if args.kind == "math" else code_task
    kept, left_out, questions = [], [], set()
    index = 0
    while len(kept) < args.count and index < args.count * 20:
        task, program = make(r, index)
        index += 1
        if task is None or task["question"] in questions:
            continue
        questions.add(task["question"])
        if args.check:
            ok, why = passes(args.check, task, program)
            if not ok:
                left_out.append((task["id"], why))
                continue
        kept.append(task)
    with open(args.out, "w") as out:
        for t in kept:
            out.write(json.dumps(t) + "\n")
    print(f"{len(kept)} {args.kind} tasks in {args.out}", file=sys.stderr)
    for task_id, why in left_out:
        print(f"left out {task_id}: {why}", file=sys.stderr)
    return 1 if left_out else 0


if __name__ == "__main__":
    sys.exit(main())
