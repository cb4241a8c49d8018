"""Runs of one configuration with the exchange overlapped, after backward (--no-overlap) and
skipped (--no-exchange), side by side (`python3 scripts/reports overlap NAME=SUMMARY.json...`,
what bench-overlap.sh prints after the trace report).

Each run's figures are its summary's. What no single run holds is the hidden share from step
times: the overlapped run's step less the --no-exchange run's is the exposed time, against the
comm time per step.
"""

import sys

from summaries import load

ORDER = ("no-exchange", "overlap", "no-overlap")


def main(pairs):
    s = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or name not in ORDER:
            sys.exit(f"overlap: '{pair}': give NAME=SUMMARY.json with NAME one of {', '.join(ORDER)}")
        s[name] = load(path)
    print("| run | ms/step | comm ms/step | exposed ms/step | hidden |")
    print("|---|---:|---:|---:|---:|")
    for name in ORDER:
        if name in s:
            c = s[name]["comm"]
            print(f"| {name} | {s[name]['ms_per_step']:.1f} | {c['comm_ms_per_step']:.2f} | "
                  f"{c['exposed_comm_ms_per_step']:.2f} | {c['hidden_comm_fraction']:.2f} |")
    if {"overlap", "no-exchange"} <= s.keys():
        t_ov, t_nx = s["overlap"]["ms_per_step"], s["no-exchange"]["ms_per_step"]
        comm = s["overlap"]["comm"]["comm_ms_per_step"]
        exposed = max(0.0, t_ov - t_nx)
        hidden = 1 - exposed / comm if comm else 0.0
        print(f"\nfrom step times: exposed = {t_ov:.1f} - {t_nx:.1f} = {exposed:.1f} ms of {comm:.1f} ms comm: "
              f"hidden {hidden:.2f}")
