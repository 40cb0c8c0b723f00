#!/usr/bin/env bash
# The RL learning run of docs/TRAINING.md: a deliberately short SFT (22 trajectories, 6 steps)
# gives an adapter that knows the format but often fails; `catena train rl` then trains it on a
# separate set of synthetic verifiable tasks with rollouts through the real runtime and sandbox;
# `catena eval` measures the same 40 held-out tasks before and after RL.
#   scripts/training/rl-run.sh [DIR]    (default: ./rl-learning-run; safe to run again: every
#                                        stage resumes or is skipped when its output exists)
# Settings through the environment: RL_STEPS (6), RL_GROUP (4), RL_PROMPTS (3), RL_LR (1e-4),
# EVAL_LIMIT (40 held-out tasks), CATENA_FEATURES (cargo features of the build, e.g. `cuda`).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
dir="${1:-rl-learning-run}"
# CATENA_FEATURES rebuilds with those features first; without them a missing binary is built.
if [ -n "${CATENA_FEATURES:-}" ]; then
  (cd "$root" && cargo build --release --locked -p catena-cli --features "$CATENA_FEATURES")
fi
catena="$(catena_bin)"
mkdir -p "$dir"
cd "$dir"

# SFT data (the same seed as scripts/training/sft-run.sh) and a disjoint task set for RL prompts.
[ -f data/train.jsonl ] || "$catena" train synth --out data --train 120 --held-out 60 --seed 11
[ -f rl-tasks/held-out.jsonl ] || "$catena" train synth --out rl-tasks --train 0 --held-out 200 --seed 12
head -22 data/train.jsonl > sft-small.jsonl
[ -f sft/adapter.gguf ] || "$catena" train sft --data sft-small.jsonl --out sft --epochs 1 \
  --batch-tokens 2200 --lr 3e-4 --warmup-ratio 0.1 --eval-fraction 0 --checkpoint-every 100

eval_flags=(--tasks data/held-out.jsonl --limit "${EVAL_LIMIT:-40}" --max-tokens 512)
[ -f before/report.json ] || "$catena" eval "${eval_flags[@]}" --adapter sft/adapter.gguf --out before
"$catena" train rl --adapter sft --tasks rl-tasks/held-out.jsonl --out rl \
  --group "${RL_GROUP:-4}" --batch-prompts "${RL_PROMPTS:-3}" --steps "${RL_STEPS:-6}" \
  --lr "${RL_LR:-1e-4}" --max-tokens 384 --seed 7
[ -f after/report.json ] || "$catena" eval "${eval_flags[@]}" --adapter rl/adapter.gguf --out after

python3 - <<'PY'
import json
b, a = (json.load(open(f"{d}/report.json")) for d in ("before", "after"))
print(f"{'':22}{'pass@1':>8}{'valid chains':>14}{'tokens/task':>13}{'tool calls/task':>17}")
for name, r in (("short SFT adapter", b), ("+ RL", a)):
    print(f"{name:22}{100*r['pass_at_1']:>7.1f}%{100*r['format_rate']:>13.1f}%{r['mean_generated_tokens']:>13.0f}{r['mean_tool_calls']:>17.2f}")
PY
