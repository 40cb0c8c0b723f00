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

step "the fuzz targets' build, started beside the lint and the tests' set-up"
# The fuzz build is 7 to 8 minutes of both cores on a fresh machine. SCHED_IDLE (`chrt --idle`)
# runs it on the CPU time the stages up to the tests leave idle (the tails of clippy and of the
# tests' build, downloads, CMake's configure steps), and the tests wait for what is left of it.
# Not beside the tests: there it made llama.cpp's threads crawl (one end-to-end test took 449 s
# beside it against 34 s alone, docs/BENCHMARKS.md, "The test command on a new VM, nothing beside
# it"). Its own build folder, so it never waits for the workspace's lock.
fuzz_build_log="$(mktemp)"
setsid chrt --idle 0 scripts/dev/fuzz.sh --build >"$fuzz_build_log" 2>&1 &
fuzz_build=$!
trap 'kill -- "-$fuzz_build" 2>/dev/null || true' EXIT

step "lint"
cargo clippy --release --locked --workspace --all-targets -- -D warnings

step "assets and the sandbox's compiled CPython"
"$target/release/catena" assets fetch all
"$target/release/catena" sandbox 'print("the sandbox is ready")'

step "llama.cpp's llama-server from the crate's llama.cpp (the remote-engine test's peer)"
scripts/setup/llama-tool.sh server llama-server

step "the tests' build"
cargo test --release --locked --workspace --no-run

step "the fuzz targets' build: what is left of it, before the tests run"
if ! wait "$fuzz_build"; then
  cat "$fuzz_build_log" >&2
  die "the fuzz targets did not build"
fi
trap - EXIT
tail -n 1 "$fuzz_build_log"
rm -f "$fuzz_build_log"

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
scripts/dev/fuzz.sh 20

step "done"
