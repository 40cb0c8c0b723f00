#!/usr/bin/env python3
"""`catena eval` on multi-hop questions over a local passage index, with and without it.

The corpus is made up here (invented people, towns and landmarks, from a fixed seed), so no model
can know the answers beforehand: a right answer has to come from `<wiki_search>`. Each person has a
passage naming their birthplace; each town a passage naming its landmark, who built it and the
year it was finished; other towns and people share those words as distractors. Questions are
one-hop ("Where was X born?") and two-hop ("In which year was the landmark of the town where X
was born finished?"), scored by `catena eval` with the QA verifier (normalised exact match and
token F1, the rewards RL trains on).

Three runs of the same tasks with the same model, greedy:
- mhqa profile with the passage index (`<wiki_search>` answers with the top three passages);
- web profile with a document index of the same facts, one Markdown file per passage
  (`<web_search>` finds them, `<crawl_page>` reads and summarises them with the run's model);
- the anchor: mhqa without an index (the tool answers that there is none), so what retrieval
  adds is the difference.

Usage: scripts/bench/qa.py [--catena PATH] [--model PATH] [--tasks N] [--max-tokens N]
  (build the binary first: cargo build --release -p catena-cli). The indexes are built in the data
  folder under names of their own and removed afterwards; no other passage index may be there.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIRST = ["Alma", "Bruno", "Cleo", "Dario", "Edda", "Fenna", "Gideon", "Hilde", "Ivo", "Juno",
         "Kasimir", "Liesel", "Marek", "Nadia", "Oskar", "Petra", "Quirin", "Rosalind"]
LAST = ["Varga", "Lindqvist", "Moreau", "Okonkwo", "Halloran", "Szabo", "Brandt", "Ferreira",
        "Castellan", "Ruokonen", "Delacroix", "Weatherby", "Amundsen", "Kowalczyk"]
TOWNS = ["Kellmoor", "Brinstead", "Oxwater", "Tarnholm", "Vellicombe", "Ashgrove", "Dunmere",
         "Saltcliff", "Hollin Ford", "Pemberlow", "Quarry End", "Whitlock", "Ravensholt", "Eldmouth"]
LANDMARKS = ["lighthouse", "clock tower", "stone bridge", "town hall", "covered market",
             "observatory", "windmill", "harbour wall"]
JOBS = ["botanist", "cartographer", "violinist", "glassblower", "astronomer", "engineer",
        "novelist", "chemist"]


def corpus(seed: int):
    rng = random.Random(seed)
    towns = {}
    for town in TOWNS:
        towns[town] = {
            "landmark": rng.choice(LANDMARKS),
            "year": rng.randint(1612, 1911),
            "builder": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        }
    people = []
    names = set()
    while len(people) < 18:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name in names or any(name == t["builder"] for t in towns.values()):
            continue
        names.add(name)
        people.append({"name": name, "town": rng.choice(TOWNS), "job": rng.choice(JOBS),
                       "born": rng.randint(1820, 1960)})
    passages = []
    for town, t in towns.items():
        passages.append((town, f"{town} is a small town known for its {t['landmark']}, which "
                         f"{t['builder']} built and finished in {t['year']}. The town holds a "
                         f"market every week."))
    for p in people:
        passages.append((p["name"], f"{p['name']} (born {p['born']}) was a {p['job']} born in "
                         f"{p['town']}. {p['name'].split()[0]} later worked in several other "
                         f"towns."))
    rng.shuffle(passages)
    tasks = []
    for i, p in enumerate(people):
        t = towns[p["town"]]
        if i % 3 == 0:
            tasks.append({"question": f"In which town was the {p['job']} {p['name']} born?",
                          "answer": p["town"]})
        else:
            tasks.append({"question": f"In which year was the {t['landmark']} of the town where "
                          f"the {p['job']} {p['name']} was born finished?",
                          "answer": str(t["year"])})
    return passages, tasks


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--catena", default=str(ROOT / "target/release/catena"))
    parser.add_argument("--model", default=None)
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=768)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()

    passages, tasks = corpus(args.seed)
    tasks = tasks[: args.tasks]
    work = Path(tempfile.mkdtemp(prefix="catena-qa-bench-"))
    corpus_file = work / "passages.jsonl"
    with corpus_file.open("w") as w:
        for i, (title, text) in enumerate(passages):
            w.write(json.dumps({"id": str(i + 1), "contents": f'"{title}"\n{text}'}) + "\n")
    tasks_file = work / "tasks.jsonl"
    with tasks_file.open("w") as w:
        for i, t in enumerate(tasks):
            w.write(json.dumps({"id": str(i), "kind": "qa", **t}) + "\n")
    name = f"qa-bench-{os.getpid()}"
    model = ["--model", args.model] if args.model else []
    common = ["eval", "--profile", "mhqa", "--tasks", str(tasks_file), "--max-tokens",
              str(args.max_tokens), "--json", *model]
    # The anchor first, before the index exists (no other passage index may be there either).
    listed = json.loads(run([args.catena, "index", "list", "--json"]).stdout)
    others = [i["name"] for i in listed if i["kind"] == "passages"]
    if others:
        sys.exit(f"remove the other passage indexes first ({', '.join(others)}): the anchor "
                 "run must have none")
    without = json.loads(run([args.catena, *common]).stdout)
    docs = work / "docs"
    docs.mkdir()
    for i, (title, text) in enumerate(passages):
        (docs / f"{i:03d}.md").write_text(f"# {title}\n\n{text}\n")
    run([args.catena, "index", "add", str(corpus_file), "--name", name])
    run([args.catena, "index", "add", str(docs), "--name", f"{name}-docs"])
    try:
        with_index = json.loads(run([args.catena, *common, "--wiki-index", name]).stdout)
        web_common = [c if c != "mhqa" else "web" for c in common]
        web = json.loads(run([args.catena, *web_common, "--doc-index", f"{name}-docs"]).stdout)
    finally:
        run([args.catena, "index", "rm", name])
        run([args.catena, "index", "rm", f"{name}-docs"])

    def line(label, r):
        return (f"{label:<22} EM {100 * r['pass_at_1']:5.1f}%  F1 {100 * (r.get('mean_f1') or 0):5.1f}%  "
                f"valid chains {100 * r['format_rate']:5.1f}%  tool calls/task "
                f"{r['mean_tool_calls']:.1f}  s/task {r['wall_seconds'] / max(1, r['tasks']):.1f}")

    print(f"{len(tasks)} questions ({sum(1 for t in tasks if t['answer'].isdigit())} two-hop), "
          f"{len(passages)} passages, max {args.max_tokens} tokens, greedy")
    print(line("mhqa, passage index", with_index))
    print(line("web, document index", web))
    print(line("mhqa, no index", without))
    em_without = without["pass_at_1"]
    for label, r in [("passage index", with_index), ("document index", web)]:
        ratio = "n/a (the anchor solved none)" if em_without == 0 else f"{r['pass_at_1'] / em_without:.2f}"
        print(f"EM with the {label} / without any: {ratio}")
    out = work / "results.json"
    out.write_text(json.dumps({"with_index": with_index, "web": web, "without": without}, indent=1))
    print(f"reports: {out}")


if __name__ == "__main__":
    main()
