#!/usr/bin/env bash
# llama.cpp's Vulkan backend on Mesa's lavapipe (a Vulkan driver that runs on the CPU) against the
# same binary's CPU backend: `catena bench` prompt processing (pp) and generation (tg) with every
# layer on the Vulkan device, and with none, in alternating rounds, each round's ratio
# Vulkan / CPU, and their median. On a machine with a real GPU, --device INDEX names it instead of
# lavapipe (`catena doctor` lists the Vulkan devices).
#
# Usage: scripts/bench/vulkan.sh [--prompt N] [--gen N] [--rounds N] [--device INDEX]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
prompt=64
gen=16
rounds=3
device=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    *) die "unknown argument $1" 2 ;;
  esac
done
catena="$(catena_bin)"
vulkan_env=(GGML_VK_VISIBLE_DEVICES="${device:-0}")
if [ -z "$device" ]; then
  icd="/usr/share/vulkan/icd.d/lvp_icd.$(uname -m).json"
  [ -f "$icd" ] || die "no lavapipe ($icd): scripts/setup/packages.sh --tests installs it"
  vulkan_env+=(VK_DRIVER_FILES="$icd")
fi

bench() { # bench GPU_LAYERS [ENV...]: "pp tg" tokens/s
  local layers="$1"
  shift
  env "$@" "$catena" bench -p "$prompt" -n "$gen" -r 1 --gpu-layers "$layers" --json 2>/dev/null \
    | python3 -c 'import json,sys; t={x["test"][:2]: x["tokens_per_s"] for x in json.load(sys.stdin)["tests"]}; print(t["pp"], t["tg"])'
}

echo "round  cpu pp$prompt  vulkan pp$prompt  ratio  |  cpu tg$gen  vulkan tg$gen  ratio"
ratios=()
for round in $(seq 1 "$rounds"); do
  read -r cpu_pp cpu_tg < <(bench 0)
  read -r vk_pp vk_tg < <(bench 99 "${vulkan_env[@]}")
  line="$(python3 -c "import sys; c,v,ct,vt=map(float,sys.argv[1:]); print(f'{c:9.2f}  {v:13.2f}  {v/c:5.3f}  |  {ct:9.2f}  {vt:12.2f}  {vt/ct:5.3f}')" "$cpu_pp" "$vk_pp" "$cpu_tg" "$vk_tg")"
  echo "$round      $line"
  ratios+=("$line")
done
printf '%s\n' "${ratios[@]}" | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin]
pp = statistics.median(float(r[2]) for r in rows)
tg = statistics.median(float(r[6]) for r in rows)
print(f"median ratio Vulkan / CPU: pp {pp:.3f}, tg {tg:.3f}")'
