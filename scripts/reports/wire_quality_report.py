"""results.md, results.json and quality.png of a bench-wire-quality.sh folder: each variant's
Fréchet distance and KID after every epoch (from its bench-quality.sh results.json), against
the epoch and against the training time; with `--links` (a bench-wire.sh results.json), also
against the time its epochs take on those emulated links: epochs x steps per epoch x the
variant's step there (a variant not timed there takes its base's: 1bit-frozen 1bit's,
bmuf4-bm0 bmuf4's)."""

import glob
import json
import os


def _variant(out, name):
    """[(epoch, fid, kid, train seconds)] of the variant's one configuration."""
    r = json.load(open(os.path.join(out, name, "results.json")))
    (config,) = r["configurations"]
    return [(e["epoch"], e["fid"]["mean"], e["kid"]["mean"], e["train_seconds"]["mean"]) for e in config["epochs"]]


def _steps_per_epoch(out, name):
    """Steps of the variant's first epoch, from its run's metrics.jsonl."""
    for path in glob.glob(os.path.join(out, name, "*", "metrics.jsonl")):
        for line in open(path):
            r = json.loads(line)
            if r.get("type") == "epoch":
                return r["steps"]
    return None


def _link_minutes(out, rows, links):
    """{variant: (timed as, [minutes to the end of each epoch])} on the links of `links`."""
    step_ms = {v: r["step_ms"] for v, r in json.load(open(links))["variants"].items()}
    minutes = {}
    for name, epochs in rows.items():
        timed = name if name in step_ms else name.split("-")[0]
        steps = _steps_per_epoch(out, name)
        if timed in step_ms and steps:
            minutes[name] = (timed, [e[0] * steps * step_ms[timed] / 6e4 for e in epochs])
    return minutes


def _plot(out, rows, minutes):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "quality.png left out: no matplotlib (pip install matplotlib)"
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, epochs in rows.items():
        a.plot([e[0] for e in epochs], [e[1] for e in epochs], marker="o", label=name)
        if minutes:
            if name in minutes:
                b.plot(minutes[name][1], [e[1] for e in epochs], marker="o", label=name)
        else:
            b.plot([e[3] for e in epochs], [e[1] for e in epochs], marker="o", label=name)
    a.set_xlabel("epoch")
    b.set_xlabel("minutes on the emulated links" if minutes else "training seconds (this machine's cores, no emulated links)")
    for ax in (a, b):
        ax.set_ylabel("FID (lower is better)")
        ax.grid(alpha=0.3)
    a.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "quality.png"), dpi=110)
    return "quality.png: FID against epoch and against training time"


def main(out, links=None):
    settings = dict(kv.split("=", 1) for kv in open(os.path.join(out, "settings.txt")).read().split())
    names = [v for v in settings["variants"].split(",") if os.path.exists(os.path.join(out, v, "results.json"))]
    rows = {v: _variant(out, v) for v in names}
    minutes = _link_minutes(out, rows, links) if links else {}
    json.dump({"settings": settings, "variants": rows, "link_minutes": minutes, "links": links},
              open(os.path.join(out, "results.json"), "w"), indent=1)
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
    if minutes:
        lines += [
            "",
            f"Minutes to the end of each epoch on the links of {links} (each variant's step there; "
            "\"timed as\": whose step a variant not timed there takes):",
            "",
            "| variant | timed as | " + " | ".join(f"min epoch {i + 1}" for i in range(epochs)) + " |",
            "|---|---|" + "---:|" * epochs,
        ]
        for v, (timed, h) in minutes.items():
            lines.append(f"| {v} | {timed} | " + " | ".join(f"{x:.1f}" for x in h) + " |")
    lines += ["", _plot(out, rows, minutes)]
    open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
