#!/usr/bin/env python3
"""same-weights.py RUN_A RUN_B: exit 0 when the latest checkpoints of two training runs hold
bitwise identical tensors (G and D; metadata ignored), else name the first tensors that differ.

Python's standard library only, so that it runs where the GPU checks run (no Rust, no pip)."""
import json
import struct
import sys
from pathlib import Path


def tensors(path):
    """{name: raw bytes} of one .safetensors file (8-byte header length, JSON header, data)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    return {k: data[v["data_offsets"][0] : v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}


def latest(run):
    root = Path(run) / "checkpoints"
    try:
        return root / (root / "latest").read_text().strip()
    except OSError as e:
        sys.exit(f"same-weights: {run} has no checkpoint ({e}); did the run finish?")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: same-weights.py RUN_A RUN_B")
    a, b = latest(sys.argv[1]), latest(sys.argv[2])
    differ, count = [], 0
    for net in ("G", "D"):
        ta, tb = tensors(a / f"{net}.safetensors"), tensors(b / f"{net}.safetensors")
        if ta.keys() != tb.keys():
            sys.exit(f"same-weights: {net} tensor names differ: {sorted(ta.keys() ^ tb.keys())}")
        count += len(ta)
        differ += [f"{net} {k}" for k in sorted(ta) if ta[k] != tb[k]]
    if differ:
        sys.exit(f"same-weights: {len(differ)} of {count} tensors differ, first: {', '.join(differ[:5])}")
    print(f"same-weights: all {count} tensors bitwise identical ({a} and {b})")


main()
