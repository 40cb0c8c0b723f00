#!/usr/bin/env bash
# Assembles the part of CUDA 13.0 that a `--features catena-trainer/cuda` build needs, from
# NVIDIA's wheels on PyPI, and prints the folder (bin/nvcc, include/, lib/): for building the GPU
# check's carried trainer and llama.cpp's CUDA build (scripts/device-check.sh --prepare) on a
# machine with no GPU and no CUDA installed. candle compiles its kernels to PTX with nvcc and
# cudarc links the CUDA libraries by name (`-lcuda -lcublas -lcurand -lcudart ...`); llama.cpp's
# CMake compiles its kernels with nvcc and links the same libraries. So the build needs the
# compiler, the headers and the libraries to link against, nothing that runs a GPU.
#
# The release is pinned to 13.0, the one the lent H200's driver (580) and its CUDA image carry
# (docs/BENCHMARKS.md, "The GPU check"): PTX from a newer nvcc would not load on that driver, and
# the libraries' major versions (libcublas.so.13, libcurand.so.10, libcudart.so.13) are what the
# binary will ask the GPU machine for.
#
# The driver library, libcuda.so.1, comes with NVIDIA's driver and from no wheel. lib/stubs/
# holds a stand-in for linking: every function cudarc's driver bindings declare, each returning
# CUDA_ERROR_NO_DEVICE (100). On a machine without NVIDIA's driver, a carried binary started with
# it in LD_LIBRARY_PATH runs and finds no GPU, as it would on a machine without one; it never
# stands in for the driver where the driver is.
#
# Usage: scripts/setup/cuda-toolkit.sh   (prints the folder; about 1.2 GB, 680 MB of wheels)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
cd "$root"
home="$target/cuda-13.0"
cuda="$home/nvidia/cu13"
wheels=(
  nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvrtc==13.0.88 nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35
)
# What a finished folder has; a folder without it (an earlier run stopped, or an older layout
# without lib64) is made again.
done_mark="$(printf '%s ' "${wheels[@]}") lib64"
if [ "$(cat "$home/.done" 2>/dev/null)" != "$done_mark" ]; then
  rm -rf "$home"
  mkdir -p "$home/wheels"
  step "CUDA 13.0's compiler and libraries, from PyPI (about 680 MB)" >&2
  python3 -m pip download -q --no-deps --disable-pip-version-check --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
    --python-version 3.12 -d "$home/wheels" "${wheels[@]}" >&2
  for wheel in "$home"/wheels/*.whl; do
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("nvidia/")])' "$wheel" "$home"
  done
  rm -rf "$home/wheels"
  # zipfile drops the permission bits: the compiler's programs must run.
  chmod +x "$cuda"/bin/* "$cuda"/bin/crt/* "$cuda"/nvvm/bin/* 2>/dev/null || true
  # The names the linker looks for (`-lcublas` finds libcublas.so); the wheels carry the sonames.
  for lib in cublas cublasLt cudart nvrtc; do ln -sf "lib$lib.so.13" "$cuda/lib/lib$lib.so"; done
  ln -sf libcurand.so.10 "$cuda/lib/libcurand.so"
  # nvcc's profile names lib64/ (and lib64/stubs) for linking, as an installed toolkit has it;
  # the wheels have lib/. CMake's check of the CUDA compiler links through nvcc.
  ln -sfn lib "$cuda/lib64"
  # The driver's stand-in, from the functions cudarc declares (its bindings are in the lock file).
  cudarc="$(crate_dir cudarc --all-features)"
  mkdir -p "$cuda/lib/stubs"
  grep -ohE '^ +fn cu[A-Za-z0-9_]*\(' "$cudarc/src/driver/sys/mod.rs" | sed -E 's/^ +fn //; s/\($//' |
    sort -u | awk '{ print "int " $1 "(void) { return 100; }" }' >"$cuda/lib/stubs/libcuda.c"
  [ -s "$cuda/lib/stubs/libcuda.c" ] || die "found no driver functions in cudarc's bindings ($cudarc)"
  cc -shared -fPIC -o "$cuda/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 "$cuda/lib/stubs/libcuda.c"
  ln -sf libcuda.so "$cuda/lib/stubs/libcuda.so.1"
  # Stand-ins of the same kind for the large libraries the binary links, under their sonames only
  # (so the linker never takes them for `-lcublas`): the GPU check carries them for a machine
  # whose CUDA libraries it cannot find, so that catena still starts there and only its trainer's
  # GPU step fails. Their functions carry the real ones' symbol version (the soname). The runtime
  # (libcudart, 0.7 MB) travels as itself: llama.cpp's CUDA backend crashed on its stand-in
  # (which returns a number where a pointer is due, as from cudaGetErrorString), and the real one
  # says there is no driver.
  for lib in libcublas.so.13 libcurand.so.10; do
    nm -D --defined-only "$cuda/lib/$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print "int " $3 "(void) { return 100; }" }' \
      >"$cuda/lib/stubs/$lib.c"
    [ -s "$cuda/lib/stubs/$lib.c" ] || die "found no functions in $lib"
    echo "$lib { global: *; };" >"$cuda/lib/stubs/$lib.map"
    cc -shared -fPIC -o "$cuda/lib/stubs/$lib" -Wl,-soname,"$lib" -Wl,--version-script="$cuda/lib/stubs/$lib.map" \
      "$cuda/lib/stubs/$lib.c"
  done
  # (Not `nvcc | grep -q`: grep leaving early could fail the pipeline under pipefail.)
  grep -q 'release 13\.0,' <<<"$("$cuda/bin/nvcc" --version)" || die "the assembled nvcc is not CUDA 13.0"
  echo "$done_mark" >"$home/.done"
fi
echo "$cuda"
