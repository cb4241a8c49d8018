//! `python3 scripts/reports losses` on a bench-losses.sh folder built by hand: each loss's FID
//! at the shorter run's training wall time, interpolated between its epochs, and the lower
//! one named, per rank count.

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// A run's folder: epochs with their training seconds and FIDs (evaluations take 100 s each,
/// which a wall time that counted them would show).
fn write_run(out: &Path, name: &str, seconds: &[f64], fid: &[f64]) {
    write_run_with(out, name, seconds, fid, None);
}

/// The same, with each epoch's precision and recall where given.
fn write_run_with(out: &Path, name: &str, seconds: &[f64], fid: &[f64], pr: Option<&[[f64; 2]]>) {
    let dir = out.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lines: String = seconds
        .iter()
        .zip(fid)
        .enumerate()
        .map(|(e, (s, f))| {
            let mut line = json!({"type": "epoch", "epoch": e, "steps": 10, "seconds": s, "images_per_s": 1.0,
                "sample": "x.png", "fid": f, "kid": f / 1000.0, "eval_seconds": 100.0});
            if let Some(pr) = pr {
                (line["precision"], line["recall"]) = (json!(pr[e][0]), json!(pr[e][1]));
            }
            format!("{line}\n")
        })
        .collect();
    std::fs::write(dir.join("metrics.jsonl"), lines).unwrap();
    let summary = json!({"program": "dcgan-train 0.1.0", "ranks": 1, "global_batch_size": 64, "lr": 1e-4,
        "ms_per_step": 1.0, "comm": {}});
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
}

#[test]
fn the_losses_are_compared_at_the_shorter_runs_wall_time() {
    let tmp = tempfile::tempdir().unwrap();
    // DCGAN: epochs end at 10, 20, 30 s; WGAN-GP at 15, 30, 45 s. Equal wall time: 30 s, where
    // DCGAN has 30.0 and WGAN-GP, between 40 (at 15 s) and 20 (at 30 s), 20.0.
    write_run(tmp.path(), "dcgan-r1-s1", &[10.0, 10.0, 10.0], &[50.0, 40.0, 30.0]);
    write_run(tmp.path(), "wgan-gp-r1-s1", &[15.0, 15.0, 15.0], &[40.0, 20.0, 10.0]);
    // WGAN-GP with layer norm, a loss of its own: epochs at 20, 40, 60 s; 25.0 at 30 s.
    write_run(tmp.path(), "wgan-gp-layer-r1-s1", &[20.0, 20.0, 20.0], &[35.0, 15.0, 5.0]);
    // Two ranks: only DCGAN, so nothing to compare.
    write_run(tmp.path(), "dcgan-r2-s1", &[5.0], &[60.0]);
    let o =
        Command::new("python3").args(["scripts/reports", "losses"]).arg(tmp.path()).arg("--no-plot").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(tmp.path().join("results.json")).unwrap()).unwrap();
    let verdicts = v["at_equal_wall_time"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{v}");
    assert_eq!(verdicts[0]["ranks"], 1);
    assert_eq!(verdicts[0]["seconds"], 30.0);
    assert_eq!(verdicts[0]["fid"]["dcgan"], 30.0);
    assert_eq!(verdicts[0]["fid"]["wgan-gp"], 20.0);
    assert_eq!(verdicts[0]["fid"]["wgan-gp-layer"], 25.0);
    assert_eq!(verdicts[0]["lower"], "wgan-gp");
    let md = std::fs::read_to_string(tmp.path().join("results.md")).unwrap();
    let verdict = "after 30 s of training: FID dcgan 30.00, wgan-gp 20.00, wgan-gp-layer 25.00: **wgan-gp** is lower";
    assert!(md.contains(verdict), "{md}");
}

/// Runs that recorded precision and recall give them columns (the mean over seeds), and '-'
/// where a seed of the loss recorded none.
#[test]
fn precision_and_recall_have_columns_where_runs_recorded_them() {
    let tmp = tempfile::tempdir().unwrap();
    let pr = |p: f64, r: f64| [[p, r], [p + 0.1, r + 0.1]];
    write_run_with(tmp.path(), "dcgan-r1-s1", &[10.0, 10.0], &[50.0, 40.0], Some(&pr(0.3, 0.5)));
    write_run_with(tmp.path(), "dcgan-r1-s2", &[10.0, 10.0], &[52.0, 42.0], Some(&pr(0.4, 0.3)));
    write_run_with(tmp.path(), "wgan-gp-r1-s1", &[15.0, 15.0], &[40.0, 20.0], Some(&pr(0.5, 0.1)));
    write_run(tmp.path(), "wgan-gp-r1-s2", &[15.0, 15.0], &[41.0, 21.0]);
    let o =
        Command::new("python3").args(["scripts/reports", "losses"]).arg(tmp.path()).arg("--no-plot").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(tmp.path().join("results.md")).unwrap();
    assert!(md.contains("| FID | KID | precision | recall |"), "{md}");
    // DCGAN after epoch 2: precision (0.4 + 0.5) / 2, recall (0.6 + 0.4) / 2.
    // | loss | ranks | global batch | lr | seeds | epoch |
    let row = md.lines().find(|l| l.starts_with("| dcgan | 1 | 64 | 0.0001 | 2 | 2 |")).unwrap();
    assert!(row.ends_with("| 0.450 | 0.500 |"), "{row}");
    let wgan: Vec<&str> = md.lines().filter(|l| l.starts_with("| wgan-gp | 1 |")).collect();
    assert!(wgan.len() == 2 && wgan.iter().all(|l| l.ends_with("| - | - |")), "{md}");
}
