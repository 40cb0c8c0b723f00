#!/usr/bin/env bash
# Catena's benchmarks, each against a named anchor measured in the same run:
#
#  1. Engine speed: `catena bench` (prompt processing pp and generation tg through Catena's own
#     session code) against llama.cpp's `llama-bench`, built here from the SAME vendored llama.cpp
#     sources the llama-cpp-sys-2 crate compiles into Catena, with the crate's CMake options, on
#     the same model, threads and test sizes. The ratio catena / llama-bench is the figure.
#  2. Sandbox latency: one `<code>` call of `print(1+1)` and of `import numpy`, each in a fresh
#     interpreter, with the compiled module already cached (in-process time per call, and the
#     whole `catena sandbox` process).
#
# The two engines run in alternating rounds (llama-bench, catena, llama-bench, ...), each round
# with --reps repetitions after a warm-up, and the ratio is taken per round, so a machine whose
# speed drifts over minutes (a shared VM) shifts both sides of a ratio alike; the table gives the
# median of the per-round ratios.
#
# Usage: scripts/bench/engine.sh [--model PATH] [--threads N] [--reps N] [--rounds N] [--gpu]
#   --gpu builds llama-bench and Catena with CUDA and offloads all layers.
# llama-bench's sources come from the llama-cpp-python source distribution on PyPI (the crate
# ships llama.cpp without its tools); they compile against the crate's tree.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
cd "$root"
model=""
threads="$(physical_cores)"
reps=1
rounds=10
gpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --gpu) gpu=1; shift ;;
    *) die "unknown argument $1" 2 ;;
  esac
done

scripts/setup/packages.sh
features=()
if [ "$gpu" = 1 ]; then
  features=(--features cuda)
fi
cargo build --release --locked -p catena-cli "${features[@]}" >&2
catena="$target/release/catena"
if [ -z "$model" ]; then
  model="$(default_model "$catena")"
fi

# --- llama-bench from the crate's vendored llama.cpp --------------------------------------------
gpu_flag=()
if [ "$gpu" = 1 ]; then gpu_flag=(--gpu); fi
bench_bin="$(scripts/setup/llama-tool.sh "${gpu_flag[@]}" llama-bench llama-bench)"

ngl=0
if [ "$gpu" = 1 ]; then ngl=99; fi
echo "Engine: model $(basename "$model"), $threads threads, pp512 and tg128, $rounds rounds of $reps" >&2
rounds_file="$(mktemp)"
for round in $(seq "$rounds"); do
  echo "  round $round" >&2
  anchor="$("$bench_bin" -m "$model" -p 512 -n 128 -t "$threads" -r "$reps" -ngl "$ngl" -o json)"
  ours="$("$catena" bench --model "$model" -p 512 -n 128 -t "$threads" -r "$reps" --gpu-layers "$ngl" --json)"
  python3 - "$anchor" "$ours" >>"$rounds_file" <<'EOF'
import json, sys
anchor = {("pp" if r["n_prompt"] else "tg") + str(r["n_prompt"] or r["n_gen"]): r["avg_ts"]
          for r in json.loads(sys.argv[1])}
ours = {t["test"]: t["tokens_per_s"] for t in json.loads(sys.argv[2])["tests"]}
print(json.dumps({"anchor": anchor, "catena": ours}))
EOF
done

# --- sandbox latency ----------------------------------------------------------------------------
"$catena" sandbox 'print("warm")' >/dev/null
print_json="$("$catena" sandbox --repeat 20 --json 'print(1+1)')"
numpy_json="$("$catena" sandbox --repeat 10 --json 'import numpy')"
process_ms="$(python3 - "$catena" <<'EOF'
import subprocess, sys, time
runs = []
for _ in range(10):
    t = time.perf_counter()
    subprocess.run([sys.argv[1], "sandbox", "print(1+1)"], check=True, capture_output=True)
    runs.append((time.perf_counter() - t) * 1e3)
runs.sort()
print(f"{runs[len(runs) // 2]:.1f}")
EOF
)"

python3 - "$rounds_file" "$print_json" "$numpy_json" "$process_ms" <<'EOF'
import json, statistics, sys
rounds_file, p, n, process_ms = sys.argv[1:]
rounds = [json.loads(line) for line in open(rounds_file)]
print("| test | llama-bench (tok/s, per round) | catena (tok/s, per round) | ratio per round | median ratio |")
print("|---|---|---|---|---|")
for test in ("pp512", "tg128"):
    a = [r["anchor"][test] for r in rounds]
    c = [r["catena"][test] for r in rounds]
    ratios = [x / y for x, y in zip(c, a)]
    fmt = lambda xs, d: ", ".join(f"{x:.{d}f}" for x in xs)
    print(f"| {test} | {fmt(a, 1)} | {fmt(c, 1)} | {fmt(ratios, 3)} | **{statistics.median(ratios):.3f}** |")
p, n = json.loads(p), json.loads(n)
print()
print("| sandbox call (warm cache) | median ms | min ms |")
print("|---|---|---|")
print(f"| print(1+1), in process | {p['median_ms']:.1f} | {p['min_ms']:.1f} |")
print(f"| import numpy, in process | {n['median_ms']:.1f} | {n['min_ms']:.1f} |")
print(f"| `catena sandbox 'print(1+1)'`, whole process | {process_ms} | |")
EOF
