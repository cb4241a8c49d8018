"""The weak-scaling targets of the scaling report: each judged on the paired figures where
the run has them (with the medians of the runs beside them) and with an interval that says
whether the sitting's repeats can tell met from missed; a target the run has no runs for is
listed as not measured, not left out."""

from summaries import median


def section(hosts, meas, P, noisy, intervals, allreduce_rows, predictions, w):
    """Write the "Targets" section and return its entries for results.json.
    meas: {(hosts, mode): figures}; P: the paired ratios {hosts: {key: [(repeat, ratio)]}};
    intervals: the median_interval module; allreduce_rows: (rows within 1.25x, rows >= 64 KiB), both
    None without the allreduce benchmark; predictions: ({hosts: error} wire only, {hosts:
    error} sharing cores, {hosts: whether calibrated on its own repeat's pair})."""
    within, big = allreduce_rows
    errors, cpu_errors, own_pair = predictions
    w("\n## Targets\n")
    if noisy:
        w("This sitting was noisy (\"How steady the machine was\" above): judge the targets on a steadier run.\n")
    targets = []

    def target(name, value, ok, text, repeats=None, extra=None):
        """repeats: (paired values, threshold, higher_is_better, fmt) for a target judged on
        the paired median: whether this sitting's repeats can tell it met from missed; extra:
        more fields for results.json."""
        entry = dict(target=name, value=value, met=bool(ok), **(extra or {}))
        line = f"- {text}: {'met' if ok else 'NOT met'}"
        if repeats:
            noise, entry["decided"], iv = intervals.verdict(*repeats)
            entry["interval"] = list(iv) if iv else None
            line += f"; {noise}"
        targets.append(entry)
        w(line)

    def unmeasured(name, needs):
        targets.append(dict(target=name, value=None, met=None))
        w(f"- {name}: not measured in this run (needs {needs})")

    def paired_values(h, key):
        """The paired ratios a target is judged on, or None where the median of the runs is."""
        return [v for _, v in P.get(h, {}).get(key, [])] or None

    def paired_median(h, key):
        vals = paired_values(h, key)
        return median(vals) if vals else None

    def judged(paired_value, runs_value, fmt):
        """The value to judge on, and how it was obtained."""
        if paired_value is None:
            return runs_value, "medians of the runs: no repeat holds both runs"
        return paired_value, f"median of the paired repeats; medians of the runs give {fmt(runs_value)}"

    if (2, "overlap") in meas:
        fmt = lambda x: f"{x:.3f}"  # noqa: E731
        v, how = judged(paired_median(2, "efficiency"), meas[(2, "overlap")]["eff_of_medians"], fmt)
        bound = paired_median(2, "placement")
        bound = f"; without the exchange this placement reaches {bound:.3f}" if bound is not None else ""
        pv = paired_values(2, "efficiency")
        target("2-host efficiency >= 0.9", v, v >= 0.9, f"2 hosts, efficiency by eq. (1) >= 0.9: {v:.3f} ({how}{bound})",
               pv and (pv, 0.9, True, fmt))
    else:
        unmeasured("2-host efficiency >= 0.9", "--hosts with 2")
    if (4, "overlap") in meas and (4, "no-exchange") in meas:
        over = meas[(4, "overlap")]["ms"] / meas[(4, "no-exchange")]["ms"]
        fmt = lambda x: f"{100 * (x - 1):+.1f}%"  # noqa: E731
        v, how = judged(paired_median(4, "exchange_cost"), over, fmt)
        pv = paired_values(4, "exchange_cost")
        target("4-host exchange <= 10% over --no-exchange", v - 1, v <= 1.10,
               f"4 hosts, exchange at most 10% over --no-exchange: {100 * (v - 1):+.1f}% ({how})",
               pv and (pv, 1.10, False, fmt))
    else:
        unmeasured("4-host exchange <= 10% over --no-exchange", "--hosts with 4 and --modes with overlap and no-exchange")
    if (4, "overlap") in meas:
        hid = meas[(4, "overlap")]["hidden"]
        target("4-host hidden fraction >= 0.9", hid, hid >= 0.9, f"4 hosts, hidden-comm fraction >= 0.9: {hid:.3f}")
    else:
        unmeasured("4-host hidden fraction >= 0.9", "--hosts with 4")
    if big is not None:
        target("allreduce within 1.25x of the model at >= 64 KiB", f"{len(within)}/{len(big)}", big and len(within) == len(big),
               f"every hand-written allreduce within 1.25x of the model at >= 64 KiB (ranks <= cores): {len(within)}/{len(big)} rows")
    else:
        unmeasured("allreduce within 1.25x of the model at >= 64 KiB", "the allreduce benchmark: leave out --skip-allreduce-bench")
    for h in [h for h in hosts if h > 1]:
        if h in errors:
            e = errors[h]
            also = f" (sharing cores: {100 * cpu_errors[h]:+.1f}%)" if h in cpu_errors else ""
            target(f"simulate-scaling within 15% at {h} hosts", e, abs(e) <= 0.15,
                   f"simulate-scaling within 15% of the measured {h}-host run: {100 * e:+.1f}%{also}",
                   extra={"with_comm_cpu": cpu_errors[h]} if h in cpu_errors else None)
        else:
            unmeasured(f"simulate-scaling within 15% at {h} hosts", "--modes with overlap and no-exchange")
    # Judged only as a prediction: not at 2 hosts where a repeat's figures came from its own
    # 2-host runs (bench-scaling takes the next repeat's pair wherever there are two repeats).
    for h in [h for h in hosts if h > 1]:
        name = f"simulate-scaling sharing cores within 15% at {h} hosts"
        if h in cpu_errors and (h > 2 or not own_pair[h]):
            e = cpu_errors[h]
            source = "a 2-host pair" if h > 2 else "another repeat's 2-host pair"
            target(name, e, abs(e) <= 0.15,
                   f"simulate-scaling sharing cores (calibrated on {source}) within 15% of the measured {h}-host run: "
                   f"{100 * e:+.1f}%")
        elif h in cpu_errors:
            unmeasured(name, "figures from other runs than the ones predicted, which bench-scaling takes from the "
                             "next repeat with --repeats 2 or more")
        else:
            unmeasured(name, "a 2-host pair and this placement: --hosts with 2, --modes with overlap and no-exchange")
    return targets
