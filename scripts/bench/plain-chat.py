#!/usr/bin/env python3
"""The anchor every agent feature must beat: the same model asked in a plain chat, one turn.
Starts `catena serve --no-adapter` on loopback, asks each code task of a task file (greedy, the
same token budget as `catena eval`), takes the first fenced Python program of the answer and runs
it with the task's tests in Catena's sandbox (`catena sandbox`). Prints each task and pass@1.

    scripts/bench/plain-chat.py TASKS.jsonl [--catena BIN] [--limit 30] [--max-tokens 1024]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KEY = "plain-chat-anchor"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def ask(port, model, question, max_tokens):
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=900) as reply:
        answer = json.load(reply)
    return answer["choices"][0]["message"]["content"] or "", answer["usage"]["completion_tokens"]


def program(text):
    match = re.search(r"```(?:python|py)?\n(.*?)```", text, re.S)
    return match.group(1) if match else None


def passes(catena, code, tests):
    if "assert" in tests:
        source = f"{code}\n\n{tests['assert']}\n"
        run = subprocess.run([catena, "sandbox", "--json", "-"], input=source, text=True,
                             capture_output=True)
        return run.returncode == 0 and json.loads(run.stdout).get("exit") == {"status": 0}
    for given, expected in zip(tests["inputs"], tests["outputs"]):
        run = subprocess.run([catena, "sandbox", "--json", "--stdin", given, "-"], input=code,
                             text=True, capture_output=True)
        result = json.loads(run.stdout)
        if result.get("exit") != {"status": 0} or \
                result["stdout"].rstrip() != expected.rstrip():
            return False
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks")
    parser.add_argument("--catena", default="catena")
    parser.add_argument("--limit", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args()
    tasks = [json.loads(line) for line in open(args.tasks)][: args.limit]
    port = free_port()
    store = tempfile.mkdtemp()
    log = open(os.path.join(store, "serve.log"), "w")
    server = subprocess.Popen(
        [args.catena, "--store-dir", store, "serve", "--no-adapter", "--port", str(port),
         "--api-key", KEY], stdout=log, stderr=log)
    try:
        model = None
        for _ in range(600):
            try:
                model = get(port, "/v1/models")["data"][0]["id"]
                break
            except OSError:
                time.sleep(1)
        solved = tokens = 0
        for task in tasks:
            text, used = ask(port, model, task["question"], args.max_tokens)
            tokens += used
            code = program(text)
            ok = code is not None and passes(args.catena, code, task["tests"])
            solved += ok
            print(f"{task['id']}: {'solved' if ok else 'wrong' if code else 'no program'} "
                  f"({used} tokens)", flush=True)
        print(f"plain chat pass@1 {solved}/{len(tasks)} ({100 * solved / len(tasks):.1f}%), "
              f"{tokens / len(tasks):.0f} tokens a task")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
