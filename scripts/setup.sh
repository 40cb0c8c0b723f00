#!/usr/bin/env bash
# Installs what building Catena needs and is missing: a C/C++ toolchain, CMake and libclang (for
# llama.cpp and its bindings), ccache (cheap rebuilds of llama.cpp), and Python 3 with pip (the
# client that fetches the default model and the Python sandbox runtime). Uses apt-get (as root,
# or through sudo); on other systems it names what to install. With --tests, also what the test
# suite needs: Debian's Chromium for the UI's end-to-end tests.
set -euo pipefail

need=()
tests=false
if [ "${1:-}" = "--tests" ]; then
  tests=true
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  # Node.js builds and tests the web UI (Vite 8 needs Node 20.19 or newer).
  command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
fi
command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 || need+=(build-essential)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null || compgen -G "/usr/lib/*/libclang*.so*" >/dev/null \
  || need+=(libclang-dev)
command -v ccache >/dev/null 2>&1 || need+=(ccache)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
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
    echo "Please install these packages (Debian names): ${need[*]}" >&2
    exit 1
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "Rust is needed: install it from https://rustup.rs (stable 1.95 or newer)." >&2
  exit 1
fi

if command -v node >/dev/null 2>&1; then
  node_version="$(node -p 'process.versions.node')"
  if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&b>=19)?0:1)'; then
    echo "Node.js $node_version is too old for the web UI's build (20.19 or newer is needed)." >&2
    if $tests; then exit 1; fi
  fi
fi
