#!/usr/bin/env bash
# Proves the README's two commands on a machine that has never seen Catena, and times them.
#
#   sudo scripts/setup/fresh-machine.sh [--only-run | --only-test | --only-prepare] [ROOTFS]
#   (ROOTFS: default /var/tmp/catena-fresh; it must not exist yet, except with --only-test or
#   --only-prepare, which run again in one an earlier run left)
#
# What "fresh" means here: a Debian 12 (bookworm) root file system made by debootstrap from
# Debian's packages (`minbase`: no compiler, no Python, no CMake, no libclang), with only what a
# new user is told to have: Rust (this machine's rustup toolchains, mounted read-only) and Node.js
# 20.19 or newer (copied from this machine, as the machine image CI runs on ships it; Debian 12's
# own nodejs is 18, too old for the web UI's build). HOME, the cargo registry, every cache and
# the data directory start empty. The committed HEAD of this checkout is cloned into it at the
# same path as this checkout.
#
# Inside, as root (so `apt-get` works, as on CI), one after the other as a new user would:
#   1. ./catena run "How many primes are there below 10000?"     (the README's first command)
#   2. ./scripts/test.sh                                          (the README's test command)
# Each is timed; the log and the timings go to ROOTFS.log and ROOTFS.times.
#   --only-run    stops after the first command.
#   --only-test   runs the second command again in a ROOTFS an earlier run left (after a fix).
#   --only-prepare
#                 runs neither: only `scripts/device-check.sh --prepare`, what a session lent a GPU
#                 runs first on a machine that may never have built the project; in a ROOTFS an
#                 earlier --only-prepare left, it runs it again there (after a fix).
# The package clients use this machine's configuration for them (apt sources, pip and npm
# settings, its CA certificates and the variables that point clients at them), nothing else of it.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

mode=all
case "${1:-}" in
  --only-run) mode=run; shift ;;
  --only-test) mode=test; shift ;;
  --only-prepare) mode=prepare; shift ;;
esac
rootfs="${1:-/var/tmp/catena-fresh}"
checkout="$root" # cloned into the fresh root at the same path
task="How many primes are there below 10000?"

[ "$(id -u)" = 0 ] || die "run as root: debootstrap, chroot and mounts need it"
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
[ -x "$cargo_bin/cargo" ] || die "no Rust toolchain at $cargo_bin (rustup)"
node_bin="$(command -v node || true)"
[ -n "$node_bin" ] || die "Node.js (20.19 or newer) is needed on this machine to copy in"

mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() { # bind SOURCE TARGET [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounts+=("$2")
  if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$2"; fi
}

log="$rootfs.log"
times="$rootfs.times"

make_root() {
  if [ -e "$rootfs" ]; then
    die "$rootfs exists: remove it first (a fresh machine starts with nothing)"
  fi
  command -v debootstrap >/dev/null 2>&1 || {
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >&2
  }
  # The Debian mirror this machine's apt already uses.
  local mirror
  mirror="$(debian_mirror)" || die "cannot tell which Debian mirror apt uses here"
  : >"$log"
  : >"$times"
  echo "debootstrap bookworm (minbase) into $rootfs" >&2
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >>"$log" 2>&1

  # The package clients' configuration (this machine's apt sources replace debootstrap's own).
  rm -f "$rootfs/etc/apt/sources.list"
  cp -a /etc/apt/sources.list.d/. "$rootfs/etc/apt/sources.list.d/" 2>/dev/null || true
  if [ -s /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$rootfs/etc/apt/sources.list"; fi
  cp -a /etc/apt/apt.conf.d/. "$rootfs/etc/apt/apt.conf.d/"
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
  local file
  for file in /etc/pip.conf /etc/npmrc /usr/etc/npmrc "$HOME/.npmrc"; do
    if [ -f "$file" ]; then
      mkdir -p "$rootfs$(dirname "$file")"
      cp "$file" "$rootfs$file"
    fi
  done
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  if [ -f /etc/hosts ]; then cp /etc/hosts "$rootfs/etc/hosts"; fi

  # Node.js, as the machine image has it (the binary and npm).
  cp "$node_bin" "$rootfs/usr/bin/node"
  mkdir -p "$rootfs/usr/lib/node_modules"
  cp -a "$(dirname "$(readlink -f "$node_bin")")/../lib/node_modules/npm" "$rootfs/usr/lib/node_modules/"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/bin/npx"

  # Rust: an empty cargo home with rustup and its proxies (the toolchains are mounted below);
  # nothing `cargo install` put beside them here (cargo-fuzz, tauri-driver), which the set-up must
  # install itself.
  mkdir -p "$rootfs/root/.cargo/bin"
  cp -a "$cargo_bin/rustup" "$rootfs/root/.cargo/bin/"
  local proxy
  for proxy in "$cargo_bin"/*; do
    if [ -L "$proxy" ] && [ "$(readlink "$proxy")" = rustup ]; then cp -a "$proxy" "$rootfs/root/.cargo/bin/"; fi
  done
}

mount_all() {
  bind "$rustup_home" "$rootfs/root/.rustup" ro
  bind /proc "$rootfs/proc"
  bind /sys "$rootfs/sys"
  bind /dev "$rootfs/dev"
  bind /dev/pts "$rootfs/dev/pts"
  mkdir -p "$rootfs/dev/shm"
  mount -t tmpfs -o mode=1777 tmpfs "$rootfs/dev/shm"
  mounts+=("$rootfs/dev/shm")
}

# The variables this machine sets so that its clients trust its CA certificates (kept when set).
client_env=()
for name in SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS PIP_CERT; do
  if [ -n "${!name:-}" ]; then client_env+=("$name=${!name}"); fi
done

inside() { # inside LABEL COMMAND...: runs in the fresh root as a new login would, timed
  local label="$1" start end status=0
  shift
  start=$(date +%s)
  echo "== $label: $*" | tee -a "$log" >&2
  chroot "$rootfs" /usr/bin/env -i HOME=/root USER=root LANG=C.UTF-8 TERM=dumb CI=true \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    "${client_env[@]}" \
    bash -c 'cd "$0" && "$@"' "$checkout" "$@" >>"$log" 2>&1 || status=$?
  end=$(date +%s)
  printf '%s\t%d s\texit %d\n' "$label" "$((end - start))" "$status" | tee -a "$times" >&2
  return "$status"
}

# prepare_inside: the GPU check's packing, and the sizes of what it packed.
prepare_inside() {
  inside "device-check prepare" ./scripts/device-check.sh --prepare
  du -sb "$rootfs$checkout/.device" "$rootfs$checkout/.device-cuda" | tee -a "$times" >&2
}

if [ "$mode" = test ] || { [ "$mode" = prepare ] && [ -e "$rootfs" ]; }; then
  [ -d "$rootfs$checkout" ] || die "no earlier run in $rootfs"
  mount_all
  git -C "$rootfs$checkout" pull -q --ff-only "$checkout" HEAD
  echo "commit $(git -C "$rootfs$checkout" rev-parse HEAD) (again)" | tee -a "$times" >&2
  if [ "$mode" = prepare ]; then
    prepare_inside
    exit 0
  fi
  inside "test command" ./scripts/test.sh
  echo "the test command passed; timings in $times" >&2
  exit 0
fi

make_root
mount_all
# The certificates the image trusts, so HTTPS clients work as they do on this machine.
chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends ca-certificates' >>"$log" 2>&1

# The project, as committed.
mkdir -p "$rootfs$(dirname "$checkout")"
git clone -q --no-hardlinks "$checkout" "$rootfs$checkout"
if [ -d "$checkout/../shared" ]; then cp -a "$checkout/../shared" "$rootfs$(dirname "$checkout")/shared"; fi
echo "commit $(git -C "$checkout" rev-parse HEAD)" | tee -a "$times" >&2

if [ "$mode" = prepare ]; then
  prepare_inside
  exit 0
fi
inside "first command" ./catena run "$task"
[ "$mode" = run ] && exit 0
inside "test command" ./scripts/test.sh
echo "both commands passed on a fresh machine; timings in $times" >&2
