#!/usr/bin/env bash
# The GPU check in one command, for a lent GPU machine that has CUDA's compiler, CMake and Python
# but no Rust and no network, and takes at most 64 MiB with the source tree (docs/BENCHMARKS.md,
# "The GPU check"). What travels is a release `catena` binary built with llama.cpp as shared
# libraries (`--features shared-llama`) and its trainer on candle's CUDA (`catena-trainer/cuda`,
# built with CUDA 13.0 as the GPU machine has it), the default model's header, and llama.cpp's
# sources; there it builds llama.cpp's own `llama-bench`, `llama-batched-bench` and `llama-simple`
# from those sources twice (CUDA and Vulkan), each with llama.cpp's shared libraries beside it, and
# runs catena on each backend's libraries: catena and its anchor run the same compiled llama.cpp. The
# CUDA build can be made here instead, with the same nvcc, and placed there by a first call of its
# own (it does not fit beside the rest): on an H200 it was 349 of the check's 430 s. It
# makes a model of the default's exact shape with random weights (the same kernels over the same
# bytes: on the CPU its prompt speed is the real model's and generation about 10% faster, in both
# engines, so only ratios between engines on the same file are read), and prints:
#   - single-sequence prompt and generation speed, catena against each llama-bench, alternating
#     (catena's greedy picks made in llama.cpp's decode, and again made on the CPU from the
#     logits, as a generation under a grammar makes them: `catena bench --host-picks`; where the
#     picks in the decode fail, that row runs with --host-picks and the table says what failed);
#   - single-sequence generation against llama.cpp's own simplest generator, `llama-simple` (the
#     greedy sampler, each token read back before the next is decoded, as any generator must;
#     llama-bench's generation test waits for each token's logits to reach host memory but never
#     reads them: its next token is drawn at random);
#   - aggregate generation of a group decoded together, catena against llama-batched-bench;
#   - two SFT steps of `catena train sft` on that model, the trainer on the GPU and on the CPU.
# No RL update: its rollouts run code in the sandbox, whose CPython (150 MB) cannot travel, and
# a random-weights model's rollouts would all score 0 and leave nothing to update; a rollout
# group's decoding is the batched line above, and its update the same passes as an SFT step's.
# Each ratio is catena's own cost on that backend. The Vulkan anchor against the CUDA one is what a
# user of the one Linux binary (Vulkan) gives up on an NVIDIA card against a `--features cuda` build.
#
#   scripts/device-check.sh --prepare   here: writes .device/ (about 36 MiB, ignored by git) and
#                                       .device-cuda/ (llama.cpp's CUDA build, about 22 MiB)
#   scripts/device-check.sh --place-cuda
#                                       there, with `.device-cuda` carried: puts that build where
#                                       the check looks for it (a GPU of compute capability 9.0
#                                       only; a few seconds). Optional: without it the check
#                                       builds llama.cpp with CUDA there, as before
#   scripts/device-check.sh             there, with `.device` carried (in the next call, within the
#                                       30 s the machine stays warm): the checks on the GPU
#   scripts/device-check.sh --cpu       the same steps with the CPU backend and small sizes, on
#                                       this machine's own build: the test suite's dry run
# The table goes to stdout and, where OUT is set, to $OUT/device-check.md. The builds are kept in
# target/device-check, so a second call on the same machine goes straight to the measurements.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$root"
mode=gpu
case "${1:-}" in
  --prepare) mode=prepare ;;
  --place-cuda) mode=place-cuda ;;
  --cpu) mode=cpu ;;
  "") ;;
  *) die "usage: scripts/device-check.sh [--prepare | --place-cuda | --cpu]" 2 ;;
esac
pack="$root/.device"
# llama.cpp's CUDA build, made here: a carry of its own.
pack_cuda="$root/.device-cuda"
# The GPU generation the carried CUDA code is built for: compute capability 9.0, the H100 and the
# H200 (the lent machines so far). candle's kernels in the trainer take it as CUDA_COMPUTE_CAP,
# llama.cpp's CMake as an architecture.
cuda_arch=90
# Where the GPU machine's builds go (outside the carried folders, which a later call replaces),
# and llama.cpp's CUDA build among them (scripts/setup/llama-tool.sh's folder for --gpu).
builds="$target/device-check"
cuda_build="$builds/llama-tools-cuda/build"
# The GPU machine's NVIDIA Vulkan driver, where its loader does not find it on its own.
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
# Everything that travels, in bytes: the device tool takes 64 MiB with the source tree.
carry_limit=$((64 * 1024 * 1024))
# The libraries the GPU machine may lack, each by its Debian package and the library that shows
# whether it is there. NVIDIA's Vulkan driver is `libGLX_nvidia.so.0`, which needs GLVND's
# dispatch libraries; a bare image has the driver but not always those.
declare -A runtime_debs=(
  [libvulkan1]=libvulkan.so.1 [libgomp1]=libgomp.so.1 [libglvnd0]=libGLdispatch.so.0
  [libglx0]=libGLX.so.0 [libgl1]=libGL.so.1 [libegl1]=libEGL.so.1 [libopengl0]=libOpenGL.so.0
  [libgles2]=libGLESv2.so.2
)
# The seconds the GPU mode may take in all (the device tool stops a command at 600): a CUDA
# build still running when only the measurements' time is left is stopped, and the check goes
# on with the Vulkan anchor alone rather than measure nothing.
budget_s="${DEVICE_CHECK_SECONDS:-540}"
measure_reserve_s=170

# xz in and out through Python's lzma: the GPU machine has Python, not necessarily xz.
unxz_to() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
untar_xz() { python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$1" "$2"; }

prepare() {
  scripts/setup/packages.sh --device-check
  # The binary runs on the GPU machine's CPU, not this one, so it is built for any x86-64 CPU
  # with AVX2 (not for this CPU, as .cargo/config.toml builds), in a build folder of its own; the
  # libraries it loads there are built the same way (LLAMA_TOOLS_CPU below).
  local portable="$target/portable" cuda
  # Its trainer has candle's CUDA kernels (`catena-trainer/cuda`), built with CUDA 13.0 as the
  # GPU machine has it; nvcc and the libraries to link against come from PyPI's wheels.
  cuda="$(scripts/setup/cuda-toolkit.sh)"
  # llama-cpp-sys-2 (0.1.161) hard-links llama.cpp's shared libraries into the build folder,
  # their relative symlinks included, which dangle there; when its build script runs again it
  # takes such a link for absent and fails with "File exists" (the links llama-cpp-rs pull
  # request 980 describes). They are made again each run.
  find "$portable/release" -maxdepth 2 -xtype l -delete 2>/dev/null || true
  PATH="$cuda/bin:$PATH" CUDA_HOME="$cuda" CUDA_COMPUTE_CAP="$cuda_arch" CUDARC_CUDA_VERSION=13000 \
    RUSTFLAGS="-C target-cpu=x86-64-v3" CARGO_TARGET_DIR="$portable" cargo build --release --locked -p catena-cli \
    --features shared-llama,catena-trainer/cuda >&2
  local catena="$portable/release/catena" model llama_src tools_src needed
  # It must load whichever backend's libraries it is given: llama.cpp's core, never a backend.
  needed="$(readelf -d "$catena" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  case "$needed" in *libllama.so*) ;; *) die "the carried catena does not load llama.cpp as a shared library: $needed" ;; esac
  case "$needed" in *ggml-vulkan* | *ggml-cuda*) die "the carried catena names a backend library itself: $needed" ;; esac
  case "$needed" in *libcublas.so.13*) ;; *) die "the carried catena's trainer has no CUDA (no libcublas.so.13 in: $needed)" ;; esac
  # This machine's build of those libraries (the newest, should an older build's be there too),
  # for the commands below, with the CUDA libraries and the driver's stand-in: no GPU here.
  local libs
  libs="$(dirname "$(find "$portable/release/build" -path '*llama-cpp-sys-2-*/out/lib*/libllama.so' -printf '%T@ %p\n' |
    sort -rn | sed -n '1s/^[^ ]* //p')")"
  libs="$libs:$cuda/lib:$cuda/lib/stubs"
  model="$(LD_LIBRARY_PATH="$libs" default_model "$catena")"
  rm -rf "$pack"
  mkdir -p "$pack/debs"
  step "the catena binary (stripped, xz)"
  strip -o "$pack/catena" "$catena"
  xz -6 -T0 "$pack/catena"
  step "CUDA libraries for the GPU machine where it lacks them: the runtime, and stand-ins for the rest"
  mkdir -p "$pack/cuda-fallback"
  local lib
  for lib in libcuda.so.1 libcublas.so.13 libcurand.so.10; do
    cp -L "$cuda/lib/stubs/$lib" "$pack/cuda-fallback/$lib"
  done
  cp -L "$cuda/lib/libcudart.so.13" "$pack/cuda-fallback/"
  step "the default model's header"
  LD_LIBRARY_PATH="$libs" "$catena" models random-weights --like "$model" --out "$pack/model-header.gguf" --header-only
  xz -6 "$pack/model-header.gguf"
  step "llama.cpp's sources and its tools' sources"
  # The tools' sources as llama-tool.sh fetches them (without building anything: a tool built
  # here would build the whole workspace, the desktop app included, for a CPU tool the GPU
  # machine never runs); the library's tree is the crate's.
  tools_src="$(scripts/setup/llama-tool.sh --sources)"
  llama_src="$(crate_dir llama-cpp-sys-2)/llama.cpp"
  # What the library build reads (tools/mtmd: llama-tool.sh builds the multimodal library too).
  tar -cJf "$pack/llama-src.tar.xz" -C "$llama_src" CMakeLists.txt LICENSE cmake common ggml include \
    src vendor tools/mtmd
  tar -cJf "$pack/llama-tools.tar.xz" -C "$tools_src" llama-bench batched-bench -C "$tools_src/../examples" simple
  step "Debian packages the GPU machine may lack: the Vulkan loader, OpenMP, GLVND, glslc, Vulkan headers"
  (cd "$pack/debs" && apt-get -o APT::Sandbox::User=root download "${!runtime_debs[@]}" glslc libshaderc1 \
    spirv-headers >/dev/null)
  # The headers the cargo build uses: the user's VULKAN_SDK, set-up's newer ones, or the system's.
  local headers=/usr/include
  if [ -n "${VULKAN_SDK:-}" ]; then headers="$VULKAN_SDK/include"
  elif [ -d "$root/.vulkan-sdk/include/vulkan" ]; then headers="$root/.vulkan-sdk/include"; fi
  tar -cJf "$pack/vulkan-headers.tar.xz" -C "$headers" vulkan vk_video
  local size tree
  size="$(du -sb "$pack" | cut -f1)"
  tree="$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)"
  echo "Wrote $pack: $((size / 1048576)) MiB; with the source tree $(((size + tree) / 1048576)) MiB of the 64 MiB that travel." >&2
  [ $((size + tree)) -le "$carry_limit" ] || die "too large to travel: leave something out of .device"
  prepare_cuda_build "$portable" "$cuda" "$tree"
  echo "On the GPU machine: scripts/device-check.sh --place-cuda with .device-cuda carried, then at once" \
    "scripts/device-check.sh with .device carried." >&2
}

# prepare_cuda_build PORTABLE CUDA TREE_BYTES: llama.cpp's CUDA build, shared libraries and the two
# tools, made here with the nvcc the GPU machine has (13.0) for compute capability 9.0 only, into
# .device-cuda/. It travels alone: 22 MB beside .device's 36 MiB and the source tree would pass
# the 64 MiB a call carries.
prepare_cuda_build() {
  local portable="$1" cuda="$2" tree="$3" tool size
  step "llama.cpp's CUDA build for compute capability $cuda_arch (the first time 22 to 25 minutes on 2 cores)"
  for tool in "llama-bench llama-bench" "batched-bench llama-batched-bench" "simple llama-simple"; do
    # The linker resolves libggml-cuda's CUDA libraries through LD_LIBRARY_PATH when it links a
    # tool: CMake leaves nvcc's own folders out of the library's RUNPATH. The driver's is the
    # link-time stand-in; the GPU machine's own is used there.
    # ($tool unquoted: the tool's folder and its target, two words)
    CARGO_TARGET_DIR="$portable" PATH="$cuda/bin:$PATH" CUDACXX="$cuda/bin/nvcc" CUDAToolkit_ROOT="$cuda" \
      CUDA_ARCHITECTURES="$cuda_arch-real" LLAMA_TOOLS_CPU=x86-64-v3 LLAMA_TOOLS_SHARED=1 \
      LD_LIBRARY_PATH="$cuda/lib:$cuda/lib/stubs" scripts/setup/llama-tool.sh --gpu $tool >/dev/null
  done
  local built="$portable/llama-tools-cuda/build" stage
  rm -rf "$pack_cuda"
  stage="$pack_cuda/stage"
  mkdir -p "$stage"
  # The folder as llama-tool.sh leaves it, so that there it finds the build done: the tools and
  # the libraries beside them (with their version links), and the options they were built with.
  cp -a "$built/bin" "$stage/bin"
  cp "$built/options" "$stage/options"
  find "$stage/bin" -type f -exec strip --strip-unneeded {} +
  tar -cJf "$pack_cuda/llama-cuda.tar.xz" -C "$stage" bin options
  rm -rf "$stage"
  size="$(du -sb "$pack_cuda" | cut -f1)"
  echo "Wrote $pack_cuda: $((size / 1048576)) MiB; with the source tree $(((size + tree) / 1048576)) MiB." >&2
  [ $((size + tree)) -le "$carry_limit" ] || die "llama.cpp's CUDA build is too large to travel"
}

# On the GPU machine, before the check: the carried CUDA build where the check's build of it goes,
# when this GPU is of the generation it was built for. Anything else (another GPU, no GPU) leaves
# the build to the check, which makes it there where nvcc is.
place_cuda() {
  [ -f "$pack_cuda/llama-cuda.tar.xz" ] ||
    die "no .device-cuda/ here: run scripts/device-check.sh --prepare where the project builds, and carry .device-cuda"
  local cap
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)"
  if [ "$cap" != "$cuda_arch" ]; then
    echo "This GPU's compute capability reads '${cap:-nothing}', the carried CUDA build's $cuda_arch: not placed; the check builds llama.cpp with CUDA here." >&2
    return 0
  fi
  rm -rf "$cuda_build"
  mkdir -p "$cuda_build"
  untar_xz "$pack_cuda/llama-cuda.tar.xz" "$cuda_build"
  touch "$cuda_build/placed"
  echo "Placed llama.cpp's CUDA build (compute capability $cuda_arch) in $cuda_build; now scripts/device-check.sh with .device carried." >&2
}

# Unpacks what --prepare wrote into .device/unpacked, and the Debian packages.
unpack() {
  [ -f "$pack/catena.xz" ] || die "no .device/ here: run scripts/device-check.sh --prepare where the project builds, and carry .device"
  mkdir -p "$pack/unpacked"
  local u="$pack/unpacked"
  if [ ! -x "$u/catena" ]; then
    unxz_to "$pack/catena.xz" "$u/catena.part" && chmod +x "$u/catena.part" && mv "$u/catena.part" "$u/catena"
    unxz_to "$pack/model-header.gguf.xz" "$u/model-header.gguf"
    mkdir -p "$u/llama.cpp" "$u/tools" "$u/vulkan/include"
    untar_xz "$pack/llama-src.tar.xz" "$u/llama.cpp"
    untar_xz "$pack/llama-tools.tar.xz" "$u/tools"
    untar_xz "$pack/vulkan-headers.tar.xz" "$u/vulkan/include"
  fi
  # The runtime libraries where the system has none; glslc and its library in a folder of their own.
  local package deb
  for package in "${!runtime_debs[@]}"; do
    ldconfig -p | grep -qF "${runtime_debs[$package]} " && continue
    for deb in "$pack/debs/${package}"_*.deb; do
      echo "  $package: not here, unpacking the carried one" >&2
      dpkg -x "$deb" /
    done
  done
  ldconfig
  for deb in "$pack"/debs/glslc_*.deb "$pack"/debs/libshaderc1_*.deb "$pack"/debs/spirv-headers_*.deb; do
    dpkg -x "$deb" "$u/vulkan"
  done
  # The SPIR-V headers beside the Vulkan ones, which the build names with -isystem: llama.cpp's
  # CMake finds the SPIRV-Headers package but adds no include folder for it, so without this the
  # compiler takes whatever spirv.hpp the machine has, and on the H200 image (2026-11-28) that
  # one did not declare `spv`.
  rm -rf "$u/vulkan/include/spirv"
  cp -r "$u/vulkan/usr/include/spirv" "$u/vulkan/include/spirv"
  find /usr/include /usr/local/include /usr/local/cuda/include -name 'spirv*.hpp' 2>/dev/null |
    sed 's/^/  a SPIR-V header of this machine, not used: /' >&2 || true
  # CMake's FindVulkan links `libvulkan.so`, which only a -dev package provides.
  mkdir -p "$u/vulkan/lib"
  ln -sf "$(ldconfig -p | awk '/libvulkan\.so\.1 / { print $NF; exit }')" "$u/vulkan/lib/libvulkan.so"
}

# The folders holding the CUDA libraries the carried catena needs, for LD_LIBRARY_PATH: the
# loader's own, CUDA's, or one under /opt (where a Python package may keep NVIDIA's wheels). One
# that is nowhere is taken from .device/cuda-fallback: CUDA's runtime itself, or a stand-in that
# fails every call (the driver, cuBLAS, cuRAND), with which catena still starts and measures the
# engine, and only its trainer's CUDA step fails, saying why.
cuda_library_path() {
  local lib dir dirs="" stubbed=""
  for lib in libcuda.so.1 libcublas.so.13 libcudart.so.13 libcurand.so.10; do
    dir="$(ldconfig -p | awk -v lib="$lib" '$1 == lib { print $NF; exit }')"
    [ -n "$dir" ] || dir="$({ find /usr/local/nvidia /usr/local/cuda /usr/local/cuda-13* /opt /usr/lib \
      -name "$lib" 2>/dev/null || true; } | head -n 1)"
    if [ -n "$dir" ]; then
      dir="$(dirname "$dir")"
    else
      dir="$pack/cuda-fallback"
      echo "Not found here: $lib; the carried one is used." >&2
      [ "$lib" = libcudart.so.13 ] || stubbed="$stubbed $lib"
    fi
    case ":$dirs:" in *":$dir:"*) ;; *) dirs="${dirs:+$dirs:}$dir" ;; esac
  done
  [ -z "$stubbed" ] || echo "Stand-ins for$stubbed: the trainer's CUDA step will fail." >&2
  echo "$dirs"
}

# build_anchor cuda|vulkan|cpu TOOL_FOLDER TARGET: one of llama.cpp's tools, printed as a path.
# On the GPU machine the builds go to $builds, outside the carried .device (a second call carries
# .device again, which replaces that folder there, but leaves the ignored target/ as it was), with
# llama.cpp's shared libraries beside the tools for catena. A CUDA build placed there by
# --place-cuda is found done.
build_anchor() {
  local backend="$1"
  shift
  case "$backend" in
    cpu) scripts/setup/llama-tool.sh "$@" ;;
    cuda) CARGO_TARGET_DIR="$builds" LLAMA_TOOLS_CPU=x86-64-v3 LLAMA_TOOLS_SHARED=1 LLAMA_SRC="$pack/unpacked/llama.cpp" LLAMA_TOOLS_SRC="$pack/unpacked/tools" \
      scripts/setup/llama-tool.sh --gpu "$@" ;;
    vulkan) CARGO_TARGET_DIR="$builds" LLAMA_TOOLS_CPU=x86-64-v3 LLAMA_TOOLS_SHARED=1 LLAMA_SRC="$pack/unpacked/llama.cpp" LLAMA_TOOLS_SRC="$pack/unpacked/tools" \
      VULKAN_SDK="$pack/unpacked/vulkan" CMAKE_PREFIX_PATH="$pack/unpacked/vulkan/usr" PATH="$pack/unpacked/vulkan/usr/bin:$PATH" \
      CPLUS_INCLUDE_PATH="$pack/unpacked/vulkan/include" \
      LD_LIBRARY_PATH="$pack/unpacked/vulkan/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" \
      scripts/setup/llama-tool.sh --vulkan "$@" ;;
  esac
}

# build_anchors BACKEND: the three tools for one backend, their paths on three lines.
build_anchors() {
  build_anchor "$1" llama-bench llama-bench
  build_anchor "$1" batched-bench llama-batched-bench
  build_anchor "$1" simple llama-simple
}

# run_catena BACKEND ARGS...: catena on that backend's llama.cpp. This machine's own build (--cpu)
# has llama.cpp linked in; the carried one loads the libraries built beside the backend's tools,
# and is stopped after catena_limit_s seconds where that is set.
run_catena() {
  local backend="$1"
  shift
  # (catena_limit_s unquoted: `timeout SECONDS`, or nothing where it is empty)
  on_backend "$backend" ${catena_limit_s:+timeout $catena_limit_s} "$catena" "$@"
}

# on_backend BACKEND COMMAND...: on the GPU machine, a command with that backend's libraries and
# the CUDA libraries found there first on the loader's path, for catena and its anchors alike (a
# CUDA build made here names this machine's folders in its RUNPATH, not the GPU machine's).
on_backend() {
  local backend="$1"
  shift
  if [ "$mode" = cpu ]; then
    "$@"
  else
    LD_LIBRARY_PATH="${libs[$backend]}:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
  fi
}

# catena_bench BACKEND ARGS...: `catena bench ARGS --json` on that backend's llama.cpp, its JSON on
# stdout, stopped after bench_limit_s seconds where that is set. Where it fails with its greedy
# picks made in llama.cpp's decode (llama.cpp's samplers in the graph are experimental in the
# vendored tree, and a lent GPU is the first to run them on CUDA), it runs again with --host-picks
# and adds the first run's last lines as "device_picks_error": the table keeps its other rows.
catena_bench() {
  local backend="$1" out status=0 err="$work/catena-bench.err"
  shift
  out="$(catena_limit_s="$bench_limit_s" run_catena "$backend" bench "$@" --json 2>"$err")" || status=$?
  cat "$err" >&2
  if [ "$status" = 0 ]; then
    printf '%s\n' "$out"
    return
  fi
  case " $* " in *" --host-picks "*) return "$status" ;; esac
  echo "catena bench failed (exit $status) with the picks in llama.cpp's decode: again with --host-picks" >&2
  out="$(catena_limit_s="$bench_limit_s" run_catena "$backend" bench "$@" --host-picks --json)"
  python3 - "$out" "$err" "$status" <<'EOF'
import json, sys
out, err, status = json.loads(sys.argv[1]), open(sys.argv[2], errors="replace").read().splitlines(), sys.argv[3]
said = " / ".join(l.strip() for l in err[-3:] if l.strip()) or "no output"
out["device_picks_error"] = f"exit status {status}: {said}".replace("|", "/")[:600]
print(json.dumps(out))
EOF
}

# engine ANCHOR_NAME LLAMA_BENCH LLAMA_SIMPLE: alternating rounds of llama-bench, catena bench (its
# greedy picks made in llama.cpp's decode, then its generation again with the picks made on the
# CPU from the logits, as under a grammar) and llama-simple (its generation speed, the mean of
# `reps` runs); one JSON line a round.
engine() {
  local name="$1" bench="$2" simple="$3" round anchor ours host generator rep
  for round in $(seq "$rounds"); do
    echo "  $name, round $round" >&2
    anchor="$(on_backend "$name" "$bench" -m "$model" -p "$pp" -n "$tg" -t "$threads" -r "$reps" -ngl "$ngl" -o json)"
    ours="$(catena_bench "$name" --model "$model" -p "$pp" -n "$tg" -t "$threads" -r "$reps" --gpu-layers "$ngl")"
    host="$(catena_bench "$name" --model "$model" -p 0 -n "$tg" -t "$threads" -r "$reps" --gpu-layers "$ngl" --host-picks)"
    generator=""
    for rep in $(seq "$reps"); do
      # It prints "decoded N tokens in S s, speed: R t/s" on stderr, the text on stdout. It takes
      # no thread count (llama.cpp's default, 4); with every layer on the GPU the CPU's threads
      # barely count (catena bench at 1 and 8 threads on the H200: 760 and 769 tok/s).
      generator="$generator $(on_backend "$name" "$simple" -m "$model" -n "$tg" -ngl "$ngl" "Hello" 2>&1 >/dev/null |
        sed -n 's/.*decoded [0-9]* tokens in .* speed: \([0-9.]*\) t\/s.*/\1/p')"
    done
    python3 - "$name" "$anchor" "$ours" "$generator" "$host" <<'EOF'
import json, statistics, sys
anchor = {("pp" if r["n_prompt"] else "tg") + str(r["n_prompt"] or r["n_gen"]): r["avg_ts"]
          for r in json.loads(sys.argv[2])}
ours = json.loads(sys.argv[3])
runs = [float(x) for x in sys.argv[4].split()]
host = json.loads(sys.argv[5])
print(json.dumps({"kind": "engine", "anchor_name": sys.argv[1], "anchor": anchor,
                  "catena": {t["test"]: t["tokens_per_s"] for t in ours["tests"]},
                  "catena_host_picks": host["tests"][0]["tokens_per_s"],
                  "picks": ours["picks"], "device_picks_error": ours.get("device_picks_error"),
                  "generator": statistics.mean(runs) if runs else None,
                  "gpu_layers": ours["gpu_layers"]}))
EOF
  done
}

# batched ANCHOR_NAME LLAMA_BATCHED_BENCH: a group decoded together, alternating; one JSON line a
# round.
batched() {
  local name="$1" bench="$2" round anchor ours
  for round in $(seq "$rounds"); do
    echo "  $name batched, round $round" >&2
    anchor="$(on_backend "$name" "$bench" -m "$model" -c $(((bpp + btg + 16) * group)) -b 512 -ub 512 -npp "$bpp" -ntg "$btg" \
      -npl "$group" -t "$threads" -ngl "$ngl" --output-format jsonl 2>/dev/null | grep '^{')"
    ours="$(catena_bench "$name" --model "$model" -p "$bpp" -n "$btg" -r 1 -t "$threads" --gpu-layers "$ngl" \
      --sequences "$group")"
    python3 - "$name" "$anchor" "$ours" <<'EOF'
import json, sys
anchor = json.loads(sys.argv[2].splitlines()[0])["speed_tg"]
ours = json.loads(sys.argv[3])
print(json.dumps({"kind": "batched", "anchor_name": sys.argv[1], "anchor": anchor,
                  "catena": ours["tests"][0]["tokens_per_s"], "picks": ours["picks"],
                  "device_picks_error": ours.get("device_picks_error")}))
EOF
  done
}

# sft_step WORK BACKEND DEVICE: two SFT steps on the random-weights model, the trainer on DEVICE
# (cpu or cuda; catena loads BACKEND's llama.cpp either way): one JSON line with the command's
# seconds and each step's event, or with the error where the run failed (a CUDA trainer that
# fails on its first GPU must not cost the engine figures measured before it).
# 16 short chains, about 1,000 tokens a step: the first step pays what is done once (the weights
# dequantised; on a GPU presumably the kernels loaded too), the second is the steady one.
sft_step() {
  local work="$1" backend="$2" device="$3" data="$1/sft.jsonl"
  python3 - "$data" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(16):
        a, b = 17 + 7 * i, 23 + 5 * i
        chain = (f"<code>\n```py\nprint({a} * {b})\n```\n</code>\n<observation>\n[EXECUTED] Code exited with "
                 f"status 0.\n[STDOUT:BEGIN]\n{a * b}\n[STDOUT:END]\n</observation>\n\n<answer>\\boxed{{{a * b}}}</answer>")
        f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {a} * {b}?"},
                                         {"role": "assistant", "content": chain}]}) + "\n")
EOF
  local start end status=0
  start="$(date +%s.%N)"
  rm -rf "$work/sft-$device"
  # A GPU run gets at most 150 s (about 30 s are expected), so a hung one still leaves the table.
  catena_limit_s="$([ "$device" = cuda ] && echo 150)" run_catena "$backend" train sft --json --base "$model" --data "$data" --out "$work/sft-$device" --rank 8 \
    --max-steps 2 --batch-tokens 1024 --eval-fraction 0 --device "$device" >"$work/sft-$device.log" 2>&1 || status=$?
  end="$(date +%s.%N)"
  python3 - "$work/sft-$device.log" "$start" "$end" "$device" "$status" <<'EOF'
import json, sys
log, start, end, device, status = sys.argv[1:]
lines = open(log).read().splitlines()
steps = [json.loads(l) for l in lines if l.startswith('{"event":"step"')]
line = {"kind": "sft", "device": device, "seconds": float(end) - float(start), "steps": steps}
if status != "0" or len(steps) != 2:
    said = [l.strip() for l in lines if l.startswith(("error", "  caused by"))] or lines[-3:]
    line["error"] = " / ".join(said).replace("|", "/")[:600] or f"exit status {status}"
print(json.dumps(line))
EOF
}

# The table, from the JSON lines; fails when a figure is missing or not positive.
report() {
  python3 - "$1" "$2" <<'EOF'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
device = sys.argv[2]
def positive(x, what):
    if not isinstance(x, (int, float)) or not x > 0:
        sys.exit(f"device check: {what} is {x!r}, not a speed")
    return x
out = [f"Device: {device}", "",
       "| test | anchor | anchor tok/s (per round) | catena tok/s (per round) | median ratio |",
       "|---|---|---|---|---|"]
fmt = lambda xs: ", ".join(f"{x:,.1f}" for x in xs)
for name in dict.fromkeys(l["anchor_name"] for l in lines if l["kind"] == "engine"):
    rounds = [l for l in lines if l["kind"] == "engine" and l["anchor_name"] == name]
    for test in rounds[0]["anchor"]:
        a = [positive(r["anchor"].get(test), f"llama-bench {test}") for r in rounds]
        c = [positive(r["catena"].get(test), f"catena {test}") for r in rounds]
        ratio = statistics.median(x / y for x, y in zip(c, a))
        picks = f", picks: {rounds[0]['picks']}" if test.startswith("tg") else ""
        out.append(f"| {test}, {rounds[0]['gpu_layers']} layers offloaded{picks} | llama-bench ({name}) | {fmt(a)} | {fmt(c)} | **{ratio:.3f}** |")
    tg = next(t for t in rounds[0]["catena"] if t.startswith("tg"))
    a = [r["anchor"][tg] for r in rounds]
    c = [positive(r.get("catena_host_picks"), "catena --host-picks") for r in rounds]
    ratio = statistics.median(x / y for x, y in zip(c, a))
    out.append(f"| {tg}, picks from the logits on the CPU (--host-picks) | llama-bench ({name}) | {fmt(a)} | {fmt(c)} | **{ratio:.3f}** |")
    a = [positive(r.get("generator"), "llama-simple") for r in rounds]
    c = [r["catena"][tg] for r in rounds]
    ratio = statistics.median(x / y for x, y in zip(c, a))
    out.append(f"| {tg}, a generator's loop | llama-simple ({name}) | {fmt(a)} | {fmt(c)} | **{ratio:.3f}** |")
for name in dict.fromkeys(l["anchor_name"] for l in lines if l["kind"] == "batched"):
    rounds = [l for l in lines if l["kind"] == "batched" and l["anchor_name"] == name]
    a = [positive(r["anchor"], "llama-batched-bench") for r in rounds]
    c = [positive(r["catena"], "catena --sequences") for r in rounds]
    ratio = statistics.median(x / y for x, y in zip(c, a))
    out.append(f"| a group decoded together | llama-batched-bench ({name}) | {fmt(a)} | {fmt(c)} | **{ratio:.3f}** |")
failed = {f'{l["anchor_name"]}, {l["kind"]}': l["device_picks_error"] for l in lines if l.get("device_picks_error")}
for where, error in failed.items():
    out += ["", f"catena's picks in llama.cpp's decode failed ({where}), so that row's catena ran with --host-picks: {error}"]
sft = {l["device"]: l for l in lines if l["kind"] == "sft"}
if sft:
    out += ["", "Two SFT steps (`catena train sft --max-steps 2 --batch-tokens 1024`, rank 8, 16 samples):", "",
            "| trainer on | whole command (s) | step 1: tokens, tok/s | step 2: tokens, tok/s |", "|---|---|---|---|"]
    for device, l in sft.items():
        if "error" in l:
            out.append(f"| {device} | failed: {l['error']} | | |")
            continue
        cells = [f"{s['tokens']}, {positive(s['tokens_per_second'], 'an SFT step'):,.1f}" for s in l["steps"]]
        out.append(f"| {device} | {positive(l['seconds'], 'the SFT run'):.1f} | {cells[0]} | {cells[1]} |")
    if "error" not in sft.get("cuda", {"error": ""}) and "error" not in sft.get("cpu", {"error": ""}):
        ratio = sft["cuda"]["steps"][1]["tokens_per_second"] / sft["cpu"]["steps"][1]["tokens_per_second"]
        out += ["", f"The trainer on CUDA against the CPU, step 2: **{ratio:.2f}x**"]
    if "error" in sft.get("cpu", {}):
        sys.exit("device check: the SFT run on the CPU failed")
print("\n".join(out))
EOF
}

if [ "$mode" = prepare ]; then
  prepare
  exit 0
elif [ "$mode" = place-cuda ]; then
  place_cuda
  exit 0
fi

started="$SECONDS"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The measurements go where the device tool returns files as they are made, and to stderr, so a
# call stopped at its limit still brings back what was measured.
logs="${OUT:-$work}"
mkdir -p "$logs"
results="$logs/results.jsonl"
: >"$results"
record() { tee -a "$results" >&2; }
declare -A bench batched_bench simple build_pid libs
if [ "$mode" = cpu ]; then
  catena="$(catena_bin)"
  anchors=(cpu)
  ngl=0 threads="$(physical_cores)" rounds=1 reps=1 pp=64 tg=16 bpp=32 btg=16 group=2
  # No limit on a loaded CI machine: a slow run there is not a hung one.
  bench_limit_s=""
  device="CPU only ($(nproc) cores): the dry run, small sizes"
else
  unpack >&2
  catena="$pack/unpacked/catena"
  cuda_libs="$(cuda_library_path)"
  [ -f "$nvidia_icd" ] && export VK_DRIVER_FILES="$nvidia_icd"
  anchors=(vulkan)
  if [ -f "$cuda_build/placed" ]; then
    anchors+=(cuda) cuda_from="carried (--place-cuda): made with CUDA 13.0 where catena was built, for compute capability $cuda_arch"
  elif command -v nvcc >/dev/null; then
    anchors+=(cuda) cuda_from="built here"
  else
    echo "No nvcc here and no CUDA build placed: no CUDA build of llama.cpp, for catena or its anchor." >&2
  fi
  ngl=99 threads=8 rounds=3 reps=3 pp=512 tg=128 bpp=256 btg=128 group=8
  # A `catena bench` there decodes for a few seconds at the rates measured; 120 s leaves room for
  # loading the model and a first Vulkan batch, and stops a hung run before it takes the call.
  bench_limit_s=120
  # DEVICE_CHECK_QUICK=1: the small sizes, for a rehearsal of this path on a slow device (lavapipe).
  if [ "${DEVICE_CHECK_QUICK:-0}" = 1 ]; then threads=2 rounds=1 reps=1 pp=64 tg=16 bpp=32 btg=16 group=2; fi
fi

# Every build before any measurement: a call stopped in a build leaves nothing half measured,
# and the next call on the same machine finds the finished builds. The backends build side by
# side: each has long single-file stretches (ggml-vulkan.cpp, the shader generator) that leave
# cores idle. Their logs go where the device tool returns files. On the GPU machine the carried
# catena cannot start before a build has made llama.cpp's libraries.
for backend in "${anchors[@]}"; do
  step "llama.cpp's tools with the $backend backend (log: $logs/build-$backend.log)"
  # Job control on: each build is a process group of its own, so that a build stopped at the
  # deadline takes its compilers with it.
  set -m
  build_anchors "$backend" >"$work/tools-$backend" 2>"$logs/build-$backend.log" &
  build_pid[$backend]=$!
  set +m
done
measured=()
for backend in "${anchors[@]}"; do
  pid="${build_pid[$backend]}"
  if [ "$mode" = gpu ] && [ "$backend" != vulkan ]; then
    while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - started)) -lt $((budget_s - measure_reserve_s)) ]; do sleep 2; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -- -"$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      echo "The $backend build was still running after $((SECONDS - started)) s: stopped, and measured without it (its objects stay in target/device-check; run the check again on the same machine to finish it)." >&2
      continue
    fi
  fi
  if ! wait "$pid"; then
    tail -n 30 "$logs/build-$backend.log" >&2
    die "the $backend build of llama.cpp's tools failed (the end of its log is above)"
  fi
  bench[$backend]="$(sed -n 1p "$work/tools-$backend")"
  batched_bench[$backend]="$(sed -n 2p "$work/tools-$backend")"
  simple[$backend]="$(sed -n 3p "$work/tools-$backend")"
  libs[$backend]="$(dirname "${bench[$backend]}")"
  echo "  $backend: ${bench[$backend]} and ${batched_bench[$backend]}, after $((SECONDS - started)) s" >&2
  measured+=("$backend")
done
first="${measured[0]}"

model="$work/random-weights.gguf"
if [ "$mode" = cpu ]; then
  # The same path as the GPU machine's: a header cut from the real model, random weights from it.
  header="$work/header.gguf"
  run_catena cpu models random-weights --like "$(default_model "$catena")" --out "$header" --header-only
else
  header="$pack/unpacked/model-header.gguf"
fi
run_catena "$first" models random-weights --like "$header" --out "$model" --seed 1

# A backend whose libraries show catena no GPU is not measured: its numbers would be the CPU's.
found=()
for backend in "${measured[@]}"; do
  step "what catena finds with llama.cpp's $backend build"
  run_catena "$backend" doctor --model "$model" | tee "$work/doctor-$backend.txt" >&2 || true
  name="$(case "$backend" in cuda) echo CUDA0 ;; vulkan) echo Vulkan0 ;; *) echo CPU ;; esac)"
  if [ "$mode" = gpu ] && ! grep -q "$name" "$work/doctor-$backend.txt"; then
    echo "catena found no $name with the $backend build (the doctor above): not measured." >&2
    continue
  fi
  found+=("$backend")
done
[ "${#found[@]}" -gt 0 ] || die "catena found no GPU here with any build: nothing to measure"
measured=("${found[@]}")
if [ "$mode" = gpu ]; then
  device="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
    sed -n 's/^ *device *\(Vulkan0 .*\)/\1/p' "$work/doctor-vulkan.txt" 2>/dev/null || true)"
  # The machine's CUDA release and cuBLAS libraries, and where the carried trainer's came from.
  if command -v nvcc >/dev/null; then
    # (find fails on a folder the image lacks; what it found still counts.)
    cublas="$({ find /usr/local /usr/lib /opt -name 'libcublas.so.*' 2>/dev/null || true; } | sed 's|.*/||' | sort -u | tr '\n' ' ')"
    device="$device; $(nvcc --version | sed -n 's/^Cuda compilation tools, //p'); cuBLAS: ${cublas:-none found}"
  fi
  device="$device; catena's CUDA libraries from $cuda_libs"
  case " ${measured[*]} " in *" cuda "*) device="$device; llama.cpp's CUDA build $cuda_from" ;; esac
fi

for backend in "${measured[@]}"; do
  step "engine against llama.cpp ($backend)"
  engine "$backend" "${bench[$backend]}" "${simple[$backend]}" | record
  batched "$backend" "${batched_bench[$backend]}" | record
done
# The trainer on the GPU where this catena has CUDA (the carried one; the dry run's release build
# has none), then on the CPU.
trainer_devices=(cpu)
[ "$mode" = gpu ] && trainer_devices=(cuda cpu)
for trainer_device in "${trainer_devices[@]}"; do
  step "two SFT steps, the trainer on $trainer_device"
  sft_step "$work" "$first" "$trainer_device" | record
done

step "the table"
report "$results" "$device" | tee "${OUT:-$work}/device-check.md"
