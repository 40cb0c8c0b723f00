#!/usr/bin/env python3
"""Start-up time and idle memory of the desktop app (docs/BENCHMARKS.md).

Starts `catena-desktop` ROUNDS times under an X server of its own (Xvfb) with a throw-away home and
session store, and measures:

- interactive: from spawning the process to the UI's first call into the app after it mounted
  (the app writes CATENA_DESKTOP_READY_FILE then), i.e. a window that takes input;
- loaded: from spawning to the model worker having loaded the model (the app logs it);
- idle memory, IDLE seconds after loading: proportional set size (PSS: shared pages divided among
  the processes sharing them) and RSS of the app, its WebKit processes and the model worker.

The anchor, measured in the same run: the same UI in a Chromium-based window (Debian's Chromium in
app mode on the same X server, showing the UI that `catena serve` serves; Electron apps are
Chromium plus Node.js), its whole process tree's PSS and RSS after the same idle time. The model
worker of that `catena serve` is not counted, so the comparison is shell against shell.

Usage: scripts/bench/desktop.py [--rounds 5] [--idle 10] [--bin target/release/catena-desktop]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def children_of(pid):
    """Every descendant of pid, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def memory_kib(pid):
    """(PSS, RSS) in KiB of one process."""
    pss = rss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
        elif line.startswith("Rss:"):
            rss = int(line.split()[1])
    return pss, rss


def role(pid, app_pid):
    if pid == app_pid:
        return "app"
    name = Path(f"/proc/{pid}/comm").read_text().strip()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if name.startswith("WebKit") or b"WebKit" in cmdline[0]:
        return "webview"
    if len(cmdline) > 1 and cmdline[1] == b"worker":
        return "worker"
    return "other"


def start_xvfb():
    number = next(n for n in range(150, 250) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    xvfb = subprocess.Popen(
        ["Xvfb", f":{number}", "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not Path(f"/tmp/.X11-unix/X{number}").exists():
        if time.monotonic() > deadline:
            sys.exit("Xvfb did not start")
        time.sleep(0.05)
    return xvfb, f":{number}"


def real_dirs():
    """Where the real model and sandbox live, so no round fetches them into its throw-away home."""
    home = Path.home()
    data = os.environ.get("CATENA_DATA_DIR") or str(Path(os.environ.get("XDG_DATA_HOME", home / ".local/share")) / "catena")
    cache = os.environ.get("CATENA_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME", home / ".cache")) / "catena")
    return {"CATENA_DATA_DIR": data, "CATENA_CACHE_DIR": cache}


def tree_memory(pid, classify):
    usage = {}
    for p in [pid] + children_of(pid):
        try:
            pss, rss = memory_kib(p)
            kind = classify(p)
        except OSError:
            continue
        total = usage.setdefault(kind, {"pss_kib": 0, "rss_kib": 0, "processes": 0})
        total["pss_kib"] += pss
        total["rss_kib"] += rss
        total["processes"] += 1
    return usage


def anchor_round(url, display, idle):
    """Chromium in app mode showing the served UI: PSS/RSS of its process tree after `idle` s."""
    with tempfile.TemporaryDirectory(prefix="catena-chromium-bench-") as profile:
        env = dict(os.environ, DISPLAY=display)
        browser = subprocess.Popen(
            ["chromium", "--no-sandbox", "--no-first-run", "--disable-background-networking",
             "--disable-gpu", f"--user-data-dir={profile}", f"--app={url}"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3 + idle)
            return tree_memory(browser.pid, lambda p: "chromium")["chromium"]
        finally:
            browser.terminate()
            try:
                browser.wait(10)
            except subprocess.TimeoutExpired:
                browser.kill()
                browser.wait()


def one_round(binary, display, idle):
    with tempfile.TemporaryDirectory(prefix="catena-desktop-bench-") as tmp:
        tmp = Path(tmp)
        ready = tmp / "ready.json"
        env = dict(os.environ)
        env.update(real_dirs())
        env.update(
            DISPLAY=display,
            HOME=str(tmp / "home"),
            CATENA_STORE_DIR=str(tmp / "store"),
            CATENA_DESKTOP_READY_FILE=str(ready),
            WEBKIT_DISABLE_SANDBOX_THIS_IS_DANGEROUS="1",
            WEBKIT_DISABLE_COMPOSITING_MODE="1",
        )
        log = open(tmp / "app.log", "w+")
        started = time.monotonic()
        app = subprocess.Popen([binary], env=env, stdout=log, stderr=subprocess.STDOUT)
        interactive = loaded = None
        try:
            deadline = started + 300
            while loaded is None or interactive is None:
                if app.poll() is not None:
                    log.seek(0)
                    sys.exit(f"the app exited with {app.returncode}:\n{log.read()}")
                if time.monotonic() > deadline:
                    sys.exit("the app did not become ready within 300 s")
                now = time.monotonic()
                if interactive is None and ready.exists() and ready.read_text().strip():
                    interactive = now - started
                if loaded is None:
                    log.seek(0)
                    if "the model is loaded" in log.read():
                        loaded = now - started
                time.sleep(0.005)
            time.sleep(idle)
            usage = tree_memory(app.pid, lambda p: role(p, app.pid))
            return {"interactive_s": interactive, "loaded_s": loaded, "memory": usage}
        finally:
            app.send_signal(signal.SIGTERM)
            try:
                app.wait(10)
            except subprocess.TimeoutExpired:
                app.kill()
                app.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle before measuring memory")
    parser.add_argument("--bin", default=str(ROOT / "target/release/catena-desktop"))
    parser.add_argument("--catena", default=str(ROOT / "target/release/catena"), help="serves the UI for the Chromium anchor")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not shutil.which("Xvfb"):
        sys.exit("Xvfb is needed: scripts/setup/packages.sh --tests installs it")
    if not shutil.which("chromium"):
        sys.exit("Debian's chromium is needed for the anchor: "
                 "scripts/setup/packages.sh --tests installs it")
    xvfb, display = start_xvfb()
    store = tempfile.TemporaryDirectory(prefix="catena-bench-store-")
    server = subprocess.Popen([args.catena, "serve", "--port", "0", "--store-dir", store.name],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        url = line.split(" on ")[1].split()[0]
        rounds = []
        for _ in range(args.rounds):
            rounds.append(one_round(args.bin, display, args.idle))
            rounds[-1]["anchor"] = anchor_round(url, display, args.idle)
    finally:
        server.terminate()
        server.wait()
        store.cleanup()
        xvfb.terminate()
        xvfb.wait()

    def median(key, kind=None, field=None):
        values = [r["memory"].get(kind, {}).get(field, 0) / 1024 if kind else r[key] for r in rounds]
        return statistics.median(values)

    summary = {
        "rounds": len(rounds),
        "first_interactive_s": rounds[0]["interactive_s"],
        "interactive_s": median("interactive_s"),
        "loaded_s": median("loaded_s"),
        "pss_mib": {k: median(None, k, "pss_kib") for k in ("app", "webview", "worker", "other")},
        "rss_mib": {k: median(None, k, "rss_kib") for k in ("app", "webview", "worker", "other")},
        "anchor_pss_mib": statistics.median(r["anchor"]["pss_kib"] / 1024 for r in rounds),
        "anchor_rss_mib": statistics.median(r["anchor"]["rss_kib"] / 1024 for r in rounds),
        "raw": rounds,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"rounds: {len(rounds)} (the first started with cold WebKit caches: {rounds[0]['interactive_s']:.3f} s)")
    print(f"interactive window, median: {summary['interactive_s']:.3f} s")
    print(f"model loaded, median:       {summary['loaded_s']:.3f} s")
    print(f"idle memory after {args.idle:g} s, median MiB:   PSS      RSS")
    for kind in ("app", "webview", "worker", "other"):
        print(f"  {kind:<8}                          {summary['pss_mib'][kind]:7.1f}  {summary['rss_mib'][kind]:7.1f}")
    shell = summary["pss_mib"]["app"] + summary["pss_mib"]["webview"]
    print(f"  app + webview (PSS): {shell:.1f} MiB; with the model worker: {shell + summary['pss_mib']['worker']:.1f} MiB")
    anchor = summary["anchor_pss_mib"]
    print(f"anchor: Chromium app window with the same UI, median PSS {anchor:.1f} MiB (RSS {summary['anchor_rss_mib']:.1f} MiB)")
    print(f"ratio app + webview / Chromium (PSS): {shell / anchor:.2f}")


if __name__ == "__main__":
    main()
