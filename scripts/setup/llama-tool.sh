#!/usr/bin/env bash
# Builds one of llama.cpp's own tools (llama-bench, llama-quantize, ...) from the VERY llama.cpp
# tree the llama-cpp-sys-2 crate compiles into Catena, with the crate's CMake options, and prints
# the binary's path: the anchors Catena's benchmarks and conversion checks compare against.
# The crate ships llama.cpp without its tools; their sources come from the llama-cpp-python
# source distribution on PyPI and compile against the crate's tree. All tools share one build
# folder, so llama.cpp itself is compiled once.
#
# Usage: scripts/setup/llama-tool.sh [--gpu | --vulkan] TOOL_FOLDER TARGET   (e.g. llama-bench
#        llama-bench, quantize llama-quantize, server llama-server, or simple llama-simple: a
#        folder of llama.cpp's tools/ or, failing that, its examples/); --gpu builds with CUDA (for
#        the GPU of the machine it runs on, or CUDA_ARCHITECTURES), --vulkan with Vulkan.
#        scripts/setup/llama-tool.sh --sources   prints the folder of the tools' sources (fetched
#        once) and builds nothing: what the GPU check carries to build them elsewhere.
# Where there is no cargo or pip (the lent GPU machine, scripts/device-check.sh), LLAMA_SRC names
# the llama.cpp tree and LLAMA_TOOLS_SRC the folder holding the tools' sources.
# The tools are built for the CPU they run on (llama.cpp's GGML_NATIVE), as Catena's own build is
# (.cargo/config.toml); LLAMA_TOOLS_CPU=x86-64-v3 builds them as a binary built with
# RUSTFLAGS="-C target-cpu=x86-64-v3" is (the GPU check's carried catena).
# LLAMA_TOOLS_SHARED=1 builds llama.cpp as shared libraries beside the tools (in build/bin), so
# that a catena built with `--features shared-llama` runs on the very libraries its anchor runs
# on (the GPU check's CUDA and Vulkan builds).
# For the CPU backend on this CPU as static libraries (the default, and what the test suite
# builds), nothing of llama.cpp is compiled again: the tools link the libraries the crate's own
# build made (scripts/setup/llama-linked.cmake; cargo names that build's folder), so the anchor
# runs the very objects Catena does, and a fresh machine saves llama.cpp's second compile
# (llama-server took 6 min 59 s from the tree on the 2-core VM, 1 min 43 s linked). Only the
# tools and the multimodal library the server needs are compiled; a tool is linked again when the
# crate's libraries change.
# llama-server is built without its web UI (an empty asset table: nothing is fetched or built
# with npm); its HTTP API is all Catena's tests use.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
cd "$root"
backend=cpu
sources_only=false
case "${1:-}" in
  --gpu) backend=cuda; shift ;;
  --vulkan) backend=vulkan; shift ;;
  --sources) sources_only=true; shift ;;
esac
# tools_sources: the folder holding the tools' sources, from the llama-cpp-python source
# distribution on PyPI, fetched once into the CPU build's folder (whichever backend asks).
tools_sources() {
  local sdist_dir="$target/llama-tools/sdist" sdist
  sdist="$sdist_dir/llama_cpp_python-0.3.36"
  if [ ! -d "$sdist" ]; then
    mkdir -p "$sdist_dir"
    # The source distribution, never a wheel. pip still reads its metadata, in an environment
    # of its build requirements, and those come as wheels: with `--no-binary :all:` pip built
    # them from source too (ninja's C++ among them), 7 min 43 s on a fresh 2-core machine.
    python3 -m pip download -q --no-deps --no-binary llama-cpp-python -d "$sdist_dir" llama-cpp-python==0.3.36 >&2
    tar -xzf "$sdist_dir"/llama_cpp_python-0.3.36.tar.gz -C "$sdist_dir"
  fi
  echo "$sdist/vendor/llama.cpp/tools"
}
if $sources_only; then
  [ $# = 0 ] || die "usage: scripts/setup/llama-tool.sh --sources" 2
  tools_sources
  exit 0
fi
[ $# = 2 ] || die "usage: scripts/setup/llama-tool.sh [--gpu | --vulkan] TOOL_FOLDER TARGET" 2
tool="$1" cmake_target="$2"
work="$target/llama-tools"
cmake_gpu=(-DGGML_CUDA=OFF)
case "$backend" in
  cuda)
    work="$work-cuda"
    cmake_gpu=(-DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES:-native}")
    ;;
  vulkan)
    work="$work-vulkan"
    cmake_gpu=(-DGGML_CUDA=OFF -DGGML_VULKAN=ON)
    # The newer headers set-up unpacks where the system's are too old (as for the cargo build).
    if [ -z "${VULKAN_SDK:-}" ] && [ -d "$root/.vulkan-sdk/include/vulkan" ]; then export VULKAN_SDK="$root/.vulkan-sdk"; fi
    ;;
esac
cpu="${LLAMA_TOOLS_CPU:-native}"
# The options the llama-cpp-sys-2 build script passes for that CPU: with `target-cpu=native`,
# GGML_NATIVE; with a named target CPU, GGML_NATIVE off and -march for it (llama.cpp's defaults
# then add AVX2, FMA and F16C, as that CPU has). Then the flags the cmake crate adds, and Release
# as Catena's release profile gets.
case "$cpu" in
  native) cmake_cpu=(-DGGML_NATIVE=ON) march="" ;;
  x86-64-v3) cmake_cpu=(-DGGML_NATIVE=OFF) march="-march=x86-64-v3" ;;
  *) die "LLAMA_TOOLS_CPU is native or x86-64-v3, not $cpu" 2 ;;
esac
shared="${LLAMA_TOOLS_SHARED:-0}"
case "$shared" in
  0) cmake_libs=(-DBUILD_SHARED_LIBS=OFF) ;;
  1) cmake_libs=(-DBUILD_SHARED_LIBS=ON -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$work/build/bin") ;;
  *) die "LLAMA_TOOLS_SHARED is 0 or 1, not $shared" 2 ;;
esac
options="$backend $cpu"
if [ "$shared" = 1 ]; then options="$options shared"; fi
# The crate's build of llama.cpp to link against (its OUT_DIR), where the options are its own; a
# GPU machine's separate tree (LLAMA_SRC) is always compiled. Cargo names that folder (the
# workspace's build of the crate; other feature sets have folders of their own), asked once when
# the tool is built: the end-to-end test that runs llama-server calls this script under `cargo
# test`, whose variables for a test (the package's name, its folder) would make cargo build
# again the crates whose build scripts watch them, so they are left out of that call.
linked=""
crate_llama_build() {
  (
    cd "$root"
    for var in $(compgen -e); do
      case "$var" in
        CARGO_PKG_* | CARGO_MANIFEST_* | CARGO_CRATE_NAME | CARGO_BIN_* | CARGO_PRIMARY_PACKAGE | \
          CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR | OUT_DIR) unset "$var" ;;
      esac
    done
    cargo build --release --locked --workspace --message-format=json | python3 -c '
import json, sys
dirs = [m["out_dir"] for m in map(json.loads, sys.stdin)
        if m.get("reason") == "build-script-executed" and "llama-cpp-sys-2" in m["package_id"]]
print(dirs[0] if len(dirs) == 1 else "")'
  )
}
if [ "$backend" = cpu ] && [ "$cpu" = native ] && [ "$shared" = 0 ] && [ -z "${LLAMA_SRC:-}" ]; then
  options="$options linked"
  if [ -f "$work/build/linked-to" ] && [ -d "$(cat "$work/build/linked-to")" ]; then
    linked="$(cat "$work/build/linked-to")"
  else
    linked="$(crate_llama_build)"
    [ -n "$linked" ] || die "cargo named no single build of llama-cpp-sys-2 for the workspace"
    # Tools linked to another build of the crate (a folder since removed) are made again.
    rm -rf "$work/build"
  fi
fi
# A build folder made with other options is made again (its cached CMake options would win).
if [ -f "$work/build/options" ] && [ "$(cat "$work/build/options")" != "$options" ]; then
  rm -rf "$work/build"
elif [ -d "$work/build" ] && [ ! -f "$work/build/options" ]; then
  rm -rf "$work/build"
fi
bin="$work/build/bin/$cmake_target"
if [ ! -x "$bin" ]; then
  echo "Building $cmake_target from the crate's llama.cpp${linked:+ (linked to its build in $linked)} ..." >&2
  mkdir -p "$work/src"
  if [ -n "${LLAMA_TOOLS_SRC:-}" ]; then
    tools_src="$LLAMA_TOOLS_SRC"
  else
    tools_src="$(tools_sources)"
  fi
  if [ -n "${LLAMA_SRC:-}" ]; then
    llama_src="$LLAMA_SRC"
  else
    llama_src="$(crate_dir llama-cpp-sys-2)/llama.cpp"
  fi
  rm -rf "$work/src/$tool"
  tool_dir="$tools_src/$tool"
  [ -d "$tool_dir" ] || tool_dir="$tools_src/../examples/$tool"
  [ -d "$tool_dir" ] || die "no $tool among llama.cpp's tools or examples (in $tools_src)"
  cp -r "$tool_dir" "$work/src/$tool"
  if [ "$tool" = server ]; then
    # The server links llama.cpp's UI library (here an empty one) and its multimodal library;
    # the UI's CMake script finds its templates under the project's tools/ui.
    rm -rf "$work/src/tools" "$work/src/scripts"
    mkdir -p "$work/src/tools" "$work/src/scripts"
    cp -r "$tools_src/ui" "$work/src/tools/ui"
    cp "$tools_src/../scripts/ui-assets.cmake" "$work/src/scripts/"
    # The two places where the server's sources and the crate's tree disagree (the sdist and the
    # crate track different llama.cpp commits), both outside anything Catena's tests use:
    # mtmd's memory estimate (multimodal projectors only) is a struct holding the per-device
    # map in the crate's tree; the crate's common library has no fs_open_ifstream (a Windows
    # path helper, used for the MCP configuration file), which is std::ifstream elsewhere.
    if grep -q backend_mem_usage "$llama_src/tools/mtmd/mtmd.h"; then
      sed -i -e 's/mmproj_mem\.empty()/mmproj_mem.backend_mem_usage.empty()/' \
        -e 's/: mmproj_mem)/: mmproj_mem.backend_mem_usage)/' "$work/src/server/server-context.cpp"
    fi
    if ! grep -q fs_open_ifstream "$llama_src/common/common.h"; then
      sed -i 's/fs_open_ifstream(/std::ifstream(/g' "$work"/src/server/*.cpp
    fi
  fi
  {
    echo "cmake_minimum_required(VERSION 3.14)"
    echo "project(llama_tools C CXX)"
    if [ -n "$linked" ]; then
      echo "set(LLAMA_PREFIX \"$linked\")"
      echo "set(LLAMA_SRC \"$llama_src\")"
      echo "include(\"$root/scripts/setup/llama-linked.cmake\")"
    else
      echo "add_subdirectory(\"$llama_src\" llama.cpp)"
    fi
    # The UI library before the server that links it; scripts/ holds only a CMake script.
    if [ -d "$work/src/tools/ui" ]; then echo "add_subdirectory(tools/ui ui)"; fi
    for dir in "$work"/src/*/; do
      case "$(basename "$dir")" in tools | scripts) ;; *) echo "add_subdirectory($(basename "$dir"))" ;; esac
    done
  } >"$work/src/CMakeLists.txt"
  flags="-ffunction-sections -fdata-sections -fPIC -m64 $march"
  mkdir -p "$work/build"
  echo "$options" >"$work/build/options"
  if [ -n "$linked" ]; then echo "$linked" >"$work/build/linked-to"; fi
  # llama.cpp's own options, where it is compiled here; the UI's either way.
  cmake_llama=()
  if [ -z "$linked" ]; then
    cmake_llama=("${cmake_cpu[@]}" -DGGML_OPENMP=ON "${cmake_libs[@]}" -DLLAMA_CURL=OFF
      -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_TESTS=OFF
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
      -DLLAMA_BUILD_MTMD=ON "${cmake_gpu[@]}")
  elif [ -z "${VULKAN_SDK:-}" ] && [ -d "$root/.vulkan-sdk/include/vulkan" ]; then
    # ggml's package file finds Vulkan (the crate's build has its backend) as the crate's build did.
    export VULKAN_SDK="$root/.vulkan-sdk"
  fi
  cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" "${cmake_llama[@]}" \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$work/build/bin" >&2
  cmake --build "$work/build" --target "$cmake_target" -j "$(nproc)" >&2
elif [ -n "$linked" ]; then
  # Linked again only where the crate's libraries changed since (make compares their times); its
  # log is shown only when that fails.
  if ! cmake --build "$work/build" --target "$cmake_target" -j "$(nproc)" >"$work/build/relink.log" 2>&1; then
    cat "$work/build/relink.log" >&2
    die "linking $cmake_target again to the crate's llama.cpp failed (remove $work/build to start over)"
  fi
fi
echo "$bin"
