#!/usr/bin/env python3
"""Our training step against PyTorch's on the same GPU, from gpu-check.sh's bench and torch
stages: the median run of each batch size, precision and launch mode, and its ratio to each
PyTorch variant.

  python3 scripts/gpu/compare-step.py OUT     (OUT holds bench-step.jsonl, bench-torch.jsonl)
"""
import json
import os
import sys

out = sys.argv[1]


def load(name):
    p = os.path.join(out, name)
    return [json.loads(line) for line in open(p)] if os.path.exists(p) else []


runs = {}
for r in load("bench-step.jsonl"):
    graphs = "+graphs" if r.get("cuda_graphs") else ""
    runs.setdefault((r["batch_size"], r.get("precision", "fp32") + graphs), []).append(r)
ours = {}
for key, rs in runs.items():
    # The run whose median step time is the median of the runs'.
    rs.sort(key=lambda r: r["ms_per_step"])
    ours[key] = dict(rs[len(rs) // 2], tflops=rs[len(rs) // 2]["gflops"] / 1e3, runs=[r["ms_per_step"] for r in rs])
torch = load("bench-torch.jsonl")
print("\nstep time, 28x28 DCGAN (median ms/step; images/s; TFLOP/s)")
for (b, p), o in sorted(ours.items()):
    print(f"ours at batch {b} {p}: run medians " + ", ".join(f"{v:.3f}" for v in o["runs"]))
def torch_tag(r):
    how = "compiled" if r.get("impl", "").startswith("pytorch-compile") else "eager"
    return f"{how} {'tf32' if r['tf32'] else 'fp32'}"
for b in sorted({k[0] for k in ours} | {r["batch"] for r in torch}):
    for r in torch:
        if r["batch"] == b:
            print(f"batch {b:4d}: torch {torch_tag(r)} {r['ms_per_step']:.3f} ms, {r['images_per_s']:.0f} img/s, {r['tflops']:.2f} TFLOP/s")
    for (bb, p), o in sorted(ours.items()):
        if bb != b:
            continue
        line = f"batch {b:4d}: ours {p} {o['ms_per_step']:.3f} ms, {o['images_per_s']:.0f} img/s, {o['tflops']:.2f} TFLOP/s"
        ratios = [f"/torch {torch_tag(r)} {o['ms_per_step'] / r['ms_per_step']:.2f}" for r in torch if r["batch"] == b]
        print(line + (" (ours" + ", ".join(ratios) + ")" if ratios else ""))
if torch:
    print("GPU:", torch[0]["gpu"], "| PyTorch", torch[0]["torch"], "cuDNN", torch[0]["cudnn"])
# Which build ran (its commit; lines from builds before it was recorded have none).
builds = sorted({r["program"] for r in load("bench-step.jsonl") if "program" in r})
if builds:
    print("ours:", ", ".join(builds))
