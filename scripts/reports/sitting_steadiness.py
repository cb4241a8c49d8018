"""How steady the machine was during a bench-scaling.sh run (a section of the scaling report).

On a shared machine one run is one sitting of a noisy neighbourhood: a slow stretch moves every
figure of the report, and pairing runs by repeat cancels only the stretches that cover both
runs of a pair. This section measures the sitting from the runs themselves, so that a reader
knows whether to trust the targets or to run again:
- each configuration's step time (hosts, exchange mode) across the repeats: the same command
  on the same code, so its range is the machine's;
- the steps that ran well over their own run's median (the first step, which warms up, left
  out);
- where bench-scaling.sh recorded the machine's CPU ticks around each run (machine-cpu.json),
  the share the hypervisor took (steal): a neighbour that takes whole cores shows there, one
  that shares caches and memory bandwidth does not.
"""

import json
import os
import statistics

# A sitting is noisy past these: a configuration's step ranging more than SPREAD_LIMIT across
# the repeats, or more than SLOW_SHARE of the steps running SLOW times their run's median. Set
# between what steady and noisy sittings of the same benchmark showed (docs/performance/).
SPREAD_LIMIT = 0.25
SLOW = 1.25
SLOW_SHARE = 0.01


def step_times(metrics_path):
    """The wall times (ms) of a run's steps, from its metrics.jsonl, the first step left out."""
    ms = []
    with open(metrics_path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "step":
                ms.append(rec["ms"])
    return ms[1:]


def steadiness(R):
    """For summaries.runs(OUT) ({(hosts, mode): [summary with "_dir", ...]}):
    {"configs": [{hosts, mode, repeats, lo_ms, hi_ms, spread}, ...] (widest first),
    "steps", "slow_steps", "slowest_run": [name, slow steps] or None, "steal_share": the
    hypervisor's share of the CPU ticks of the runs that recorded them (None: none did),
    "most_stolen_run": [name, share] or None, "noisy": bool}."""
    slow, steps, per_run = 0, 0, []
    stolen, ticks, steal_per_run = 0, 0, []
    for summary in (s for ss in R.values() for s in ss):
        run_dir = summary["_dir"]
        run = os.path.basename(run_dir)
        cpu = os.path.join(run_dir, "machine-cpu.json")
        if os.path.exists(cpu):
            with open(cpu) as f:
                t = json.load(f)
            total = sum(t.values())
            if total > 0:
                stolen, ticks = stolen + t.get("steal", 0), ticks + total
                steal_per_run.append((t.get("steal", 0) / total, run))
        metrics = os.path.join(run_dir, "metrics.jsonl")
        if os.path.exists(metrics):
            ms = step_times(metrics)
            if ms:
                med = statistics.median(ms)
                n = sum(x > SLOW * med for x in ms)
                slow, steps = slow + n, steps + len(ms)
                per_run.append((n, run))
    configs = []
    for (h, mode), ss in R.items():
        v = [s["ms_per_step"] for s in ss]
        if len(v) > 1:
            configs.append(dict(hosts=h, mode=mode, repeats=len(v), lo_ms=min(v), hi_ms=max(v), spread=max(v) / min(v) - 1))
    configs.sort(key=lambda c: -c["spread"])
    worst = max(per_run) if per_run else None
    noisy = bool(configs and configs[0]["spread"] > SPREAD_LIMIT) or (steps > 0 and slow / steps > SLOW_SHARE)
    most_stolen = max(steal_per_run) if steal_per_run else None
    return dict(configs=configs, steps=steps, slow_steps=slow,
                slowest_run=[worst[1], worst[0]] if worst and worst[0] else None,
                steal_share=stolen / ticks if ticks else None,
                most_stolen_run=[most_stolen[1], most_stolen[0]] if most_stolen else None, noisy=noisy)


def section(S, w):
    """The markdown section for steadiness(out)'s result."""
    w("## How steady the machine was\n")
    if not S["configs"]:
        w("One repeat only: nothing to compare a run with; run with --repeats 3 or more to see the sitting.\n")
        return
    w(f"Each configuration's median step across the repeats (the same command on the same code: the range is the "
      f"machine's), widest first. A sitting is called noisy when a configuration's range passes {100 * SPREAD_LIMIT:.0f}%, "
      f"or when more than {100 * SLOW_SHARE:.0f}% of all steps ran {SLOW}x their run's median.\n")
    w("| hosts | exchange | repeats | step ms, lowest | highest | range |")
    w("|---:|---|---:|---:|---:|---:|")
    for c in S["configs"]:
        label = "none (1 rank)" if c["hosts"] == 1 else c["mode"]
        w(f"| {c['hosts']} | {label} | {c['repeats']} | {c['lo_ms']:.1f} | {c['hi_ms']:.1f} | +{100 * c['spread']:.0f}% |")
    w("")
    if S["steps"]:
        worst = f"; most in {S['slowest_run'][0]}: {S['slowest_run'][1]}" if S["slowest_run"] else ""
        w(f"Steps over {SLOW}x their run's median: {S['slow_steps']} of {S['steps']} "
          f"({100 * S['slow_steps'] / S['steps']:.1f}%{worst}).\n")
    if S["steal_share"] is not None:
        name, share = S["most_stolen_run"]
        w(f"CPU time the hypervisor took from this machine during the runs (steal): {100 * S['steal_share']:.2f}% "
          f"(the most in {name}: {100 * share:.2f}%). Noise with little steal came from neighbours sharing caches "
          f"and memory bandwidth, which no counter here shows.\n")
    if S["noisy"]:
        w("**A noisy sitting**: the figures below moved with the machine more than the margins of the targets; "
          "run again before concluding from them.\n")
    else:
        w("A steady sitting by these measures.\n")
