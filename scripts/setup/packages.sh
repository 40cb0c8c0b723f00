#!/usr/bin/env bash
# Installs what building Catena needs and is missing: a C/C++ toolchain, CMake and libclang (for
# llama.cpp and its bindings), ccache (cheap rebuilds of llama.cpp), the Vulkan loader, headers
# and shader compiler (llama.cpp's Vulkan backend is in every Linux build), and Python 3 with pip
# (the client that fetches the default model and the Python sandbox runtime). Uses apt-get (as root,
# or through sudo); on other systems it names what to install. With --desktop, also what the
# desktop app builds against (WebKitGTK, GTK) and Node.js for its UI. With --tests, all of that and
# what the test suite drives: Debian's Chromium (the web UI), Xvfb, WebKitWebDriver and
# tauri-driver (the desktop app), and Mesa's lavapipe (a Vulkan driver on the CPU, so the Vulkan
# backend is tested on machines without a GPU), and git where a machine lacks it (the suite's
# long-function check lists the clone's files with it). With --bench, a Python virtual environment outside the clone
# (~/.cache/catena-bench/venv) with PyTorch, transformers, PEFT and gguf: the anchor that
# scripts/bench/train.py measures the trainer against (several GB; never needed otherwise). With
# --device-check, also what `scripts/device-check.sh --prepare` packs with: git (it sizes what
# travels from the clone's tracked files), binutils (readelf, strip) and xz.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"

# bindgen (through clang-sys) loads libclang at build time: a file named libclang.so,
# libclang-*.so, libclang.so.* or libclang-*.so.* in $LIBCLANG_PATH, `llvm-config --libdir` or
# the system's library folders, and it must carry libclang's C API. libclang-cpp (the C++
# library, shipped on its own by some images) has a matching name but not that API, so a file
# counts only when it defines clang_createIndex, the first function bindgen calls.
has_libclang() {
  local dirs=() dir file
  [ -n "${LIBCLANG_PATH:-}" ] && dirs+=("$LIBCLANG_PATH")
  command -v llvm-config >/dev/null 2>&1 && dirs+=("$(llvm-config --libdir)")
  dirs+=(/usr/lib/llvm-*/lib /usr/local/llvm*/lib /usr/lib/*-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)
  for dir in "${dirs[@]}"; do
    for file in "$dir"/libclang.so "$dir"/libclang-*.so "$dir"/libclang.so.* "$dir"/libclang-*.so.*; do
      [ -f "$file" ] || continue
      case "${file##*/}" in libclang-cpp*) continue ;; esac
      grep -q -a clang_createIndex "$file" && return 0
    done
  done
  return 1
}

need=()
tests=false
desktop=false
bench=false
case "${1:-}" in
  --tests) tests=true; desktop=true ;;
  --desktop) desktop=true ;;
  --bench) bench=true ;;
  --device-check)
    command -v git >/dev/null 2>&1 || need+=(git)
    command -v readelf >/dev/null 2>&1 && command -v strip >/dev/null 2>&1 || need+=(binutils)
    command -v xz >/dev/null 2>&1 || need+=(xz-utils)
    ;;
esac
if $tests; then
  # Playwright drives this very binary (ui/playwright.config.ts).
  [ -x "${CHROMIUM:-/usr/bin/chromium}" ] || need+=(chromium)
  # The desktop app's end-to-end test: an X server and WebKitGTK's WebDriver.
  command -v Xvfb >/dev/null 2>&1 || need+=(xvfb xauth)
  command -v WebKitWebDriver >/dev/null 2>&1 || need+=(webkit2gtk-driver)
  command -v xwd >/dev/null 2>&1 || need+=(x11-apps)
  # The ZIM archive tests pack a folder of HTML with zim-tools' zimwriterfs, as Kiwix does.
  command -v zimwriterfs >/dev/null 2>&1 || need+=(zim-tools)
  # The Vulkan tests run the model on lavapipe, Mesa's Vulkan driver on the CPU.
  compgen -G '/usr/share/vulkan/icd.d/lvp_icd.*.json' >/dev/null || need+=(mesa-vulkan-drivers)
  # The server tests signal the server process with kill(1).
  [ -x /bin/kill ] || [ -x /usr/bin/kill ] || need+=(procps)
  # The long-function check reads the list of files from git (the clone's tracked files).
  command -v git >/dev/null 2>&1 || need+=(git)
fi
if $desktop; then
  # Node.js builds the web UI (Vite 8 needs Node 20.19 or newer).
  command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
  # The desktop app (Tauri 2) builds against WebKitGTK 4.1 and GTK 3.
  pkg-config --exists webkit2gtk-4.1 2>/dev/null || need+=(libwebkit2gtk-4.1-dev)
  pkg-config --exists gtk+-3.0 2>/dev/null || need+=(libgtk-3-dev)
  pkg-config --exists librsvg-2.0 2>/dev/null || need+=(librsvg2-dev)
fi
command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 || need+=(build-essential)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
has_libclang || need+=(libclang-dev)
command -v ccache >/dev/null 2>&1 || need+=(ccache)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# llama.cpp's Vulkan backend: the loader to link, its headers, SPIR-V's headers and the GLSL
# compiler its shaders are built with.
if [ "$(uname -s)" = Linux ]; then
  pkg-config --exists vulkan 2>/dev/null || need+=(libvulkan-dev)
  command -v glslc >/dev/null 2>&1 || need+=(glslc)
  compgen -G '/usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake' >/dev/null \
    || compgen -G '/usr/lib/*/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake' >/dev/null \
    || need+=(spirv-headers)
fi
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# The tests install the official OpenAI client into a virtual environment.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)

if ((${#need[@]})); then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "Installing system packages: ${need[*]}" >&2
    $sudo apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >&2
  else
    die "Please install these packages (Debian names): ${need[*]}"
  fi
fi

# The Vulkan headers llama.cpp's backend compiles against must have VK_EXT_layer_settings
# (Debian 12's 1.3.239 lack it; Debian 13's 1.4.309 have it). On Debian 12 the headers alone (not
# the loader or the compiler) come from Debian 13's libvulkan-dev, through apt with a source list
# of its own, into .vulkan-sdk/, where .cargo/config.toml points the build.
vulkan_sdk="$root/.vulkan-sdk"
has_layer_settings() { grep -qs VkLayerSettingEXT "$1/vulkan/vulkan_core.h"; }
if [ "$(uname -s)" = Linux ] && [ -z "${VULKAN_SDK:-}" ] \
  && ! has_layer_settings /usr/include && ! has_layer_settings "$vulkan_sdk/include"; then
  codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
  [ "$codename" = bookworm ] && command -v apt-get >/dev/null 2>&1 || die "The Vulkan headers here \
lack VK_EXT_layer_settings, which llama.cpp's Vulkan backend needs: \
install newer ones (your distribution's libvulkan-dev, or LunarG's Vulkan SDK with VULKAN_SDK set)."
  echo "Fetching Debian 13's Vulkan headers (Debian 12's are too old for llama.cpp's Vulkan backend)..." >&2
  mirror="$(debian_mirror)" || die "cannot tell which Debian mirror apt uses here"
  apt_dir="$(mktemp -d)"
  trap 'rm -rf "$apt_dir"' EXIT
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/unpacked"
  printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s trixie main\n' "$mirror" \
    >"$apt_dir/sources.list"
  apt_private=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o APT::Sandbox::User=root)
  apt-get "${apt_private[@]}" update -q >&2
  (cd "$apt_dir" && apt-get "${apt_private[@]}" download -q libvulkan-dev/trixie >&2)
  dpkg-deb --extract "$apt_dir"/libvulkan-dev_*.deb "$apt_dir/unpacked"
  has_layer_settings "$apt_dir/unpacked/usr/include" || die "the fetched Vulkan headers lack VK_EXT_layer_settings"
  rm -rf "$vulkan_sdk"
  mkdir -p "$vulkan_sdk"
  cp -r "$apt_dir/unpacked/usr/include" "$vulkan_sdk/include"
  echo "Vulkan headers (VK_HEADER_VERSION $(awk '$2 == "VK_HEADER_VERSION" { print $3 }' "$vulkan_sdk/include/vulkan/vulkan_core.h")) in $vulkan_sdk" >&2
  # llama.cpp's CMake keeps the headers it found first: a build that already failed on the old
  # ones (`'LayerSettingEXT' is not a member of 'vk'`) needs its llama.cpp build folder cleared.
  echo "If a build here already failed on ggml-vulkan.cpp, run \`cargo clean -p llama-cpp-sys-2\` once." >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
  die "Rust is needed: install it from https://rustup.rs (stable 1.95 or newer)."
fi

if command -v node >/dev/null 2>&1; then
  node_version="$(node -p 'process.versions.node')"
  if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&b>=19)?0:1)'; then
    echo "Node.js $node_version is too old for the web UI's build (20.19 or newer is needed)." >&2
    if $tests; then exit 1; fi
  fi
fi

if $tests && ! command -v tauri-driver >/dev/null 2>&1 && [ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/tauri-driver" ]; then
  echo "Installing tauri-driver (the desktop app's WebDriver bridge; a minute or two)..." >&2
  cargo install --locked --quiet tauri-driver --version 2.1.0 >&2
fi

if $bench; then
  venv="$HOME/.cache/catena-bench/venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet torch transformers peft gguf accelerate >&2
fi
