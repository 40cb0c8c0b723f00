#!/usr/bin/env bash
# The whole test suite, from a fresh machine: system packages, formatting, lints, the build, the
# real assets (default model, Python runtime, test models; fetched once into the user's data
# directory), then every unit, property and end-to-end test.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$root"

step "system packages"
scripts/setup/packages.sh --tests

step "format"
cargo fmt --all -- --check

step "no import cycles between the modules of a crate (cargo refuses them between crates)"
python3 scripts/dev/module-cycles.py

step "no product function over 100 lines (tests and generated code aside)"
python3 scripts/dev/long-functions.py

step "the CLI's and the desktop's builds are parts of the workspace's (crates/workspace-hack)"
python3 scripts/dev/shared-build.py

step "web UI: type check, unit tests, build (embedded by the cargo build)"
scripts/setup/ui.sh check
scripts/setup/ui.sh build

step "build"
cargo build --release --locked --workspace

step "lint"
cargo clippy --release --locked --workspace --all-targets -- -D warnings

step "assets and the sandbox's compiled CPython"
"$target/release/catena" assets fetch all
"$target/release/catena" sandbox 'print("the sandbox is ready")'

step "llama.cpp's llama-server from the crate's llama.cpp (the remote-engine test's peer)"
scripts/setup/llama-tool.sh server llama-server

step "the fuzz targets' build, started beside the tests on the CPU time they leave idle"
# A quarter of two cores' time went unused while the tests ran (single-threaded tests, waits on
# processes and sockets); the fuzz build is 8 minutes of both on a fresh machine. SCHED_IDLE
# (`chrt --idle`) runs it only when no test wants a core; it still slowed the tests (caches,
# llama.cpp's spinning threads): 2,228 s against 1,870 s, for 3 to 4 minutes saved in all when
# the fuzz build starts from nothing (docs/BENCHMARKS.md). Its own build folder, so it never
# waits for the workspace's lock.
fuzz_build_log="$(mktemp)"
setsid chrt --idle 0 scripts/dev/fuzz.sh --build >"$fuzz_build_log" 2>&1 &
fuzz_build=$!
trap 'kill -- "-$fuzz_build" 2>/dev/null || true' EXIT

step "tests"
# One test at a time: most end-to-end tests run llama.cpp or the trainer on every core, and
# llama.cpp's threads spin at each step's barriers, so two such tests on the same cores stall
# each other (docs/ARCHITECTURE.md, "CPU threads"): with two at once the suite took 50 minutes on
# the 2-core VM, alone each one runs at full speed.
cargo test --release --locked --workspace -- --test-threads=1

step "the GPU check's dry run: scripts/device-check.sh's steps on the CPU backend"
scripts/device-check.sh --cpu

step "web UI end to end (Chromium against catena serve)"
CATENA_BIN="$target/release/catena" scripts/setup/ui.sh e2e

step "desktop app end to end (tauri-driver and WebKitWebDriver under Xvfb)"
tests/desktop/desktop_e2e.py --bin "$target/release/catena-desktop"

step "desktop package (deb)"
scripts/setup/package-desktop.sh

step "fuzz smoke (the parsers of untrusted bytes)"
if ! wait "$fuzz_build"; then
  cat "$fuzz_build_log" >&2
  die "the fuzz targets did not build"
fi
trap - EXIT
tail -n 1 "$fuzz_build_log"
rm -f "$fuzz_build_log"
step "fuzz smoke: running"
scripts/dev/fuzz.sh 20

step "done"
