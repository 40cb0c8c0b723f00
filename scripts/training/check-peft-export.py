#!/usr/bin/env python3
"""The PEFT export in the Python ecosystem: transformers loads the base model from the same GGUF
(dequantised), PEFT loads `DIR/peft`, and both generate greedily for a held-out task, with and
without the adapter. Needs the venv of `scripts/setup/packages.sh --bench`.

    ~/.cache/catena-bench/venv/bin/python scripts/training/check-peft-export.py learning-run
"""
import json
import os
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

run = sys.argv[1] if len(sys.argv) > 1 else "learning-run"
model_path = os.path.expanduser("~/.local/share/catena/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
folder, name = os.path.split(model_path)
torch.set_num_threads(os.cpu_count() or 1)
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
# The prompt of a training sample with a held-out question in place of its own.
messages = json.loads(open(os.path.join(run, "data", "train.jsonl")).readline())["messages"][:2]
task = json.loads(open(os.path.join(run, "data", "held-out.jsonl")).readline())
messages[1]["content"] = messages[1]["content"].rsplit("Task:\n", 1)[0] + "Task:\n" + task["question"]
ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
peft = PeftModel.from_pretrained(model, os.path.join(run, "sft", "peft"))
print("task:", task["question"])
out = peft.generate(ids, max_new_tokens=60, do_sample=False)
print("with the adapter:", repr(tok.decode(out[0, ids.shape[1]:])))
with peft.disable_adapter():
    out = peft.generate(ids, max_new_tokens=30, do_sample=False)
print("without:", repr(tok.decode(out[0, ids.shape[1]:])))
