#!/usr/bin/env bash
# Fuzzes the parsers that take untrusted bytes: the streaming trajectory parser (model output),
# the GGUF header reader (model files), the checkpoint converter's config and vocabulary reader
# (config.json and tokenizer.json from a model hub) and the whole converter on a checkpoint
# folder (its weights too: what it accepts must convert into a GGUF file Catena finds usable),
# the ZIM reader (offline archives), the readers of web pages and PDFs (crawled pages, the
# user's documents), and the tool-call readers of each model family (a model's answer streamed
# to an API client).
#   scripts/dev/fuzz.sh [SECONDS_PER_TARGET]   (default 60; the targets run side by side, one
#                                             per core: libFuzzer runs on one)
#   scripts/dev/fuzz.sh --build                builds the targets only (the test command starts
#                                             this beside its tests, on CPU time they leave idle)
# cargo-fuzz drives libFuzzer with flags that are unstable in rustc; on the stable toolchain
# RUSTC_BOOTSTRAP=1 lets it use them for this build only. Its build folder is one of its own
# (`$target/fuzz`), so it never waits for the workspace's lock.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
targets=(trajectory_parser gguf_header convert_config checkpoint_open zim_reader html_page pdf_text call_stream)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz@0.13.2
export CARGO_TARGET_DIR="$target/fuzz"
cd "$root/fuzz"
if [ "${1:-}" = "--build" ]; then
  # The same options as `cargo fuzz run --release` below, so the runs build nothing again.
  started=$SECONDS
  RUSTC_BOOTSTRAP=1 cargo fuzz build --release
  echo "the fuzz targets built in $(( SECONDS - started )) s"
  exit 0
fi
seconds="${1:-60}"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

# fuzz_one TARGET: fuzzes TARGET for $seconds; its output goes to $logs/TARGET, and
# $logs/TARGET.passed marks a run that found nothing.
fuzz_one() {
  local fuzz_target="$1" corpus=()
  # A target with seeds (fuzz/seeds/TARGET: a valid file to start from) reads them beside its
  # corpus; libFuzzer writes what it finds into the first folder.
  if [ -d "seeds/$fuzz_target" ]; then
    mkdir -p "corpus/$fuzz_target"
    corpus=("corpus/$fuzz_target" "seeds/$fuzz_target")
  fi
  # One input running past half the target's time is a hang (libFuzzer's own default waits 20
  # minutes for one, past the time given: a PDF page that was its own parent was found that way).
  local unit_limit=$(( seconds / 2 > 1 ? seconds / 2 : 1 ))
  # libFuzzer exits non-zero on a crash or a panic, and prints the input that caused it.
  RUSTC_BOOTSTRAP=1 cargo fuzz run --release "$fuzz_target" "${corpus[@]}" -- \
      -max_total_time="$seconds" -timeout="$unit_limit" >"$logs/$fuzz_target" 2>&1
  touch "$logs/$fuzz_target.passed"
}

# In rounds of one target per core (each runs for the same time).
cores="$(physical_cores)"
for (( first = 0; first < ${#targets[@]}; first += cores )); do
  for fuzz_target in "${targets[@]:first:cores}"; do
    echo "fuzzing $fuzz_target for ${seconds}s" >&2
    fuzz_one "$fuzz_target" &
  done
  wait
done
for fuzz_target in "${targets[@]}"; do
  if [ ! -e "$logs/$fuzz_target.passed" ]; then
    tail -n 40 "$logs/$fuzz_target" >&2 || true
    die "fuzzing $fuzz_target found a failure (the input is under fuzz/artifacts/$fuzz_target/)"
  fi
  echo "$fuzz_target: $(grep -E "^Done [0-9]+ runs" "$logs/$fuzz_target")" >&2
done
