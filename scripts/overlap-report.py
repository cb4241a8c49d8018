#!/usr/bin/env python3
"""Hidden communication, measured two ways, from runs of dcgan-train.

  scripts/overlap-report.py TRACE.json [--summary overlap=S1 --summary no-overlap=S2 --summary no-exchange=S3]

From the trace: per rank, the share of the comm thread's allreduce time that falls inside
the compute thread's busy intervals (compute spans other than "wait"), over the recorded
steps after the first. From step times (with the three summaries): exposed = step(overlap)
- step(no-exchange); hidden = 1 - exposed / (comm time per step).
"""
import argparse
import json
import sys


def merge(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(a, busy):
    """Length of interval a covered by the merged intervals busy."""
    s, e = a
    return sum(max(0.0, min(e, be) - max(s, bs)) for bs, be in busy)


def from_trace(path):
    t = json.load(open(path))
    names = {}
    for ev in t["traceEvents"]:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[(ev["pid"], ev["tid"])] = ev["args"]["name"]
    rows = []
    for pid in sorted({ev["pid"] for ev in t["traceEvents"] if ev.get("ph") == "X"}):
        evs = [ev for ev in t["traceEvents"] if ev.get("ph") == "X" and ev["pid"] == pid and ev["args"].get("step", 0) >= 1]
        track = lambda ev: names.get((ev["pid"], ev["tid"]), "")
        busy = merge([(ev["ts"], ev["ts"] + ev["dur"]) for ev in evs if track(ev).startswith("compute") and ev["cat"] != "wait"])
        comm = [(ev["ts"], ev["ts"] + ev["dur"]) for ev in evs if ev["cat"] == "allreduce"]
        total = sum(e - s for s, e in comm)
        hidden = sum(overlap(c, busy) for c in comm)
        steps = len({ev["args"]["step"] for ev in evs})
        rows.append((pid - 1, steps, total / 1e3 / max(steps, 1), hidden / total if total else 0.0))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--summary", action="append", default=[], help="name=summary.json")
    a = ap.parse_args()
    print("| rank | steps | allreduce ms/step | hidden (trace) |")
    print("|---|---|---|---|")
    for rank, steps, ms, frac in from_trace(a.trace):
        print(f"| {rank} | {steps} | {ms:.2f} | {frac:.2f} |")
    s = {k: json.load(open(v)) for k, v in (x.split("=", 1) for x in a.summary)}
    if {"overlap", "no-exchange"} <= s.keys():
        t_ov, t_nx = s["overlap"]["ms_per_step"], s["no-exchange"]["ms_per_step"]
        comm = s["overlap"]["comm"]["comm_ms_per_step"]
        exposed = max(0.0, t_ov - t_nx)
        print()
        print("| run | ms/step | comm ms/step | exposed ms/step | hidden |")
        print("|---|---|---|---|---|")
        for name in ("no-exchange", "overlap", "no-overlap"):
            if name in s:
                c = s[name]["comm"]
                print(f"| {name} | {s[name]['ms_per_step']:.1f} | {c['comm_ms_per_step']:.2f} | {c['exposed_comm_ms_per_step']:.2f} | {c['hidden_comm_fraction']:.2f} |")
        print(f"\nfrom step times: exposed = {t_ov:.1f} - {t_nx:.1f} = {exposed:.1f} ms of {comm:.1f} ms comm: hidden {1 - exposed / comm if comm else 0:.2f}")


if __name__ == "__main__":
    sys.exit(main())
