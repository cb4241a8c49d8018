//! Checkpoints: round trip, the errors for foreign, broken and mismatched files, files of
//! different saves, and the digests that find a flipped byte in a tensor.

use crate::common;

use dcgan_train::checkpoint::block::BlockCheckpoint;
use dcgan_train::checkpoint::{self, AveragedGenerator, Checkpoint, Keep, Moments, NetTensors, Progress};
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, DISCRIMINATOR_64, GENERATOR_28, discriminator_28, generator_28};
use dcgan_train::model::net::param_layout;
use dcgan_train::nn::params::ParamLayout;

pub fn sample_checkpoint(g: &ParamLayout, d: &ParamLayout) -> Checkpoint {
    let net = |l: &ParamLayout, seed| NetTensors {
        values: common::random(l.param_len(), 1.0, seed),
        state: common::random(l.state_len(), 1.0, seed + 1),
        batches_tracked: 42 + seed,
    };
    let moments = |l: &ParamLayout, seed| Moments {
        exp_avg: common::random(l.param_len(), 1.0, seed),
        exp_avg_sq: common::random(l.param_len(), 1.0, seed + 1),
        steps: 7,
    };
    Checkpoint {
        g: net(g, 1),
        d: net(d, 3),
        g_ema: Some(AveragedGenerator { net: net(g, 80), images_seen: 12_345 }),
        g_adam: moments(g, 5),
        d_adam: moments(d, 7),
        progress: Progress {
            step: 123,
            epoch: 2,
            batch_in_epoch: 17,
            seed: 9,
            ranks: 3,
            batch_per_rank: 64,
            image_size: 28,
            ngf: 64,
            rng: "counter".into(),
            config: serde_json::json!({"lr": 0.0002}),
            block_sync_due: true,
        },
        rank_states: (1..3)
            .map(|r| [common::random(g.state_len(), 1.0, 10 + r), common::random(d.state_len(), 1.0, 20 + r)])
            .collect(),
        residuals: (0..3u64)
            .map(|r| {
                let pair = |l: &ParamLayout, seed| [0, 1].map(|k| common::random(l.param_len(), 0.1, seed + k));
                [pair(g, 30 + 2 * r), pair(d, 40 + 2 * r)]
            })
            .collect(),
        block: Some(BlockCheckpoint {
            global: [common::random(g.param_len(), 1.0, 50), common::random(d.param_len(), 1.0, 51)],
            velocity: [common::random(g.param_len(), 0.1, 52), common::random(d.param_len(), 0.1, 53)],
            ranks: (1..3u64)
                .map(|r| {
                    let three = |l: &ParamLayout, seed| [0, 1, 2].map(|k| common::random(l.param_len(), 1.0, seed + k));
                    [three(g, 60 + 3 * r), three(d, 70 + 3 * r)]
                })
                .collect(),
        }),
    }
}

/// Why loading the checkpoint in `dir` fails (it must fail).
fn load_error(dir: &std::path::Path, layouts: (&ParamLayout, &ParamLayout)) -> String {
    match checkpoint::load(dir, layouts) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

pub fn layouts() -> (ParamLayout, ParamLayout) {
    (param_layout(&GENERATOR_28).0, param_layout(&DISCRIMINATOR_28).0)
}

#[test]
fn round_trip_restores_everything_and_keeps_only_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let mut ck = sample_checkpoint(&g, &d);
    let first = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    ck.progress.step = 200;
    ck.g.values[0] = 0.5;
    let second = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert!(!first.exists(), "the previous checkpoint is removed once the new one is complete");
    assert_eq!(checkpoint::resolve(dir.path()).unwrap(), second);
    assert_eq!(checkpoint::resolve(&second.join("G.safetensors")).unwrap(), second, "a checkpoint's file names it");
    let back = checkpoint::load(&second, (&g, &d)).unwrap();
    assert_eq!(back, ck);
    assert_eq!(checkpoint::image_size_of(&second).unwrap(), 28);
    // A run that never sent 1-bit, ran blocks or averaged G keeps none of them, and reads
    // back none.
    ck.residuals.clear();
    ck.block = None;
    ck.g_ema = None;
    let third = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert_eq!(checkpoint::load(&third, (&g, &d)).unwrap(), ck);
}

/// A file of another save (the same step saved again, here with other weights) put into a
/// checkpoint is refused by name, whichever file it is; the checkpoint's own files load.
#[test]
fn a_file_of_another_save_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let mut ck = sample_checkpoint(&g, &d);
    let keep = Keep::All;
    let first = checkpoint::save(dir.path(), (&g, &d), &ck, keep).unwrap();
    ck.d.values[0] = 0.25;
    ck.g_ema.as_mut().unwrap().net.values[0] = 0.5;
    let second = checkpoint::save(dir.path(), (&g, &d), &ck, keep).unwrap();
    for file in ["G.safetensors", "D.safetensors", "G_ema.safetensors", "optimizer.safetensors"] {
        let own = std::fs::read(second.join(file)).unwrap();
        std::fs::copy(first.join(file), second.join(file)).unwrap();
        let e = load_error(&second, (&g, &d));
        assert!(e.contains(&format!("{file} is not from the save of")), "{file}: {e}");
        assert!(e.contains(&format!("put back the checkpoint's own {file}")), "{file}: {e}");
        std::fs::write(second.join(file), own).unwrap();
    }
    assert_eq!(checkpoint::load(&second, (&g, &d)).unwrap(), ck);
}

/// What a save that never finished left (its `.tmp-` directory, of another step) goes with the
/// next save.
#[test]
fn a_save_clears_what_unfinished_saves_left() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let ck = sample_checkpoint(&g, &d);
    let unfinished = dir.path().join("checkpoints").join(".tmp-step-00000007");
    std::fs::create_dir_all(&unfinished).unwrap();
    std::fs::write(unfinished.join("G.safetensors"), b"half a file").unwrap();
    let saved = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::All).unwrap();
    assert!(!unfinished.exists(), "the unfinished save is still there");
    let left: Vec<String> = std::fs::read_dir(dir.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(left.iter().all(|n| !n.starts_with(".tmp-")), "{left:?}");
    assert_eq!(checkpoint::load(&saved, (&g, &d)).unwrap(), ck);
}

/// A second save of the same step (a periodic checkpoint, then the epoch's end with the new
/// position) goes to a new directory: the one `latest` names is never removed before
/// `latest` moves, so a crash between the two leaves a whole checkpoint.
#[test]
fn saving_the_same_step_again_never_replaces_the_latest_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let mut ck = sample_checkpoint(&g, &d);
    let first = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    ck.progress.epoch += 1;
    ck.progress.batch_in_epoch = 0;
    let second = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert_ne!(first, second, "the second save of step {} wrote over the first", ck.progress.step);
    assert!(!first.exists(), "the first is removed once the second is the latest");
    assert_eq!(checkpoint::resolve(dir.path()).unwrap(), second);
    assert_eq!(checkpoint::load(&second, (&g, &d)).unwrap(), ck);
    // A third save of that step takes the base name again.
    let third = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    assert_eq!(third, first);
    assert!(!second.exists());
}

/// `--keep-checkpoints`: the newest N stay (by step, whatever order they were written in
/// with a repeated step among them), all of them with 0; `latest` names the one just written.
#[test]
fn saves_keep_the_newest_n_or_all() {
    // Narrow networks: what is kept does not depend on the files' size.
    let (g, d) = (param_layout(&generator_28(16)).0, param_layout(&discriminator_28(16)).0);
    let names = common::checkpoint_names;
    let dir = tempfile::tempdir().unwrap();
    let mut ck = sample_checkpoint(&g, &d);
    for step in [10, 20, 30, 30, 40] {
        ck.progress.step = step;
        let saved = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(3)).unwrap();
        assert_eq!(checkpoint::resolve(dir.path()).unwrap(), saved);
    }
    assert_eq!(names(dir.path()), ["step-00000030", "step-00000030.2", "step-00000040"]);

    let dir = tempfile::tempdir().unwrap();
    for step in [10, 20, 30] {
        ck.progress.step = step;
        checkpoint::save(dir.path(), (&g, &d), &ck, Keep::from_option(0)).unwrap();
    }
    assert_eq!(names(dir.path()), ["step-00000010", "step-00000020", "step-00000030"]);
    assert_eq!(Keep::from_option(1), Keep::Latest(1));

    // Oldest first by (step, K) as numbers, not as text: .10 is after .2, and a step past
    // eight digits after every eight-digit one.
    for (present, step, kept) in [
        (["step-00000030.2", "step-00000030.10"], 30, ["step-00000030", "step-00000030.10"]),
        (["step-99999999", "step-100000000"], 100000001, ["step-100000000", "step-100000001"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for n in present {
            std::fs::create_dir_all(dir.path().join("checkpoints").join(n)).unwrap();
        }
        ck.progress.step = step;
        checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(2)).unwrap();
        assert_eq!(names(dir.path()), kept, "{present:?}");
    }
}

#[test]
fn foreign_truncated_and_mismatched_checkpoints_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let saved = checkpoint::save(dir.path(), (&g, &d), &sample_checkpoint(&g, &d), Keep::Latest(1)).unwrap();

    // Another architecture: the 64x64 discriminator cannot load a 28x28 one.
    let d64 = param_layout(&DISCRIMINATOR_64).0;
    let err = checkpoint::load(&saved, (&g, &d64)).unwrap_err().to_string();
    assert!(err.contains("another architecture") && err.contains("--image-size"), "{err}");

    // A truncated file.
    let gpath = saved.join("G.safetensors");
    let bytes = std::fs::read(&gpath).unwrap();
    std::fs::write(&gpath, &bytes[..bytes.len() / 2]).unwrap();
    let err = format!("{:#}", checkpoint::load(&saved, (&g, &d)).unwrap_err());
    let instead = "no older checkpoint beside it is intact: restore it from a copy, or start the run again";
    assert!(err.contains("not a readable safetensors file") && err.ends_with(instead), "{err}");
    // A file missing: named, with the way on.
    std::fs::write(&gpath, &bytes).unwrap();
    let optimizer = saved.join("optimizer.safetensors");
    let kept = std::fs::read(&optimizer).unwrap();
    std::fs::remove_file(&optimizer).unwrap();
    let err = format!("{:#}", checkpoint::load(&saved, (&g, &d)).unwrap_err());
    assert!(err.contains("cannot read") && err.contains("optimizer.safetensors") && err.ends_with(instead), "{err}");
    std::fs::write(&optimizer, kept).unwrap();

    // A safetensors file of someone else's (no format marker).
    let foreign = safetensors::serialize(
        [("x", safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &[0, 0, 0, 0]).unwrap())],
        None,
    )
    .unwrap();
    std::fs::write(&gpath, foreign).unwrap();
    let err = checkpoint::load(&saved, (&g, &d)).unwrap_err().to_string();
    assert!(err.contains("not written by dcgan-train"), "{err}");

    // Not a checkpoint at all.
    let err = checkpoint::resolve(&dir.path().join("nowhere")).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
}

/// Every tensor's digest is written with it, and an unchanged checkpoint verifies. One byte
/// flipped in a tensor's data (not the header: safetensors checks that itself) is refused
/// naming the file and the tensor, where it once loaded silently; a run directory whose only
/// checkpoint is corrupt has no intact one.
#[test]
fn a_flipped_byte_in_a_tensor_is_refused_naming_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let ck = sample_checkpoint(&g, &d);
    let saved = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    for file in ["G.safetensors", "D.safetensors", "optimizer.safetensors", "G_ema.safetensors"] {
        let path = saved.join(file);
        let meta = common::safetensors_metadata(&path);
        let digests: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(meta["digests"].as_str().expect("a digests entry")).unwrap();
        for name in common::read_safetensors(&path).keys() {
            assert!(digests.contains_key(name), "{file}: no digest of {name}");
        }
    }
    assert_eq!(checkpoint::load(&saved, (&g, &d)).unwrap(), ck, "an unchanged checkpoint verifies");

    common::flip_tensor_byte(&saved.join("G.safetensors"), "main.3.weight");
    let err = load_error(&saved, (&g, &d));
    assert!(err.contains("G.safetensors is corrupt: tensor main.3.weight does not match its digest"), "{err}");
    assert!(err.contains("no older checkpoint beside it is intact"), "{err}");
    let err = format!("{:#}", checkpoint::resolve(dir.path()).unwrap_err());
    assert!(err.contains("no intact checkpoint") && err.contains("G.safetensors is corrupt"), "{err}");
    assert!(err.contains("main.3.weight"), "{err}");
    // The averaged generator is checked as the others are.
    let again = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    common::flip_tensor_byte(&again.join("G_ema.safetensors"), "main.0.weight");
    let err = load_error(&again, (&g, &d));
    assert!(err.contains("G_ema.safetensors is corrupt: tensor main.0.weight does not match its digest"), "{err}");
}

/// The metadata (the training progress, from which a resume takes the run's options) has a
/// digest too: a changed digit there is refused like a changed weight.
#[test]
fn changed_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let saved = checkpoint::save(dir.path(), (&g, &d), &sample_checkpoint(&g, &d), Keep::Latest(1)).unwrap();
    let opt = saved.join("optimizer.safetensors");
    common::rewrite_metadata(&opt, |m| {
        let p = m["progress"].as_str().unwrap().replace("\"step\":123", "\"step\":723");
        m.insert("progress".into(), p.into());
    });
    let err = load_error(&saved, (&g, &d));
    assert!(err.contains("optimizer.safetensors is corrupt: its metadata does not match its digest"), "{err}");
}

/// `latest` naming a corrupt checkpoint: the newest intact one beside it is used, and a
/// note says which and why; the corrupt one named directly is refused naming the older one.
#[test]
fn a_corrupt_latest_falls_back_to_the_newest_intact_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let mut ck = sample_checkpoint(&g, &d);
    let older = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(3)).unwrap();
    ck.progress.step = 200;
    let newer = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(3)).unwrap();
    common::flip_tensor_byte(&newer.join("D.safetensors"), "main.2.weight");
    assert_eq!(checkpoint::resolve(dir.path()).unwrap(), older);
    let found = checkpoint::locate(dir.path(), "--resume").unwrap();
    assert_eq!(found.skipped, std::slice::from_ref(&newer));
    let notes = found.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = &notes[0];
    for part in ["latest names step-00000200", "D.safetensors is corrupt", "main.2.weight", "using", "step-00000123"] {
        assert!(note.contains(part), "'{part}' missing from: {note}");
    }
    let err = load_error(&newer, (&g, &d));
    assert!(err.contains(&format!("use the older checkpoint {}, which is intact", older.display())), "{err}");
    // A latest naming nothing, or no latest at all, falls back alike.
    std::fs::remove_dir_all(&newer).unwrap();
    let found = checkpoint::locate(dir.path(), "--resume").unwrap();
    assert_eq!(found.dir, older);
    assert!(found.notes()[0].contains("names step-00000200, which does not exist"), "{:?}", found.notes());
    std::fs::remove_file(dir.path().join("checkpoints").join("latest")).unwrap();
    let found = checkpoint::locate(dir.path(), "--resume").unwrap();
    assert_eq!(found.dir, older);
    assert!(found.notes()[0].contains("latest is missing"), "{:?}", found.notes());
}

/// A checkpoint written before digests existed loads as before, with a note naming its files
/// that have none.
#[test]
fn a_checkpoint_without_digests_loads_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let (g, d) = layouts();
    let ck = sample_checkpoint(&g, &d);
    let saved = checkpoint::save(dir.path(), (&g, &d), &ck, Keep::Latest(1)).unwrap();
    for file in ["G.safetensors", "D.safetensors", "optimizer.safetensors"] {
        common::rewrite_metadata(&saved.join(file), |m| drop(m.remove("digests")));
    }
    assert_eq!(checkpoint::load(&saved, (&g, &d)).unwrap(), ck);
    let found = checkpoint::locate(dir.path(), "--resume").unwrap();
    let notes = found.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = &notes[0];
    assert!(note.contains("has no digests in G.safetensors, D.safetensors, optimizer.safetensors"), "{note}");
}

/// The binary, alone (one rank, no mpiexec): its exit status and standard error.
fn dcgan(args: &[&str]) -> (bool, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dcgan-train")).args(args).output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// A real run of two steps in `dir`: one checkpoint, step-00000002.
fn short_run(dir: &std::path::Path) -> std::path::PathBuf {
    let run = dir.join("run");
    let out = run.to_str().unwrap();
    let (ok, err) =
        dcgan(&["--data", "synthetic:64", "--batch-size", "8", "--max-steps", "2", "--no-progress", "--out", out]);
    assert!(ok, "{err}");
    run
}

/// The one error line of a failed command (and that there is exactly one).
fn error_line(err: &str) -> &str {
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line, got: {err}");
    lines[0]
}

/// The case that once passed with exit 0: one byte flipped in a weight of a real run's
/// G.safetensors. `--resume` and `sample` both refuse, naming the file and the tensor, and
/// `sample` writes no image.
#[test]
fn resume_and_sample_refuse_a_flipped_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let run = short_run(tmp.path());
    let ck = run.join("checkpoints").join("step-00000002");
    common::flip_tensor_byte(&ck.join("G.safetensors"), "main.3.weight");
    let png = tmp.path().join("s.png");
    for (args, flag) in [
        // The run's options repeated: it once resumed from the flipped weight with exit 0.
        (
            vec!["--data", "synthetic:64", "--batch-size", "8", "--resume", run.to_str().unwrap(), "--max-steps", "4"],
            "--resume",
        ),
        (vec!["sample", "--checkpoint", run.to_str().unwrap(), "--out", png.to_str().unwrap()], "--checkpoint"),
    ] {
        let (ok, err) = dcgan(&args);
        assert!(!ok, "{args:?} went on with a corrupt checkpoint: {err}");
        let line = error_line(&err);
        assert!(line.contains(&format!("{flag} {}: no intact checkpoint", run.display())), "{line}");
        assert!(line.contains("G.safetensors is corrupt (tensor main.3.weight does not match its digest)"), "{line}");
        assert!(line.contains("start the run again"), "{line}");
    }
    assert!(!png.exists(), "sample wrote an image from a corrupt generator");
    // Named directly, the checkpoint is refused with what to do instead.
    let (ok, err) = dcgan(&["sample", "--checkpoint", ck.to_str().unwrap(), "--out", png.to_str().unwrap()]);
    assert!(!ok);
    let line = error_line(&err);
    assert!(
        line.contains(&format!("{} is corrupt: tensor main.3.weight", ck.join("G.safetensors").display())),
        "{line}"
    );
    assert!(line.contains("no older checkpoint beside it is intact"), "{line}");
    // The rest of the run is untouched.
    assert!(run.join("summary.json").exists());
}

/// A checkpoint written before checkpoints carried digests still resumes and samples, with
/// one warning line naming its files; what the resumed run writes has digests.
#[test]
fn a_checkpoint_without_digests_resumes_and_samples_with_one_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let run = short_run(tmp.path());
    let ck = run.join("checkpoints").join("step-00000002");
    for file in ["G.safetensors", "D.safetensors", "optimizer.safetensors"] {
        common::rewrite_metadata(&ck.join(file), |m| drop(m.remove("digests")));
    }
    let png = tmp.path().join("s.png");
    let want =
        format!("warning: {} has no digests in G.safetensors, D.safetensors, optimizer.safetensors", ck.display());
    for args in [
        vec!["sample", "--checkpoint", run.to_str().unwrap(), "--out", png.to_str().unwrap()],
        vec![
            "--data",
            "synthetic:64",
            "--batch-size",
            "8",
            "--resume",
            run.to_str().unwrap(),
            "--max-steps",
            "3",
            "--no-progress",
        ],
    ] {
        let (ok, err) = dcgan(&args);
        assert!(ok, "{args:?}: {err}");
        let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
        assert_eq!(warnings.len(), 1, "{args:?}: one warning line, got: {err}");
        assert!(warnings[0].starts_with(&want), "{args:?}: {}", warnings[0]);
    }
    let newest = run.join("checkpoints").join("step-00000003");
    assert!(common::safetensors_metadata(&newest.join("G.safetensors")).contains_key("digests"));
}
