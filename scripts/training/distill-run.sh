#!/usr/bin/env bash
# The distillation learning run of docs/TRAINING.md, from nothing, and the recipe of the adapter
# the default model ships with:
#   1. tasks of Catena's own making: the arithmetic, string and list families of `catena train
#      synth`, word problems and functions to complete (scripts/tasks/own-tasks.py);
#   2. the explicit multi-agent system as the teacher on part of them (`catena distill`, the math
#      profile for the math tasks, the code profile for the functions);
#   3. a LoRA adapter trained on what the filters kept (`catena train sft`), then agentic RL on
#      other tasks of the math families (`catena train rl`), the last stage's factors written in
#      F16 (STAGE/adapter-f16.gguf: what ships as the default model's adapter);
#   4. the student measured before, after SFT and after RL on held-out tasks of the same families
#      and on a family it never trained on (scripts/tasks/tool-questions.jsonl: counting,
#      arithmetic, strings and dates questions in words), the teacher's own pass@1 beside them,
#      and the shipped adapter on two public sets nobody here wrote (HumanEval's first 30 problems and
#      41 word problems of OpenAI Evals, scripts/tasks/).
#   scripts/training/distill-run.sh [DIR]   (default: ./distill-run; safe to run again: the
#                                           distillation, training and each evaluation resume or
#                                           are kept)
# Sizes from the environment: TEACH_SYNTH, TEACH_WORD, TEACH_CODE (teacher tasks of each kind,
# default 30, 30 and 20), HELD (held-out tasks of each kind, default 10), SAMPLES (teacher runs per
# task, default 1), TEACHER (a GGUF or an installed model; default: the default model),
# TEACHER_URL (a teacher at a server instead), PARALLEL (runs decoded together in distillation and
# evaluation, default 1), SFT_EPOCHS (default 2), RL_STEPS (default 6; 0 ends at SFT), TEACHER_HELD=1 (the
# teacher on the held-out sets too), PUBLIC_BEFORE=1 (the model without the adapter on the public
# sets too).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
dir="${1:-distill-run}"
catena="$(catena_bin)"
held="${HELD:-10}"
own="$root/scripts/tasks/own-tasks.py"
unseen="$root/scripts/tasks/tool-questions.jsonl"
parallel="${PARALLEL:-1}"
mkdir -p "$dir"
cd "$dir"

step "tasks"
if [ ! -f tasks/done ]; then
  mkdir -p tasks
  # Each set from a seed of its own, so a size changes no other set: the teacher's tasks, the
  # held-out ones and RL's.
  "$catena" train synth --out tasks/synth-teach --train 0 --held-out "${TEACH_SYNTH:-30}" --seed 31
  "$catena" train synth --out tasks/synth-held --train 0 --held-out "$held" --seed 32
  "$catena" train synth --out tasks/synth-rl --train 0 --held-out 200 --seed 61
  python3 "$own" tasks/word-teach.jsonl --kind math --count "${TEACH_WORD:-30}" --seed 41 --check "$catena"
  python3 "$own" tasks/word-held.jsonl --kind math --count "$held" --seed 43 --check "$catena"
  python3 "$own" tasks/word-rl.jsonl --kind math --count 100 --seed 61 --check "$catena"
  python3 "$own" tasks/code-teach.jsonl --kind code --count "${TEACH_CODE:-20}" --seed 42 --check "$catena"
  python3 "$own" tasks/code-held.jsonl --kind code --count "$held" --seed 44 --check "$catena"
  cat tasks/synth-teach/held-out.jsonl tasks/word-teach.jsonl >tasks/teach-math.jsonl
  cp tasks/code-teach.jsonl tasks/teach-code.jsonl
  cat tasks/synth-held/held-out.jsonl tasks/word-held.jsonl >tasks/held-math.jsonl
  cp tasks/code-held.jsonl tasks/held-code.jsonl
  # RL never sees a held-out question; a held-out question the teacher saw stops the run.
  python3 - <<'PY'
import json
def read(path):
    return [json.loads(line) for line in open(path) if line.strip()]
held = {t["question"] for f in ("held-math", "held-code") for t in read(f"tasks/{f}.jsonl")}
taught = {t["question"] for f in ("teach-math", "teach-code") for t in read(f"tasks/{f}.jsonl")}
if held & taught:
    raise SystemExit(f"{len(held & taught)} held-out questions are also teacher tasks")
rl = [t for f in ("synth-rl/held-out", "word-rl") for t in read(f"tasks/{f}.jsonl")]
with open("tasks/rl.jsonl", "w") as out:
    for t in rl:
        if t["question"] not in held:
            out.write(json.dumps(t) + "\n")
PY
  python3 "$root/scripts/tasks/humaneval.py" tasks/humaneval.jsonl --limit 30
  python3 "$root/scripts/tasks/openai-evals-math.py" tasks/evals-math.jsonl
  touch tasks/done
fi

teacher_flags=()
if [ -n "${TEACHER_URL:-}" ]; then
  teacher_flags=(--teacher "$TEACHER_URL")
elif [ -n "${TEACHER:-}" ]; then
  teacher_flags=(--teacher-model "$TEACHER")
fi

for kind in math code; do
  step "distillation: the explicit system on the $kind tasks"
  "$catena" distill --tasks "tasks/teach-$kind.jsonl" --profile "$kind" --out "distilled-$kind" \
    "${teacher_flags[@]}" --temperature 0.6 --samples "${SAMPLES:-1}" --max-tokens 2048 \
    --parallel "$parallel"
done
cat distilled-math/sft.jsonl distilled-code/sft.jsonl >sft-data.jsonl

step "SFT on the kept trajectories"
if [ ! -f sft/adapter.gguf ]; then
  "$catena" train sft --data sft-data.jsonl --out sft --rank 8 --alpha 16 --epochs "${SFT_EPOCHS:-2}" \
    --batch-tokens 4096 --max-seq-len 3072 --lr 2e-4 --warmup-ratio 0.1 --eval-fraction 0 \
    --checkpoint-every 5
fi

evaluate() { # NAME TASKS PROFILE MAX_TOKENS [FLAGS...]
  local name="$1" tasks="$2" profile="$3" max_tokens="$4"
  shift 4
  [ -f "$name/report.json" ] || "$catena" eval --tasks "$tasks" --profile "$profile" \
    --max-tokens "$max_tokens" --parallel "$parallel" "$@" --out "$name"
}
# One set with one model setting: NAME_PREFIX SET [FLAGS...]
evaluate_set() {
  local prefix="$1" set="$2"
  shift 2
  case "$set" in
    held-math) evaluate "$prefix-$set" tasks/held-math.jsonl math 768 "$@" ;;
    held-code) evaluate "$prefix-$set" tasks/held-code.jsonl code 1024 "$@" ;;
    unseen) evaluate "$prefix-$set" "$unseen" math 768 "$@" ;;
  esac
}
evaluate_public() {
  local prefix="$1"
  shift
  evaluate "$prefix-humaneval" tasks/humaneval.jsonl code 1024 "$@"
  evaluate "$prefix-evals-math" tasks/evals-math.jsonl math 768 "$@"
}

# RL_STEPS=0 stops at SFT: the adapter that ships is then the SFT one.
final=sft
if [ "${RL_STEPS:-6}" -gt 0 ]; then
  step "RL from the SFT adapter"
  if [ ! -f rl/adapter.gguf ]; then
    "$catena" train rl --adapter sft --tasks tasks/rl.jsonl --profile math --out rl --group 4 \
      --batch-prompts 3 --steps "${RL_STEPS:-6}" --lr 1e-4 --max-tokens 512 --seed 7
  fi
  final=rl
fi

# What ships: the last stage's adapter with its factors in F16 (half the size; the form measured
# below). import-adapter writes into a data folder of its own here, and loads the result once in
# llama.cpp.
step "the shipped form of the adapter ($final)"
shipped="$final/adapter-f16.gguf"
if [ ! -f "$shipped" ]; then
  base="$("$catena" models list --json | python3 -c \
    'import json, sys; print(next(m["path"] for m in json.load(sys.stdin) if m["default"]))')"
  rm -rf "$final/f16"
  CATENA_DATA_DIR="$PWD/$final/f16" "$catena" models import-adapter "$final/peft" --base "$base" \
    --name shipped --f16
  mv "$final/f16/adapters/shipped/adapter.gguf" "$shipped"
  rm -rf "$final/f16"
fi

# The evaluations: the shipped adapter on the public sets first, then each held-out set and the
# unseen family without it and with it, one after the other.
step "the student with the shipped adapter, on the public sets"
evaluate_public "$final" --adapter "$shipped"
for set in unseen held-math held-code; do
  step "the student on $set, before and after"
  evaluate_set before "$set" --no-adapter
  evaluate_set "$final" "$set" --adapter "$shipped"
  if [ "$final" = rl ]; then
    evaluate_set sft "$set" --adapter sft/adapter.gguf
  fi
done

step "the teacher (the explicit system) on the same tasks"
teacher_eval=(--mode mas)
if [ -n "${TEACHER_URL:-}" ]; then
  teacher_eval+=(--engine "$TEACHER_URL")
elif [ -n "${TEACHER:-}" ]; then
  teacher_eval+=(--model "$TEACHER")
else
  teacher_eval+=(--no-adapter)
fi
# On the held-out sets only with TEACHER_HELD=1: the distillation already measured the teacher on
# tasks of those families (its pass@1 is in distilled-*/report.json), at the cost of a day's
# evaluation on two cores.
if [ "${TEACHER_HELD:-0}" = 1 ]; then
  evaluate teacher-held-math tasks/held-math.jsonl math 2048 "${teacher_eval[@]}"
  evaluate teacher-held-code tasks/held-code.jsonl code 2048 "${teacher_eval[@]}"
fi
evaluate teacher-unseen "$unseen" math 2048 "${teacher_eval[@]}"
if [ "${PUBLIC_BEFORE:-0}" = 1 ]; then
  step "the model without the adapter on the public sets"
  evaluate_public before --no-adapter
fi

python3 - <<'PY'
import json, os
def report(name):
    return json.load(open(f"{name}/report.json")) if os.path.exists(f"{name}/report.json") else None
for kind in ("math", "code"):
    d = json.load(open(f"distilled-{kind}/report.json"))
    print(f"{kind}: teacher runs {d['teacher_runs']} (pass@1 {100 * d['teacher_pass_at_1']:.1f}%), "
          f"kept {d['kept']}: " +
          ", ".join(f"{s['stage']} {s['kept']}" for s in d["filters"]["stages"]))
sets = ("held-math", "held-code", "unseen", "humaneval", "evals-math")
print(f"{'':22}" + "".join(f"{s:>12}" for s in sets))
for label, prefix in (("student before", "before"), ("student after SFT", "sft"),
                      ("student after RL", "rl"), ("teacher (explicit)", "teacher")):
    cells = []
    for s in sets:
        r = report(f"{prefix}-{s}")
        cells.append(f"{100 * r['pass_at_1']:>11.1f}%" if r else f"{'-':>12}")
    print(f"{label:22}" + "".join(cells))
PY
