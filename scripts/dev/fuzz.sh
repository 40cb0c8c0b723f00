#!/usr/bin/env bash
# Fuzzes the parsers that take untrusted bytes: the streaming trajectory parser (model output),
# the GGUF header reader (model files), the checkpoint converter's config and vocabulary reader
# (config.json and tokenizer.json from a model hub) and the whole converter on a checkpoint
# folder (its weights too: what it accepts must convert into a GGUF file Catena finds usable),
# the ZIM reader (offline archives), the readers of web pages and PDFs (crawled pages, the
# user's documents), and the tool-call readers of each model family (a model's answer streamed
# to an API client).
#   scripts/dev/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
# cargo-fuzz drives libFuzzer with flags that are unstable in rustc; on the stable toolchain
# RUSTC_BOOTSTRAP=1 lets it use them for this build only.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz@0.13.2
cd "$root/fuzz"
log="$(mktemp)"
for fuzz_target in trajectory_parser gguf_header convert_config checkpoint_open zim_reader html_page pdf_text call_stream; do
  echo "fuzzing $fuzz_target for ${seconds}s" >&2
  # libFuzzer exits non-zero on a crash or a panic, and prints the input that caused it.
  # A target with seeds (fuzz/seeds/TARGET: a valid file to start from) reads them beside its
  # corpus; libFuzzer writes what it finds into the first folder.
  corpus=()
  if [ -d "seeds/$fuzz_target" ]; then
    mkdir -p "corpus/$fuzz_target"
    corpus=("corpus/$fuzz_target" "seeds/$fuzz_target")
  fi
  # One input running past half the target's time is a hang (libFuzzer's own default waits 20
  # minutes for one, past the time given: a PDF page that was its own parent was found that way).
  unit_limit=$(( seconds / 2 > 1 ? seconds / 2 : 1 ))
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run --release "$fuzz_target" "${corpus[@]}" -- \
      -max_total_time="$seconds" -timeout="$unit_limit" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "fuzzing $fuzz_target found a failure (the input is under fuzz/artifacts/$fuzz_target/)"
  fi
  grep -E "^Done [0-9]+ runs" "$log" >&2
done
