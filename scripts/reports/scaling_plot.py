"""The plot of the scaling report: speedup against hosts, measured and simulated, next to the
ideal line (speedup.png)."""

import os


def plot(out, hosts, meas, sim, sim_cpu, predicted, predicted_cpu, links, batch):
    """speedup.png in `out`: the measured speedups (meas: {(hosts, mode): {"speedup": ...}}),
    the simulated curves (simulate-scaling --json predictions, wire only and sharing cores),
    `predicted` and `predicted_cpu` [(hosts, speedup)] from each N-host trace (wire only and
    sharing cores), and the ideal line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    sim_rows = sim["rows"] if sim else []
    nodes = sorted({r["nodes"] for r in sim_rows} | set(hosts))
    ax.plot(nodes, nodes, "k--", lw=1, label="ideal (s = N)")
    styles = {"auto": ("C0", "-"), "ring": ("C3", ":"), "tree": ("C2", ":"), "rd": ("C4", ":"), "vhd": ("C1", ":")}
    for algo, (color, ls) in styles.items():
        rows = sorted((r for r in sim_rows if r["algorithm"] == algo), key=lambda r: r["nodes"])
        if rows:
            ax.plot([r["nodes"] for r in rows], [r["speedup_eq1"] for r in rows], color=color, ls=ls,
                    lw=4 if algo == "auto" else 1.2, alpha=0.5 if algo == "auto" else 1,
                    label=f"simulated, {algo}" + (" (= vhd here)" if algo == "auto" else ""))
    cpu_rows = sorted((r for r in (sim_cpu["rows"] if sim_cpu else []) if r["algorithm"] == "auto"),
                      key=lambda r: r["nodes"])
    if cpu_rows:
        ax.plot([r["nodes"] for r in cpu_rows], [r["speedup_eq1"] for r in cpu_rows], color="C0", ls="--", lw=1.5,
                label="simulated, auto, sharing cores (CPU ranks)")
    for mode, marker in [("overlap", "o"), ("no-overlap", "s")]:
        # The 1-host run has no exchange to overlap: it starts both series.
        pts = [(1, meas[(1, "overlap")]["speedup"])]
        pts += [(h, meas[(h, mode)]["speedup"]) for h in hosts if h > 1 and (h, mode) in meas]
        if len(pts) > 1 or mode == "overlap":
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, ms=7, mfc="none" if mode == "no-overlap" else None,
                    color="k", label=f"measured, {mode} (emulated cluster)")
    # The replay of each N-host --no-exchange trace (that placement's compute) at N.
    if predicted:
        ax.plot([p[0] for p in predicted], [p[1] for p in predicted], "x", ms=9, color="C3",
                label="simulated from the N-host --no-exchange compute")
    if predicted_cpu:
        ax.plot([p[0] for p in predicted_cpu], [p[1] for p in predicted_cpu], "+", ms=10, mew=2, color="C0",
                label="the same, sharing cores")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("hosts N (one rank each)")
    ax.set_ylabel("speedup s by eq. (1)")
    ax.set_title(f"DCGAN weak scaling, batch {batch} per rank, links {8 / links['beta_ns_per_byte']:.2f} Gbit/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "speedup.png"))
