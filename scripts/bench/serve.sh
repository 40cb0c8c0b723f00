#!/usr/bin/env bash
# The local server under load, with parallel slots: `catena serve --parallel N` against llama.cpp's
# own `llama-server -np N`, built from the SAME vendored llama.cpp (scripts/setup/llama-tool.sh), on
# the same model, threads, per-slot context and client load (scripts/bench/loadtest.py: CLIENTS
# concurrent clients of the official OpenAI client, each sending REQUESTS greedy chat completions of
# at most MAX_TOKENS tokens one after another). `catena serve` with one slot is measured beside
# them, as the figure parallel slots are meant to beat.
#
# The servers run in alternating rounds, one at a time, so a shared machine whose speed drifts
# shifts all alike; each round prints completions/s and latency percentiles, and the ratio
# catena / llama-server of completions/s per round.
#
# Usage: scripts/bench/serve.sh [--parallel 4] [--clients 16] [--requests 4] [--max-tokens 32]
#                               [--rounds 2] [--ctx 4096] [--model PATH] [--out DIR]
# CATENA_BIN picks a built catena (default: the release build, built if missing).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
. "$root/scripts/lib/servers.sh"
cd "$root"
parallel=4 clients=16 requests=4 max_tokens=32 rounds=2 ctx=4096 model="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --parallel) parallel="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --ctx) ctx="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) die "unknown argument $1" 2 ;;
  esac
done
threads="$(physical_cores)"

catena="$(catena_bin)"
llama_server="$(scripts/setup/llama-tool.sh server llama-server)"
if [ -z "$model" ]; then
  model="$(default_model "$catena")"
fi
out="${out:-$(mktemp -d)}"
mkdir -p "$out"

# The official OpenAI client, as the test suite pins it.
venv="$out/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt
fi

# Waits for URL/health, then runs the load; prints the summary line. Args: NAME PORT MODEL_ID PID
load() {
  local name="$1" port="$2" id="$3" pid="$4"
  for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "$name did not start" >&2; return 1; }
    sleep 0.2
  done
  "$venv/bin/python" scripts/bench/loadtest.py --base-url "http://127.0.0.1:$port/v1" \
    --model "$id" --clients "$clients" --requests "$requests" --max-tokens "$max_tokens" \
    --out "$out/$name-round$round.jsonl" >"$out/$name-round$round.json"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

catena_serve() { # NAME SLOTS
  local port store
  port="$(free_port)" store="$out/store-$1-$round"
  local slots=(--parallel "$2")
  [ "$2" = 1 ] && slots=(--sessions 4)
  "$catena" serve --model "$model" --port "$port" --ctx-size "$ctx" --threads "$threads" \
    --store-dir "$store" "${slots[@]}" >"$out/$1.log" 2>&1 &
  load "$1" "$port" "$(basename "$model" .gguf)" $!
}

llama() {
  local port
  port="$(free_port)"
  "$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" \
    -c $((ctx * parallel)) -np "$parallel" >"$out/llama-server.log" 2>&1 &
  load llama-server "$port" model $!
}

summary() { # FILE
  python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
l = s["ok_latency_s"]
print(f'{s["completions_per_s"]:.3f} completions/s  ok {s["ok"]}/{s["requests"]}  errors {s["errors"]}'
      f'  latency p50 {l["p50"]:.2f} p90 {l["p90"]:.2f} max {l["max"]:.2f} s')
PY
}

echo "model $(basename "$model"), $threads threads, $clients clients x $requests requests," \
  "max_tokens $max_tokens, $parallel slots of $ctx tokens; results in $out"
for round in $(seq "$rounds"); do
  catena_serve "catena-parallel$parallel" "$parallel"
  llama
  catena_serve catena-one-slot 1
  for name in "catena-parallel$parallel" llama-server catena-one-slot; do
    printf 'round %s  %-20s %s\n' "$round" "$name" "$(summary "$out/$name-round$round.json")"
  done
  python3 - "$out/catena-parallel$parallel-round$round.json" "$out/llama-server-round$round.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["completions_per_s"] for p in sys.argv[1:])
print(f"round ratio catena / llama-server (completions/s): {a / b:.3f}")
PY
done
