"""results.md, results.json and quality.png of a bench-wire-quality.sh folder: each variant's
Fréchet distance and KID after every epoch (from its bench-quality.sh results.json), against
the epoch and against the training time."""

import json
import os


def _variant(out, name):
    """[(epoch, fid, kid, train seconds)] of the variant's one configuration."""
    r = json.load(open(os.path.join(out, name, "results.json")))
    (config,) = r["configurations"]
    return [(e["epoch"], e["fid"]["mean"], e["kid"]["mean"], e["train_seconds"]["mean"]) for e in config["epochs"]]


def _plot(out, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "quality.png left out: no matplotlib (pip install matplotlib)"
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, epochs in rows.items():
        a.plot([e[0] for e in epochs], [e[1] for e in epochs], marker="o", label=name)
        b.plot([e[3] for e in epochs], [e[1] for e in epochs], marker="o", label=name)
    a.set_xlabel("epoch")
    b.set_xlabel("training seconds (this machine's cores, no emulated links)")
    for ax in (a, b):
        ax.set_ylabel("FID (lower is better)")
        ax.grid(alpha=0.3)
    a.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "quality.png"), dpi=110)
    return "quality.png: FID against epoch and against training time"


def main(out):
    settings = dict(kv.split("=", 1) for kv in open(os.path.join(out, "settings.txt")).read().split())
    names = [v for v in settings["variants"].split(",") if os.path.exists(os.path.join(out, v, "results.json"))]
    rows = {v: _variant(out, v) for v in names}
    json.dump({"settings": settings, "variants": rows}, open(os.path.join(out, "results.json"), "w"), indent=1)
    epochs = max(len(e) for e in rows.values())
    head = "| variant | " + " | ".join(f"FID epoch {i + 1}" for i in range(epochs)) + " | KID last | training s |"
    lines = [
        f"# Sample quality by exchange, {settings['ranks']} ranks, seed {settings['seed']}",
        "",
        f"FID and KID on {settings['eval_n']} images after every epoch (lower is better).",
        "",
        head,
        "|---|" + "---:|" * (epochs + 2),
    ]
    for v, e in rows.items():
        fids = " | ".join(f"{x[1]:.2f}" for x in e) + " | -" * (epochs - len(e))
        lines.append(f"| {v} | {fids} | {e[-1][2]:.4f} | {e[-1][3]:.0f} |")
    lines += ["", _plot(out, rows)]
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
