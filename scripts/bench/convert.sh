#!/usr/bin/env bash
# Catena's checkpoint import against llama.cpp's own tools, on the same Hugging Face checkpoint:
#
#  1. conversion: `catena models import DIR --quant F16` against `convert_hf_to_gguf.py --outtype
#     f16` (from the llama-cpp-python source distribution on PyPI, run with PyTorch and
#     transformers from PyPI in a venv under ~/.cache/catena-bench): tensors compared byte for
#     byte, metadata key by key (scripts/bench/compare-gguf.py);
#  2. quantisation: Catena's Q4_K_M (llama_model_quantize through the sys crate) against
#     `llama-quantize` built from the SAME vendored llama.cpp tree the sys crate compiles, run on
#     the Python converter's F16 file: tensors compared byte for byte;
#  3. time and peak memory of each side (/usr/bin/time -v), and their ratio.
#
# Usage: scripts/bench/convert.sh [CHECKPOINT_DIR]
#   default: the checkpoint tests/tests/convert.rs makes from the default model (run that test
#   first: `cargo test --release -p catena-e2e --test convert`).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
cd "$root"
data="${CATENA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/catena}"
checkpoint="${1:-$data/test-checkpoints/qwen2.5-coder-0.5b-instruct-hf}"
[ -f "$checkpoint/config.json" ] || die "no checkpoint at $checkpoint" 2

scripts/setup/packages.sh
cargo build --release --locked -p catena-cli >&2
catena="$target/release/catena"

work="$target/convert-anchor"
mkdir -p "$work/out"
# llama.cpp's Python converter and gguf-py, from the same source distribution llama-tool.sh uses
# for llama-quantize (built from the crate's vendored llama.cpp tree).
quantize_bin="$(scripts/setup/llama-tool.sh quantize llama-quantize)"
upstream="$(dirname "$(scripts/setup/llama-tool.sh --sources)")"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/catena-bench/convert-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q numpy torch transformers safetensors sentencepiece protobuf >&2
fi

timed() { # timed LABEL COMMAND...: wall seconds and peak MiB into $work/out/LABEL.time
  /usr/bin/time -v "${@:2}" >"$work/out/$1.log" 2>&1 || { tail -20 "$work/out/$1.log" >&2; exit 1; }
  python3 - "$work/out/$1.log" >"$work/out/$1.time" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
seconds = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.split(":"))))
peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
print(f"{seconds:.1f} {peak:.0f}")
PY
}

name="anchor-$$"
cleanup() { "$catena" models rm "$name-F16.gguf" >/dev/null 2>&1 || true; "$catena" models rm "$name-Q4_K_M.gguf" >/dev/null 2>&1 || true; }
trap cleanup EXIT
py_f16="$work/out/python-f16.gguf"
ref_q4="$work/out/llama-quantize-q4_k_m.gguf"
rm -f "$py_f16" "$ref_q4"

echo "== conversion to F16" >&2
timed python-convert "$venv/bin/python" "$upstream/convert_hf_to_gguf.py" "$checkpoint" --outtype f16 --outfile "$py_f16"
timed catena-convert "$catena" models import "$checkpoint" --quant F16 --name "$name"
# The import prints the installed file's path on stdout (the log's only line that is a path).
ours_f16="$(grep "^/.*/$name-F16.gguf$" "$work/out/catena-convert.log")"
"$venv/bin/python" scripts/bench/compare-gguf.py --gguf-py "$upstream/gguf-py" "$ours_f16" "$py_f16"

echo "== quantisation to Q4_K_M" >&2
timed llama-quantize "$quantize_bin" "$py_f16" "$ref_q4" Q4_K_M
timed catena-import "$catena" models import "$checkpoint" --quant Q4_K_M --name "$name"
ours_q4="$(grep "^/.*/$name-Q4_K_M.gguf$" "$work/out/catena-import.log")"
"$venv/bin/python" scripts/bench/compare-gguf.py --gguf-py "$upstream/gguf-py" --tensors-only \
  "$ours_q4" "$ref_q4"

read -r pc_s pc_m <"$work/out/python-convert.time"
read -r cc_s cc_m <"$work/out/catena-convert.time"
read -r lq_s lq_m <"$work/out/llama-quantize.time"
read -r ci_s ci_m <"$work/out/catena-import.time"
python3 - "$pc_s" "$pc_m" "$cc_s" "$cc_m" "$lq_s" "$lq_m" "$ci_s" "$ci_m" <<'PY'
import sys
pc_s, pc_m, cc_s, cc_m, lq_s, lq_m, ci_s, ci_m = map(float, sys.argv[1:])
print("| step | llama.cpp's tools | catena | ratio catena / llama.cpp |")
print("|---|---|---|---|")
print(f"| convert to F16: wall | {pc_s:.1f} s | {cc_s:.1f} s | {cc_s / pc_s:.2f} |")
print(f"| convert to F16: peak memory | {pc_m:.0f} MiB | {cc_m:.0f} MiB | {cc_m / pc_m:.2f} |")
print(f"| convert + quantise to Q4_K_M: wall | {pc_s + lq_s:.1f} s | {ci_s:.1f} s | {ci_s / (pc_s + lq_s):.2f} |")
print(f"| convert + quantise to Q4_K_M: peak memory | {max(pc_m, lq_m):.0f} MiB | {ci_m:.0f} MiB | {ci_m / max(pc_m, lq_m):.2f} |")
PY
