"""results.md and results.json of a bench-pipeline.sh folder: per global batch and variant,
the median over rounds of each run's mean step after the skipped ones, images/s and the
speedup over one rank with one thread; for the pipeline, each stage's busy time per step and
idle fraction (summary.json) against GPipe's bubble, and the step they predict:
max(busy) (m + p - 1) / m with p = 2 stages."""

import json
import os
import re
import statistics


def _run(run_dir, skip):
    """(mean step ms after `skip`, the summary's pipeline section or None)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if r.get("type") == "step" and r["step"] > skip]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    return statistics.fmean(s["ms"] for s in steps), summary.get("pipeline")


def _rows(out, skip):
    runs = {}
    for name in sorted(os.listdir(out)):
        m = re.fullmatch(r"r(\d+)-b(\d+)-(.+)", name)
        if m and os.path.isdir(os.path.join(out, name)):
            runs.setdefault((int(m.group(2)), m.group(3)), []).append(_run(os.path.join(out, name), skip))
    rows = {}
    for (batch, variant), got in runs.items():
        row = {"batch": batch, "variant": variant, "rounds": len(got), "step_ms": statistics.median(g[0] for g in got)}
        row["images_per_s"] = batch / row["step_ms"] * 1e3
        pipes = [g[1] for g in got if g[1]]
        if pipes:
            m = pipes[0]["micro_batches"]
            busy = [statistics.median(p["busy_ms_per_step"][k] for p in pipes) for k in range(2)]
            row.update(
                micro_batches=m,
                busy_ms=busy,
                idle_fraction=[statistics.median(p["idle_fraction"][k] for p in pipes) for k in range(2)],
                bubble_formula=pipes[0]["bubble_formula"],
                predicted_step_ms=max(busy) * (m + 1) / m,
            )
            row["measured_over_predicted"] = row["step_ms"] / row["predicted_step_ms"]
        rows[(batch, variant)] = row
    for (batch, variant), row in rows.items():
        base = rows.get((batch, "one-1t"))
        row["speedup_over_one_thread"] = base["step_ms"] / row["step_ms"] if base else None
    return rows


def main(out):
    settings = dict(kv.split("=", 1) for kv in open(os.path.join(out, "settings.txt")).read().split())
    rows = _rows(out, int(settings["skip"]))
    best = {}
    for row in rows.values():
        if "micro_batches" in row and (row["batch"] not in best or row["step_ms"] < best[row["batch"]]["step_ms"]):
            best[row["batch"]] = row
    json.dump({"settings": settings, "rows": list(rows.values()),
               "best_pipeline": {str(b): r["variant"] for b, r in best.items()}},
              open(os.path.join(out, "results.json"), "w"), indent=1)
    f = lambda x, spec: "-" if x is None else spec.format(x)
    lines = [
        "# Pipeline against one rank and data parallelism",
        "",
        f"{settings['steps']} steps per run, each run's mean over its steps after {settings['skip']}; medians of "
        f"{settings['repeats']} rounds, the variants taking turns. one-1t/one-2t: one rank with 1/2 threads; ddp2: "
        "2 ranks of half the batch; pipe-mM: G and D on 2 ranks, M micro-batches. Busy: a stage's step less its "
        "waits (G's, D's); predicted: max(busy) (M + 1) / M.",
        "",
        "| batch | variant | step ms | images/s | over one-1t | busy G / D ms | idle G / D | bubble formula | predicted ms | measured / predicted |",
        "|---:|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for (batch, variant), r in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[1].get("micro_batches", 0), kv[0][1])):
        pipe = "micro_batches" in r
        lines.append(
            f"| {batch} | {variant} | {r['step_ms']:.1f} | {r['images_per_s']:.0f} | {f(r['speedup_over_one_thread'], '{:.2f}')} | "
            + (f"{r['busy_ms'][0]:.0f} / {r['busy_ms'][1]:.0f} | {r['idle_fraction'][0]:.2f} / {r['idle_fraction'][1]:.2f} | "
               f"{r['bubble_formula']:.3f} | {r['predicted_step_ms']:.1f} | {r['measured_over_predicted']:.2f} |"
               if pipe else "- | - | - | - | - |")
        )
    lines.append("")
    for batch, r in sorted(best.items()):
        lines.append(
            f"Batch {batch}: the best pipeline is {r['variant']}, {r['speedup_over_one_thread']:.2f}x one rank with one "
            f"thread (goal 1.3x), {r['measured_over_predicted']:.2f} of the step its stages predict (goal within 15%)."
        )
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
