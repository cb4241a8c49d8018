#!/usr/bin/env python3
"""results.md and speedup.png from the output folder of scripts/bench-scaling.sh.

    scaling-report.py OUT [--no-plot]

Step times are medians over the repeats (each run's own ms_per_step is already the median
of its steps); eq. (1) of the MPI paper with the same batch per rank on 1 and N hosts is
s = t_1 / t_N * N. Each repeat also pairs its own runs (1 host against N hosts, overlap
against --no-exchange), which ran one after the other, so that a slow stretch of a noisy
machine cancels out of the ratio; the targets of issue 7 are judged on those paired ratios
and printed with both figures, and with an interval of the median from the repeats that
says whether they can tell the target met from missed (median-interval.py). Writes
results.md, results.json (the figures the targets are judged on) and, unless --no-plot,
speedup.png. Sections for parts a run left out (the
allreduce benchmark, some hosts or exchange modes) are left out; their targets are listed as
not measured.
"""

import glob
import importlib.util
import json
import os
import re
import statistics
import sys

MODES = ["overlap", "no-overlap", "no-exchange"]


def load(path):
    with open(path) as f:
        return json.load(f)


def load_script(name):
    """A sibling script as a module (their names have hyphens, so no plain import)."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py").replace("-", "_"),
                                                  os.path.join(os.path.dirname(__file__), name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def runs(out):
    """{(hosts, mode): [summary, ...]} in repeat order; each summary gains "_repeat" and "_dir"
    (its run's folder)."""
    found = {}
    for p in glob.glob(os.path.join(out, "runs", "*", "summary.json")):
        m = re.match(r"(\d+)-(.+)-(\d+)$", os.path.basename(os.path.dirname(p)))
        if m:
            s = load(p)
            s["_repeat"] = int(m.group(3))
            s["_dir"] = os.path.dirname(p)
            found.setdefault((int(m.group(1)), m.group(2)), []).append(s)
    for ss in found.values():
        ss.sort(key=lambda s: s["_repeat"])
    return found


def by_repeat(R, h, mode):
    """{repeat: summary} of the runs of `h` hosts in `mode`."""
    return {s["_repeat"]: s for s in R.get((h, mode), [])}


def paired(R, hosts):
    """Per repeat, the ratios of runs made one after the other: eq. (1) efficiency t_1 / t_N, the
    same for the placement alone (t_1 over the N-host --no-exchange step: what the efficiency
    could reach if the exchange were free), and the N-host step with overlap over the
    --no-exchange one. {hosts: {"efficiency": [(repeat, ratio), ...], "placement": [...],
    "exchange_cost": [...]}}"""

    def step_ms(h, mode):
        return {r: s["ms_per_step"] for r, s in by_repeat(R, h, mode).items()}

    one = step_ms(1, "overlap")
    out = {}
    for h in hosts:
        if h == 1:
            continue
        over, noex = step_ms(h, "overlap"), step_ms(h, "no-exchange")
        out[h] = {
            "efficiency": [(r, one[r] / over[r]) for r in sorted(over) if r in one],
            "placement": [(r, one[r] / noex[r]) for r in sorted(noex) if r in one],
            "exchange_cost": [(r, over[r] / noex[r]) for r in sorted(over) if r in noex],
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
      "before any gradient moves.\n")
    w("| hosts | efficiency t_1 / t_N per repeat | median | without the exchange, per repeat | median "
      "| overlap / no-exchange per repeat | median |")
    w("|---:|---|---:|---|---:|---|---:|")

    def cells(pairs):
        """The per-repeat ratios, then their median."""
        vals = ", ".join(f"{v:.3f}" for _, v in pairs) or "-"
        return f"{vals} | " + (f"{median([v for _, v in pairs]):.3f}" if pairs else "-")

    for h, p in sorted(P.items()):
        w(f"| {h} | {cells(p['efficiency'])} | {cells(p['placement'])} | {cells(p['exchange_cost'])} |")
    w("")


def buckets_text(s):
    b = s["comm"]["buckets"]
    if all(x["algorithm"] == "none" for x in b):
        return "-"
    return ", ".join(f'{x["bucket"]} {x["algorithm"]}' for x in b)


def waits_section(out, hosts, w):
    """The exposed time of each N-host overlap run's first repeat, split by wait-report.py
    into waiting for the slowest rank and the exchange itself."""
    wait_report = load_script("wait-report.py")
    traces = {h: os.path.join(out, "runs", f"{h}-overlap-1", "trace.json") for h in hosts if h > 1}
    traces = {h: t for h, t in traces.items() if os.path.exists(t)}
    if not traces:
        return
    w("Where the exposed time goes (from each N-host overlap run's trace, first repeat; `scripts/wait-report.py`): "
      "the part of a wait before the last rank handed the bucket over is waiting for the slowest rank, the rest is "
      "the exchange itself.\n")
    for h, trace in traces.items():
        rows = wait_report.split_waits(load(trace))
        if rows:
            w(f"{h} hosts:\n")
            w(wait_report.markdown(rows))


def budget(R, hosts):
    """Per repeat, the N-host step with overlap as that repeat's 1-host step plus parts that add
    up to it exactly: placement (the --no-exchange run's compute less t_1), compute slowed by
    the exchange (the overlap run's compute less that), and waiting (the overlap step less its
    compute). Compute is each run's compute_ms_per_step (the median over its steps of a step's
    wall time less its waits). Of the slowed compute, `core_taken` is what the training thread
    spent more waiting for a core (runnable while another thread had it) than without the
    exchange; None where the summaries do not say. Parts are taken within one repeat:
    differences of medians over the repeats also add up, but on a noisy machine those medians
    come from different repeats, so that a part mixes them. {hosts: [row, ...]}"""

    one = by_repeat(R, 1, "overlap")
    out = {}
    for h in hosts:
        if h == 1:
            continue
        over, noex = by_repeat(R, h, "overlap"), by_repeat(R, h, "no-exchange")
        rows = []
        for r in sorted(set(over) & set(noex) & set(one)):
            o, n = over[r], noex[r]
            if None in (o.get("compute_ms_per_step"), n.get("compute_ms_per_step")):
                continue  # summaries from before that figure
            t1, co, cn, tn = one[r]["ms_per_step"], o["compute_ms_per_step"], n["compute_ms_per_step"], o["ms_per_step"]
            queued = "training_thread_descheduled_ms_per_step"
            qo, qn = o.get(queued), n.get(queued)
            core_taken = None if None in (qo, qn) else qo - qn
            rows.append(dict(repeat=r, t1=t1, placement=cn - t1, slowed=co - cn, core_taken=core_taken,
                             waiting=tn - co, step=tn, efficiency=t1 / tn,
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


def main():
    args = sys.argv[1:]
    no_plot = "--no-plot" in args
    args = [a for a in args if a != "--no-plot"]
    if len(args) != 1:
        sys.exit(__doc__)
    out = args[0]
    R = runs(out)
    if (1, "overlap") not in R:
        sys.exit(f"{out}: no 1-host run (runs/1-overlap-*/summary.json): run scripts/bench-scaling.sh first")
    t1 = median([s["ms_per_step"] for s in R[(1, "overlap")]])
    hosts = sorted({h for h, _ in R})
    lines = []
    w = lines.append

    def opt(name):
        p = os.path.join(out, name)
        return p if os.path.exists(p) else None

    env = open(opt("environment.txt")).read().strip() if opt("environment.txt") else ""
    w("# Weak scaling on the emulated cluster\n")
    w("```\n" + env + "\n```\n")
    for name in ["links-unshaped.txt", "links-shaped.txt"]:
        if opt(name):
            probe = [l for l in open(opt(name)).read().splitlines() if l.startswith("probe:")]
            w(f"Link checks ({'unshaped' if 'unshaped' in name else 'shaped'}):\n")
            w("```\n" + "\n".join(probe) + "\n```\n")
    links = load(os.path.join(out, "links.json"))
    w(f"Cost-model constants (ping-pong h1<->h2 on the training links, which simulate-scaling replays with): "
      f"alpha {links['alpha_us']:.2f} us, beta {links['beta_ns_per_byte']:.3f} ns/B "
      f"({links['bandwidth_gbit_per_s']:.3f} Gbit/s), gamma {links['gamma_ns_per_byte']:.4f} ns/B.\n")
    # The allreduce rows ran on links of their own (bench-scaling.sh --allreduce-links), with
    # their own ping-pong; without those files, on the training links.
    ar_links = links
    ar_shaped = open(opt("links-shaped.txt")).read() if opt("links-shaped.txt") else ""
    if opt("links-allreduce.json"):
        ar_links = load(opt("links-allreduce.json"))
        ar_shaped = open(opt("links-allreduce.txt")).read() if opt("links-allreduce.txt") else ""
        m = re.search(r"segments of (\d+) bytes and a token bucket of (\d+) bytes", ar_shaped)
        what = f"segments of {m.group(1)} bytes, token bucket {m.group(2)} bytes" if m else "links of their own"
        w(f"The allreduce rows ran on the same links reshaped ({what}; `--allreduce-links`), with a ping-pong of "
          f"their own: alpha {ar_links['alpha_us']:.2f} us, beta {ar_links['beta_ns_per_byte']:.3f} ns/B "
          f"({ar_links['bandwidth_gbit_per_s']:.3f} Gbit/s).\n")

    steadiness = load_script("sitting-steadiness.py")
    intervals = load_script("median-interval.py")
    S = steadiness.steadiness(R)
    steadiness.section(S, w)

    # Table 1: the measured runs.
    w("## Measured: step time and eq. (1) speedup\n")
    w(f"Batch {R[(1, 'overlap')][0]['batch_size_per_rank']} per rank, one rank per host, `--threads 1`; "
      f"medians over {len(R[(1, 'overlap')])} repeat(s); eq. (1) against the 1-host step time {t1:.1f} ms.\n")
    w("| hosts | exchange | step ms | global images/s | speedup eq.(1) | efficiency | comm ms/step | comm CPU ms/step | exposed ms/step | hidden-comm fraction | algorithm per bucket |")
    w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    meas = {}
    for h in hosts:
        for mode in MODES:
            ss = R.get((h, mode))
            if not ss or (h == 1 and mode != "overlap"):
                continue
            ms = median([s["ms_per_step"] for s in ss])
            ips = median([s["global_images_per_s"] for s in ss])
            comm = median([s["comm"]["comm_ms_per_step"] for s in ss])
            # Older summaries lack the comm thread's CPU time.
            cpu = median([s["comm"].get("comm_thread_cpu_ms_per_step", float("nan")) for s in ss])
            exposed = median([s["comm"]["exposed_comm_ms_per_step"] for s in ss])
            hidden = median([s["comm"]["hidden_comm_fraction"] for s in ss])
            sp = t1 / ms * h
            meas[(h, mode)] = dict(ms=ms, speedup=sp, eff=sp / h, hidden=hidden, comm=comm, exposed=exposed)
            label = "none (1 rank)" if h == 1 else mode
            w(f"| {h} | {label} | {ms:.1f} | {ips:.1f} | {sp:.2f} | {sp / h:.3f} | {comm:.1f} | {cpu:.1f} | {exposed:.1f} | "
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
    P = paired(R, hosts)
    paired_section(P, w)
    B = budget(R, hosts)
    budget_section(B, w)
    waits_section(out, hosts, w)

    # The allreduce model check (left out by bench-scaling.sh --skip-allreduce-bench).
    within = big = outside = None
    if opt("model-allreduce.json"):
        vs_model = load_script("allreduce-vs-model.py")
        within, big, outside = vs_model.section(
            load(opt("model-allreduce.json")).get("allreduce", []), open(opt("model-allreduce.md")).read(), ar_shaped,
            ar_links["beta_ns_per_byte"], os.cpu_count() or 1, w)

    # Predictions against the measurements.
    errors, cpu_errors, own_pair, predicted_ms = predictions_section(out, hosts, meas, w)
    sim = load(opt("simulated.json"))["prediction"] if opt("simulated.json") else None
    sim_cpu = load(opt("simulated-cpu.json"))["prediction"] if opt("simulated-cpu.json") else None
    if sim:
        w("## Simulated: up to 1024 nodes\n")
        w(open(os.path.join(out, "simulated.md")).read())
    if sim_cpu:
        w("\n### The same, sharing cores\n")
        w("For ranks that compute on every core, as these do: the exchange takes compute's time and runs slower "
          "beside it. (The table above is for ranks whose comm thread has a core of its own, a GPU rank's.)\n")
        w(open(os.path.join(out, "simulated-cpu.md")).read())

    targets = load_script("scaling-targets.py").section(
        hosts, meas, P, S["noisy"], intervals, (within, big), (errors, cpu_errors, own_pair), w)
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
    if not no_plot:
        t1 = meas[(1, "overlap")]["ms"]
        speedups = {kind: [(h, t1 / ms * h) for h, ms in sorted(by_hosts.items())]
                    for kind, by_hosts in predicted_ms.items()}
        load_script("scaling-plot.py").plot(out, hosts, meas, sim, sim_cpu, speedups["wire"], speedups["cpu"], links,
                                            R[(1, "overlap")][0]["batch_size_per_rank"])


def calibrated_on_own_runs(path, prediction):
    """Whether predict-cpu-N-R.json (at `path`, its "prediction" loaded) took its figures from
    repeat R's own 2-host pair (or does not say where they came from)."""
    repeat = re.search(r"-(\d+)\.json$", path)
    pair = prediction.get("comm_cpu_from") or {}
    came = re.search(r"-(\d+)$", os.path.basename(os.path.dirname(pair.get("with_exchange", ""))))
    return not (repeat and came) or repeat.group(1) == came.group(1)


def predictions_section(out, hosts, meas, w):
    """Each N-host --no-exchange trace replayed at N against the N-host run with overlap;
    returns {hosts: relative error} for the wire-only replay and for the replay with the
    exchange's CPU (empty where the run has no 2-host pair to measure it on), {hosts: whether
    any of the latter was calibrated on its own repeat's runs}, and the median predicted step
    ms, {"wire"|"cpu": {hosts: ms}}."""
    rows = [(h, sorted(glob.glob(os.path.join(out, f"predict-{h}-*.json")))) for h in hosts]
    rows = [(h, files) for h, files in rows if files and (h, "overlap") in meas]
    if not rows:
        return {}, {}, {}, {"wire": {}, "cpu": {}}
    cpu_files = {h: sorted(glob.glob(os.path.join(out, f"predict-cpu-{h}-*.json"))) for h, _ in rows}
    cpu_preds = {h: [load(f)["prediction"] for f in fs] for h, fs in cpu_files.items()}
    own_pair = {h: any(calibrated_on_own_runs(f, p) for f, p in zip(cpu_files[h], cpu_preds[h])) for h in cpu_files}
    with_cpu = any(cpu_files.values())
    w("## simulate-scaling against the measured runs\n")
    w("Each N-host `--no-exchange` run's trace (the compute of that placement) replayed at N with the cost model, "
      "against the N-host run with overlap; also the 1-host trace replayed at N.\n")
    w("The last column says how representative the replayed steps were: the compute of the traced steps "
      "against the step that same `--no-exchange` run measured over all its steps (medians over repeats). "
      "Where they differ, so does the prediction, whatever the model.\n")
    w("The exposed columns compare the waits for gradient buckets: predicted (of it, waiting for the slowest rank, "
      "from the ranks replaying the traced steps in orders of their own) against the run's summary.\n")
    if with_cpu:
        preds = [p for ps in cpu_preds.values() for p in ps]
        cs = [p["comm_cpu_ns_per_byte"] for p in preds]
        ss = [p.get("comm_speed_beside_compute", 1.0) for p in preds]
        shares = {h: median([p.get("core_share", 1.0) for p in ps]) for h, ps in cpu_preds.items() if ps}
        share_text = ", ".join(f"{h} hosts {shares[h]:.2f}" for h in sorted(shares))
        any_own_pair = any(own_pair.values())
        w("*Sharing cores*: the same replay with compute and the exchange sharing cores (`--comm-cpu-from`), measured "
          f"on {'each repeat' if any_own_pair else 'the next repeat'}'s 2-host pair: the compute the exchange took per byte a "
          f"rank moved each way beside compute ({min(cs):.2f} to {max(cs):.2f} ns/B, median {median(cs):.2f}), and "
          f"the share of its wire speed a collective kept beside compute ({min(ss):.2f} to {max(ss):.2f}, median "
          f"{median(ss):.2f}), both for a rank with a core of its own. "
          + ("At 2 hosts that is the pair it was measured on; at more hosts it is a prediction. " if any_own_pair else
             "So every row is a prediction: no repeat is predicted from its own runs. ")
          + "On an emulated cluster more hosts also put more ranks on the same cores: the replay scales "
          "both figures by the share of a core the N-host `--no-exchange` run's ranks had "
          f"({share_text}).\n")
    cpu_head = " sharing cores | error | its exposed ms |" if with_cpu else ""
    w("| hosts | predicted step ms (from the N-host compute) | from the 1-host compute | measured step ms | error |"
      f"{cpu_head} predicted exposed ms (slowest rank) | measured exposed ms | traced compute / its run's step ms |")
    w("|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if with_cpu else "") + "---:|---:|---:|")
    sim_path = os.path.join(out, "simulated.json")
    sim = load(sim_path)["prediction"]["rows"] if os.path.exists(sim_path) else []
    sim_auto = {r["nodes"]: r for r in sim if r["algorithm"] == "auto"}
    errors, cpu_errors = {}, {}
    predicted_ms = {"wire": {}, "cpu": {}}
    for h, files in rows:
        preds = [load(f)["prediction"] for f in files]
        pred = median([p["rows"][0]["step_ms"] for p in preds])
        m = meas[(h, "overlap")]["ms"]
        errors[h] = pred / m - 1
        predicted_ms["wire"][h] = pred
        one = sim_auto.get(h, {}).get("step_ms", float("nan"))
        traced = median([p.get("compute_ms_per_step", float("nan")) for p in preds])
        own = median([p.get("measured_ms_per_step", float("nan")) for p in preds])
        exp = median([p["rows"][0]["exposed_comm_ms_per_step"] for p in preds])
        slow = median([p["rows"][0].get("slowest_rank_ms_per_step", float("nan")) for p in preds])
        cpu_cells = ""
        if with_cpu:
            if cpu_preds[h]:
                cpu_rows = [p["rows"][0] for p in cpu_preds[h]]
                cpu_pred = median([r["step_ms"] for r in cpu_rows])
                predicted_ms["cpu"][h] = cpu_pred
                cpu_exp = median([r["exposed_comm_ms_per_step"] for r in cpu_rows])
                cpu_errors[h] = cpu_pred / m - 1
                cpu_cells = f" {cpu_pred:.1f} | {100 * cpu_errors[h]:+.1f}% | {cpu_exp:.1f} |"
            else:
                cpu_cells = " - | - | - |"
        w(f"| {h} | {pred:.1f} | {one:.1f} | {m:.1f} | {100 * errors[h]:+.1f}% |{cpu_cells} {exp:.1f} ({slow:.1f}) | "
          f"{meas[(h, 'overlap')]['exposed']:.1f} | {traced:.1f} / {own:.1f} |")
    w("")
    return errors, cpu_errors, own_pair, predicted_ms


if __name__ == "__main__":
    main()
