#!/usr/bin/env bash
# Times a clean release build of the `catena` binary into TARGET_DIR (emptied first), then a
# rebuild after touching each FILE, one at a time: what an edit in that place costs on this
# machine. C/C++ compiler caches are switched off so llama.cpp is compiled every time.
# Usage, from the repository root (docs/BENCHMARKS.md):
#   scripts/bench/build-times.sh TARGET_DIR FILE...
set -euo pipefail
target=$1; shift
export CARGO_TARGET_DIR=$target CCACHE_DISABLE=1
build() { cargo build --release --locked -p catena-cli --bin catena >/dev/null 2>&1; }
secs() { local s e; s=$(date +%s.%N); build; e=$(date +%s.%N); printf '%.0f' "$(echo "$e - $s" | bc)"; }
rm -rf "$target"
cargo fetch --locked >/dev/null
echo "clean build: $(secs) s"
for f in "$@"; do
  sleep 1; touch "$f"
  echo "after touching $f: $(secs) s"
done
