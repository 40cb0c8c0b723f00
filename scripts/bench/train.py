#!/usr/bin/env python3
"""Training speed and memory: `catena train sft` against PyTorch + PEFT on the same model, data,
LoRA configuration and sequence lengths, measured in one run, printed as a ratio.

Both sides train the default model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF) for the same
number of optimizer steps, one trajectory per step unless --batch-tokens says more, LoRA rank 16 / alpha 32 on
q,k,v,o,gate,up,down, AdamW at 2e-4, the prompt masked. PyTorch loads the GGUF through
transformers (dequantised to f32, the dense model PEFT trains); catena keeps the GGUF's
quantised weights. The first step of each is a warm-up and is not counted. Peak memory is each
process's maximum resident set (wait4).

PyTorch runs twice: with per-layer gradient checkpointing, the algorithm catena runs (each
block's forward pass done again in the backward pass), and without it, PyTorch's fastest way,
which keeps every block's activations. transformers' checkpointing only acts on layers in
training mode, and after `from_pretrained` (eval mode) and `get_peft_model` the decoder layers
stay in eval mode even though the PEFT wrapper reports training, so the checkpointed run calls
`model.train()`. Until 2026-11-29 this script enabled checkpointing without it: that side ran
without checkpointing (a hook on a decoder layer's feed-forward module counts one run a step,
not two; the script now checks that count on both runs).

    python3 scripts/bench/train.py --steps 6 [--rounds 2] [--threads 2] [--device cpu|cuda]
                                   [--batch-tokens 4096]

With --batch-tokens N a step trains on samples until they hold N tokens (catena's own
`--batch-tokens`, 4,096 by default in `catena train sft`; this script's default, 1, is one
trajectory a step). Catena evaluates a step's samples that share their beginning as packs;
PyTorch runs them one after another and accumulates their gradients (each sample's loss weighted
by its trained tokens over the step's, the mean catena takes): gradient accumulation, the usual
way to train on samples of unequal lengths without padding them, whose memory is one sample's.
Catena shuffles its samples and PyTorch takes them in the file's order, so the steps hold
different samples of the same file; the rates are per token.

With --rounds N the three runs are made N times, in turn (catena, checkpointed, not), so that a
machine whose speed drifts over minutes (the 2-core VMs here, by a third or more) weighs on every
side alike; each round's ratios are printed, then the ratio of the totals.

Needs torch, transformers, peft and gguf (scripts/setup/packages.sh --bench installs them into a
virtual environment outside the clone) and a release build of catena.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def catena_bin():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.environ.get("CATENA_BIN", os.path.join(target, "release", "catena"))


def spawn_measured(cmd, env=None):
    started = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed:\n{err[-3000:]}")
    return out, err, usage.ru_maxrss / 1024.0, time.time() - started


def catena_side(args, data, out_dir):
    cmd = [
        catena_bin(), "train", "sft", "--json", "--data", data, "--out", out_dir,
        "--base", args.model, "--device", args.device, "--epochs", "1", "--batch-tokens", str(args.batch_tokens),
        "--max-steps", str(args.steps), "--eval-fraction", "0", "--checkpoint-every", "0",
        "--rank", "16", "--alpha", "32", "--lr", "2e-4", "--max-seq-len", "4096",
    ]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    out, _, peak, _ = spawn_measured(cmd, env)
    steps = [json.loads(l) for l in out.splitlines() if '"event":"step"' in l]
    counted = steps[1:]
    if not counted:
        sys.exit(f"catena reported {len(steps)} steps; at least 2 are needed (the first is a warm-up)")
    tokens = sum(s["tokens"] for s in counted)
    seconds = sum(s["tokens"] / s["tokens_per_second"] for s in counted)
    return {"tokens": tokens, "seconds": seconds, "peak_mib": peak, "steps": len(counted),
            "lengths": [s["tokens"] for s in steps]}


TORCH_WORKER = r'''
import json, os, sys, time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from peft import LoraConfig, get_peft_model
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
torch.manual_seed(0)
device = cfg["device"]
folder, name = os.path.split(cfg["model"])
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32).to(device)
if cfg["checkpointing"]:
    model.gradient_checkpointing_enable()
model.enable_input_require_grads()
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=cfg["targets"], task_type="CAUSAL_LM"))
# Checkpointing acts only on layers in training mode; from_pretrained left them in eval mode.
model.train()
# Counts the first layer's feed-forward module runs a step: 2 when the layer is recomputed.
calls = [0]
model.base_model.model.model.layers[0].mlp.register_forward_pre_hook(
    lambda *_: calls.__setitem__(0, calls[0] + 1))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
def encoded(s):
    msgs = s["messages"]
    prompt = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True)
    full = prompt + msgs[-1]["content"] + "<|im_end|>"
    ids = tok(full, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
    n_prompt = len(tok(prompt, add_special_tokens=False).input_ids)
    labels = ids.clone()
    labels[:, :n_prompt] = -100
    return ids, labels, ids.shape[1] - n_prompt
# The steps: samples in the file's order until they hold batch_tokens tokens.
steps, current, held = [], [], 0
for line in open(cfg["data"]):
    current.append(encoded(json.loads(line)))
    held += current[-1][0].shape[1]
    if held >= cfg["batch_tokens"]:
        steps.append(current)
        current, held = [], 0
    if len(steps) == cfg["steps"]:
        break
if current and len(steps) < cfg["steps"]:
    steps.append(current)
results = []
for step in steps:
    trained = sum(n for _, _, n in step)
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.time()
    total = 0.0
    for ids, labels, n in step:
        # transformers' loss is the mean over the sample's trained tokens.
        loss = model(input_ids=ids, labels=labels).loss * (n / trained)
        loss.backward()
        total += loss.item()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
    results.append({"tokens": sum(ids.shape[1] for ids, _, _ in step), "seconds": time.time() - t,
                    "loss": total, "layer_calls": calls[0] / len(step), "samples": len(step)})
    calls[0] = 0
peak_gpu = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
print(json.dumps({"steps": results, "peak_gpu_mib": peak_gpu, "torch": torch.__version__}))
'''


def torch_side(args, data, checkpointing):
    cfg = dict(model=args.model, data=data, steps=args.steps, threads=args.threads,
               device=args.device, targets=TARGETS, checkpointing=checkpointing,
               batch_tokens=args.batch_tokens)
    out, _, peak, _ = spawn_measured([args.python, "-c", TORCH_WORKER, json.dumps(cfg)])
    result = json.loads(out.strip().splitlines()[-1])
    counted = result["steps"][1:]
    # A checkpointed step runs each layer's feed-forward module twice a sample (forward, then
    # again in the backward pass).
    want = 2 if checkpointing else 1
    calls = {s["layer_calls"] for s in result["steps"]}
    if calls != {want}:
        sys.exit(f"PyTorch ran a layer's feed-forward {sorted(calls)} times a step, not {want}: "
                 f"checkpointing is {'not ' if checkpointing else ''}in effect")
    return {"tokens": sum(s["tokens"] for s in counted), "seconds": sum(s["seconds"] for s in counted),
            "peak_mib": peak, "steps": len(counted), "peak_gpu_mib": result["peak_gpu_mib"],
            "lengths": [s["tokens"] for s in result["steps"]], "torch": result["torch"]}


def total(runs):
    """The runs of one side over all rounds: tokens and seconds summed, the highest peak."""
    merged = dict(runs[0])
    merged["tokens"] = sum(r["tokens"] for r in runs)
    merged["seconds"] = sum(r["seconds"] for r in runs)
    merged["peak_mib"] = max(r["peak_mib"] for r in runs)
    return merged


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--batch-tokens", type=int, default=1,
                   help="tokens a step (default 1: one trajectory a step)")
    p.add_argument("--model", default=os.path.expanduser("~/.local/share/catena/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    p.add_argument("--python", default=os.path.expanduser("~/.cache/catena-bench/venv/bin/python"))
    p.add_argument("--data", help="trajectories (default: written by `catena train synth`)")
    args = p.parse_args()
    if args.rounds < 1 or args.steps < 2 or args.batch_tokens < 1:
        p.error("--rounds and --batch-tokens must be at least 1 and --steps at least 2 "
                "(the first is a warm-up)")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            # Trajectories of `catena train synth` hold 594 to 713 tokens.
            samples = args.steps * max(1, -(-args.batch_tokens // 590))
            subprocess.run([catena_bin(), "train", "synth", "--out", tmp, "--train", str(samples),
                            "--held-out", "0", "--seed", "99"], check=True, stderr=subprocess.DEVNULL)
            data = os.path.join(tmp, "train.jsonl")
        rounds = []
        for i in range(args.rounds):
            # A folder of its own each round: in the last one's, catena would resume, finished.
            ours = catena_side(args, data, os.path.join(tmp, f"out{i}"))
            anchors = {"checkpointed": torch_side(args, data, True),
                       "not checkpointed": torch_side(args, data, False)}
            rounds.append((ours, anchors))
    rate = lambda r: r["tokens"] / r["seconds"]
    if len(rounds) > 1:
        for i, (ours, anchors) in enumerate(rounds, 1):
            print(f"round {i}: catena {rate(ours):.1f} tokens/s; " + "; ".join(
                f"PyTorch {name} {rate(theirs):.1f}, ratio {rate(ours) / rate(theirs):.2f}x"
                for name, theirs in anchors.items()))
    ours, anchors = total([r[0] for r in rounds]), {
        name: total([r[1][name] for r in rounds]) for name in rounds[0][1]}
    print(f"tokens a step: catena {ours['lengths']}, "
          f"torch {anchors['checkpointed']['lengths']}")
    print(f"{'':44}{'tokens/s':>10}{'peak RSS MiB':>14}")
    print(f"{'catena (GGUF Q4_K_M, checkpointed)':44}{rate(ours):>10.1f}{ours['peak_mib']:>14.0f}")
    for name, theirs in anchors.items():
        label = f"PyTorch {theirs['torch']} + PEFT, {name}"
        print(f"{label:44}{rate(theirs):>10.1f}{theirs['peak_mib']:>14.0f}")
        if theirs["peak_gpu_mib"]:
            print(f"  its peak GPU memory: {theirs['peak_gpu_mib']:.0f} MiB")
    for name, theirs in anchors.items():
        print(f"ratio catena/PyTorch {name}: speed {rate(ours) / rate(theirs):.2f}x, "
              f"peak memory {ours['peak_mib'] / theirs['peak_mib']:.2f}x")


if __name__ == "__main__":
    main()
