#!/usr/bin/env bash
# The README's first example over seeds 1..N, three ways: free decoding, the protocol enforced
# (the default), and --samples 5 (five chains decoded together, their answers put to a vote).
# Prints one row per seed and the count of right answers; the right answer is 1229.
#
#   scripts/bench/first-example.sh [--seeds N] [--catena BIN] [--max-time S] [--samples-max-time S]
set -euo pipefail
seeds=10 catena=${CATENA_BIN:-catena} max_time=150 samples_max_time=300
while [ $# -gt 0 ]; do
  case "$1" in
    --seeds) seeds=$2; shift 2 ;;
    --catena) catena=$2; shift 2 ;;
    --max-time) max_time=$2; shift 2 ;;
    --samples-max-time) samples_max_time=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
task="How many primes are there below 10000?"
out=$(mktemp -d)
for seed in $(seq 1 "$seeds"); do
  "$catena" run "$task" --seed "$seed" --free --max-time "$max_time" --no-store --json \
    >"$out/free-$seed.jsonl" 2>/dev/null || true
  "$catena" run "$task" --seed "$seed" --max-time "$max_time" --no-store --json \
    >"$out/protocol-$seed.jsonl" 2>/dev/null || true
  "$catena" run "$task" --seed "$seed" --samples 5 --max-time "$samples_max_time" --no-store --json \
    >"$out/samples-$seed.jsonl" 2>/dev/null || true
  echo "seed $seed done" >&2
done
python3 - "$out" "$seeds" <<'PY'
import json, re, sys
out, seeds = sys.argv[1], int(sys.argv[2])
RIGHT = "1229"

def lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, json.JSONDecodeError):
        return []

def value(answer):
    if answer is None:
        return None
    m = re.search(r"\\boxed\{([^{}]*)\}", answer)
    text = (m.group(1) if m else answer).replace(",", "").strip()
    return text

def valid(trajectory):
    # Every tag closed in order and an answer last: the same check `catena eval` reports.
    stack = []
    for closing, name in re.findall(r"<(/?)(think|plan|reflection|answer|code|observation)>", trajectory):
        if closing:
            if not stack or stack[-1] != name:
                return False
            stack.pop()
        else:
            if stack:
                return False
            stack.append(name)
    return not stack and trajectory.rstrip().endswith("</answer>")

rows, totals = [], {"free": 0, "protocol": 0, "samples": 0}
valid_count = {"free": 0, "protocol": 0}
for seed in range(1, seeds + 1):
    row = [str(seed)]
    for mode in ("free", "protocol"):
        summary = next((o for o in lines(f"{out}/{mode}-{seed}.jsonl") if o.get("type") == "summary"), None)
        answer = value(summary and summary.get("answer"))
        ok = answer == RIGHT
        totals[mode] += ok
        is_valid = bool(summary) and valid(summary["trajectory"])
        valid_count[mode] += is_valid
        row.append(f"{answer or '—'}{' ✓' if ok else ''} ({'valid' if is_valid else 'malformed'}, {summary['stop_reason'] if summary else 'failed'})")
    records = lines(f"{out}/samples-{seed}.jsonl")
    vote = next((o for o in records if o.get("type") == "vote"), None)
    answer = value(vote and vote.get("answer"))
    ok = answer == RIGHT
    totals["samples"] += ok
    chains = [o for o in records if o.get("type") == "sample"]
    votes = ", ".join(f"{value(g['answer'])}×{len(g['samples'])}" for g in (vote or {}).get("groups", []))
    right_chains = sum(value(c["summary"].get("answer")) == RIGHT for c in chains)
    row.append(f"{answer or '—'}{' ✓' if ok else ''} (votes {votes or 'none'}; {right_chains}/{len(chains)} chains right)")
    rows.append(row)
print("| seed | free | protocol enforced | --samples 5 |")
print("|---|---|---|---|")
for row in rows:
    print("| " + " | ".join(row) + " |")
print(f"| right | {totals['free']}/{seeds} | {totals['protocol']}/{seeds} | {totals['samples']}/{seeds} |")
print(f"| valid chains | {valid_count['free']}/{seeds} | {valid_count['protocol']}/{seeds} | |")
PY
echo "raw output: $out" >&2
