#!/usr/bin/env bash
# Rollout throughput and the time split of `catena train rl`, with llama.cpp's `llama-bench`
# (built by scripts/bench/engine.sh from the same vendored llama.cpp) as the anchor measured in the
# same run: its text-generation speed (tg128) on the same model and threads is the most the
# rollouts could reach one sequence at a time, and `llama-batched-bench`'s aggregate generation
# at the group size (a group's rollouts are decoded together) the most they could reach together;
# rollouts also prefill prompts and observations and run code in the sandbox.
#   scripts/bench/rl.sh ADAPTER [TASKS] [STEPS]
# ADAPTER: a `catena train sft` output, a GGUF adapter or `catena-coa-0.5b` (RL from an adapter
# that solves some tasks, so groups have signal and there is an update to time); TASKS: default
# a fresh synthetic set. RL_FLAGS: more `catena train rl` flags (e.g. `--parallel-groups 1`).
# RL_GROUP (default 4) and RL_PROMPTS (default 2): the group size, which is also the anchor's
# number of sequences, and the groups with signal a step trains on (`train rl`'s defaults are 8
# and 4).
# The batched anchor runs twice, before and after the rollouts (this VM drifts), at two shapes:
# pp256 tg128, and pp400 tg256, the shape of these rollouts (the math profile's prompt is about
# 400 tokens, and they generate about 260 each). S_TG leaves out what rollouts also do: evaluate
# prompts and observations. The same work at the anchor's own rates (its S_PP for the prompt and
# observation tokens the engine evaluated, its S_TG for the generated ones) is printed beside it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
adapter="${1:?usage: scripts/bench/rl.sh ADAPTER [TASKS] [STEPS]}"
if [ -e "$adapter" ]; then adapter="$(realpath "$adapter")"; fi
tasks="${2:-}"
steps="${3:-2}"
catena="$(catena_bin)"
threads="$(nproc)"
bench_bin="$(cd "$root" && scripts/setup/llama-tool.sh llama-bench llama-bench)"
batched_bin="$(cd "$root" && scripts/setup/llama-tool.sh batched-bench llama-batched-bench)"
group="${RL_GROUP:-4}"
prompts="${RL_PROMPTS:-2}"
model="$(default_model "$catena")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$tasks" ]; then
  "$catena" train synth --out "$work/tasks" --train 0 --held-out 50 --seed 99 >/dev/null
  tasks="$work/tasks/held-out.jsonl"
fi

"$bench_bin" -m "$model" -p 0 -n 128 -t "$threads" -r 3 -o json > "$work/llama-bench.json"
batched() {
  local pp tg
  for shape in "256 128" "400 256"; do
    read -r pp tg <<< "$shape"
    "$batched_bin" -m "$model" -c "$((group * 1024))" -b 512 -ub 512 -npp "$pp" -ntg "$tg" -npl "$group" \
      -t "$threads" --output-format jsonl 2>/dev/null | grep '^{' >> "$work/batched-bench.jsonl"
  done
}
batched
# shellcheck disable=SC2086 # RL_FLAGS is a list of flags
"$catena" train rl --json --adapter "$adapter" --tasks "$tasks" --out "$work/rl" --group "$group" \
  --batch-prompts "$prompts" --steps "$steps" --max-tokens 384 --seed 3 ${RL_FLAGS:-} > "$work/rl.jsonl"
batched

python3 - "$work/llama-bench.json" "$work/rl.jsonl" "$work/batched-bench.jsonl" "$group" <<'PY'
import json, sys
anchor = json.load(open(sys.argv[1]))[0]["avg_ts"]
# Each shape's S_TG, measured before and after the rollouts; the mean is the anchor.
runs = [json.loads(line) for line in open(sys.argv[3])]
batched, prefill_rate = {}, {}
for run in runs:
    batched.setdefault((run["pp"], run["tg"]), []).append(run["speed_tg"])
    prefill_rate.setdefault((run["pp"], run["tg"]), []).append(run["speed_pp"])
group = sys.argv[4]
steps = [e for e in map(json.loads, open(sys.argv[2])) if e.get("event") == "step"]
tot = lambda k: sum(s[k] for s in steps)
rollouts, tokens, roll_s = tot("rollouts"), tot("generated_tokens"), tot("rollout_seconds")
parts = {k: tot(f"{k}_seconds") for k in ("reload", "rollout", "scoring", "update")}
wall = sum(parts.values())
tok_s = tokens / roll_s
print(f"steps {len(steps)}, rollouts {rollouts}, generated tokens {tokens}, trained tokens {tot('trained_tokens')}")
prefill = tot("prefill_tokens")
print(f"rollout throughput: {60 * rollouts / roll_s:.1f} trajectories/min, {tok_s:.1f} generated tokens/s")
print(f"prompt and observation tokens evaluated: {prefill}; sequences a decode step carried: " + ", ".join(f"{s['mean_batch_width']:.1f}" for s in steps))
print(f"llama-bench tg128 (same model, same threads): {anchor:.1f} tokens/s")
print(f"ratio rollout tokens/s / llama-bench tg128: {tok_s / anchor:.2f}x")
for (pp, tg), speeds in batched.items():
    mean = sum(speeds) / len(speeds)
    each = ", ".join(f"{s:.1f}" for s in speeds)
    print(f"llama-batched-bench S_TG at {group} sequences (pp{pp}, tg{tg}): {mean:.1f} tokens/s (before, after: {each})")
    print(f"ratio rollout tokens/s / llama-batched-bench at the group size, pp{pp} tg{tg}: {tok_s / mean:.2f}x")
    pp_rate = sum(prefill_rate[(pp, tg)]) / len(prefill_rate[(pp, tg)])
    same = prefill / pp_rate + tokens / mean
    print(f"  the same work at its rates (S_PP {pp_rate:.1f}, S_TG {mean:.1f}): {same:.0f} s against {roll_s:.0f} s of rollouts: {same / roll_s:.2f}x")
print("time split: " + ", ".join(f"{k} {100 * v / wall:.1f}% ({v:.0f} s)" for k, v in parts.items()))
PY
