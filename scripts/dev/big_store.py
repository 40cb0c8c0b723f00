#!/usr/bin/env python3
"""Makes a session store the size a coding agent leaves behind, for measuring exports.

    scripts/dev/big_store.py DIR [RUNS]

Creates the store with `catena sessions list` (CATENA_BIN, else the release build), then adds RUNS
finished chat runs (default 2,000), each asked with a 41-message conversation of about 217 KB, as a
coding agent's requests are: every request carries the whole conversation so far. Then measure:

    /usr/bin/time -v env CATENA_STORE_DIR=DIR catena sessions export -o out.jsonl
"""
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
catena = os.environ.get("CATENA_BIN", os.path.join(target, "release", "catena"))
folder = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
os.makedirs(folder, exist_ok=True)
subprocess.run([catena, "sessions", "list"], env={**os.environ, "CATENA_STORE_DIR": folder},
               check=True, stdout=subprocess.DEVNULL)
messages = [{"role": "system", "content": "You are a coding agent. " + "rules " * 8000}]
messages += [{"role": "user" if i % 2 == 0 else "assistant", "content": "line of code\n" * 300}
             for i in range(40)]
options = json.dumps({"messages": messages})
db = sqlite3.connect(os.path.join(folder, "catena.db"))
now = int(time.time() * 1000)
for i in range(runs):
    session, run = uuid.uuid4().hex, uuid.uuid4().hex
    db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (session, "t", now + i, now + i))
    db.execute(
        "INSERT INTO runs (id, session_id, kind, status, task, model, options_json, system_prompt,"
        " user_prompt, owner, started_ms, finished_ms, trajectory, answer)"
        " VALUES (?, ?, 'chat', 'finished', 't', 'm', ?, '', '', 'o', ?, ?, ?, 'a')",
        (run, session, options, now + i, now + i, "reply " * 500))
db.commit()
print(f"{runs} chat runs of {len(options)} bytes of request each in {folder}")
