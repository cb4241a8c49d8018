//! `python3 scripts/reports quality` on a bench-quality.sh folder built by hand: the FID and KID
//! of each (ranks, --lr-scaling) after every epoch as the mean and range over seeds, the wall
//! time to reach each epoch from the epochs' training seconds alone, 1 rank shown once (at
//! global batch 64 every scaling is the same run), and the verdicts on the final FID.

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

/// Each evaluation's seconds: far more than an epoch's, so that a wall time that counted them
/// could not pass for one that does not.
const EVAL_SECONDS: f64 = 100.0;
const FEATURE_NET: &str = "classifier-28-fashion-0123abcd.safetensors";

struct Run {
    ranks: u32,
    scaling: &'static str,
    seed: u32,
    /// The learning rate the run's summary says it used.
    lr: f64,
    /// FID after epochs 1, 2 and 3 (KID is FID / 1000).
    fid: [f64; 3],
    /// Each epoch's training seconds.
    seconds: [f64; 3],
    /// `--g-ema`'s averaged generator's FID after each epoch, where the run kept one.
    fid_ema: Option<[f64; 3]>,
    /// Precision and recall after each epoch, where the run recorded them.
    precision_recall: Option<[[f64; 2]; 3]>,
}

impl Run {
    fn name(&self) -> String {
        format!("r{}-{}-s{}", self.ranks, self.scaling, self.seed)
    }
}

fn write_run(out: &Path, r: &Run) {
    let dir = out.join(r.name());
    std::fs::create_dir_all(&dir).unwrap();
    let mut lines = vec![];
    let mut quality = vec![];
    for (e, (&fid, &seconds)) in r.fid.iter().zip(&r.seconds).enumerate() {
        // A step line: the report reads the epoch lines only.
        lines.push(json!({"type": "step", "step": e + 1, "epoch": e, "loss_d": 1.0, "loss_g": 1.0, "d_x": 0.5,
            "d_g_z": 0.5, "d_g_z2": 0.5, "lr": r.lr, "ms": 9000.0, "wait_ms": 0.0, "cpu_ms": 9000.0}));
        let mut line = json!({"type": "epoch", "epoch": e, "steps": 10, "seconds": seconds, "images_per_s": 64.0,
            "sample": format!("samples/epoch-{:03}.png", e + 1), "fid": fid, "kid": fid / 1000.0,
            "eval_seconds": EVAL_SECONDS});
        if let Some(ema) = r.fid_ema {
            line["fid_ema"] = json!(ema[e]);
            line["kid_ema"] = json!(ema[e] / 1000.0);
        }
        if let Some(pr) = r.precision_recall {
            (line["precision"], line["recall"]) = (json!(pr[e][0]), json!(pr[e][1]));
        }
        lines.push(line);
        quality.push(json!({"epoch": e, "fid": fid, "kid": fid / 1000.0, "kid_std": 0.001, "n": 2000,
            "seconds": EVAL_SECONDS}));
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("metrics.jsonl"), text).unwrap();
    let summary = json!({"program": "dcgan-train 0.1.0", "ranks": r.ranks, "batch_size_per_rank": 64,
        "global_batch_size": 64 * r.ranks, "lr": r.lr, "ms_per_step": 100.0, "comm": {},
        "epoch_seconds": r.seconds, "quality": quality, "feature_net": FEATURE_NET});
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
}

fn quality(out: &Path) -> Output {
    Command::new("python3").args(["scripts/reports", "quality"]).arg(out).arg("--no-plot").output().unwrap()
}

/// results.md and results.json of the folder.
fn report(out: &Path) -> (String, Value) {
    let o = quality(out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    let json = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    (md, json)
}

/// (mean, min, max)
fn stats(xs: &[f64]) -> (f64, f64, f64) {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    (mean, xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

/// The report's figure {"mean", "min", "max"} against (mean, min, max).
fn assert_spread(v: &Value, want: (f64, f64, f64)) {
    let got = (v["mean"].as_f64().unwrap(), v["min"].as_f64().unwrap(), v["max"].as_f64().unwrap());
    assert!(close(got.0, want.0) && close(got.1, want.1) && close(got.2, want.2), "{v} against {want:?}");
}

/// 1 rank, and 2 ranks with `none` and `linear`, two seeds each. At the last epoch 2 ranks
/// with `none` end above 1 rank beyond the seeds' spread (30-34 against 20-24), though they
/// were the lowest of all after epoch 2; `linear` ends lowest (mean 21), within 1 rank's spread.
fn runs() -> Vec<Run> {
    let r = |ranks, scaling, seed, lr, fid, seconds| Run {
        ranks,
        scaling,
        seed,
        lr,
        fid,
        seconds,
        fid_ema: None,
        precision_recall: None,
    };
    vec![
        r(1, "none", 1, 0.0002, [60.0, 35.0, 20.0], [10.2, 10.4, 10.1]),
        r(1, "none", 2, 0.0002, [64.0, 39.0, 24.0], [10.6, 10.3, 10.2]),
        r(2, "none", 1, 0.0002, [70.0, 12.0, 30.0], [6.3, 6.1, 6.2]),
        r(2, "none", 2, 0.0002, [74.0, 10.0, 34.0], [6.4, 6.0, 6.6]),
        r(2, "linear", 1, 0.0004, [50.0, 30.0, 19.0], [6.2, 6.2, 6.3]),
        r(2, "linear", 2, 0.0004, [55.0, 33.0, 23.0], [6.1, 6.5, 6.3]),
    ]
}

/// The configurations of `runs` as the report should list them: (ranks, label, lr as written,
/// its runs).
fn configurations(runs: &[Run]) -> Vec<(u32, &'static str, &'static str, Vec<&Run>)> {
    let of = |ranks: u32, scaling: &str| runs.iter().filter(|r| r.ranks == ranks && r.scaling == scaling).collect();
    vec![
        (1, "any", "0.0002", of(1, "none")),
        (2, "none", "0.0002", of(2, "none")),
        (2, "linear", "0.0004", of(2, "linear")),
    ]
}

fn range(s: (f64, f64, f64), digits: usize) -> String {
    format!("{:.digits$}–{:.digits$}", s.1, s.2)
}

#[test]
fn the_table_gives_each_configurations_mean_and_range_over_seeds_and_its_training_time() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let runs = runs();
    for r in &runs {
        write_run(out, r);
    }
    let (md, results) = report(out);
    let configs = results["configurations"].as_array().unwrap();
    let want = configurations(&runs);
    // KID to 4 significant digits of the largest (0.074 here: 5 decimals).
    let top = runs.iter().flat_map(|r| r.fid).fold(0.0, f64::max) / 1000.0;
    let kd = (3 - top.log10().floor() as i32).clamp(0, 6) as usize;
    assert_eq!(kd, 5);
    assert_eq!(configs.len(), want.len(), "{results}");
    assert_eq!(results["final_epoch"], 3);
    for (c, (ranks, scaling, lr, seeds)) in configs.iter().zip(&want) {
        assert!(c["ranks"] == *ranks && c["lr_scaling"] == *scaling, "{c}");
        assert_eq!(c["global_batch"], 64 * ranks);
        assert!(close(c["lr"].as_f64().unwrap(), seeds[0].lr), "{c}");
        assert_eq!(c["seeds"], json!([1, 2]));
        let epochs = c["epochs"].as_array().unwrap();
        assert_eq!(epochs.len(), 3, "{c}");
        for (e, row) in epochs.iter().enumerate() {
            let fid = stats(&seeds.iter().map(|r| r.fid[e]).collect::<Vec<_>>());
            let kid = stats(&seeds.iter().map(|r| r.fid[e] / 1000.0).collect::<Vec<_>>());
            // The epochs' training seconds up to this one; the evaluations are not training.
            let secs = stats(&seeds.iter().map(|r| r.seconds[..=e].iter().sum()).collect::<Vec<_>>());
            assert_eq!(row["epoch"], e + 1);
            assert_spread(&row["fid"], fid);
            assert_spread(&row["kid"], kid);
            assert_spread(&row["train_seconds"], secs);
            let line = format!(
                "| {ranks} | {scaling} | {} | {lr} | {} | {:.1} | {:.2} | {} | {:.kd$} | {} |",
                64 * ranks,
                e + 1,
                secs.0,
                fid.0,
                range(fid, 2),
                kid.0,
                range(kid, kd)
            );
            assert!(md.contains(&line), "no row {line} in\n{md}");
            if e == 2 {
                let line = format!(
                    "| {ranks} | {scaling} | {} | {lr} | 2 | {:.2} | {} | {:.kd$} | {} | {:.1} |",
                    64 * ranks,
                    fid.0,
                    range(fid, 2),
                    kid.0,
                    range(kid, kd),
                    secs.0
                );
                assert!(md.contains(&line), "no final row {line} in\n{md}");
            }
        }
    }
    // 1 rank once: one row after the last epoch and one per epoch, not one per scaling.
    assert_eq!(md.matches("\n| 1 | ").count(), 1 + 3, "{md}");
    assert!(
        md.contains("1 rank trains at global batch 64, where `none`, `sqrt` and `linear` give the same learning rate"),
        "{md}"
    );
    assert!(md.contains(&format!("`{FEATURE_NET}`")) && md.contains("2000 generated images"), "{md}");
    assert!(!md.contains("averaged G FID"), "a column for an average no run kept:\n{md}");
}

/// Runs with `--g-ema` give the averaged generator's FID a column of its own in both tables:
/// its mean over the seeds after each epoch, '-' for a configuration whose runs kept none, and
/// its spread in results.json.
#[test]
fn the_averaged_generators_fid_has_a_column_where_runs_kept_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let mut runs = runs();
    // 1 rank's two seeds kept an average; the 2-rank runs did not.
    runs[0].fid_ema = Some([58.0, 33.0, 19.0]);
    runs[1].fid_ema = Some([62.0, 36.0, 22.0]);
    for r in &runs {
        write_run(out, r);
    }
    let (md, results) = report(out);
    assert!(md.contains("| training s | averaged G FID |") && md.contains("| KID range | averaged G FID |"), "{md}");
    let configs = results["configurations"].as_array().unwrap();
    for (e, row) in configs[0]["epochs"].as_array().unwrap().iter().enumerate() {
        let ema = stats(&[runs[0].fid_ema.unwrap()[e], runs[1].fid_ema.unwrap()[e]]);
        assert_spread(&row["fid_ema"], ema);
        let fid = stats(&[runs[0].fid[e], runs[1].fid[e]]);
        // The per-epoch row of 1 rank ends with the average's mean.
        let start = format!("| 1 | any | 64 | 0.0002 | {} |", e + 1);
        let every = md.split("## Every epoch").nth(1).expect("the per-epoch table");
        let line = every.lines().find(|l| l.starts_with(&start)).unwrap_or_else(|| panic!("no {start} in\n{md}"));
        assert!(line.contains(&format!("| {:.2} |", fid.0)) && line.ends_with(&format!("| {:.2} |", ema.0)), "{line}");
    }
    // The final row of 1 rank (its 2 seeds): the last epoch's mean, 20.50.
    let last = md.split("## Every epoch").next().unwrap();
    assert!(last.lines().any(|l| l.starts_with("| 1 | any | 64 | 0.0002 | 2 |") && l.ends_with("| 20.50 |")), "{md}");
    for c in &configs[1..] {
        assert!(c["epochs"].as_array().unwrap().iter().all(|row| row.get("fid_ema").is_none()), "{c}");
    }
    assert_eq!(md.lines().filter(|l| l.starts_with("| 2 | ") && l.ends_with("| - |")).count(), 2 + 2 * 3, "{md}");
}

/// Runs that recorded precision and recall give each a column: the mean over the seeds, '-'
/// for a configuration with a seed that did not record them.
#[test]
fn precision_and_recall_have_columns_where_runs_recorded_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let mut runs = runs();
    for (i, r) in runs.iter_mut().enumerate() {
        // Every run but the last seed of the last configuration.
        if i + 1 < 6 {
            let i = i as f64;
            r.precision_recall = Some([[0.1 + i / 100.0, 0.2], [0.3, 0.4 - i / 100.0], [0.5 + i / 50.0, 0.6]]);
        }
    }
    for r in &runs {
        write_run(out, r);
    }
    let (md, results) = report(out);
    assert!(md.contains("| KID range | precision | recall |") && !md.contains("averaged G FID"), "{md}");
    let configs = results["configurations"].as_array().unwrap();
    // 1 rank: seeds 1 and 2; after the last epoch precision 0.50 and 0.52, recall 0.6.
    let last = &configs[0]["epochs"].as_array().unwrap()[2];
    assert_spread(&last["precision"], (0.51, 0.5, 0.52));
    assert_spread(&last["recall"], (0.6, 0.6, 0.6));
    let last_table = md.split("## Every epoch").next().unwrap();
    let row = last_table.lines().find(|l| l.starts_with("| 1 | any | 64 | 0.0002 | 2 |")).unwrap();
    assert!(row.ends_with("| 0.510 | 0.600 |"), "{row}");
    // The configuration with a seed that recorded none: no figure, a '-'.
    let lacking = configs.iter().find(|c| c["runs"].as_array().unwrap().iter().any(|n| n == &json!(runs[5].name())));
    assert!(lacking.unwrap()["epochs"].as_array().unwrap().iter().all(|row| row.get("precision").is_none()));
    assert_eq!(md.lines().filter(|l| l.ends_with("| - | - |")).count(), 1 + 3, "{md}");
}

#[test]
fn the_verdicts_compare_final_fids_with_1_ranks_beyond_the_seeds_spread_or_within_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let runs = runs();
    for r in &runs {
        write_run(out, r);
    }
    let (md, results) = report(out);
    let last = |ranks: u32, scaling: &str| {
        stats(&runs.iter().filter(|r| r.ranks == ranks && r.scaling == scaling).map(|r| r.fid[2]).collect::<Vec<_>>())
    };
    let (one, none, linear) = (last(1, "none"), last(2, "none"), last(2, "linear"));
    // Lowest by the mean at the last epoch (not at any epoch: 2 ranks with none were lowest
    // after epoch 2).
    assert!(linear.0 < one.0 && linear.0 < none.0);
    let best = &results["lowest_final_fid"];
    assert!(best["ranks"] == 2 && best["lr_scaling"] == "linear", "{best}");
    assert_spread(&best["fid"], linear);
    let lowest = format!(
        "Lowest final FID: **2 ranks, linear** (global batch 128, lr 0.0004): {:.2} ({}).",
        linear.0,
        range(linear, 2)
    );
    assert!(md.contains(&lowest), "no '{lowest}' in\n{md}");

    // 2 ranks, none: 30-34 against 20-24, above beyond the spread; linear: 19-23 overlaps.
    assert!(none.1 > one.2 && linear.1 <= one.2 && one.1 <= linear.2);
    let against = results["against_one_rank"].as_array().unwrap();
    assert_eq!(against.len(), 2, "{results}");
    for (a, (scaling, fid, verdict, words)) in against.iter().zip([
        ("none", none, "worse", "above it beyond the seeds' spread"),
        ("linear", linear, "within the spread", "within the spread"),
    ]) {
        assert!(a["ranks"] == 2 && a["lr_scaling"] == scaling && a["verdict"] == verdict, "{a}");
        assert_spread(&a["fid"], fid);
        assert_spread(&a["one_rank_fid"], one);
        let line = format!(
            "- 2 ranks, {scaling} (global batch 128): final FID {:.2} ({}) against 1 rank's {:.2} ({}): {words}.",
            fid.0,
            range(fid, 2),
            one.0,
            range(one, 2)
        );
        assert!(md.contains(&line), "no '{line}' in\n{md}");
    }
    assert_eq!(results["larger_batches_hurt"], true);
    assert!(
        md.contains("**Do larger global batches hurt?** Yes: the final FID is above 1 rank's beyond the seeds' spread for 2 ranks, none.")
            && md.contains("Within the spread of 1 rank's: 2 ranks, linear."),
        "{md}"
    );

    // With 2 ranks, none ending at 22 and 26 instead (overlapping 20-24), no configuration is
    // worse beyond the spread.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    for mut r in runs {
        if r.ranks == 2 && r.scaling == "none" {
            r.fid[2] -= 8.0;
        }
        write_run(out, &r);
    }
    let (md, results) = report(out);
    assert_eq!(results["larger_batches_hurt"], false);
    assert!(results["against_one_rank"].as_array().unwrap().iter().all(|a| a["verdict"] == "within the spread"));
    assert!(md.contains("**Do larger global batches hurt?** Not beyond the seeds' spread"), "{md}");
    assert!(md.contains("Within the spread of 1 rank's: 2 ranks, none; 2 ranks, linear."), "{md}");
}

#[test]
fn a_1_rank_run_under_another_scaling_is_the_same_run_and_counts_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    let runs = runs();
    for r in &runs {
        write_run(out, r);
    }
    // Seed 1 again under linear (global batch 64: the same learning rate). Were it counted,
    // 1 rank's mean after the last epoch would move far from 22.
    let fid = [500.0; 3];
    write_run(
        out,
        &Run {
            ranks: 1,
            scaling: "linear",
            seed: 1,
            lr: 0.0002,
            fid,
            seconds: [50.0; 3],
            fid_ema: None,
            precision_recall: None,
        },
    );
    let (md, results) = report(out);
    let one = &results["configurations"][0];
    assert!(one["ranks"] == 1 && one["lr_scaling"] == "any" && one["seeds"] == json!([1, 2]), "{one}");
    assert_eq!(one["runs"], json!(["r1-none-s1", "r1-none-s2"]));
    assert_spread(&one["epochs"][2]["fid"], (22.0, 20.0, 24.0));
    assert_eq!(results["configurations"].as_array().unwrap().len(), 3, "{results}");
    assert!(md.contains("left out: r1-linear-s1: the same run as r1-none-s1"), "{md}");
    assert_eq!(md.matches("\n| 1 | ").count(), 1 + 3, "{md}");
}

#[test]
fn one_seed_leaves_the_comparison_unjudged() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    for r in runs().into_iter().filter(|r| r.seed == 1) {
        write_run(out, &r);
    }
    let (md, results) = report(out);
    assert!(results["against_one_rank"].as_array().unwrap().iter().all(|a| a["verdict"] == "one seed"), "{results}");
    assert!(results["larger_batches_hurt"].is_null(), "{results}");
    assert!(md.contains("**Do larger global batches hurt?** Not judged: with one seed per configuration"), "{md}");
    assert!(
        md.contains("final FID 30.00 (30.00–30.00) against 1 rank's 20.00 (20.00–20.00): one seed each: not judged."),
        "{md}"
    );
}

#[test]
fn a_run_without_distances_fails_with_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path();
    for r in runs() {
        write_run(out, &r);
    }
    let metrics = out.join("r2-linear-s2").join("metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            for k in ["fid", "kid", "eval_seconds"] {
                v.as_object_mut().unwrap().remove(k);
            }
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&metrics, lines.concat()).unwrap();
    let o = quality(out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("r2-linear-s2") && err.contains("--eval-every 1"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out.join("results.md").exists());
}
