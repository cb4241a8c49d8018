"""Sample quality against ranks (`python3 scripts/reports quality OUT [--no-plot]`, what
bench-quality.sh runs last): results.md, results.json and quality.png of its folder.

Every run of the folder, OUT/rRANKS-SCALING-sSEED/, gives its epoch lines (metrics.jsonl: the
FID and KID after the epoch, and the epoch's training seconds, the evaluation not counted)
and its summary.json (the global batch and the learning rate it trained with, the feature
network and the images per evaluation). Runs of one (ranks, --lr-scaling) are the seeds of a
configuration: the report gives their mean and range (min-max) after each epoch, and the
training wall time to reach it (the epochs' seconds summed). At the reference global batch (64)
every scaling gives the same learning rate, so such runs are one configuration whatever
scaling they were started with ("any"), one run per seed. Runs with `--g-ema` (through
bench-quality.sh's --train-args) also give the averaged generator's FID: a column of its own;
so do precision and recall, where runs recorded them (builds before them did not).

The verdicts compare final FIDs (the last epoch every run has): which configuration is lowest,
and for each configuration of several ranks, whether its seeds' range lies above 1 rank's
(larger batches hurt), below it, or overlaps it ("within the spread").
"""

import importlib.util
import json
import math
import os
import re
import sys

from summaries import load

RUN = re.compile(r"r(\d+)-(none|sqrt|linear)-s(\d+)$")
# --lr-scaling's reference: at this global batch the learning rate is --lr whatever the scaling.
REFERENCE_BATCH = 64
ANY = "any"
# Figures of the epoch lines that not every run has: (key, column head, decimals).
OPTIONAL = (("precision", "precision", 3), ("recall", "recall", 3), ("fid_ema", "averaged G FID", 2))


def fail(msg):
    sys.exit(f"quality: {msg}")


def read_run(out, name, ranks, seed):
    """One run: its summary's figures and its epochs [{epoch (1-based), fid, kid,
    train_seconds (summed up to this epoch)}], only those evaluated."""
    d = os.path.join(out, name)
    try:
        s = load(os.path.join(d, "summary.json"))
    except (OSError, ValueError) as e:
        fail(f"{d}: no readable summary.json ({e}): did the run finish?")
    if s.get("ranks") != ranks:
        fail(f"{d}: summary.json says {s.get('ranks')} ranks, its name {ranks}")
    lines = {}
    try:
        with open(os.path.join(d, "metrics.jsonl")) as f:
            for raw in f:
                rec = json.loads(raw)
                if rec.get("type") == "epoch":
                    lines[rec["epoch"]] = rec  # a resumed run's repeat of an epoch: its last
    except (OSError, ValueError) as e:
        fail(f"{d}: no readable metrics.jsonl ({e})")
    epochs, total = [], 0.0
    for e in sorted(lines):
        rec = lines[e]
        total += rec["seconds"]
        if rec.get("fid") is not None:
            epochs.append({"epoch": e + 1, "fid": rec["fid"], "kid": rec["kid"], "train_seconds": total,
                           **{key: rec.get(key) for key, _, _ in OPTIONAL}})
    if not epochs:
        fail(f"{d}: its epoch lines have no FID: train with --eval-every 1 (and a data set with a test split)")
    quality = s.get("quality") or []
    return {
        "name": name,
        "ranks": ranks,
        "seed": seed,
        "global_batch": s.get("global_batch_size"),
        "lr": s.get("lr"),
        "feature_net": s.get("feature_net"),
        "eval_n": quality[-1]["n"] if quality else None,
        "epochs": epochs,
    }


def spread(xs):
    return {"mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs)}


def label(ranks, scaling):
    who = f"{ranks} rank" + ("s" if ranks != 1 else "")
    return who if scaling == ANY else f"{who}, {scaling}"


def compare(a, ref):
    """Where the seeds' range of a final FID lies against the reference's."""
    if a["n"] < 2 or ref["n"] < 2:
        return "one seed"
    if a["min"] > ref["max"]:
        return "worse"
    if a["max"] < ref["min"]:
        return "better"
    return "within the spread"


def collect(out):
    """The configurations of the folder, in (ranks, scaling) order, and the runs left out."""
    found = []
    for name in sorted(os.listdir(out)):
        m = RUN.match(name)
        if m and os.path.isdir(os.path.join(out, name)):
            found.append(read_run(out, name, int(m.group(1)), int(m.group(3))) | {"scaling": m.group(2)})
    if not found:
        fail(f"{out} holds no runs (folders rRANKS-SCALING-sSEED, as bench-quality.sh writes them)")
    configs, left_out = {}, []
    order = {"none": 0, "sqrt": 1, "linear": 2, ANY: -1}
    for run in sorted(found, key=lambda r: (r["ranks"], order[r["scaling"]], r["seed"])):
        scaling = ANY if run["global_batch"] == REFERENCE_BATCH else run["scaling"]
        c = configs.setdefault((run["ranks"], scaling), {"ranks": run["ranks"], "lr_scaling": scaling, "runs": []})
        twin = next((r for r in c["runs"] if r["seed"] == run["seed"]), None)
        if twin:
            left_out.append(f"{run['name']}: the same run as {twin['name']} (global batch {REFERENCE_BATCH}, "
                            "where every scaling gives the same learning rate)")
            continue
        for key in ("global_batch", "lr"):
            if c["runs"] and c["runs"][0][key] != run[key]:
                fail(f"{run['name']} has {key} {run[key]}, {c['runs'][0]['name']} {c['runs'][0][key]}: "
                     "one configuration's runs must train alike")
        c["runs"].append(run)
    return [configs[k] for k in sorted(configs, key=lambda k: (k[0], order[k[1]]))], left_out


def summarise(configs):
    """Each configuration's epochs: the mean and range over seeds of FID, KID and the training
    seconds, at the epochs every one of its seeds evaluated."""
    for c in configs:
        runs = c["runs"]
        common = sorted(set.intersection(*({e["epoch"] for e in r["epochs"]} for r in runs)))
        at = [{e["epoch"]: e for e in r["epochs"]} for r in runs]
        c["global_batch"], c["lr"] = runs[0]["global_batch"], runs[0]["lr"]
        c["seeds"] = [r["seed"] for r in runs]
        c["epochs"] = []
        for ep in common:
            row = {"epoch": ep}
            for key in ("fid", "kid", "train_seconds"):
                row[key] = spread([a[ep][key] for a in at]) | {"n": len(runs)}
            # Precision, recall, --g-ema's averaged generator: where every seed has them.
            for key, _, _ in OPTIONAL:
                if all(a[ep][key] is not None for a in at):
                    row[key] = spread([a[ep][key] for a in at]) | {"n": len(runs)}
            c["epochs"].append(row)


def verdicts(configs):
    """The final epoch (the last every configuration has), the lowest final FID, and each
    configuration of several ranks against 1 rank's (of its own scaling, or 'any')."""
    shared = set.intersection(*({e["epoch"] for e in c["epochs"]} for c in configs))
    if not shared:
        fail("the runs share no evaluated epoch: nothing to compare")
    final = max(shared)
    fin = {(c["ranks"], c["lr_scaling"]): next(e for e in c["epochs"] if e["epoch"] == final) for c in configs}
    best = min(configs, key=lambda c: fin[(c["ranks"], c["lr_scaling"])]["fid"]["mean"])
    against = []
    for c in configs:
        if c["ranks"] == 1:
            continue
        ref_key = next((k for k in ((1, c["lr_scaling"]), (1, ANY)) if k in fin), None)
        if ref_key is None:
            continue
        a, ref = fin[(c["ranks"], c["lr_scaling"])]["fid"], fin[ref_key]["fid"]
        against.append({"ranks": c["ranks"], "lr_scaling": c["lr_scaling"], "global_batch": c["global_batch"],
                        "one_rank_lr_scaling": ref_key[1], "fid": a, "one_rank_fid": ref,
                        "verdict": compare(a, ref)})
    return final, fin, best, against


def fmt_range(s, digits):
    return f"{s['min']:.{digits}f}–{s['max']:.{digits}f}"


def kid_digits(configs):
    """KID's decimals in every cell: 4 significant digits of the largest KID. Its scale
    follows the feature network's (a polynomial kernel of the features), from hundredths to
    hundreds."""
    top = max(abs(e["kid"][k]) for c in configs for e in c["epochs"] for k in ("mean", "min", "max"))
    return 6 if top == 0 else min(6, max(0, 3 - math.floor(math.log10(top))))


def hurt_sentence(against):
    if not against:
        return None, "There are no runs of 1 rank and of several to compare: nothing to say about larger batches."
    names = {v: [label(a["ranks"], a["lr_scaling"]) for a in against if a["verdict"] == v]
             for v in ("worse", "better", "within the spread", "one seed")}
    if names["one seed"] and not (names["worse"] or names["better"] or names["within the spread"]):
        return None, ("**Do larger global batches hurt?** Not judged: with one seed per configuration there "
                      "is no spread to tell a difference from the noise of a seed.")
    parts = []
    if names["worse"]:
        hurt = True
        parts.append("**Do larger global batches hurt?** Yes: the final FID is above 1 rank's beyond the "
                     f"seeds' spread for {'; '.join(names['worse'])}.")
    else:
        hurt = False
        parts.append("**Do larger global batches hurt?** Not beyond the seeds' spread: no configuration of "
                     "several ranks ends above 1 rank's final FID by more than the seeds differ.")
    if names["within the spread"]:
        parts.append(f"Within the spread of 1 rank's: {'; '.join(names['within the spread'])}.")
    if names["better"]:
        parts.append(f"Below 1 rank's beyond the spread: {'; '.join(names['better'])}.")
    if names["one seed"]:
        parts.append(f"Not judged (one seed): {'; '.join(names['one seed'])}.")
    return hurt, " ".join(parts)


def optional_cell(e, key, digits):
    """A figure not every run has (precision and recall from runs of older builds, the averaged
    generator's FID from runs with `--g-ema`): its mean, or '-' where the runs have none."""
    return f"{e[key]['mean']:.{digits}f}" if key in e else "-"


def markdown(out, configs, left_out, final, fin, best, against, hurt_text, plot_note):
    one = [c for c in configs if c["ranks"] == 1 and c["lr_scaling"] == ANY]
    runs = [r for c in configs for r in c["runs"]]
    nets = sorted({str(r["feature_net"]) for r in runs})
    ns = sorted({str(r["eval_n"]) for r in runs})
    batch = sorted({r["global_batch"] // r["ranks"] for r in runs if r["global_batch"]})
    kd = kid_digits(configs)
    # A column for each optional figure that any run has.
    shown = [(k, head, d) for k, head, d in OPTIONAL if any(k in e for c in configs for e in c["epochs"])]
    averaged = any(k == "fid_ema" for k, _, _ in shown)
    optional_head, optional_rule = "".join(f" {head} |" for _, head, _ in shown), "---:|" * len(shown)
    optional = lambda e: "".join(f" {optional_cell(e, k, d)} |" for k, _, d in shown)
    L = ["# Sample quality against ranks (weak scaling)", ""]
    env = os.path.join(out, "environment.txt")
    if os.path.exists(env):
        with open(env) as f:
            L += ["```", f.read().rstrip(), "```", ""]
    L += [f"The Fréchet distance (FID) and KID of {' or '.join(ns)} generated images to the test split, taken "
          f"with the feature network {' and '.join(f'`{n}`' for n in nets)}, after each epoch: the mean over "
          "the seeds and their range (min–max; lower is better). Weak scaling: "
          f"{'/'.join(map(str, batch))} images per rank per step, so that the global batch grows with the ranks "
          "and an epoch takes fewer, larger steps; `lr` is the learning rate after `--lr-scaling`. "
          "Training s: the wall time to reach the epoch, its epochs' seconds summed, the evaluations left out "
          "(mean over seeds; the ranks share this machine's cores).", ""]
    if any(k == "precision" for k, _, _ in shown):
        L += ["Precision and recall: the share of generated images that fall among the test split's "
              "(fidelity) and of the test split's images the generated ones reach (diversity), from "
              "3-nearest-neighbour balls in the same features (mean over the seeds; higher is better).", ""]
    if averaged:
        L += ["Averaged G FID: the FID of `--g-ema`'s average of G's weights in the same runs (mean over "
              "the seeds; '-' where a configuration's runs kept none).", ""]
    if len(nets) > 1 or len(ns) > 1:
        L += ["**Warning**: these runs were not all measured alike (feature networks or images per evaluation "
              "differ): their distances are not comparable.", ""]
    if one:
        L += [f"1 rank trains at global batch {REFERENCE_BATCH}, where `none`, `sqrt` and `linear` give the same "
              "learning rate: it is one run per seed, shown once as `any`, and every configuration of several "
              "ranks is compared with it.", ""]
    for msg in left_out:
        L.append(f"- left out: {msg}")
    if left_out:
        L.append("")
    L += [f"## After the last epoch ({final})", "",
          "| ranks | lr scaling | global batch | lr | seeds | FID | FID range | KID | KID range | training s |"
          + optional_head,
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|" + optional_rule]
    for c in configs:
        e = fin[(c["ranks"], c["lr_scaling"])]
        L.append(f"| {c['ranks']} | {c['lr_scaling']} | {c['global_batch']} | {c['lr']:.6g} | {len(c['seeds'])} | "
                 f"{e['fid']['mean']:.2f} | {fmt_range(e['fid'], 2)} | {e['kid']['mean']:.{kd}f} | "
                 f"{fmt_range(e['kid'], kd)} | {e['train_seconds']['mean']:.1f} |" + optional(e))
    b = fin[(best["ranks"], best["lr_scaling"])]["fid"]
    L += ["", "## What it shows", "",
          f"Lowest final FID: **{label(best['ranks'], best['lr_scaling'])}** (global batch {best['global_batch']}, "
          f"lr {best['lr']:.6g}): {b['mean']:.2f} ({fmt_range(b, 2)}).", ""]
    words = {"worse": "above it beyond the seeds' spread", "better": "below it beyond the seeds' spread",
             "within the spread": "within the spread", "one seed": "one seed each: not judged"}
    for a in against:
        ref = "1 rank" + ("" if a["one_rank_lr_scaling"] == ANY else f", {a['one_rank_lr_scaling']}")
        L.append(f"- {label(a['ranks'], a['lr_scaling'])} (global batch {a['global_batch']}): final FID "
                 f"{a['fid']['mean']:.2f} ({fmt_range(a['fid'], 2)}) against {ref}'s {a['one_rank_fid']['mean']:.2f} "
                 f"({fmt_range(a['one_rank_fid'], 2)}): {words[a['verdict']]}.")
    if against:
        L.append("")
    L += [hurt_text, "", "## Every epoch", "",
          "| ranks | lr scaling | global batch | lr | epoch | training s | FID | FID range | KID | KID range |"
          + optional_head,
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|" + optional_rule]
    for c in configs:
        for e in c["epochs"]:
            L.append(f"| {c['ranks']} | {c['lr_scaling']} | {c['global_batch']} | {c['lr']:.6g} | {e['epoch']} | "
                     f"{e['train_seconds']['mean']:.1f} | {e['fid']['mean']:.2f} | {fmt_range(e['fid'], 2)} | "
                     f"{e['kid']['mean']:.{kd}f} | {fmt_range(e['kid'], kd)} |" + optional(e))
    L += ["", plot_note, ""]
    return "\n".join(L)


def main(out, plot=True):
    if not os.path.isdir(out):
        fail(f"{out} is not a folder (give the one bench-quality.sh wrote)")
    configs, left_out = collect(out)
    summarise(configs)
    final, fin, best, against = verdicts(configs)
    hurt, hurt_text = hurt_sentence(against)
    plot_note = "quality.png: FID against the epoch and against the training wall time, one line per configuration."
    if not plot:
        plot_note = "No plot (--no-plot)."
    elif importlib.util.find_spec("matplotlib") is None:
        plot_note = ("No plot: python3 has no matplotlib (pip install matplotlib, or apt-get install "
                     "python3-matplotlib, then run `python3 scripts/reports quality OUT` again).")
        print(f"quality: {plot_note}", file=sys.stderr)
    else:
        import quality_plot
        quality_plot.plot(out, configs, label)
    results = {
        "reference_batch": REFERENCE_BATCH,
        "final_epoch": final,
        "configurations": [{k: c[k] for k in ("ranks", "lr_scaling", "global_batch", "lr", "seeds", "epochs")}
                           | {"runs": [r["name"] for r in c["runs"]]} for c in configs],
        "lowest_final_fid": {"ranks": best["ranks"], "lr_scaling": best["lr_scaling"],
                             "fid": fin[(best["ranks"], best["lr_scaling"])]["fid"]},
        "against_one_rank": against,
        "larger_batches_hurt": hurt,
        "left_out": left_out,
        "feature_nets": sorted({str(r["feature_net"]) for c in configs for r in c["runs"]}),
        "eval_n": sorted({r["eval_n"] for c in configs for r in c["runs"] if r["eval_n"] is not None}),
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    md = markdown(out, configs, left_out, final, fin, best, against, hurt_text, plot_note)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    print(md)
