//! The run's TensorBoard events, read by TensorBoard's own reader (its `EventAccumulator`,
//! which checks every record's CRC-32C): every number of metrics.jsonl at its step, each step
//! once also after a resume from an earlier checkpoint, the epochs' sample grids byte for
//! byte, one file for a run of two ranks, none with `--no-tensorboard`.

use crate::common;

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");
const DATA: &str = common::SMALL_EVAL_DATA;

use crate::common::program as bin;

fn ok(o: Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// What TensorBoard reads from the run directory: scalars by tag as (step, value), images by
/// tag as (step, width, height, SHA-256 of the PNG), the text tab's by tag as (step, text).
#[derive(serde::Deserialize)]
struct Read {
    scalars: BTreeMap<String, Vec<(u64, f32)>>,
    images: BTreeMap<String, Vec<(u64, u32, u32, String)>>,
    texts: BTreeMap<String, Vec<(u64, String)>>,
}

const READER: &str = r#"
import hashlib, json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.IMAGES: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
scalars = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags["scalars"]}
images = {t: [(i.step, i.width, i.height, hashlib.sha256(i.encoded_image_string).hexdigest())
              for i in acc.Images(t)] for t in tags["images"]}
texts = {t: [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(t)] for t in tags["tensors"]
         if acc.SummaryMetadata(t).plugin_data.plugin_name == "text"}
print(json.dumps({"scalars": scalars, "images": images, "texts": texts}))
"#;

/// The run directory `run` as TensorBoard reads it (its reader installed by the project's
/// script where it is not yet).
fn tensorboard_read(run: &Path) -> Read {
    let root = env!("CARGO_MANIFEST_DIR");
    let install = Command::new(format!("{root}/scripts/lib/install-tensorboard.sh")).output().unwrap();
    assert!(install.status.success(), "{}", String::from_utf8_lossy(&install.stderr));
    let pythonpath = String::from_utf8(install.stdout).unwrap().trim().to_string();
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let o = Command::new(python).env("PYTHONPATH", pythonpath).args(["-c", READER, path(run)]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn event_files(run: &Path) -> usize {
    let names = std::fs::read_dir(run).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string());
    names.filter(|n| n.starts_with("events.out.tfevents.")).count()
}

/// metrics.jsonl's lines of `kind` as JSON objects.
fn lines(run: &Path, kind: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let all = text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
    all.filter(|v| v["type"] == kind).map(|v| v.as_object().unwrap().clone()).collect()
}

/// Three epochs, then a resume from the checkpoint after the second: TensorBoard shows every
/// step once, with the numbers metrics.jsonl holds for it, and each epoch's grid.
#[test]
fn tensorboard_reads_what_metrics_jsonl_holds_also_after_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let (net, run) = (common::small_feature_net(BIN), tmp.path().join("run"));
    let args = ["--data", DATA, "--epochs", "3", "--keep-checkpoints", "0", "--eval-n", "500", "--eval-every", "1"];
    ok(bin(&[&args[..], &common::NARROW, &["--classifier", path(net), "--no-progress", "--out", path(&run)]].concat()));
    let second = run.join("checkpoints").join("step-00000016");
    let before = common::read_summary(&run).quality;
    ok(bin(&["--resume", path(&second), "--classifier", path(net), "--no-progress"]));
    // summary.json lists the whole run's quality: the epochs before the resume as they were
    // measured, then the one it measured again.
    let after = common::read_summary(&run).quality;
    assert_eq!(after.iter().map(|q| q.epoch).collect::<Vec<_>>(), [0, 1, 2], "{after:?}");
    assert_eq!(after[..2], before[..2]);
    assert_eq!(event_files(&run), 2, "one file for each invocation");
    let read = tensorboard_read(&run);
    let steps = lines(&run, "step");
    assert_eq!(steps.len(), 24);
    let mut compared = 0;
    for (group, records, step_of) in [("train", &steps, None), ("epoch", &lines(&run, "epoch"), Some(8))] {
        for r in records.iter() {
            let step = match step_of {
                Some(per_epoch) => (r["epoch"].as_u64().unwrap() + 1) * per_epoch,
                None => r["step"].as_u64().unwrap(),
            };
            for (key, v) in r.iter().filter(|(k, _)| !["type", "step", "epoch"].contains(&k.as_str())) {
                let Some(v) = v.as_f64() else { continue };
                let tag = format!("{group}/{key}");
                let shown: Vec<f32> = read.scalars[&tag].iter().filter(|(s, _)| *s == step).map(|p| p.1).collect();
                assert_eq!(shown, [v as f32], "{tag} at step {step}: each step once, as recorded");
                compared += 1;
            }
        }
    }
    assert!(read.scalars["train/loss_d"].len() == 24 && read.scalars["epoch/fid"].len() == 3, "{:?}", read.scalars);
    assert!(compared > 24 * 8, "{compared} numbers compared");
    // Each epoch's grid, as the run wrote it to samples/.
    let grids: Vec<(u64, String)> = (1..=3)
        .map(|e| {
            let png = std::fs::read(run.join("samples").join(format!("epoch-{e:03}.png"))).unwrap();
            (8 * e, format!("{:x}", Sha256::digest(&png)))
        })
        .collect();
    let shown: Vec<(u64, String)> = read.images["samples"].iter().map(|i| (i.0, i.3.clone())).collect();
    assert_eq!(shown, grids);
    assert!(read.images["samples"].iter().all(|i| i.1 == 242 && i.2 == 242), "an 8x8 grid of 28x28 images");
    // The text tab: each invocation's command line and options where it started.
    let options = &read.texts["options"];
    assert_eq!(options.iter().map(|t| t.0).collect::<Vec<_>>(), [0, 16], "{options:?}");
    assert!(options[0].1.contains("--out") && options[1].1.contains("--resume"), "{options:?}");
    assert!(options.iter().all(|t| t.1.contains("| eval-n | 500 |") && t.1.contains("| lr | 0.0002 |")), "{options:?}");
    assert!(!read.texts.contains_key("summary"), "one rank has no step or exchange lines");
}

/// A resume from the checkpoint saved at the first epoch's last step, before that epoch
/// closed, closes it again: TensorBoard shows it once; and that epoch, the best (the only one
/// measured), measured again is no evaluation since the best (`--patience 1` lets the run go
/// on to the second).
#[test]
fn a_resume_from_an_epochs_last_step_shows_that_epoch_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (net, run) = (common::small_feature_net(BIN), tmp.path().join("run"));
    let args = ["--data", DATA, "--epochs", "1", "--checkpoint-every", "4", "--keep-checkpoints", "0"];
    let quality = ["--eval-n", "500", "--eval-every", "1", "--classifier", path(net), "--no-progress"];
    ok(bin(&[&args[..], &common::NARROW, &quality, &["--out", path(&run)]].concat()));
    let at_the_end_of_the_first = run.join("checkpoints").join("step-00000008");
    let resume = ["--resume", path(&at_the_end_of_the_first), "--epochs", "2", "--patience", "1"];
    ok(bin(&[&resume[..], &quality].concat()));
    let epochs = lines(&run, "epoch");
    assert_eq!(epochs.len(), 2, "the resumed run went on to the second epoch");
    let fids: Vec<f64> = epochs.iter().map(|e| e["fid"].as_f64().unwrap()).collect();
    let read = tensorboard_read(&run);
    let shown = &read.scalars["epoch/fid"];
    assert_eq!(shown, &[(8, fids[0] as f32), (16, fids[1] as f32)], "each epoch once");
    assert_eq!(read.images["samples"].iter().map(|i| i.0).collect::<Vec<_>>(), [8, 16]);
}

/// Rank 0 alone writes events, the run's closing lines among them; `--no-tensorboard` writes
/// none.
#[test]
fn one_event_file_for_two_ranks_and_none_when_declined() {
    let tmp = tempfile::tempdir().unwrap();
    let (two, none) = (tmp.path().join("two"), tmp.path().join("none"));
    let args =
        ["--data", "synthetic:256", "--batch-size", "16", "--max-steps", "3", "--no-progress", "--eval-every", "0"];
    ok(common::mpirun(2, &[&args[..], &["--out", path(&two)]].concat(), 300));
    assert_eq!(event_files(&two), 1);
    let read = tensorboard_read(&two);
    assert_eq!(read.scalars["train/loss_g"].len(), 3);
    // Several ranks: the lines the run ends with, in the text tab at its last step.
    let summary = &read.texts["summary"];
    assert!(
        summary.len() == 1 && summary[0].0 == 3 && summary[0].1.starts_with("step (rank 0, medians)"),
        "{summary:?}"
    );
    assert!(summary[0].1.contains("exchange (rank 0, per step)"), "{summary:?}");
    ok(bin(&[&args[..], &["--no-tensorboard", "--out", path(&none)]].concat()));
    assert_eq!(event_files(&none), 0);
}
