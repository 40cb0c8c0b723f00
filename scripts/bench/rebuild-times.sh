#!/usr/bin/env bash
# What an edit costs in a warm target folder: builds the `catena` binary of the checkout TREE
# (every .rs file touched first, so nothing another checkout built is taken for this one), then
# ROUNDS times touches FILE and times the rebuild. Unlike build-times.sh it keeps the target
# folder, so it measures only the crates an edit in FILE makes cargo rebuild.
# Usage (docs/BENCHMARKS.md): scripts/bench/rebuild-times.sh TREE FILE [ROUNDS]
set -euo pipefail
tree=$1 file=$2 rounds=${3:-3}
export CCACHE_DISABLE=1
cd "$tree"
build() { cargo build --release --locked -p catena-cli --bin catena >/dev/null 2>&1; }
git ls-files '*.rs' | xargs touch
build
for round in $(seq "$rounds"); do
  sleep 1
  touch "$file"
  s=$(date +%s.%N); build; e=$(date +%s.%N)
  echo "$tree, round $round, after touching $file: $(echo "$e - $s" | bc) s"
done
