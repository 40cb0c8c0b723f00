#!/usr/bin/env bash
# Many sequences decoded together: Catena's batched engine (`catena bench --sequences`) against
# llama.cpp's own `llama-batched-bench`, built here from the SAME vendored llama.cpp the
# llama-cpp-sys-2 crate compiles into Catena, on the same model, threads and sizes. The figure
# is aggregate generation (all sequences' generated tokens per second of generation) and the
# ratio catena / llama-batched-bench at each sequence count.
#
# The two run in alternating rounds and the ratio is taken per round, so a shared machine whose
# speed drifts shifts both sides alike; the table gives the median of the per-round ratios.
#
# Usage: scripts/bench/batched.sh [--model PATH] [--threads N] [--rounds N] [--npl 1,4,8,16]
#                                 [--pp 128] [--tg 128] [--gpu]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
cd "$root"
model="" rounds=3 npl="1,4,8,16" pp=128 tg=128 gpu=0
threads="$(physical_cores)"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --npl) npl="$2"; shift 2 ;;
    --pp) pp="$2"; shift 2 ;;
    --tg) tg="$2"; shift 2 ;;
    --gpu) gpu=1; shift ;;
    *) die "unknown argument $1" 2 ;;
  esac
done

scripts/setup/packages.sh
features=() gpu_flag=() ngl=0
if [ "$gpu" = 1 ]; then features=(--features cuda) gpu_flag=(--gpu) ngl=99; fi
cargo build --release --locked -p catena-cli "${features[@]}" >&2
catena="$target/release/catena"
if [ -z "$model" ]; then
  model="$(default_model "$catena")"
fi
anchor_bin="$(scripts/setup/llama-tool.sh "${gpu_flag[@]}" batched-bench llama-batched-bench)"

largest="$(tr ',' '\n' <<<"$npl" | sort -n | tail -n 1)"
ctx=$(((pp + tg + 16) * largest))
echo "Batched generation: model $(basename "$model"), $threads threads, pp$pp tg$tg, sequences $npl, $rounds rounds" >&2
rounds_file="$(mktemp)"
for round in $(seq "$rounds"); do
  echo "  round $round" >&2
  # One batch of up to 512 tokens a step, as Catena's sessions use.
  anchor="$("$anchor_bin" -m "$model" -c "$ctx" -b 512 -ub 512 -npp "$pp" -ntg "$tg" -npl "$npl" \
    -t "$threads" -ngl "$ngl" --output-format jsonl 2>/dev/null)"
  ours="$("$catena" bench --model "$model" -p "$pp" -n "$tg" -r 1 -t "$threads" \
    --gpu-layers "$ngl" --sequences "$npl" --json)"
  python3 - "$anchor" "$ours" >>"$rounds_file" <<'EOF'
import json, sys
anchor = {}
for line in sys.argv[1].splitlines():
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        anchor[str(r["pl"])] = r["speed_tg"]
ours = {str(t["sequences"]): t["tokens_per_s"] for t in json.loads(sys.argv[2])["tests"]}
print(json.dumps({"anchor": anchor, "catena": ours}))
EOF
done

python3 - "$rounds_file" "$npl" <<'EOF'
import json, statistics, sys
rounds = [json.loads(line) for line in open(sys.argv[1])]
print("| sequences | llama-batched-bench S_TG (tok/s, per round) | catena (tok/s, per round) | ratio per round | median ratio |")
print("|---|---|---|---|---|")
for n in sys.argv[2].split(","):
    a = [r["anchor"][n] for r in rounds]
    c = [r["catena"][n] for r in rounds]
    ratios = [x / y for x, y in zip(c, a)]
    fmt = lambda xs, d: ", ".join(f"{x:.{d}f}" for x in xs)
    print(f"| {n} | {fmt(a, 1)} | {fmt(c, 1)} | {fmt(ratios, 3)} | **{statistics.median(ratios):.3f}** |")
EOF
