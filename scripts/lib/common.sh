# The preamble the shell scripts share; each sources it right after `set -euo pipefail`:
#   . "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
# It only defines things (no `cd`, no output): a script whose arguments are paths relative to
# where it was started (a run folder, a checkpoint) must resolve them before it moves.

# The checkout, found from this file's own place, so a script runs from any working directory.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Cargo's build folder: the caller's CARGO_TARGET_DIR (CI keeps it outside the clone) or target/.
target="${CARGO_TARGET_DIR:-$root/target}"

# The Debian mirror this machine's apt uses (the first deb822 or one-line source that is not the
# security archive), printed; fails where there is none.
debian_mirror() {
  local mirror
  mirror="$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1)"
  [ -n "$mirror" ] || mirror="$(sed -e 's/\[[^]]*\] *//' /etc/apt/sources.list 2>/dev/null | awk '$1 == "deb" && $0 !~ /security/ { print $2; exit }')"
  [ -n "$mirror" ] && echo "$mirror"
}

# A heading between the stages of a long script, with the time, so a log shows where time went.
step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

# die MESSAGE [STATUS]: the message on stderr, then exit (status 1, or 2 for a usage mistake).
die() {
  echo "$1" >&2
  exit "${2:-1}"
}

# The release `catena` binary the script drives, as an absolute path (the script may `cd` to a run
# folder afterwards): CATENA_BIN when set, else the release build, built first when missing.
catena_bin() {
  local bin="${CATENA_BIN:-$target/release/catena}"
  [ -x "$bin" ] || (cd "$root" && cargo build --release --locked -p catena-cli >&2)
  echo "$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
}

# crate_dir NAME [CARGO_METADATA_OPTIONS...]: the folder of the locked crate NAME's sources, as
# cargo fetched them (llama.cpp's tree inside llama-cpp-sys-2, cudarc's driver bindings). A crate
# behind an optional feature needs --all-features to be in the graph.
crate_dir() {
  local name="$1" manifest
  shift
  manifest="$(cd "$root" && cargo metadata --format-version 1 --locked "$@" | python3 -c '
import json, sys
print(next((p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == sys.argv[1]), ""))' "$name")"
  [ -n "$manifest" ] || die "no crate $name in the lock file's graph"
  dirname "$manifest"
}

# default_model CATENA: the default model's GGUF path, fetched first when missing (the fetch
# prints `name: path`).
default_model() { "$1" assets fetch model | sed -n 's/^[^:]*: //p'; }

# Physical cores (llama.cpp's threads: a second thread on one core only adds contention), or
# every CPU where lscpu cannot tell.
physical_cores() {
  local cores
  cores="$(lscpu -p=core 2>/dev/null | grep -v '^#' | sort -u | wc -l)"
  if [ "$cores" -gt 0 ] 2>/dev/null; then echo "$cores"; else nproc; fi
}
