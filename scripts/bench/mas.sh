#!/usr/bin/env bash
# The paper's efficiency claim on this machine, and distillation's throughput: the same model,
# tools, sandbox and tasks run as one Chain-of-Agents generation (`catena eval --mode coa`) and
# by the explicit multi-agent system (`catena distill`, greedy: planner, thinker, tool agents,
# reflector, verifier and answerer as separate calls, every run stored and filtered). Prints
# tokens per solved task (prompt and completion tokens of every model call over the solved
# tasks), model calls and wall time per task, pass@1, the ratio CoA / explicit system, teacher
# runs per minute and what each filter stage kept.
#   scripts/bench/mas.sh [TASKS] [N] [MAX_TOKENS]
# TASKS: a JSONL task file, default scripts/tasks/tool-questions.jsonl (24 questions a program
# answers: counting, arithmetic, strings, dates); `synth` for a fresh synthetic set (`catena
# train synth`); N: tasks. MAS_BENCH_DIR keeps the reports and the teacher runs there.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
tasks="${1:-$root/scripts/tasks/tool-questions.jsonl}"
n="${2:-24}"
max_tokens="${3:-1536}"
catena="$(catena_bin)"
if [ -n "${MAS_BENCH_DIR:-}" ]; then
  work="$MAS_BENCH_DIR"
  rm -rf "$work/distill"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
if [ "$tasks" = synth ]; then
  "$catena" train synth --out "$work/tasks" --train 0 --held-out "$n" --seed 41 >/dev/null
  tasks="$work/tasks/held-out.jsonl"
fi
"$catena" eval --mode coa --tasks "$tasks" --limit "$n" --max-tokens "$max_tokens" \
  --json > "$work/coa.json"
"$catena" distill --tasks "$tasks" --limit "$n" --max-tokens "$max_tokens" --temperature 0 \
  --out "$work/distill" 2> "$work/distill.log"
python3 - "$work/coa.json" "$work/distill" <<'PY'
import json, sys
coa = json.load(open(sys.argv[1]))
runs = [json.loads(l) for l in open(f"{sys.argv[2]}/runs.jsonl")]
report = json.load(open(f"{sys.argv[2]}/report.json"))
def line(name, n, solved, tokens, calls, seconds):
    per = tokens / solved if solved else float("nan")
    print(f"{name}: {n} tasks, solved {solved} (pass@1 {100 * solved / n:.1f}%), {tokens} tokens "
          f"in all, {tokens / n:.0f} per task and {per:.0f} per solved task, {calls / n:.1f} model "
          f"calls and {seconds / n:.1f} s per task")
    return per, tokens / n
res = coa["results"]
print(f"model: {coa['model']}")
c = line("CoA (one generation)", len(res), sum(r["solved"] for r in res),
         sum(r["total_tokens"] for r in res), sum(r["model_calls"] for r in res),
         sum(r["seconds"] for r in res))
m = line("explicit multi-agent system", len(runs), sum(r["run"]["reward"] >= 1 for r in runs),
         sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in runs),
         sum(r["usage"]["calls"] for r in runs), sum(r["seconds"] for r in runs))
print(f"ratio CoA / explicit system: tokens per solved task {c[0] / m[0]:.3f}, "
      f"tokens per task {c[1] / m[1]:.3f}")
print(f"teacher runs per minute: {report['runs_per_minute_this_time']:.2f}")
print("filters: " + ", ".join(f"{s['stage']} {s['kept']}/{s['seen']}" for s in report["filters"]["stages"]))
PY
