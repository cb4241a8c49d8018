"""results.md and results.json of a bench-wire.sh folder: per variant, the medians over rounds
of each run's mean step, mean wait on other ranks (the exposed exchange) and bytes sent per
step after the warm-up, and each against f32 and --no-exchange of the same round. Means over
a run's steps, not medians: block momentum pays its exchange in one step of K, which a median
would leave out."""

import json
import os
import re
import statistics


def _run_figures(run_dir, skip):
    """(mean step ms, mean wait ms, sent bytes per step) over the steps after `skip`."""
    steps = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "step" and r["step"] > skip:
                steps.append(r)
    comm = json.load(open(os.path.join(run_dir, "summary.json")))["comm"]
    sent = comm.get("sent_bytes_per_wire_step") or comm.get("sent_bytes_per_warmup_step") or comm.get("sent_bytes_per_step", 0.0)
    return statistics.fmean(s["ms"] for s in steps), statistics.fmean(s["wait_ms"] for s in steps), sent


def main(out):
    settings = dict(kv.split("=", 1) for kv in open(os.path.join(out, "settings.txt")).read().split())
    skip, variants = int(settings["skip"]), settings["variants"].split(",")
    rounds = {}
    for name in sorted(os.listdir(out)):
        m = re.fullmatch(r"r(\d+)-(.+)", name)
        if m and os.path.isdir(os.path.join(out, name)):
            rounds.setdefault(int(m.group(1)), {})[m.group(2)] = _run_figures(os.path.join(out, name), skip)
    rows = {}
    for v in variants:
        per_round = [r[v] for r in rounds.values() if v in r]
        ratio = lambda base, k: [r[v][k] / r[base][k] for r in rounds.values() if v in r and base in r and r[base][k] > 0]
        rows[v] = {
            "rounds": len(per_round),
            "step_ms": statistics.median(x[0] for x in per_round),
            "exposed_ms": statistics.median(x[1] for x in per_round),
            "sent_bytes_per_step": statistics.median(x[2] for x in per_round),
            "step_over_no_exchange": statistics.median(ratio("no-exchange", 0)) if ratio("no-exchange", 0) else None,
            "exposed_over_f32": statistics.median(ratio("f32", 1)) if ratio("f32", 1) else None,
            "bytes_over_f32": statistics.median(ratio("f32", 2)) if ratio("f32", 2) else None,
        }
    json.dump({"settings": settings, "variants": rows}, open(os.path.join(out, "results.json"), "w"), indent=1)
    fmt = lambda x, f: "-" if x is None else f.format(x)
    lines = [
        f"# Wires on {settings['hosts']} emulated hosts at {settings['rate']}",
        "",
        f"{settings['steps']} steps per run, each run's mean over its steps after {skip}; medians of "
        f"{len(rounds)} rounds, the variants taking turns in each; ratios per round, then the median.",
        "",
        "| variant | step ms | over --no-exchange | exposed exchange ms | over f32 | bytes sent per step | over f32 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v, r in rows.items():
        lines.append(
            f"| {v} | {r['step_ms']:.1f} | {fmt(r['step_over_no_exchange'], '{:.3f}')} | {r['exposed_ms']:.1f} | "
            f"{fmt(r['exposed_over_f32'], '{:.3f}')} | {r['sent_bytes_per_step']:.0f} | {fmt(r['bytes_over_f32'], '{:.4f}')} |"
        )
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
