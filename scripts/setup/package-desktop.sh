#!/usr/bin/env bash
# Builds the desktop app's Debian package with the Tauri CLI (packaging/tauri-cli), then checks
# it: the package holds the app, its desktop entry and icons, the app carries llama.cpp's Vulkan
# backend (so one package offloads on AMD, Intel and NVIDIA GPUs) and the package depends on the
# Vulkan loader it links, and the packaged binary runs.
# The app in it is built for this machine's CPU, as every build here is (.cargo/config.toml), and
# refuses to start on a CPU that lacks what it was built for; for a package for other machines
# run this with RUSTFLAGS="-C target-cpu=x86-64-v3" and a CARGO_TARGET_DIR of its own.
#   scripts/setup/package-desktop.sh   -> target/release/bundle/deb/Catena_<version>_amd64.deb
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
"$root/scripts/setup/ui.sh" build >&2
cd "$root"
# The workspace's release build (the features `scripts/test.sh` builds with, so an up-to-date
# target/ is reused), then the Tauri CLI packages that binary (`bundle`: no build of its own).
cargo build --release --locked --workspace --bins >&2
# `npm install`, not `npm ci`: the lock records only the CLI's Linux binaries (the registry this
# project installs from serves no others), and `npm ci` refuses a lock without every platform's
# optional package. The lock still pins the version and the integrity of what is installed.
(cd packaging/tauri-cli && npm install --no-audit --no-fund >&2)
packaging/tauri-cli/node_modules/.bin/tauri bundle --ci --bundles deb >&2
deb="$(ls -t "$target"/release/bundle/deb/*.deb | head -n 1)"
listing="$(dpkg-deb --contents "$deb")"
for path in usr/bin/catena-desktop usr/share/applications/Catena.desktop usr/share/icons/hicolor/128x128/apps/catena-desktop.png; do
  grep -qF "$path" <<<"$listing" || die "$deb lacks $path"
done
unpacked="$(mktemp -d)"
trap 'rm -rf "$unpacked"' EXIT
dpkg-deb --extract "$deb" "$unpacked"
readelf --dynamic "$unpacked/usr/bin/catena-desktop" | grep -qF '[libvulkan.so.1]' \
  || die "the packaged catena-desktop does not link the Vulkan loader: no Vulkan backend in it"
dpkg-deb --field "$deb" Depends | grep -qw libvulkan1 || die "$deb does not depend on libvulkan1"
"$unpacked/usr/bin/catena-desktop" --version >&2
echo "$deb"
