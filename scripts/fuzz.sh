#!/usr/bin/env bash
# Fuzzes the parsers that take untrusted bytes: the streaming trajectory parser (model output),
# the GGUF header reader (model files), the checkpoint converter's config and vocabulary reader
# (config.json and tokenizer.json from a model hub) and the ZIM reader (offline archives). Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
# cargo-fuzz drives libFuzzer with flags that are unstable in rustc; on the stable toolchain
# RUSTC_BOOTSTRAP=1 lets it use them for this build only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz@0.13.2
cd "$root/fuzz"
log="$(mktemp)"
for target in trajectory_parser gguf_header convert_config zim_reader; do
  echo "fuzzing $target for ${seconds}s" >&2
  # libFuzzer exits non-zero on a crash or a panic, and prints the input that caused it.
  # A target with seeds (fuzz/seeds/TARGET: a valid file to start from) reads them beside its
  # corpus; libFuzzer writes what it finds into the first folder.
  corpus=()
  if [ -d "seeds/$target" ]; then
    mkdir -p "corpus/$target"
    corpus=("corpus/$target" "seeds/$target")
  fi
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run --release "$target" "${corpus[@]}" -- -max_total_time="$seconds" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzzing $target found a failure (the input is under fuzz/artifacts/$target/)" >&2
    exit 1
  fi
  grep -E "^Done [0-9]+ runs" "$log" >&2
done
