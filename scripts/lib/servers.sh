# The two servers the client benchmarks compare, started side by side on loopback on the same GGUF:
# llama.cpp's own llama-server (built from the vendored sources by scripts/setup/llama-tool.sh,
# with --jinja: the model's own chat template, tools included) and `catena serve`. Sourced after
# common.sh by scripts/bench/bfcl.sh and scripts/bench/coding-agents.sh; it only defines things.
#
# Both servers answer to the same model id (the GGUF's file stem) and the same API key, so one
# client configuration serves both and only the base URL differs. Each start_* records the child's
# pid in server_pids; stop_servers ends exactly those.

server_pids=()

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready NAME PORT PID LOG: until GET /health answers 200, or die when the process is gone or
# two minutes have passed.
wait_ready() {
  local name="$1" port="$2" pid="$3" log="$4"
  for _ in $(seq 600); do
    curl -fs -m 2 "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { tail -20 "$log" >&2; die "$name did not start (log: $log)"; }
    sleep 0.2
  done
  die "$name was not ready in two minutes (log: $log)"
}

# start_llama_server PORT MODEL CTX THREADS KEY LOG: one slot, so that a request gets the whole
# context as it does from `catena serve` with one kept conversation.
start_llama_server() {
  local port="$1" model="$2" ctx="$3" threads="$4" key="$5" log="$6" bin
  bin="$("$root/scripts/setup/llama-tool.sh" server llama-server)"
  "$bin" -m "$model" --jinja --host 127.0.0.1 --port "$port" -t "$threads" -c "$ctx" -np 1 \
    --alias "$(basename "$model" .gguf)" --api-key "$key" >"$log" 2>&1 &
  server_pids+=($!)
  wait_ready llama-server "$port" $! "$log"
}

# start_catena_serve PORT MODEL CTX THREADS KEY STORE LOG [EXTRA...]: EXTRA goes to `catena serve`
# as is (the benchmarks pass --no-adapter, so that both servers run the very same weights).
start_catena_serve() {
  local port="$1" model="$2" ctx="$3" threads="$4" key="$5" store="$6" log="$7"
  shift 7
  CATENA_API_KEY="$key" "$(catena_bin)" serve --model "$model" --port "$port" --ctx-size "$ctx" \
    --threads "$threads" --store-dir "$store" --sessions 1 "$@" >"$log" 2>&1 &
  server_pids+=($!)
  wait_ready "catena serve" "$port" $! "$log"
}

stop_servers() {
  local pid
  for pid in "${server_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pids=()
}
