#!/usr/bin/env python3
"""Compares two GGUF files tensor by tensor (name, type, shape, data bytes) and key by key.

Used to check Catena's converter and quantiser against llama.cpp's own tools
(scripts/bench/convert.sh). Reads with gguf-py, llama.cpp's Python GGUF package; pass its folder
with --gguf-py (it ships in the llama-cpp-python source distribution).

Usage: compare-gguf.py --gguf-py DIR OURS.gguf THEIRS.gguf [--tensors-only]
Prints every difference; exits 1 when a tensor differs (metadata differences are listed, and
judged by the reader: some keys are written by one converter only).
"""
import argparse
import hashlib
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--gguf-py", required=True)
parser.add_argument("ours")
parser.add_argument("theirs")
parser.add_argument("--tensors-only", action="store_true")
args = parser.parse_args()
sys.path.insert(0, args.gguf_py)
import gguf  # noqa: E402


def fields(reader):
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        try:
            value = field.contents()
        except Exception:  # older gguf-py
            value = [bytes(field.parts[i]) for i in field.data]
        if isinstance(value, list) and len(value) > 8:
            digest = hashlib.sha256(repr(value).encode()).hexdigest()[:16]
            value = f"<{len(value)} items, sha256 {digest}>"
        out[name] = value
    return out


def tensors(reader):
    return {t.name: t for t in reader.tensors}


ours, theirs = gguf.GGUFReader(args.ours), gguf.GGUFReader(args.theirs)
failed = False
t_ours, t_theirs = tensors(ours), tensors(theirs)
for name in sorted(set(t_ours) | set(t_theirs)):
    a, b = t_ours.get(name), t_theirs.get(name)
    if a is None or b is None:
        print(f"tensor {name}: only in {'theirs' if a is None else 'ours'}")
        failed = True
        continue
    if a.tensor_type != b.tensor_type or list(a.shape) != list(b.shape):
        print(f"tensor {name}: {a.tensor_type.name} {list(a.shape)} vs {b.tensor_type.name} {list(b.shape)}")
        failed = True
    elif bytes(a.data.tobytes()) != bytes(b.data.tobytes()):
        print(f"tensor {name}: the data differs")
        failed = True
print(f"tensors: {len(t_ours)} ours, {len(t_theirs)} theirs, "
      f"{'identical' if not failed else 'DIFFERENT'}")
if not args.tensors_only:
    f_ours, f_theirs = fields(ours), fields(theirs)
    same = 0
    for key in sorted(set(f_ours) | set(f_theirs)):
        a, b = f_ours.get(key), f_theirs.get(key)
        if a == b:
            same += 1
        elif key not in f_ours:
            print(f"key {key}: only theirs = {b!r:.120}")
        elif key not in f_theirs:
            print(f"key {key}: only ours = {a!r:.120}")
        else:
            print(f"key {key}: ours {a!r:.120} vs theirs {b!r:.120}")
    print(f"keys: {same} equal")
sys.exit(1 if failed else 0)
