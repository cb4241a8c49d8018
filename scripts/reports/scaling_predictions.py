"""The scaling report's check of simulate-scaling: each N-host --no-exchange run's trace
replayed at N, wire only and with the exchange sharing cores, against the N-host run."""

import glob
import os
import re

from summaries import load, median


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
