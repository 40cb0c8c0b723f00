#!/usr/bin/env bash
# One RL step's rollouts, alternated between `catena` binaries (or wrappers that add flags) over
# seeds, each read from the batch scheduler's own report: where the rollout time went (decode
# steps by width, steps that evaluated prompts and observations, sampling, idle). The process is
# stopped once the report is printed, before the update, so a comparison of rollout schedules
# takes minutes a run instead of `scripts/bench/rl.sh`'s twelve. The draws differ between runs
# (batched rounding moves the samples), so compare over several seeds. `llama-batched-bench`
# (8 sequences, pp400 tg256, the shape of these rollouts) runs before the first seed and after
# each, as the anchor of the VM's speed at the time.
#   scripts/bench/rl-rollouts.sh CATENA [CATENA ...]
# SEEDS (default "3 4 5"), RL_FLAGS: more `catena train rl` flags for every binary. Tokens/s
# counts every token the scheduler sampled (its `sampled_tokens`) over the time its report
# accounts for (decode steps, prompt and observation steps, sampling, idle), which is the
# step's `rollout_seconds` to within a second. From the scheduler's trace line a step and the
# sandbox's line a program it also prints what the decode steps that ran beside a program cost
# over steps of the same width alone, the steps alone by width (steps that copied a KV stream
# left out), and what the prompt and observation steps cost over steps of their width alone.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
[ "$#" -ge 1 ] || die "usage: scripts/bench/rl-rollouts.sh CATENA [CATENA ...]" 2
bins=()
for bin in "$@"; do bins+=("$(realpath "$bin")"); done
batched_bin="$(cd "$root" && scripts/setup/llama-tool.sh batched-bench llama-batched-bench)"
model="$(default_model "${bins[0]}")"
threads="$(physical_cores)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${bins[0]}" train synth --out "$work/tasks" --train 0 --held-out 50 --seed 99 >/dev/null

anchor() {
  "$batched_bin" -m "$model" -c 8192 -b 512 -ub 512 -npp 400 -ntg 256 -npl 8 -t "$threads" \
    --output-format jsonl 2>/dev/null | grep '^{' |
    python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("llama-batched-bench, 8 sequences, pp400 tg256: S_TG %.1f, S_PP %.1f tokens/s" % (r["speed_tg"], r["speed_pp"]))'
}

anchor
for seed in ${SEEDS:-3 4 5}; do
  for i in "${!bins[@]}"; do
    run="$work/run-$i-$seed"
    # shellcheck disable=SC2086 # RL_FLAGS is a list of flags
    RUST_LOG=catena_engine=trace,catena_sandbox=debug "${bins[$i]}" train rl --json --adapter catena-coa-0.5b \
      --tasks "$work/tasks/held-out.jsonl" --out "$run" --group 8 --batch-prompts 4 --steps 1 \
      --max-tokens 384 --seed "$seed" ${RL_FLAGS:-} > "$run.jsonl" 2> "$run.log" &
    pid=$!
    until grep -qs "batch scheduler ends" "$run.log" || ! kill -0 "$pid" 2>/dev/null; do sleep 2; done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    python3 - "$run.log" "$run.jsonl" "$(basename "${bins[$i]}")" "$seed" <<'PY'
import json, re, sys
log, events, name, seed = sys.argv[1:]
lines = [l for l in open(log) if "batch scheduler ends" in l]
if not lines:
    tail = "".join(open(log).readlines()[-5:])
    sys.exit(f"{name} seed {seed}: the run ended without the scheduler's report:\n{tail}")
line = lines[0]
def seconds(text):
    value, unit = re.fullmatch(r"([\d.]+)(ns|µs|ms|s)", text).groups()
    return float(value) * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
head, tail = line.split("with_prefill")
by_width = [(seconds(t), int(n)) for t, n in re.findall(r"\(([\d.]+(?:ns|µs|ms|s)), (\d+)\)", head)]
field = lambda name: re.search(name + r": ([^,}]+)", tail).group(1).strip()
prefill_time = seconds(re.search(r"\(([^,]+), \d+\)", tail).group(1))
sampled = int(field("sampled_tokens"))
sampling, idle = seconds(field("sampling")), seconds(field("idle"))
decode = sum(t for t, _ in by_width)
steps = sum(n for _, n in by_width)
width = sum(w * n for w, (_, n) in enumerate(by_width)) / max(steps, 1)
narrow = sum(t for w, (t, _) in enumerate(by_width) if w < 8)
total = decode + prefill_time + sampling + idle
groups = [e for e in map(json.loads, open(events)) if e.get("event") == "group"]
per_width = ", ".join(f"{w}: {1000 * t / n:.0f}" for w, (t, n) in enumerate(by_width) if n and w in (1, 2, 4, 8, 16, 24, 32))
# Decode steps of one token a sequence that moved no KV stream, split by whether a sandbox
# program ran during them (the two share the cores): from the per-step trace lines and the
# sandbox's "program ran".
def stamp(line):
    from datetime import datetime
    return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
steps, programs, prefill_steps = [], [], []
for l in open(log):
    if "decode step" in l:
        n, tokens, copies, us = (int(re.search(k + r"=(\d+)", l).group(1))
                                 for k in ("sequences", "tokens", "stream_copies", "micros"))
        if n == tokens and copies == 0:
            end = stamp(l)
            steps.append((end - us / 1e6, end, n))
        elif tokens > n:
            prefill_steps.append((n, tokens, us))
    elif "program ran" in l:
        end = stamp(l)
        programs.append((end - int(re.search(r"micros=(\d+)", l).group(1)) / 1e6, end))
def beside(start, end):
    return any(a < end and start < b for a, b in programs)
split = {}
for start, end, n in steps:
    alone, shared = split.setdefault(n, ([], []))
    (shared if beside(start, end) else alone).append(end - start)
# What the steps beside a program cost over steps of the same width alone.
mean = lambda xs: sum(xs) / len(xs)
paired = [(t, mean(split[n][0])) for n in split for t in split[n][1] if split[n][0]]
extra = sum(t - alone for t, alone in paired)
ratio = sum(t for t, _ in paired) / max(sum(alone for _, alone in paired), 1e-9)
program_seconds = sum(b - a for a, b in programs)
print(f"{name} seed {seed}: {len(programs)} programs ran, {program_seconds:.1f} s; "
      f"{len(paired)} decode steps beside them took {ratio:.2f}x the same widths' steps alone "
      f"({extra:.1f} s more); steps alone, ms by width: "
      + ", ".join(f"{n}: {1000 * mean(split[n][0]):.0f}" for n in sorted(split) if n in (1, 2, 4, 8, 16, 24, 32) and split[n][0]))
# Steps that evaluated a prompt or an observation, over decode steps of the same width alone:
# what evaluating those tokens cost.
widths = {n: mean(split[n][0]) for n in split if split[n][0]}
with_prefill = [(n, us / 1e6) for n, tokens, us in prefill_steps if n in widths]
prefill_extra = sum(t - widths[n] for n, t in with_prefill)
print(f"{name} seed {seed}: {len(with_prefill)} prompt and observation steps "
      f"({len(prefill_steps) - len(with_prefill)} left out, no step of their width ran alone) took {prefill_extra:.1f} s "
      f"more than decode steps of their widths alone: {int(field('prefill_tokens')) / max(prefill_extra, 1e-9):.0f} "
      f"prompt and observation tokens/s")
print(f"{name} seed {seed}: {len(groups)} groups ({sum(not g['kept'] for g in groups)} dropped), {sampled} tokens sampled in "
      f"{total:.1f} s: {sampled / total:.1f} tokens/s; mean width {width:.1f}; decode {decode:.1f} s "
      f"({narrow:.1f} s under 8 wide), prompt and observation steps {prefill_time:.1f} s "
      f"({field('prefill_tokens')} tokens), sampling {sampling:.1f} s, idle {idle:.1f} s, "
      f"stream copies {field('stream_copies')}; ms a step by width: {per_width}")
PY
  done
  anchor
done
