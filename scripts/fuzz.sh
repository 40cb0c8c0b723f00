#!/usr/bin/env bash
# Fuzzes the parsers that take untrusted bytes: the streaming trajectory parser (model output)
# and the GGUF header reader (model files). Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
# cargo-fuzz drives libFuzzer with flags that are unstable in rustc; on the stable toolchain
# RUSTC_BOOTSTRAP=1 lets it use them for this build only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz@0.13.2
cd "$root/fuzz"
log="$(mktemp)"
for target in trajectory_parser gguf_header; do
  echo "fuzzing $target for ${seconds}s" >&2
  # libFuzzer exits non-zero on a crash or a panic, and prints the input that caused it.
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run --release "$target" -- -max_total_time="$seconds" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzzing $target found a failure (the input is under fuzz/artifacts/$target/)" >&2
    exit 1
  fi
  grep -E "^Done [0-9]+ runs" "$log" >&2
done
