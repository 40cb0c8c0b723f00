#!/usr/bin/env python3
"""Catena's local search against bm25s (PyPI), on the same text, in the same run.

The corpus is real text every machine that builds Catena has: the Markdown files (READMEs,
changelogs, guides) of the crates in Cargo's registry, split into passages of about 100 words for
the passage index (the wiki-18 layout), and the files themselves for the document index.

Measured, for Catena (`catena index add`, `catena index search --queries`) and for bm25s 0.2
with the same analysis (English stop words, Snowball English stemmer via PyStemmer):
- build: passages/s and MB/s, the median of three builds: wall time of the whole command
  (Catena: process start, reading, analysis, writing the index to disk) or of tokenising and
  indexing in memory (bm25s, after Python has read the text);
- query latency: the mean time of one query (tokenising it included), top 3, one at a time on
  one thread, measured inside each program;
- recall@3 on known-item queries: six distinctive words drawn from a passage, the passage to be
  found in the top three;
- documents: `catena index add FOLDER` on the files themselves (reading, HTML/Markdown, index);
- ZIM: the same documents as HTML pages packed by zim-tools' zimwriterfs, indexed from the
  archive against the same pages indexed from a folder (pages/s, the median of three builds);
- a `<crawl_page>` of three indexed documents with the default model: seconds per page read and
  summarised (two model calls each), from the observation's own timing.

Usage: scripts/bench/search.py [--catena PATH] [--queries N] [--out DIR]
  (build the binary first: cargo build --release -p catena-cli). bm25s and PyStemmer come from
  PyPI into a venv under ~/.cache/catena-bench, made on first use.
"""

import argparse
from html import escape
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def registry_markdown():
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    files = sorted((cargo_home / "registry" / "src").glob("*/*/**/*.md"))
    return [f for f in files if f.is_file() and f.stat().st_size < 2_000_000]


def passages_of(files, words_per_passage=100):
    passages = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        words = text.split()
        title = "/".join(f.parts[-2:])
        for start in range(0, len(words), words_per_passage):
            chunk = " ".join(words[start:start + words_per_passage])
            if len(chunk) > 80:
                passages.append({"id": str(len(passages)), "contents": f'"{title}"\n{chunk}'})
    return passages


STOP = set("""a an and are as at be but by for if in into is it no not of on or such that the their
then there these they this to was will with from has have had you your we our can may also which
when where what who how all any each more most other some than too very just use used using""".split())


def known_item_queries(passages, n, seed=7):
    rng = random.Random(seed)
    queries = []
    candidates = list(range(len(passages)))
    rng.shuffle(candidates)
    for i in candidates:
        text = passages[i]["contents"].split("\n", 1)[1]
        words = [w.lower() for w in re.findall(r"[A-Za-z]{5,}", text)]
        words = [w for w in dict.fromkeys(words) if w not in STOP]
        if len(words) < 8:
            continue
        start = rng.randrange(0, len(words) - 6)
        queries.append({"query": " ".join(words[start:start + 6]), "id": passages[i]["id"]})
        if len(queries) == n:
            break
    return queries


def run(cmd, env):
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{done.stderr}")
    return done, seconds


VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "catena-bench" / "bm25-venv"


def ensure_anchor():
    """Re-runs this script in a venv holding bm25s and PyStemmer (made on first use)."""
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
        return
    except ImportError:
        pass
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        sys.exit("bm25s or PyStemmer is missing from " + str(VENV))
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "bm25s==0.2.14", "PyStemmer"], check=True)
    os.execv(str(python), [str(python), *sys.argv])


def main():
    ensure_anchor()
    parser = argparse.ArgumentParser()
    parser.add_argument("--catena", default=str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "catena"))
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--out", default=str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "search-bench"))
    args = parser.parse_args()

    import bm25s
    import Stemmer

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "docs").mkdir(parents=True)
    files = registry_markdown()
    for i, f in enumerate(files):
        shutil.copyfile(f, out / "docs" / f"{i:05d}-{f.parent.name}-{f.name}")
    passages = passages_of(files)
    corpus_file = out / "passages.jsonl"
    with corpus_file.open("w", encoding="utf-8") as w:
        for p in passages:
            w.write(json.dumps(p) + "\n")
    queries = known_item_queries(passages, args.queries)
    query_file = out / "queries.txt"
    query_file.write_text("".join(q["query"] + "\n" for q in queries))
    corpus_mb = corpus_file.stat().st_size / 1e6
    docs_mb = sum(f.stat().st_size for f in (out / "docs").iterdir()) / 1e6

    env = dict(os.environ, CATENA_DATA_DIR=str(out / "data"), CATENA_STORE_DIR=str(out / "store"))

    def median_build(source, name):
        """The median of three builds' wall time (the index of the last one is kept)."""
        times = []
        for attempt in range(3):
            if attempt:
                run([args.catena, "index", "rm", name], env)
            times.append(run([args.catena, "index", "add", str(source), "--name", name], env)[1])
        return sorted(times)[1]

    catena_build = median_build(corpus_file, "bench")
    catena_docs = median_build(out / "docs", "docs")

    # ZIM archives: the same documents as HTML pages, once in a folder (the anchor: same pages,
    # same text) and once packed by zim-tools' zimwriterfs, as Kiwix's archives are made.
    html = out / "html"
    html.mkdir()
    for f in sorted((out / "docs").iterdir()):
        text = f.read_text(encoding="utf-8", errors="replace")
        body = "".join(f"<p>{escape(p)}</p>" for p in text.split("\n\n") if p.strip())
        (html / f"{f.stem}.html").write_text(
            f"<html><head><title>{escape(f.stem)}</title></head><body>{body}</body></html>", encoding="utf-8")
    (html / "index.html").write_text("<html><head><title>Crate guides</title></head><body><p>Guides.</p></body></html>")
    (html / "icon.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    _, pack_s = run(["zimwriterfs", "--withoutFTIndex", "-w", "index.html", "-I", "icon.png", "-l", "eng",
                     "-t", "Guides", "-d", "Crate guides", "-c", "bench", "-p", "bench", str(html),
                     str(out / "guides.zim")], env)
    zim_mb = (out / "guides.zim").stat().st_size / 1e6
    html_pages = len(list(html.glob("*.html")))
    html_build = median_build(html, "html")
    zim_build = median_build(out / "guides.zim", "guides")
    searched, _ = run([args.catena, "index", "search", "bench", "--queries", str(query_file), "-k", "3", "--json"], env)
    lines = [json.loads(l) for l in searched.stdout.splitlines() if l.strip()]
    catena_latency = sum(l["seconds"] for l in lines) / len(lines)
    catena_recall = sum(q["id"] in [h["id"] for h in l["hits"]] for q, l in zip(queries, lines)) / len(queries)

    stemmer = Stemmer.Stemmer("english")
    texts = [p["contents"] for p in passages]

    def bm25s_index(texts):
        started = time.perf_counter()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return retriever, time.perf_counter() - started

    builds = [bm25s_index(texts) for _ in range(3)]
    retriever = builds[-1][0]
    bm25s_build = sorted(b[1] for b in builds)[1]
    found = 0
    started = time.perf_counter()
    for q in queries:
        query_tokens = bm25s.tokenize([q["query"]], stopwords="en", stemmer=stemmer, show_progress=False)
        ids, _ = retriever.retrieve(query_tokens, k=3, show_progress=False, n_threads=1)
        found += q["id"] in [passages[i]["id"] for i in ids[0]]
    bm25s_latency = (time.perf_counter() - started) / len(queries)
    bm25s_recall = found / len(queries)

    docs_text = [f.read_text(encoding="utf-8", errors="replace") for f in sorted((out / "docs").iterdir())]
    bm25s_docs = sorted(bm25s_index(docs_text)[1] for _ in range(3))[1]

    # Crawl + summary: one call reading three indexed documents, with the default model.
    docs = sorted((out / "docs").iterdir())[:3]
    urls = " | ".join(f"file://{p.resolve()}" for p in docs)
    prefill = f"<think>Read these files to learn what the crates do.</think>\n<crawl_page>{urls}</crawl_page>"
    crawled, _ = run([args.catena, "run", "--profile", "web", "--doc-index", "docs", "--temperature", "0",
                      "--max-tokens", "1", "--no-store", "--json", "--prefill", prefill,
                      "What do these crates do?"], env)
    observation = next(json.loads(l) for l in crawled.stdout.splitlines() if '"observation"' in l)
    crawl_per_page = observation["elapsed_ms"] / 1e3 / len(docs)

    n, d = len(passages), len(files)
    result = {
        "corpus": {"passages": n, "passages_mb": round(corpus_mb, 2), "documents": d, "documents_mb": round(docs_mb, 2), "queries": len(queries)},
        "catena": {"build_s": catena_build, "docs_build_s": catena_docs, "query_ms": catena_latency * 1e3, "recall_at_3": catena_recall},
        "bm25s": {"build_s": bm25s_build, "docs_build_s": bm25s_docs, "query_ms": bm25s_latency * 1e3, "recall_at_3": bm25s_recall},
        "crawl_seconds_per_page": crawl_per_page,
        "zim": {"pages": html_pages, "archive_mb": round(zim_mb, 2), "pack_s": pack_s,
                "folder_build_s": html_build, "archive_build_s": zim_build},
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(f"corpus: {n} passages ({corpus_mb:.1f} MB), {d} documents ({docs_mb:.1f} MB), {len(queries)} known-item queries")
    print(f"{'':28} {'catena':>12} {'bm25s':>12} {'ratio':>8}")
    rows = [
        ("passage build, passages/s", n / catena_build, n / bm25s_build),
        ("passage build, MB/s", corpus_mb / catena_build, corpus_mb / bm25s_build),
        ("document build, docs/s", d / catena_docs, d / bm25s_docs),
        ("document build, MB/s", docs_mb / catena_docs, docs_mb / bm25s_docs),
        ("query latency, ms (top 3)", catena_latency * 1e3, bm25s_latency * 1e3),
        ("recall@3, known-item", catena_recall, bm25s_recall),
    ]
    for label, a, b in rows:
        print(f"{label:28} {a:12.3f} {b:12.3f} {a / b:8.2f}")
    print(f"(ratio: catena / bm25s; for latency lower is better) -> {out / 'result.json'}")
    print(f"crawl + summary with the default model: {crawl_per_page:.1f} s per page ({len(docs)} pages in one call)")
    print(f"ZIM archive of the same {html_pages} pages as HTML ({zim_mb:.1f} MB, packed by zimwriterfs in {pack_s:.1f} s): "
          f"{html_pages / zim_build:.0f} pages/s from the archive, {html_pages / html_build:.0f} pages/s from the folder, "
          f"ratio {html_build / zim_build:.2f}")


if __name__ == "__main__":
    main()
