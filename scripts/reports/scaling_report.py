"""results.md, results.json and speedup.png from the output folder of scripts/bench-scaling.sh
(`python3 scripts/reports scaling OUT [--no-plot]`).

Step times are medians over the repeats (each run's own ms_per_step is already the median of
its steps). Each N-host run was given its repeat's 1-host run as --baseline-summary, so its
summary holds its eq. (1) speedup and efficiency (`weak_scaling`): the report reads those and
takes medians over the repeats. Runs of one repeat ran one after the other, so that a slow
stretch of a noisy machine cancels out of their ratios; the targets are judged on those
paired figures, with an interval of the median from the repeats that says whether they can
tell the target met from missed. Sections for parts a run left out (the allreduce
benchmark, some hosts or exchange modes) are left out; their targets are listed as not
measured.
"""

import json
import os
import re
import sys

import allreduce_vs_model
import median_interval
import scaling_plot
import scaling_targets
import sitting_steadiness
from scaling_pairs import budget, budget_section, paired, paired_section
from scaling_predictions import predictions_section
from summaries import load, median, runs, weak_scaling

MODES = ["overlap", "no-overlap", "no-exchange"]


def read(path):
    with open(path) as f:
        return f.read()


def buckets_text(s):
    b = s["comm"]["buckets"]
    if all(x["algorithm"] == "none" for x in b):
        return "-"
    return ", ".join(f'{x["bucket"]} {x["algorithm"]}' for x in b)


def links_section(out, opt, w):
    """The environment, the link checks and the cost-model constants; returns the training
    links, the links the allreduce rows ran on, and the shaping line of the latter."""
    env = read(opt("environment.txt")).strip() if opt("environment.txt") else ""
    w("# Weak scaling on the emulated cluster\n")
    w("```\n" + env + "\n```\n")
    for name in ["links-unshaped.txt", "links-shaped.txt"]:
        if opt(name):
            probe = [line for line in read(opt(name)).splitlines() if line.startswith("probe:")]
            w(f"Link checks ({'unshaped' if 'unshaped' in name else 'shaped'}):\n")
            w("```\n" + "\n".join(probe) + "\n```\n")
    links = load(os.path.join(out, "links.json"))
    w(f"Cost-model constants (ping-pong h1<->h2 on the training links, which simulate-scaling replays with): "
      f"alpha {links['alpha_us']:.2f} us, beta {links['beta_ns_per_byte']:.3f} ns/B "
      f"({links['bandwidth_gbit_per_s']:.3f} Gbit/s), gamma {links['gamma_ns_per_byte']:.4f} ns/B.\n")
    # The allreduce rows ran on links of their own (bench-scaling.sh --allreduce-links), with
    # their own ping-pong; without those files, on the training links.
    ar_links = links
    ar_shaped = read(opt("links-shaped.txt")) if opt("links-shaped.txt") else ""
    if opt("links-allreduce.json"):
        ar_links = load(opt("links-allreduce.json"))
        ar_shaped = read(opt("links-allreduce.txt")) if opt("links-allreduce.txt") else ""
        m = re.search(r"segments of (\d+) bytes and a token bucket of (\d+) bytes", ar_shaped)
        what = f"segments of {m.group(1)} bytes, token bucket {m.group(2)} bytes" if m else "links of their own"
        w(f"The allreduce rows ran on the same links reshaped ({what}; `--allreduce-links`), with a ping-pong of "
          f"their own: alpha {ar_links['alpha_us']:.2f} us, beta {ar_links['beta_ns_per_byte']:.3f} ns/B "
          f"({ar_links['bandwidth_gbit_per_s']:.3f} Gbit/s).\n")
    return links, ar_links, ar_shaped


def measured_section(R, hosts, t1, w):
    """Table 1, the medians over repeats of each configuration's figures; returns them,
    {(hosts, mode): {ms, speedup, eff, eff_of_medians, hidden, comm, exposed}}."""
    ones = R[(1, "overlap")]
    w("## Measured: step time and eq. (1) speedup\n")
    w(f"Batch {ones[0]['batch_size_per_rank']} per rank, one rank per host, `--threads 1`; "
      f"medians over {len(ones)} repeat(s) (1-host step {t1:.1f} ms); eq. (1) as each run's summary gives it "
      f"against its repeat's 1-host run.\n")
    w("| hosts | exchange | step ms | global images/s | speedup eq.(1) | efficiency | comm ms/step | comm CPU ms/step | exposed ms/step | hidden-comm fraction | algorithm per bucket |")
    w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    meas = {}
    for h in hosts:
        for mode in MODES:
            ss = R.get((h, mode))
            if not ss or (h == 1 and mode != "overlap"):
                continue
            ms = median(s["ms_per_step"] for s in ss)
            ips = median(s["global_images_per_s"] for s in ss)
            comm = median(s["comm"]["comm_ms_per_step"] for s in ss)
            # Older summaries lack the comm thread's CPU time.
            cpu = median(s["comm"].get("comm_thread_cpu_ms_per_step", float("nan")) for s in ss)
            exposed = median(s["comm"]["exposed_comm_ms_per_step"] for s in ss)
            hidden = median(s["comm"]["hidden_comm_fraction"] for s in ss)
            if h == 1:
                sp, eff = 1.0, 1.0  # the baseline itself
            else:
                ws = [weak_scaling(s) for s in ss if weak_scaling(s)]
                sp, eff = median(x["speedup_eq1"] for x in ws), median(x["efficiency"] for x in ws)
            # Eq. (1) on the medians of the step times: no summary holds it (each run's is
            # against its own repeat), and on a noisy machine it mixes repeats.
            of_medians = t1 / ms * ss[0]["batch_size_per_rank"] / ones[0]["batch_size_per_rank"]
            meas[(h, mode)] = dict(ms=ms, speedup=sp, eff=eff, eff_of_medians=of_medians, hidden=hidden, comm=comm,
                                   exposed=exposed)
            label = "none (1 rank)" if h == 1 else mode
            w(f"| {h} | {label} | {ms:.1f} | {ips:.1f} | {sp:.2f} | {eff:.3f} | {comm:.1f} | {cpu:.1f} | {exposed:.1f} | "
              f"{hidden:.3f} | {buckets_text(ss[0]) if mode != 'no-exchange' else '-'} |")
    w("")
    if any((h, "no-exchange") in meas for h in hosts):
        w("What the exchange costs at the same placement (`--no-exchange` runs the same ranks on the same hosts without it):\n")
        w("| hosts | with overlap / no exchange | no overlap / no exchange |")
        w("|---:|---:|---:|")
        for h in hosts:
            if (h, "no-exchange") in meas:
                base = meas[(h, "no-exchange")]["ms"]
                cells = [f"{meas[(h, m)]['ms'] / base:.3f}" if (h, m) in meas else "-" for m in ("overlap", "no-overlap")]
                w(f"| {h} | {cells[0]} | {cells[1]} |")
        w("")
    return meas


def waits_section(out, hosts, w):
    """Each N-host overlap run's trace, first repeat, as `dcgan-train trace-report` gave it
    (bench-scaling.sh writes trace-report-N.md)."""
    reports = [(h, os.path.join(out, f"trace-report-{h}.md")) for h in hosts if h > 1]
    reports = [(h, p) for h, p in reports if os.path.exists(p)]
    if not reports:
        return
    w("## Where the exposed time goes\n")
    w("From each N-host overlap run's trace, first repeat (`dcgan-train trace-report`).\n")
    for h, path in reports:
        w(f"{h} hosts:\n")
        w(read(path))


def simulated_section(opt, w):
    """simulate-scaling's curves up to 1024 nodes, wire only and sharing cores."""
    sim = load(opt("simulated.json"))["prediction"] if opt("simulated.json") else None
    sim_cpu = load(opt("simulated-cpu.json"))["prediction"] if opt("simulated-cpu.json") else None
    if sim:
        w("## Simulated: up to 1024 nodes\n")
        w(read(opt("simulated.md")))
    if sim_cpu:
        w("\n### The same, sharing cores\n")
        w("For ranks that compute on every core, as these do: the exchange takes compute's time and runs slower "
          "beside it. (The table above is for ranks whose comm thread has a core of its own, a GPU rank's.)\n")
        w(read(opt("simulated-cpu.md")))
    return sim, sim_cpu


def main(out, plot=True):
    R = runs(out)
    if (1, "overlap") not in R:
        sys.exit(f"{out}: no 1-host run (runs/1-overlap-*/summary.json): run scripts/bench-scaling.sh first")
    t1 = median(s["ms_per_step"] for s in R[(1, "overlap")])
    hosts = sorted({h for h, _ in R})
    lines = []
    w = lines.append

    def opt(name):
        p = os.path.join(out, name)
        return p if os.path.exists(p) else None

    links, ar_links, ar_shaped = links_section(out, opt, w)
    S = sitting_steadiness.steadiness(R)
    sitting_steadiness.section(S, w)
    meas = measured_section(R, hosts, t1, w)
    P = paired(R, hosts)
    paired_section(P, w)
    B = budget(R, hosts)
    budget_section(B, w)
    waits_section(out, hosts, w)

    # The allreduce model check (left out by bench-scaling.sh --skip-allreduce-bench).
    within = big = outside = None
    if opt("model-allreduce.json"):
        within, big, outside = allreduce_vs_model.section(
            load(opt("model-allreduce.json")).get("allreduce", []), read(opt("model-allreduce.md")), ar_shaped,
            ar_links["beta_ns_per_byte"], os.cpu_count() or 1, w)

    errors, cpu_errors, own_pair, predicted_ms = predictions_section(out, hosts, meas, w)
    sim, sim_cpu = simulated_section(opt, w)
    targets = scaling_targets.section(
        hosts, meas, P, S["noisy"], median_interval, (within, big), (errors, cpu_errors, own_pair), w)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    figures = {
        "t1_ms": t1,
        "measured": [dict(hosts=h, mode=m, **v) for (h, m), v in sorted(meas.items())],
        "paired": {str(h): {k: [dict(repeat=r, ratio=v) for r, v in p[k]] for k in p} for h, p in P.items()},
        "budget": {str(h): rows for h, rows in B.items()},
        "targets": targets,
        "allreduce_outside_band": outside,
        "steadiness": S,
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(figures, f, indent=1)
    print(text)
    if plot:
        # A predicted step against the measured 1-host step: the speedup the prediction implies.
        speedups = {kind: [(h, t1 / ms * h) for h, ms in sorted(by_hosts.items())]
                    for kind, by_hosts in predicted_ms.items()}
        scaling_plot.plot(out, hosts, meas, sim, sim_cpu, speedups["wire"], speedups["cpu"], links,
                          R[(1, "overlap")][0]["batch_size_per_rank"])
