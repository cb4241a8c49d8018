"""DCGAN against WGAN-GP by sample quality at equal training wall time (`python3 scripts/reports
losses OUT [--no-plot]`, what bench-losses.sh runs last): results.md, results.json and
losses.png of its folder.

Every run OUT/LOSS-rRANKS-sSEED/ gives its epoch lines (FID and KID after each epoch, the
epoch's training seconds, the evaluation not counted; precision and recall where the run
recorded them, which say whether a loss falls short in fidelity or in diversity). For each rank count, the losses are
compared at the same training wall time: the shortest of their runs' total (the seeds' mean),
with each loss's FID at that time interpolated linearly between its epochs.
"""

import importlib.util
import json
import os
import re
import sys

from summaries import load

# wgan-gp-layer: WGAN-GP with layer norm in the critic.
RUN = re.compile(r"(dcgan|wgan-gp|wgan-gp-layer)-r(\d+)-s(\d+)$")


# The plot's line style of each loss.
LINE = {"dcgan": "-", "wgan-gp": "--", "wgan-gp-layer": ":"}


def fail(msg):
    sys.exit(f"losses: {msg}")


def read_run(d):
    """[(training seconds summed to the epoch, FID, KID)] of the evaluated epochs."""
    s = load(os.path.join(d, "summary.json"))
    rows, total = [], 0.0
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for raw in f:
            rec = json.loads(raw)
            if rec.get("type") != "epoch":
                continue
            total += rec["seconds"]
            if rec.get("fid") is not None:
                rows.append({"epoch": rec["epoch"] + 1, "seconds": total, "fid": rec["fid"], "kid": rec["kid"],
                             "precision": rec.get("precision"), "recall": rec.get("recall")})
    if not rows:
        fail(f"{d}: no epoch has a FID: train with --eval-every 1")
    return {"lr": s.get("lr"), "global_batch": s.get("global_batch_size"), "epochs": rows}


def fid_at(rows, t):
    """FID at training time t, linear between the epochs around it (None outside them)."""
    for a, b in zip(rows, rows[1:]):
        if a["seconds"] <= t <= b["seconds"]:
            w = (t - a["seconds"]) / (b["seconds"] - a["seconds"])
            return a["fid"] + w * (b["fid"] - a["fid"])
    return rows[0]["fid"] if abs(rows[0]["seconds"] - t) < 1e-9 else None


def mean(xs):
    return sum(xs) / len(xs)


def main(out, plot=True):
    if not os.path.isdir(out):
        fail(f"{out} is not a folder (give the one bench-losses.sh wrote)")
    runs = {}
    for name in sorted(os.listdir(out)):
        m = RUN.match(name)
        if m and os.path.isdir(os.path.join(out, name)):
            runs.setdefault((m.group(1), int(m.group(2))), []).append(read_run(os.path.join(out, name)) | {"name": name})
    if not runs:
        fail(f"{out} holds no runs (folders LOSS-rRANKS-sSEED, as bench-losses.sh writes them)")
    L = ["# DCGAN against WGAN-GP at equal training wall time", ""]
    env = os.path.join(out, "environment.txt")
    if os.path.exists(env):
        with open(env) as f:
            L += ["```", f.read().rstrip(), "```", ""]
    # Precision and recall: columns where any run recorded them, '-' where a seed did not.
    manifold = any(e["precision"] is not None for rs in runs.values() for r in rs for e in r["epochs"])
    L += ["FID to the test split after each epoch (mean over seeds; lower is better), against the training",
          "wall time to reach it (the epochs' seconds summed, evaluations left out)."
          + (" Precision and recall (higher is better): the share of generated images among the real ones "
             "(fidelity) and of real images the generated ones reach (diversity)." if manifold else ""), "",
          "| loss | ranks | global batch | lr | seeds | epoch | training s | FID | KID |"
          + (" precision | recall |" if manifold else ""),
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if manifold else "")]

    def cell(at, key):
        vals = [a[key] for a in at]
        return f" {mean(vals):.3f} |" if all(v is not None for v in vals) else " - |"

    for (loss, ranks), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        epochs = sorted(set.intersection(*({e["epoch"] for e in r["epochs"]} for r in rs)))
        for ep in epochs:
            at = [next(e for e in r["epochs"] if e["epoch"] == ep) for r in rs]
            L.append(f"| {loss} | {ranks} | {rs[0]['global_batch']} | {rs[0]['lr']:.6g} | {len(rs)} | {ep} | "
                     f"{mean([a['seconds'] for a in at]):.1f} | {mean([a['fid'] for a in at]):.2f} | "
                     f"{mean([a['kid'] for a in at]):.4f} |"
                     + (cell(at, "precision") + cell(at, "recall") if manifold else ""))
    L += ["", "## At equal wall time", ""]
    verdicts = []
    for ranks in sorted({k[1] for k in runs}):
        here = {loss: rs for (loss, r), rs in runs.items() if r == ranks}
        if len(here) < 2:
            continue
        t = min(mean([r["epochs"][-1]["seconds"] for r in rs]) for rs in here.values())
        fids = {}
        for loss, rs in here.items():
            vals = [fid_at(r["epochs"], t) for r in rs]
            fids[loss] = mean(vals) if all(v is not None for v in vals) else None
        known = {k: v for k, v in fids.items() if v is not None}
        best = min(known, key=known.get) if known else None
        verdicts.append({"ranks": ranks, "seconds": t, "fid": fids, "lower": best})
        shown = ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} (not reached)" for k, v in sorted(fids.items()))
        L.append(f"- {ranks} rank(s), after {t:.0f} s of training: FID {shown}: **{best}** is lower.")
    L.append("")
    if plot and importlib.util.find_spec("matplotlib") is not None:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        for i, ((loss, ranks), rs) in enumerate(sorted(runs.items())):
            r = rs[0]
            ax.plot([e["seconds"] for e in r["epochs"]], [e["fid"] for e in r["epochs"]], marker="o",
                    ls=LINE.get(loss, "--"), color=f"C{ranks - 1}", label=f"{loss}, {ranks} rank(s) ({r['name']})")
        ax.set_xlabel("training wall time, s (evaluations left out)")
        ax.set_ylabel("FID to the test split")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "losses.png"))
        L.append("losses.png: FID against the training wall time, one line per run (the first seed's).")
    else:
        L.append("No plot (--no-plot, or python3 has no matplotlib).")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"runs": {f"{k[0]}-r{k[1]}": [r["name"] for r in v] for k, v in runs.items()},
                   "at_equal_wall_time": verdicts}, f, indent=1)
    md = "\n".join(L) + "\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    print(md)
