#!/usr/bin/env bash
# The f32 matrix product at one SFT step's shapes: candle's CPU kernel (what `catena train sft`
# multiplies with) against PyTorch's (what the train.py anchor multiplies with), same threads,
# one after the other. Prints milliseconds, GFLOP/s and the ratio per shape.
#
#   scripts/bench/matmul.sh [THREADS]      (default 2; PyTorch from scripts/setup/packages.sh --bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
threads="${1:-2}"
python="${BENCH_PYTHON:-$HOME/.cache/catena-bench/venv/bin/python}"
target="${CARGO_TARGET_DIR:-target}"
# --workspace keeps the feature set of the usual build, so nothing else is rebuilt.
cargo build --release --offline --workspace --example matmul_shapes >&2
ours=$(RAYON_NUM_THREADS="$threads" "$target/release/examples/matmul_shapes")
theirs=$("$python" - "$threads" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
for name, m, k, n, transposed in [("gate_up_forward", 620, 896, 4864, True),
                                  ("down_backward", 620, 4864, 896, False),
                                  ("q_o_forward", 620, 896, 896, True),
                                  ("gate_up_backward", 620, 896, 4864, False),
                                  ("head_forward_32", 32, 896, 151936, True),
                                  ("head_backward_32", 32, 151936, 896, False),
                                  ("head_forward_128", 128, 896, 151936, True),
                                  ("head_backward_128", 128, 151936, 896, False)]:
    x = torch.randn(m, k)
    w = torch.randn(n, k).t() if transposed else torch.randn(k, n)
    x @ w
    started = time.perf_counter()
    for _ in range(10):
        x @ w
    print(name, m, k, n, f"{(time.perf_counter() - started) * 100:.2f}")
PY
)
python3 - "$ours" "$theirs" <<'PY'
import sys
ours = {l.split()[0]: l.split() for l in sys.argv[1].splitlines()}
theirs = {l.split()[0]: l.split() for l in sys.argv[2].splitlines()}
print(f"{'shape':18}{'m k n':>18}{'candle ms':>11}{'GFLOP/s':>9}{'torch ms':>10}{'GFLOP/s':>9}{'ratio':>7}")
for name, (_, m, k, n, ms) in ours.items():
    flops = 2 * int(m) * int(k) * int(n)
    t_ms = float(theirs[name][4])
    print(f"{name:18}{m + ' ' + k + ' ' + n:>18}{float(ms):>11.1f}{flops / float(ms) / 1e6:>9.1f}"
          f"{t_ms:>10.1f}{flops / t_ms / 1e6:>9.1f}{t_ms / float(ms):>7.2f}")
print("ratio = PyTorch's time / candle's (above 1: candle is faster)")
PY
