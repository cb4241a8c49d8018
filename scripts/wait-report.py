#!/usr/bin/env python3
"""Where the waits for gradient buckets go: the slowest rank, or the bytes.

    scripts/wait-report.py TRACE.json [--skip STEPS] [--json FILE]

An allreduce cannot end on any rank before every rank has handed it its bucket, so when a
training thread waits for a bucket, the part of the wait before the last rank's hand-off is
time spent waiting for the slowest rank (one rank's compute ran late: load imbalance, a
noisy core), and only the rest is the exchange itself (moving and summing the bytes, or the
comm thread's queue). The summary's "exposed" time counts both; this splits them, per bucket,
from a multi-rank trace of `dcgan-train train --trace` (all ranks share one wall clock on one
machine; across machines it needs clocks synchronized well below a millisecond).

A bucket's hand-off on a rank is its first "device-to-host" span (the copy to the comm
thread's buffer, made when backward completes the bucket); each "wait" span is matched to the
latest hand-off of its bucket on its rank before it.
"""

import argparse
import collections
import json
import statistics
import sys


def split_waits(trace, skip=2):
    """{bucket: {"steps": n, "wait": ms, "slowest_rank": ms, "exchange": ms}}: per step and
    rank, averaged over ranks and steps (steps before `skip` left out as warm-up)."""
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    # (bucket, step) -> {rank: hand-off time}; per (rank, bucket): sorted hand-offs.
    handoff = collections.defaultdict(dict)
    handoffs = collections.defaultdict(list)
    for e in spans:
        if e.get("cat") == "device-to-host":
            key = (e["name"], e["args"]["step"])
            handoff[key][e["pid"]] = min(e["ts"], handoff[key].get(e["pid"], float("inf")))
            handoffs[(e["pid"], e["name"])].append((e["ts"], e["args"]["step"]))
    for v in handoffs.values():
        v.sort()
    ranks = {e["pid"] for e in spans}
    per = collections.defaultdict(lambda: {"wait": [], "slowest_rank": []})
    for e in spans:
        if e.get("cat") != "wait":
            continue
        before = [step for ts, step in handoffs[(e["pid"], e["name"])] if ts <= e["ts"]]
        if not before or before[-1] < skip:
            continue
        arrivals = handoff[(e["name"], before[-1])]
        if set(arrivals) != ranks:
            continue  # a rank's hand-off fell outside the recorded steps
        start, end = e["ts"], e["ts"] + e["dur"]
        last = max(arrivals.values())
        row = per[(e["name"], before[-1])]
        row["wait"].append(e["dur"])
        row["slowest_rank"].append(max(0.0, min(end, last) - start))
    out = {}
    for bucket in sorted({b for b, _ in per}):
        steps = [per[k] for k in per if k[0] == bucket]
        mean = lambda xs: sum(xs) / len(xs) / 1e3  # noqa: E731 (us -> ms, over ranks)
        wait = [mean(s["wait"]) for s in steps]
        slow = [mean(s["slowest_rank"]) for s in steps]
        out[bucket] = {
            "steps": len(steps),
            "wait": sum(wait) / len(steps),
            "slowest_rank": sum(slow) / len(steps),
            "exchange": (sum(wait) - sum(slow)) / len(steps),
            "wait_median": statistics.median(wait),
        }
    return out


def markdown(rows):
    lines = [
        "| bucket | steps | waited ms/step (mean over ranks) | for the slowest rank | for the exchange | median step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    tot = collections.Counter()
    for b, r in rows.items():
        lines.append(f"| {b} | {r['steps']} | {r['wait']:.2f} | {r['slowest_rank']:.2f} | {r['exchange']:.2f} | {r['wait_median']:.2f} |")
        for k in ("wait", "slowest_rank", "exchange"):
            tot[k] += r[k]
    lines.append(f"| all | | {tot['wait']:.2f} | {tot['slowest_rank']:.2f} | {tot['exchange']:.2f} | |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out (default 2)")
    ap.add_argument("--json", help="also write the rows (ms per step) as JSON to this file")
    a = ap.parse_args()
    with open(a.trace) as f:
        rows = split_waits(json.load(f), a.skip)
    if not rows:
        sys.exit(f"{a.trace}: no bucket waits with every rank's hand-off: trace a multi-rank run past --skip steps")
    print(markdown(rows), end="")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
