"""The plot of the quality report (quality.png): FID against the epoch and against the
training wall time, one line per (ranks, --lr-scaling), the seeds' range shaded."""

import os


def plot(out, configs, label):
    """quality.png in `out` from the report's configurations (each with its "epochs": the
    mean, min and max over seeds of "fid" and "train_seconds"); `label(ranks, scaling)` names
    a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120, sharey=True)
    styles = {"any": "-", "none": "-", "sqrt": "--", "linear": ":"}
    ranks = sorted({c["ranks"] for c in configs})
    for c in configs:
        color = f"C{ranks.index(c['ranks'])}"
        ep = c["epochs"]
        fid = [e["fid"]["mean"] for e in ep]
        name = f"{label(c['ranks'], c['lr_scaling'])} (global batch {c['global_batch']})"
        style = dict(color=color, ls=styles.get(c["lr_scaling"], "-"), marker="o", ms=4, lw=1.5)
        x = [e["epoch"] for e in ep]
        by_epoch.plot(x, fid, label=name, **style)
        by_epoch.fill_between(x, [e["fid"]["min"] for e in ep], [e["fid"]["max"] for e in ep], color=color,
                              alpha=0.12, lw=0)
        by_time.plot([e["train_seconds"]["mean"] for e in ep], fid, label=name, **style)
    by_epoch.set_xlabel("epoch")
    by_epoch.set_ylabel("FID to the test split (mean over seeds; shaded: their range)")
    by_epoch.set_xticks(sorted({e["epoch"] for c in configs for e in c["epochs"]}))
    by_time.set_xlabel("training wall time, s (evaluations left out)")
    for ax in (by_epoch, by_time):
        ax.grid(True, alpha=0.3)
    by_epoch.legend(fontsize=8)
    fig.suptitle("Sample quality against ranks (weak scaling)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "quality.png"))
    plt.close(fig)
