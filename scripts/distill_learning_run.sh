#!/usr/bin/env bash
# The distillation learning run of docs/TRAINING.md, from nothing: verifiable tasks of Catena's
# own families (`catena train synth`), the explicit multi-agent system as the teacher on the
# first part of them (`catena distill`), a LoRA adapter trained on what the filters kept
# (`catena train sft`), and the student measured before and after on held-out tasks of the same
# families and on a family it never trained on (scripts/tasks/tool-questions.jsonl: counting,
# arithmetic, strings and dates questions in words), with the teacher's own pass@1 beside them.
#   scripts/distill_learning_run.sh [DIR]   (default: ./distill-run; safe to run again: the
#                                            distillation and each evaluation resume or are kept)
# Sizes from the environment: TEACH (tasks the teacher runs, default 40), HELD (held-out tasks,
# default 30), SAMPLES (teacher runs per task, default 1), TEACHER (a GGUF or an installed model; default: the default model), TEACHER_URL
# (a teacher at a server instead), PARALLEL (runs decoded together in distillation and evaluation,
# default 1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-distill-run}"
catena="${CATENA_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/catena}"
[ -x "$catena" ] || (cd "$root" && cargo build --release --locked -p catena-cli)
teach="${TEACH:-40}" held="${HELD:-30}"
unseen="$root/scripts/tasks/tool-questions.jsonl"
mkdir -p "$dir"
cd "$dir"
stamp() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

stamp "tasks"
if [ ! -f tasks/teach.jsonl ]; then
  "$catena" train synth --out tasks --train 0 --held-out $((teach + held)) --seed 31
  head -n "$teach" tasks/held-out.jsonl >tasks/teach.jsonl
  tail -n "$held" tasks/held-out.jsonl >tasks/held.jsonl
fi

teacher_flags=()
if [ -n "${TEACHER_URL:-}" ]; then
  teacher_flags=(--teacher "$TEACHER_URL")
elif [ -n "${TEACHER:-}" ]; then
  teacher_flags=(--teacher-model "$TEACHER")
fi

stamp "distillation: the explicit system on $teach tasks"
"$catena" distill --tasks tasks/teach.jsonl --out distilled "${teacher_flags[@]}" \
  --temperature 0.6 --samples "${SAMPLES:-1}" --max-tokens 2048 --parallel "${PARALLEL:-1}"

eval_flags=(--max-tokens 768 --parallel "${PARALLEL:-1}")
evaluate() { # NAME TASKS [FLAGS...]
  local name="$1" tasks="$2"
  shift 2
  [ -f "$name/report.json" ] || "$catena" eval --tasks "$tasks" "${eval_flags[@]}" "$@" --out "$name"
}

stamp "the student before: held-out and unseen"
evaluate before-held tasks/held.jsonl
evaluate before-unseen "$unseen"

stamp "SFT on the kept trajectories"
if [ ! -f sft/adapter.gguf ]; then
  "$catena" train sft --data distilled/sft.jsonl --out sft --epochs 2 --batch-tokens 4096 \
    --max-seq-len 3072 --lr 2e-4 --warmup-ratio 0.1 --eval-fraction 0 --checkpoint-every 5
fi

stamp "the student after"
evaluate after-held tasks/held.jsonl --adapter sft/adapter.gguf
evaluate after-unseen "$unseen" --adapter sft/adapter.gguf

stamp "the teacher (the explicit system) on the same tasks"
teacher_eval=(--mode mas)
if [ -n "${TEACHER_URL:-}" ]; then
  teacher_eval+=(--engine "$TEACHER_URL")
elif [ -n "${TEACHER:-}" ]; then
  teacher_eval+=(--model "$TEACHER")
fi
eval_flags=(--max-tokens 2048 --parallel "${PARALLEL:-1}")
evaluate teacher-held tasks/held.jsonl "${teacher_eval[@]}"
evaluate teacher-unseen "$unseen" "${teacher_eval[@]}"

python3 - <<'PY'
import json
def report(name):
    return json.load(open(f"{name}/report.json"))
d = json.load(open("distilled/report.json"))
print(f"teacher runs {d['teacher_runs']}, kept {d['kept']}: " +
      ", ".join(f"{s['stage']} {s['kept']}" for s in d["filters"]["stages"]))
print(f"{'':22}{'held-out pass@1':>17}{'unseen pass@1':>15}")
for label, a, b in (("student before", "before-held", "before-unseen"),
                    ("student after SFT", "after-held", "after-unseen"),
                    ("teacher (explicit)", "teacher-held", "teacher-unseen")):
    ra, rb = report(a), report(b)
    print(f"{label:22}{100*ra['pass_at_1']:>16.1f}%{100*rb['pass_at_1']:>14.1f}%"
          f"   ({ra['model']}, {ra['mode']})")
PY
