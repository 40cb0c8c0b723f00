#!/usr/bin/env bash
# Tool-call accuracy, `catena serve` against llama-server --jinja on the same GGUF: starts both on
# loopback (free ports, one API key), runs scripts/bench/bfcl.py over the Berkeley Function Calling
# Leaderboard's questions (simple, multiple, parallel, irrelevance) with llama-server as the anchor
# and Catena as the candidate, prints the table, and stops both.
#
# The data comes from the bfcl-eval wheel, pinned, downloaded once into the cache folder with pip
# (the wheel only, none of its dependencies: bfcl.py is ours and imports nothing from it).
#
# Usage: scripts/bench/bfcl.sh [--limit 25] [--servers llama,catena] [--ctx 8192] [--model PATH]
#                              [--out DIR]
#   --servers llama: llama-server alone (as the candidate), e.g. before Catena has function calling.
# CATENA_BIN picks a built catena (default: the release build, built if missing).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
. "$root/scripts/lib/servers.sh"
bfcl_version=2026.3.23
limit=25 servers=llama,catena ctx=8192 model="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) limit="$2"; shift 2 ;;
    --servers) servers="$2"; shift 2 ;;
    --ctx) ctx="$2"; shift 2 ;;
    --model) model="$(realpath "$2")"; shift 2 ;;
    --out) mkdir -p "$2"; out="$(realpath "$2")"; shift 2 ;;
    *) die "unknown argument $1" 2 ;;
  esac
done
cd "$root"
out="${out:-$(mktemp -d)}"
threads="$(physical_cores)"

cache="${CATENA_BENCH_CACHE:-$HOME/.cache/catena-bench}/bfcl-eval-$bfcl_version"
data="$cache/wheel/bfcl_eval/data"
if [ ! -d "$data" ]; then
  mkdir -p "$cache"
  python3 -m pip download -q --no-deps --disable-pip-version-check -d "$cache" "bfcl-eval==$bfcl_version"
  python3 -m zipfile -e "$cache/bfcl_eval-$bfcl_version-py3-none-any.whl" "$cache/wheel"
fi

if [ -z "$model" ]; then
  model="$(default_model "$(catena_bin)")"
fi
key="bench-$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
trap stop_servers EXIT
args=()
case ",$servers," in *,llama,*) ;; *) llama=no ;; esac
if [ "${llama:-yes}" = yes ]; then
  port="$(free_port)"
  start_llama_server "$port" "$model" "$ctx" "$threads" "$key" "$out/llama-server.log"
  role=--anchor
  [ "$servers" = llama ] && role=--candidate
  args+=("$role" "http://127.0.0.1:$port/v1")
fi
case ",$servers," in
  *,catena,*)
    port="$(free_port)"
    start_catena_serve "$port" "$model" "$ctx" "$threads" "$key" "$out/store" "$out/catena.log" --no-adapter
    args+=(--candidate "http://127.0.0.1:$port/v1")
    ;;
esac
echo "bfcl-eval $bfcl_version, model $(basename "$model"), $threads threads, $limit questions a category;" \
  "per-question replies in $out"
BFCL_API_KEY="$key" python3 scripts/bench/bfcl.py --data "$data" --limit "$limit" --out "$out" "${args[@]}"
