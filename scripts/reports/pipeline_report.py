"""results.md and results.json of a bench-pipeline.sh folder: per global batch and variant,
the median over rounds of each run's mean step after the skipped ones, images/s and the
speedup over one rank with one thread; for the pipeline, each stage's busy time per step and
idle fraction (summary.json) against GPipe's bubble, and the step its stages' measured times
predict. A step is two pipelined phases (D's step: G forward -> D; G's step: D -> G
backward), each of which GPipe's formula times for two stages of a and b per micro-batch as
(m - 1) max(a, b) + a + b (equal stages: idle (p - 1) / (m + p - 1)); D's update sits between
them. The stages' busy times per phase come from the run's trace (compute-track spans)."""

import json
import os
import re
import statistics


def _phases(trace, skip):
    """Mean ms per step after `skip` of [G stage phase 1, phase 2, D stage phase 1, D's
    update, phase 2] from a 2-rank pipeline's trace: G's forwards (and the update landing in
    them) then its backwards; D's spans before its update, the update, and after it."""
    events = json.load(open(trace))["traceEvents"]
    per_step = {}
    for e in events:
        step = e.get("args", {}).get("step")
        if e.get("ph") != "X" or step is None or step < skip or e.get("cat") == "wait":
            continue
        per_step.setdefault(step, {1: [], 2: []}).setdefault(e["pid"], []).append(e)
    sums = []
    for spans in per_step.values():
        g, d = spans.get(1, []), sorted(spans.get(2, []), key=lambda e: e["ts"])
        g1 = sum(e["dur"] for e in g if e["cat"] in ("forward", "upload", "send", "adam"))
        g2 = sum(e["dur"] for e in g if e["cat"].startswith("backward"))
        adam = [i for i, e in enumerate(d) if e["cat"] == "adam"]
        if not adam:
            continue
        d1 = sum(e["dur"] for e in d[: adam[0]])
        du = sum(e["dur"] for e in d[adam[0] : adam[-1] + 1])
        d2 = sum(e["dur"] for e in d[adam[-1] + 1 :])
        sums.append([x / 1e3 for x in (g1, g2, d1, du, d2)])
    return [statistics.fmean(s[k] for s in sums) for k in range(5)] if sums else None


def _predicted(phases, m):
    """The step GPipe's formula gives for the measured phases and m micro-batches."""
    g1, g2, d1, du, d2 = phases
    pipelined = lambda a, b: (m - 1) * max(a, b) + a + b
    return pipelined(g1 / m, d1 / m) + du + pipelined(d2 / m, g2 / m)


def _run(run_dir, skip):
    """(mean step ms after `skip`, the summary's pipeline section or None, the trace's
    phases or None)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = [r for r in map(json.loads, f) if r.get("type") == "step" and r["step"] > skip]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    trace = os.path.join(run_dir, "trace.json")
    phases = _phases(trace, skip) if os.path.exists(trace) else None
    return statistics.fmean(s["ms"] for s in steps), summary.get("pipeline"), phases


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
            phases = [g[2] for g in got if g[2]]
            phases = [statistics.median(p[k] for p in phases) for k in range(5)] if phases else None
            row.update(
                micro_batches=m,
                busy_ms=busy,
                idle_fraction=[statistics.median(p["idle_fraction"][k] for p in pipes) for k in range(2)],
                bubble_formula=pipes[0]["bubble_formula"],
                phases_ms=phases,
                predicted_step_ms=_predicted(phases, m) if phases else max(busy) * (m + 1) / m,
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
        "waits (G's, D's, median step); predicted: GPipe's formula over each phase of the step from the stages' "
        "times in the trace (the module's doc).",
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
    lines += [
        "",
        "Each stage's busy ms per step by phase (trace): G's forwards (and its update landing in them) and "
        "backwards; D's passes before its update, the update, and its passes on the fakes after it.",
        "",
        "| batch | variant | G forward | G backward | D before update | D update | D after update |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for (batch, variant), r in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[1].get("micro_batches", 0))):
        if r.get("phases_ms"):
            lines.append(f"| {batch} | {variant} | " + " | ".join(f"{x:.1f}" for x in r["phases_ms"]) + " |")
    lines.append("")
    for batch, r in sorted(best.items()):
        lines.append(
            f"Batch {batch}: the best pipeline is {r['variant']}, {r['speedup_over_one_thread']:.2f}x one rank with one "
            f"thread (goal 1.3x), {r['measured_over_predicted']:.2f} of the step its stages predict (goal within 15%)."
        )
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
