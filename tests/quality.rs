//! Sample quality with a feature network trained here (on synthetic data, whose classes are
//! its shapes): real images are close to the test split and noise far from it, a run comes
//! closer as it trains, measuring during a run changes nothing it trains, the figure a run
//! records is the one `evaluate` gives its checkpoint (also on 2 ranks), and bad input is one
//! line.

use crate::common;

use dcgan_train::data::idx::encode_idx_images;
use dcgan_train::eval::evaluate::Evaluation;
use std::path::Path;
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");
const DATA: &str = common::SYNTHETIC_EVAL_DATA;
const SMALL: &str = common::SMALL_EVAL_DATA;

use crate::common::program as bin;

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn feature_net() -> &'static Path {
    common::synthetic_feature_net(BIN)
}

fn evaluate(extra: &[&str]) -> Evaluation {
    evaluate_on(DATA, feature_net(), extra)
}

fn evaluate_on(data: &str, net: &Path, extra: &[&str]) -> Evaluation {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("e.json");
    let mut args = vec!["evaluate", "--data", data, "--classifier", path(net), "--json", path(&json)];
    args.extend_from_slice(extra);
    ok(bin(&args));
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

#[test]
fn real_images_are_near_the_test_split_and_noise_is_far() {
    let dir = tempfile::tempdir().unwrap();
    let noise = dir.path().join("noise.idx");
    let pixels: Vec<u8> = (0..1000u32 * 784).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    std::fs::write(&noise, encode_idx_images(&pixels, 1000, 28, 28)).unwrap();
    let e = evaluate(&["--images", path(&noise)]);
    let floor = e.floor.clone().expect("the floor is always given");
    assert_eq!((e.n, floor.n), (1000, 1000));
    assert!(floor.fid < 0.02 * e.fid, "real images {} against noise {}", floor.fid, e.fid);
    assert!(floor.kid.mean < 0.02 * e.kid, "real images {:?} against noise {}", floor.kid, e.kid);
    // Real images fall inside the test split's balls and reach most of it; noise does neither.
    let (real, noisy) = (floor.manifold, e.manifold);
    assert!(real.precision > 0.5 && real.recall > 0.5 && real.coverage > 0.5, "{real:?}");
    assert!(noisy.precision < 0.05 && noisy.recall < 0.05 && noisy.coverage < 0.05, "{noisy:?}");
    assert_eq!((real.n, noisy.n), (1000, 1000), "1000 images a side");
    // Class by class: real images reach a fair share of every class of the test split; noise
    // none, and whatever the classifier calls it, little of it looks real.
    assert!(floor.by_class.recall.iter().all(|r| r.is_some_and(|r| r > 0.3)), "{:?}", floor.by_class);
    assert!(e.by_class.recall.iter().all(|r| r.is_some_and(|r| r < 0.1)), "{:?}", e.by_class);
    assert!(e.by_class.precision.iter().all(|p| p.is_none_or(|p| p < 0.1)), "{:?}", e.by_class);
    // Real images spread over every class; noise falls into few, as a collapsed generator's
    // images would.
    assert!(floor.classes.class_shares.iter().all(|&s| s > 0.2), "{floor:?}");
    assert!(e.class_imbalance > 1.5 * floor.classes.class_imbalance, "{floor:?} against {e:?}");
}

/// A run with --eval-every trains bitwise what a run without it does; its distance falls over
/// three epochs (of 8 steps); `evaluate` of its checkpoint gives the figure its last epoch
/// recorded (drawing on the run's own seed, which is not the default).
#[test]
fn quality_during_a_run_changes_nothing_and_falls_as_it_trains() {
    let (tmp, small) = (tempfile::tempdir().unwrap(), common::small_feature_net(BIN));
    let run = |name: &str, every: &str| {
        let out = tmp.path().join(name);
        let args = ["--data", SMALL, "--epochs", "3", "--batch-size", "64", "--no-progress", "--eval-n", "500"];
        let mut args = [&args[..], &["--seed", "7"], &common::NARROW].concat();
        args.extend(["--eval-every", every, "--classifier", path(small), "--out", path(&out)]);
        ok(bin(&args));
        out
    };
    let (with, without) = (run("with", "1"), run("without", "0"));
    assert_eq!(common::step_records(&with), common::step_records(&without), "the metrics differ");
    assert_eq!(common::final_weights(&with), common::final_weights(&without), "the weights differ");
    let q = common::read_summary(&with).quality;
    assert_eq!(q.iter().map(|e| e.epoch).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(q[2].fid < q[0].fid, "{q:?}");
    assert!(common::read_summary(&without).quality.is_empty());
    let e = evaluate_on(SMALL, small, &["--checkpoint", path(&with), "--n", "500"]);
    // The features may differ in their last bits (other batches); another seed's noise moves
    // the distance by a hundred times more.
    assert!((e.fid - q[2].fid).abs() <= 1e-5 * q[2].fid, "evaluate {} against the run's {}", e.fid, q[2].fid);
}

/// A resume that does not name the feature network measures with the run's own (the run's
/// `--classifier` unless given again), so that every figure of the run is of one network.
#[test]
fn a_resume_measures_with_the_runs_feature_network() {
    let (tmp, small) = (tempfile::tempdir().unwrap(), common::small_feature_net(BIN));
    let out = tmp.path().join("run");
    let args = ["--data", SMALL, "--epochs", "1", "--batch-size", "64", "--eval-n", "256", "--eval-every", "1"];
    ok(bin(
        &[&args[..], &common::NARROW, &["--no-progress", "--classifier", path(small), "--out", path(&out)]].concat()
    ));
    ok(bin(&["--resume", path(&out), "--epochs", "2", "--no-progress"]));
    let s = common::read_summary(&out);
    assert_eq!(s.feature_net.as_deref(), Some(path(small)), "{:?}", s.quality);
    assert_eq!(s.quality.iter().map(|q| q.epoch).collect::<Vec<_>>(), [0, 1]);
    // Given another network of the same data, the resume says so and summary.json lists its
    // figures alone (another network's are not comparable); metrics.jsonl keeps them all.
    let other = tmp.path().join("other.safetensors");
    ok(bin(&["classifier", "--data", SMALL, "--epochs", "2", "--seed", "2", "--out", path(&other)]));
    let o = ok(bin(&["--resume", path(&out), "--epochs", "3", "--classifier", path(&other), "--no-progress"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("note: 2 of the run's earlier evaluations were measured with another feature network"),
        "{err}"
    );
    assert_eq!(common::read_summary(&out).quality.iter().map(|q| q.epoch).collect::<Vec<_>>(), [2]);
    let fids = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().matches("\"fid\":").count();
    assert_eq!(fids, 3, "metrics.jsonl holds every evaluation");
    // A resume that measures nothing lists the evaluations of the network that measured last.
    let o = ok(bin(&["--resume", path(&out), "--epochs", "4", "--eval-every", "0", "--no-progress"]));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("another feature network"));
    assert_eq!(common::read_summary(&out).quality.iter().map(|q| q.epoch).collect::<Vec<_>>(), [2]);
}

/// `SMALL`'s splits written as a data directory, its test images changed by `variant`.
fn small_as_a_directory(dir: &Path, variant: u8) -> String {
    use dcgan_train::data::DataSource;
    use dcgan_train::data::idx::encode_idx_labels;
    use dcgan_train::data::labelled::{Labelled, Split};
    std::fs::create_dir_all(dir).unwrap();
    for (split, prefix) in [(Split::Train, "train"), (Split::Test, "t10k")] {
        let mut l = Labelled::load(&DataSource::parse(Some(SMALL)).unwrap(), split).unwrap();
        if split == Split::Test {
            l.set.images[0] ^= variant;
        }
        let images = encode_idx_images(&l.set.images, l.set.count, l.set.height, l.set.width);
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), images).unwrap();
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), encode_idx_labels(&l.labels)).unwrap();
    }
    let test = Labelled::load(&DataSource::Dir(dir.to_path_buf()), Split::Test).unwrap();
    test.fingerprint()
}

/// The test split a run is measured against, by the fingerprint every checkpoint keeps: a
/// resume whose `--data` holds the run's training images beside other test images is refused
/// before anything of the run changes (its FIDs would mix two references), and one that
/// measures nothing keeps the record for the next; `evaluate` on other test images says so.
#[test]
fn a_resume_measures_against_the_runs_test_images() {
    let (tmp, small) = (tempfile::tempdir().unwrap(), common::small_feature_net(BIN));
    let (data, moved) = (tmp.path().join("data"), tmp.path().join("moved"));
    let (test, other_test) = (small_as_a_directory(&data, 0), small_as_a_directory(&moved, 1));
    assert_ne!(test, other_test);
    let out = tmp.path().join("run");
    let args = ["--data", path(&data), "--epochs", "1", "--batch-size", "64", "--eval-n", "256", "--eval-every", "1"];
    ok(bin(
        &[&args[..], &common::NARROW, &["--no-progress", "--classifier", path(small), "--out", path(&out)]].concat()
    ));
    let recorded = |out: &Path| {
        let latest = std::fs::read_to_string(out.join("checkpoints/latest")).unwrap();
        let p = dcgan_train::checkpoint::load_progress(&out.join("checkpoints").join(latest.trim())).unwrap();
        p.config["test_data_fingerprint"].as_str().map(str::to_string)
    };
    assert_eq!(recorded(&out).as_deref(), Some(test.as_str()));
    let metrics = std::fs::read(out.join("metrics.jsonl")).unwrap();
    fails_with(
        &["--resume", path(&out), "--data", path(&moved), "--epochs", "2", "--no-progress"],
        &format!(
            "(fingerprint {other_test}) are not those the run's sample quality was measured against (fingerprint {test})"
        ),
    );
    assert_eq!(std::fs::read(out.join("metrics.jsonl")).unwrap(), metrics, "the refused resume wrote into the run");
    ok(bin(&["--resume", path(&out), "--data", path(&moved), "--epochs", "2", "--eval-every", "0", "--no-progress"]));
    assert_eq!(recorded(&out).as_deref(), Some(test.as_str()), "a resume that measured nothing dropped the record");
    // `evaluate` measures against whatever test split it is given, and says where that is
    // not the run's.
    let note = "note: the run measured its samples against other test images";
    let evaluate = |data: &Path| {
        let args =
            ["evaluate", "--checkpoint", path(&out), "--data", path(data), "--n", "256", "--classifier", path(small)];
        let o = ok(bin(&args));
        String::from_utf8_lossy(&o.stderr).contains(note)
    };
    assert!(evaluate(&moved) && !evaluate(&data));
}

/// Two ranks each draw half the images; rank 0 scores them in their global order, which is
/// what `evaluate` draws from the same weights in one process: G's and, with `--g-ema`, the
/// averaged generator's (which `evaluate` takes by default), each rank drawing from its own
/// copy of the average.
#[test]
fn two_ranks_record_what_evaluate_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, small) = (tmp.path().join("two"), common::small_feature_net(BIN));
    let args = ["--data", SMALL, "--epochs", "1", "--batch-size", "32", "--no-progress", "--eval-every", "1"];
    let mut args = [&args[..], &common::NARROW].concat();
    args.extend(["--g-ema", "200", "--eval-n", "500", "--classifier", path(small), "--out", path(&out)]);
    ok(common::mpirun(2, &args, 600));
    let q = common::read_summary(&out).quality;
    assert_eq!(q.len(), 1);
    let trained = evaluate_on(SMALL, small, &["--checkpoint", path(&out), "--n", "500", "--generator", "trained"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-3 * b;
    assert!(close(trained.fid, q[0].fid), "evaluate {} against the run's {}", trained.fid, q[0].fid);
    let averaged = evaluate_on(SMALL, small, &["--checkpoint", path(&out), "--n", "500"]);
    let run_ema = q[0].more.fid_ema.expect("the averaged generator's FID");
    assert!(close(averaged.fid, run_ema), "evaluate {} against the run's {run_ema}", averaged.fid);
    assert!(!close(run_ema, q[0].fid), "the two generators score alike: {q:?}");
    // The best checkpoint goes by the generator `sample` draws from: the average.
    let b = dcgan_train::checkpoint::best::read(&out.join("checkpoints")).expect("a best checkpoint");
    assert_eq!((b.generator.as_str(), b.fid, b.epoch), ("G_ema", run_ema, 0));
    // Precision and recall are counts of 500: the run's features and evaluate's may differ in
    // their last bits (other batches), which moves a sample across a ball's edge rarely.
    let m = &q[0].more;
    let (run_g, run_a) = (
        [m.precision, m.recall, m.density, m.coverage].map(|x| x.expect("G's figures")),
        [m.precision_ema, m.recall_ema, m.density_ema, m.coverage_ema].map(|x| x.expect("the average's figures")),
    );
    let figures = |e: &Evaluation| [e.manifold.precision, e.manifold.recall, e.manifold.density, e.manifold.coverage];
    for (run, e) in [(run_g, figures(&trained)), (run_a, figures(&averaged))] {
        assert!(run.iter().zip(e).all(|(a, b)| (a - b).abs() <= 2.0 / 500.0), "run {run:?}, evaluate {e:?}");
    }
    let epoch_line = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let epoch_line: serde_json::Value =
        serde_json::from_str(epoch_line.lines().find(|l| l.contains(r#""type":"epoch""#)).unwrap()).unwrap();
    assert_eq!(epoch_line["recall_ema"].as_f64(), Some(run_a[1]), "{epoch_line}");
}

#[test]
fn sampled_images_score_as_images_from_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    ok(bin(&["--data", DATA, "--max-steps", "3", "--no-progress", "--eval-every", "0", "--out", path(&out)]));
    let idx = tmp.path().join("s.idx");
    ok(bin(&["sample", "--checkpoint", path(&out), "--n", "300", "--out", path(&idx)]));
    let (pixels, count, h, w) = dcgan_train::data::idx::read_idx_images(&idx).unwrap();
    assert_eq!((count, h, w, pixels.len()), (300, 28, 28, 300 * 784));
    let e = evaluate(&["--images", path(&idx)]);
    assert_eq!(e.n, 300);
    // An IDX file in the way is not replaced without --force.
    let o = bin(&["sample", "--checkpoint", path(&out), "--n", "300", "--out", path(&idx)]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--force"));
}

/// One line naming the problem and the fix, and a non-zero exit.
fn fails_with(args: &[&str], expected: &str) {
    let o = bin(args);
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert!(!o.status.success() && lines.len() == 1 && lines[0].contains(expected), "{args:?}: {err}");
}

#[test]
fn bad_input_is_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let net = path(feature_net());
    // Too few images for a covariance of 128 features.
    let run = tmp.path().join("run");
    ok(bin(&["--data", DATA, "--max-steps", "2", "--no-progress", "--eval-every", "0", "--out", path(&run)]));
    fails_with(&["evaluate", "--checkpoint", path(&run), "--n", "100", "--classifier", net], "at least 256");
    // The same for training, refused before its first step rather than after an epoch.
    let early = tmp.path().join("early");
    fails_with(&["--data", DATA, "--eval-n", "100", "--classifier", net, "--out", path(&early)], "at least 256");
    assert!(!early.exists(), "a run that cannot be evaluated wrote nothing");
    // An IDX file of too few images.
    let few = tmp.path().join("few.idx");
    std::fs::write(&few, encode_idx_images(&[0; 784 * 100], 100, 28, 28)).unwrap();
    fails_with(
        &["evaluate", "--images", path(&few), "--data", DATA, "--classifier", net],
        "100 images give too few samples",
    );
    // A checkpoint of another image size than the feature network's.
    let big = tmp.path().join("big");
    let args = ["--data", DATA, "--image-size", "64", "--batch-size", "4", "--max-steps", "1", "--no-progress"];
    ok(bin(&[&args[..], &["--eval-every", "0", "--out", path(&big)]].concat()));
    fails_with(&["evaluate", "--checkpoint", path(&big), "--classifier", net], "at 28x28, not");
    // Data without a test split.
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("train-images-idx3-ubyte"), encode_idx_images(&[0; 784 * 4], 4, 28, 28)).unwrap();
    std::fs::write(data.join("train-labels-idx1-ubyte"), dcgan_train::data::idx::encode_idx_labels(&[0, 1, 2, 1]))
        .unwrap();
    fails_with(&["evaluate", "--checkpoint", path(&run), "--data", path(&data)], "t10k-images-idx3-ubyte");
    // A corrupt feature network.
    let mut bytes = std::fs::read(net).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let bad = tmp.path().join("bad.safetensors");
    std::fs::write(&bad, bytes).unwrap();
    fails_with(&["evaluate", "--checkpoint", path(&run), "--classifier", path(&bad)], "corrupt");
    // `classifier --out` a network of other data is refused and left as it was; of the same
    // data, it is kept.
    let other = tmp.path().join("other.safetensors");
    std::fs::copy(net, &other).unwrap();
    fails_with(&["classifier", "--data", SMALL, "--out", path(&other)], "not of this data (512 synthetic");
    assert_eq!(std::fs::read(&other).unwrap(), std::fs::read(net).unwrap(), "the network was overwritten");
    ok(bin(&["classifier", "--data", DATA, "--out", path(&other)]));
    // --eval-every with data that has no test split.
    let args = ["--data", path(&data), "--batch-size", "4", "--max-steps", "1", "--eval-every", "1", "--no-progress"];
    fails_with(
        &[&args[..], &["--out", path(&tmp.path().join("r2"))]].concat(),
        "--eval-every needs the data's test split",
    );
}

/// A run keeps a relative `--data` as typed and where it found it, so that `evaluate` of its
/// checkpoint from another directory reads the run's images, as with `--data` given; where
/// neither place holds them, one line says to give `--data`.
#[test]
fn evaluate_finds_a_relative_data_from_another_directory() {
    use std::process::Command;
    let (tmp, small) = (tempfile::tempdir().unwrap(), common::small_feature_net(BIN));
    let data = tmp.path().join("data");
    small_as_a_directory(&data, 0);
    let (out, elsewhere) = (tmp.path().join("run"), tmp.path().join("elsewhere"));
    std::fs::create_dir(&elsewhere).unwrap();
    let mut train = Command::new(BIN);
    let args = ["--data", "data", "--max-steps", "2", "--batch-size", "16", "--eval-every", "0", "--no-progress"];
    train.current_dir(tmp.path()).args(args).args(common::NARROW).args(["--out", path(&out)]);
    ok(common::run_limited(train, 600));
    let json = tmp.path().join("e.json");
    let evaluate_from_elsewhere = |extra: &[&str]| {
        let mut cmd = Command::new(BIN);
        let args = ["evaluate", "--checkpoint", path(&out), "--n", "256", "--classifier", path(small)];
        cmd.current_dir(&elsewhere).args(args).args(["--json", path(&json)]).args(extra);
        let o = common::run_limited(cmd, 600);
        let e = o.status.success().then(|| serde_json::from_slice::<Evaluation>(&std::fs::read(&json).unwrap()));
        (e.map(Result::unwrap), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (found, err) = evaluate_from_elsewhere(&[]);
    let found = found.unwrap_or_else(|| panic!("evaluate without --data: {err}"));
    let (given, err) = evaluate_from_elsewhere(&["--data", path(&data)]);
    let given = given.unwrap_or_else(|| panic!("evaluate with --data: {err}"));
    assert_eq!(found.fid, given.fid);
    let floor = |e: &Evaluation| e.floor.as_ref().unwrap().fid;
    assert_eq!(floor(&found), floor(&given), "the real images' figures came from other training images");
    std::fs::rename(&data, tmp.path().join("moved")).unwrap();
    let (none, err) = evaluate_from_elsewhere(&[]);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    let expected = format!("the run's --data data is not found from here nor at {}", data.display());
    assert!(none.is_none() && lines.len() == 1 && lines[0].contains(&expected), "{err}");
    assert!(lines[0].contains("give --data"), "{err}");
}
