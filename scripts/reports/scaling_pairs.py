"""The scaling report's figures paired by repeat: each repeat ran 1 host, then every N and
mode, one after the other, so ratios within a repeat cancel a slow stretch of the machine
that medians over repeats mix in."""

from summaries import by_repeat, median, weak_scaling


def paired(R, hosts):
    """Per repeat: the N-host run's eq. (1) efficiency with overlap and with --no-exchange
    (what the placement allows if the exchange were free), both as the runs' summaries give
    them against their repeat's 1-host run, and the overlap step over the --no-exchange step.
    {hosts: {"efficiency": [(repeat, ratio), ...], "placement": [...], "exchange_cost": [...]}}"""

    def efficiencies(h, mode):
        runs = sorted(by_repeat(R, h, mode).items())
        return [(r, weak_scaling(s)["efficiency"]) for r, s in runs if weak_scaling(s)]

    out = {}
    for h in hosts:
        if h == 1:
            continue
        over, noex = by_repeat(R, h, "overlap"), by_repeat(R, h, "no-exchange")
        out[h] = {
            "efficiency": efficiencies(h, "overlap"),
            "placement": efficiencies(h, "no-exchange"),
            "exchange_cost": [(r, over[r]["ms_per_step"] / noex[r]["ms_per_step"]) for r in sorted(over) if r in noex],
        }
    return out


def paired_section(P, w):
    if not any(p["efficiency"] for p in P.values()):
        return
    w("## Paired by repeat\n")
    w("Each repeat runs 1 host, then N hosts in every exchange mode, one after the other. Ratios of runs of the same "
      "repeat cancel a slow stretch of the machine that the medians above mix in (the 1-host step alone can vary by "
      "a third or more between repeats on a shared machine); the targets below are judged on the medians of these ratios. "
      "*Without the exchange* is t_1 over the N-host `--no-exchange` step: the efficiency this placement allows "
      "before any gradient moves. Efficiencies are the runs' own (summary.json's `weak_scaling`).\n")
    w("| hosts | efficiency t_1 / t_N per repeat | median | without the exchange, per repeat | median "
      "| overlap / no-exchange per repeat | median |")
    w("|---:|---|---:|---|---:|---|---:|")

    def cells(pairs):
        """The per-repeat ratios, then their median."""
        vals = ", ".join(f"{v:.3f}" for _, v in pairs) or "-"
        return f"{vals} | " + (f"{median(v for _, v in pairs):.3f}" if pairs else "-")

    for h, p in sorted(P.items()):
        w(f"| {h} | {cells(p['efficiency'])} | {cells(p['placement'])} | {cells(p['exchange_cost'])} |")
    w("")


def budget(R, hosts):
    """Per repeat, the N-host step with overlap as that repeat's 1-host step (the run's
    baseline) plus parts that add up to it exactly: placement (the --no-exchange run's compute
    less t_1), compute slowed by the exchange (the overlap run's compute less that), and
    waiting (the overlap step less its compute). Compute is each run's compute_ms_per_step.
    Of the slowed compute, `core_taken` is what the training thread spent more waiting for a
    core than without the exchange; None where the summaries do not say. Parts are taken
    within one repeat: differences of medians over repeats mix repeats. {hosts: [row, ...]}"""
    out = {}
    for h in hosts:
        if h == 1:
            continue
        over, noex = by_repeat(R, h, "overlap"), by_repeat(R, h, "no-exchange")
        rows = []
        for r in sorted(set(over) & set(noex)):
            o, n = over[r], noex[r]
            ws = weak_scaling(o)
            if ws is None or None in (o.get("compute_ms_per_step"), n.get("compute_ms_per_step")):
                continue
            t1, co, cn, tn = ws["baseline_ms_per_step"], o["compute_ms_per_step"], n["compute_ms_per_step"], o["ms_per_step"]
            queued = "training_thread_descheduled_ms_per_step"
            qo, qn = o.get(queued), n.get(queued)
            core_taken = None if None in (qo, qn) else qo - qn
            rows.append(dict(repeat=r, t1=t1, placement=cn - t1, slowed=co - cn, core_taken=core_taken,
                             waiting=tn - co, step=tn, efficiency=ws["efficiency"],
                             waits_buckets=o["comm"]["exposed_comm_ms_per_step"],
                             waits_metrics=o["comm"].get("metrics_wait_ms_per_step")))
        if rows:
            out[h] = rows
    return out


def budget_section(B, w):
    if not B:
        return
    w("## Where the N-host step goes\n")
    w("Each repeat's N-host step with overlap as its own 1-host step plus three parts that add up to it. *Placement*: "
      "the `--no-exchange` run's compute against one host alone (here the emulated hosts share one machine's cores; on "
      "a real cluster this is about zero). *Compute slowed by the exchange*: the same compute with the exchange running "
      "beside it (the comm thread, Open MPI's progress and the kernel's TCP stack take cores and memory bandwidth from "
      "it). *Of it, a core taken*: how much more of the step the training thread spent runnable but waiting for a "
      "core, while another thread (mostly the comm thread) had it; the rest of the slowed compute is the same work "
      "taking more CPU time beside the exchange (memory, caches, the gradient copies). *Waiting*: the rest, the time "
      "blocked on other ranks. Compute is a run's median over steps of each step's wall time less its waits. The last "
      "column gives the waits as each step measured them (means per step, gradient buckets + metrics at the step's "
      "end); where it differs from *waiting*, the step times varied from step to step "
      "and their median is not the median compute plus the mean wait. The repeat in bold is the one at the median "
      "efficiency (the lower middle one for an even number of repeats).\n")
    w("| hosts | repeat | 1-host step | + placement | + compute slowed by the exchange | (of it, a core taken) "
      "| + waiting for other ranks | = N-host step | efficiency | waits: buckets + metrics |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def fmt(ms):
        return "-" if ms is None else f"{ms:.1f}"

    for h, rows in sorted(B.items()):
        # By position, so that two repeats of equal efficiency cannot both be bold.
        mid = sorted(rows, key=lambda r: r["efficiency"])[(len(rows) - 1) // 2]
        for r in rows:
            rep = f"**{r['repeat']}**" if r is mid else str(r["repeat"])
            taken = "-" if r["core_taken"] is None else f"({r['core_taken']:+.1f})"
            w(f"| {h} | {rep} | {r['t1']:.1f} | {r['placement']:+.1f} | {r['slowed']:+.1f} | {taken} | "
              f"{r['waiting']:+.1f} | {r['step']:.1f} | {r['efficiency']:.3f} | "
              f"{r['waits_buckets']:.1f} + {fmt(r['waits_metrics'])} |")
    w("")
