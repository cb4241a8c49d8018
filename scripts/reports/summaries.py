"""The runs of a bench-scaling.sh folder and the figures their summary.json files hold.

Figures dcgan-train computes (a run's median step, its eq. (1) speedup against the
--baseline-summary it was given, its hidden-comm fraction) are read here, never re-derived;
what the reports add is what no single run can know: medians over repeats and ratios of runs.
"""

import glob
import json
import os
import re
import statistics


def load(path):
    with open(path) as f:
        return json.load(f)


def median(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def runs(out):
    """{(hosts, mode): [summary, ...]} in repeat order, from OUT/runs/HOSTS-MODE-REPEAT/; each
    summary gains "_repeat" and "_dir" (its run's folder)."""
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


def weak_scaling(s):
    """The run's eq. (1) figures against its --baseline-summary (bench-scaling.sh gives every
    N-host run its own repeat's 1-host run): {"speedup_eq1", "efficiency",
    "baseline_ms_per_step", ...}, or None for a run given no baseline."""
    return s.get("weak_scaling")
