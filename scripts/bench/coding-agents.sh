#!/usr/bin/env bash
# Real coding agents, headless, against local servers on loopback: OpenAI's Codex CLI (the
# Responses API), opencode (chat completions with tools, through @ai-sdk/openai-compatible) and
# aider (chat completions, its own edit format), each given a tiny repository with a one-character
# bug and a failing unittest (scripts/bench/coding-agents/fixture) and one line of task. Each
# client runs ATTEMPTS times against each server (llama-server --jinja and `catena serve`, same
# GGUF, started side by side; the attempts interleave the servers, so a machine whose speed drifts
# affects both alike).
#
# Per attempt it records two things: whether the client ended without a protocol error (its exit
# status, and no error in its own output: the client is the wire check), and whether the fixture's
# ORIGINAL tests pass afterwards (the test file is put back first, so an agent that edits the test
# does not count). A weak model rarely fixes the bug; the protocol must hold every time.
#
# The clients are installed once, pinned, into the cache folder (npm and a Python venv there,
# nothing global), and every client's configuration and state live in the attempt's own folder:
# the configuration files written below are the ones the README quotes.
#
# Usage: scripts/bench/coding-agents.sh [--attempts 3] [--servers llama,catena]
#          [--clients codex,opencode,aider] [--ctx 16384] [--timeout 900] [--model PATH] [--out DIR]
# CATENA_BIN picks a built catena (default: the release build, built if missing).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
. "$root/scripts/lib/servers.sh"
codex_version=0.171.0 opencode_version=1.18.33 aider_version=0.86.2
attempts=3 servers=llama,catena clients=codex,opencode,aider ctx=16384 timeout_s=900 model="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --attempts) attempts="$2"; shift 2 ;;
    --servers) servers="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --ctx) ctx="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --model) model="$(realpath "$2")"; shift 2 ;;
    --out) mkdir -p "$2"; out="$(realpath "$2")"; shift 2 ;;
    *) die "unknown argument $1" 2 ;;
  esac
done
cd "$root"
fixture="$root/scripts/bench/coding-agents/fixture"
task="Fix the bug in calc.py so the tests pass"
# Codex keeps helper binaries out of temporary folders, so the default output is in the cache.
bench_cache="${CATENA_BENCH_CACHE:-$HOME/.cache/catena-bench}"
out="${out:-$bench_cache/coding-agents/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
threads="$(physical_cores)"

# The clients, pinned, in the cache folder.
tools="$bench_cache/clients-codex$codex_version-opencode$opencode_version-aider$aider_version"
if [ ! -x "$tools/npm/node_modules/.bin/codex" ] || [ ! -x "$tools/npm/node_modules/.bin/opencode" ]; then
  step "installing @openai/codex $codex_version and opencode-ai $opencode_version"
  mkdir -p "$tools/npm"
  (cd "$tools/npm" && [ -f package.json ] || echo '{"private": true}' >package.json)
  # opencode-ai's postinstall only links the platform binary, which its launcher finds without it.
  npm install --prefix "$tools/npm" --no-fund --no-audit --save-exact \
    "@openai/codex@$codex_version" "opencode-ai@$opencode_version" >&2
fi
if [ ! -x "$tools/aider/bin/aider" ]; then
  step "installing aider-chat $aider_version"
  python3 -m venv "$tools/aider"
  "$tools/aider/bin/pip" install -q --disable-pip-version-check "aider-chat==$aider_version" >&2
fi
codex="$tools/npm/node_modules/.bin/codex" opencode="$tools/npm/node_modules/.bin/opencode"
aider="$tools/aider/bin/aider"

if [ -z "$model" ]; then
  model="$(default_model "$(catena_bin)")"
fi
model_id="$(basename "$model" .gguf)"
key="bench-$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
trap stop_servers EXIT
declare -A base
for server in ${servers//,/ }; do
  port="$(free_port)"
  case "$server" in
    llama) start_llama_server "$port" "$model" "$ctx" "$threads" "$key" "$out/llama-server.log" ;;
    catena)
      start_catena_serve "$port" "$model" "$ctx" "$threads" "$key" "$out/store" "$out/catena.log" \
        --no-adapter
      ;;
    *) die "unknown server $server (llama or catena)" 2 ;;
  esac
  base[$server]="http://127.0.0.1:$port/v1"
done

# Each client's configuration, in the attempt's folder $dir (the repository is $dir/repo).
configure_codex() { # DIR BASE
  mkdir -p "$1/codex-home"
  cat >"$1/codex-home/config.toml" <<EOF
model = "$model_id"
model_provider = "local"

[model_providers.local]
name = "Local server"
base_url = "$2"
wire_api = "responses"
env_key = "LOCAL_API_KEY"
EOF
}

configure_opencode() { # DIR BASE
  cat >"$1/opencode.json" <<EOF
{
  "autoupdate": false,
  "share": "disabled",
  "model": "local/$model_id",
  "provider": {
    "local": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "Local server",
      "options": { "baseURL": "$2", "apiKey": "{env:LOCAL_API_KEY}" },
      "models": { "$model_id": { "name": "$model_id" } }
    }
  }
}
EOF
}

# run_client CLIENT DIR BASE: runs one attempt in DIR/repo; output in DIR/out.txt (stdout and
# stderr); prints the exit status.
run_client() {
  local client="$1" dir="$2" url="$3" status=0
  cd "$dir/repo"
  case "$client" in
    codex)
      configure_codex "$dir" "$url"
      CODEX_HOME="$dir/codex-home" LOCAL_API_KEY="$key" timeout "$timeout_s" "$codex" exec \
        --json --color never --ephemeral --skip-git-repo-check -s workspace-write "$task" \
        </dev/null >"$dir/out.txt" 2>&1 || status=$?
      ;;
    opencode)
      configure_opencode "$dir" "$url"
      # Its own folders for configuration, data and cache, and no fetches besides the model's:
      # no model catalogue, no update check, no default plugins, no language servers.
      XDG_CONFIG_HOME="$dir/xdg/config" XDG_DATA_HOME="$dir/xdg/data" \
        XDG_CACHE_HOME="$dir/xdg/cache" XDG_STATE_HOME="$dir/xdg/state" \
        OPENCODE_CONFIG="$dir/opencode.json" OPENCODE_DISABLE_MODELS_FETCH=true \
        OPENCODE_DISABLE_AUTOUPDATE=true OPENCODE_DISABLE_DEFAULT_PLUGINS=true \
        OPENCODE_DISABLE_LSP_DOWNLOAD=true LOCAL_API_KEY="$key" \
        timeout "$timeout_s" "$opencode" run --format json --print-logs --log-level WARN --auto \
        "$task" </dev/null >"$dir/out.txt" 2>&1 || status=$?
      ;;
    aider)
      # aider fetches a model price list on start unless its cache holds one less than a day old:
      # the copy litellm ships stands in for it.
      mkdir -p "$dir/home/.aider/caches"
      cp "$("$tools/aider/bin/python" -c 'import litellm, os; print(os.path.dirname(litellm.__file__))')/model_prices_and_context_window_backup.json" \
        "$dir/home/.aider/caches/model_prices_and_context_window.json"
      HOME="$dir/home" timeout "$timeout_s" "$aider" --yes-always --no-git --no-check-update \
        --analytics-disable --no-show-model-warnings --no-pretty --no-fancy-input \
        --model "openai/$model_id" --openai-api-base "$url" --openai-api-key "$key" \
        --message "$task" calc.py test_calc.py </dev/null >"$dir/out.txt" 2>&1 || status=$?
      ;;
  esac
  cd "$root"
  echo "$status"
}

# protocol_error CLIENT FILE: the first error the client reported, or nothing. Each client's own
# error reports: codex's JSON events of type error or turn.failed, and error items other than its
# notice that it knows no metadata for a local model's name (printed for any model id it does not
# know, before any request); opencode's JSON error events and ERROR log lines; aider's (litellm's)
# exceptions and tracebacks.
protocol_error() {
  case "$1" in
    codex)
      grep -v 'Model metadata for .* not found' "$2" |
        grep -m1 -E '"type":"(error|turn\.failed)"|^ERROR|stream disconnected|unexpected status' || true
      ;;
    opencode) grep -m1 -E '"type":"error"|level=ERROR|AI_[A-Za-z]*Error' "$2" || true ;;
    aider) grep -m1 -E 'litellm\.[A-Za-z]*Error|Traceback|APIError|BadRequestError|APIConnectionError' "$2" || true ;;
  esac
}

results="$out/results.tsv"
printf 'server\tclient\tattempt\texit\tprotocol\ttests_pass\tseconds\terror\n' >"$results"
echo "model $model_id, ctx $ctx, $threads threads, $attempts attempts; servers: ${!base[*]}; logs in $out"
for attempt in $(seq "$attempts"); do
  for client in ${clients//,/ }; do
    for server in ${servers//,/ }; do
      dir="$out/$server/$client/$attempt"
      mkdir -p "$dir/repo"
      cp "$fixture"/*.py "$dir/repo/"
      git -C "$dir/repo" init -q
      git -C "$dir/repo" add .
      git -C "$dir/repo" -c user.name=bench -c user.email=bench@localhost commit -qm fixture
      started=$SECONDS
      status="$(run_client "$client" "$dir" "${base[$server]}")"
      seconds=$((SECONDS - started))
      error="$(protocol_error "$client" "$dir/out.txt" | cut -c1-200 | tr '\t' ' ')"
      # A client stopped by the time limit reported no error of its own: it is counted apart,
      # neither as a held protocol nor as a broken one.
      if [ -n "$error" ]; then
        protocol=error
      elif [ "$status" = 124 ]; then
        protocol=timeout
      elif [ "$status" = 0 ]; then
        protocol=ok
      else
        protocol=error error="exit status $status"
      fi
      cp "$fixture/test_calc.py" "$dir/repo/test_calc.py"
      tests_pass=no
      (cd "$dir/repo" && timeout 60 python3 -m unittest -q test_calc >"$dir/tests.txt" 2>&1) && tests_pass=yes
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$server" "$client" "$attempt" "$status" \
        "$protocol" "$tests_pass" "$seconds" "$error" >>"$results"
      echo "attempt $attempt $client on $server: exit $status, protocol $protocol, tests pass $tests_pass, ${seconds}s ${error:+($error)}"
    done
  done
done

python3 - "$results" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("| client | server | attempts | protocol ok | protocol error | timed out | tests pass | median s |")
print("|---|---|---|---|---|---|---|---|")
for client in dict.fromkeys(r["client"] for r in rows):
    for server in dict.fromkeys(r["server"] for r in rows):
        rs = [r for r in rows if r["client"] == client and r["server"] == server]
        if rs:
            count = {k: sum(r["protocol"] == k for r in rs) for k in ("ok", "error", "timeout")}
            passed = sum(r["tests_pass"] == "yes" for r in rs)
            median = statistics.median(int(r["seconds"]) for r in rs)
            print(
                f"| {client} | {server} | {len(rs)} | {count['ok']} | {count['error']} | {count['timeout']} "
                f"| {passed}/{len(rs)} | {median:.0f} |"
            )
PY
