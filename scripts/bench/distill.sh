#!/usr/bin/env bash
# Distillation throughput with teacher runs decoded together: `catena distill --parallel N`
# against the anchor of the same distillation one run at a time (`--parallel 1`), the same tasks,
# greedy, one after the other in this invocation. Prints each one's wall time and teacher runs per
# minute, the ratio, and how many runs came out the same (runs decoded together may part from a
# run alone at a near tie: docs/ARCHITECTURE.md, "Many sequences in one context").
#   scripts/bench/distill.sh [N_TASKS] [PARALLEL] [MAX_TOKENS]   (defaults 8, 4, 1536)
# Tasks: scripts/tasks/tool-questions.jsonl. BENCH_DIR keeps the two output folders.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
n="${1:-8}"
parallel="${2:-4}"
max_tokens="${3:-1536}"
tasks="$root/scripts/tasks/tool-questions.jsonl"
catena="$(catena_bin)"
if [ -n "${BENCH_DIR:-}" ]; then
  work="$BENCH_DIR"
  rm -rf "$work/one" "$work/together"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
distill() { # OUT PARALLEL -> seconds on stdout
  local start end
  start="$(date +%s.%N)"
  "$catena" distill --tasks "$tasks" --limit "$n" --max-tokens "$max_tokens" --temperature 0 \
    --parallel "$2" --out "$work/$1" 2> "$work/$1.log" >/dev/null
  end="$(date +%s.%N)"
  python3 -c "print($end - $start)"
}
one="$(distill one 1)"
together="$(distill together "$parallel")"
python3 - "$work" "$one" "$together" "$parallel" <<'PY'
import json, sys
work, one, together, parallel = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def runs(name):
    return {(r["run"]["task_id"], r["sample"]): r for r in map(json.loads, open(f"{work}/{name}/runs.jsonl"))}
a, b = runs("one"), runs("together")
same = sum(1 for k in a if k in b and a[k]["run"]["activations"] == b[k]["run"]["activations"])
tokens = lambda rs: sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in rs.values())
for name, rs, secs in [("one at a time (anchor)", a, one), (f"--parallel {parallel}", b, together)]:
    print(f"{name}: {len(rs)} runs in {secs:.1f} s = {60 * len(rs) / secs:.2f} runs/min; "
          f"{tokens(rs)} prompt and completion tokens = {tokens(rs) / secs:.1f} tokens/s")
print(f"ratio, runs/min: {(len(b) / together) / (len(a) / one):.3f}")
# Runs that part at a near tie differ in length, so the work per run differs too.
print(f"ratio, tokens/s: {(tokens(b) / together) / (tokens(a) / one):.3f}")
print(f"runs with the same agent texts and observations: {same} of {len(a)}")
PY
