//! `--g-ema`: the average of G's weights follows G's updates as `train/ema.rs` says (checked in
//! f64 from every step's checkpoint, on 1 rank and on 2, whose updates hold twice the images),
//! its standing statistics are the mean of its passes' batch statistics (against an f64
//! forward), it changes nothing the run trains, resumes bit for bit, and is what `sample` draws
//! unless told otherwise. The sample-quality figures of both generators are in `quality.rs`.

use crate::common;

use crate::common::reference as r;
use crate::common::{final_weights, read_safetensors, step_records, train_narrow};
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View, ViewMut};
use dcgan_train::model::dcgan::{GENERATOR_28, NZ, generator_28};
use dcgan_train::model::net::{BackwardOrder, Net, StageSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_dcgan-train");

/// The runs' G, at `common::NARROW`'s width. The average's arithmetic is the same at any
/// width, and a narrow G's checkpoints (one a step here) are a fifth of the size.
fn g_narrow() -> [StageSpec; 3] {
    generator_28(common::NARROW[1].parse().unwrap())
}

fn dcgan(args: &[&str]) -> (bool, String) {
    let o = Command::new(BIN).args(args).output().unwrap();
    (o.status.success(), String::from_utf8_lossy(&o.stderr).to_string())
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The checkpoint directories of a run, oldest first, by their step (not those saved again at
/// the same step, `step-N.K`: an epoch's end saves after averaging the running statistics).
fn checkpoints(run: &Path) -> Vec<(u64, PathBuf)> {
    let mut all: Vec<(u64, PathBuf)> = std::fs::read_dir(run.join("checkpoints"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            Some((name.strip_prefix("step-")?.parse().ok()?, e.path()))
        })
        .collect();
    all.sort();
    all
}

/// The checkpoint `latest` names.
fn latest(run: &Path) -> PathBuf {
    let root = run.join("checkpoints");
    root.join(std::fs::read_to_string(root.join("latest")).unwrap().trim())
}

fn averaged(dir: &Path) -> BTreeMap<String, Vec<f32>> {
    read_safetensors(&dir.join("G_ema.safetensors"))
}

/// The weight of the average's past in an update of `images` that brings the images seen to
/// `seen`, written out from the formula, not taken from the program.
fn decay(images: f64, seen: f64, half_life: f64) -> f64 {
    0.5f64.powf(images / half_life.min(0.05 * seen))
}

/// Every step's average from the step before's and G's weights after the step, in f64, for a
/// run of `ranks` ranks of 8 images and a half-life of 5 images, whose update `t` holds
/// `images(t)`.
fn check_the_average_follows_the_formula(ranks: usize, steps: usize, extra: &[&str], images: impl Fn(u64) -> f64) {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let half_life = 5.0;
    let every = ["--g-ema", "5", "--checkpoint-every", "1", "--keep-checkpoints", "0"];
    train_narrow(ranks, &run, &steps.to_string(), &[&every[..], extra].concat());
    let cks = checkpoints(&run);
    assert_eq!(cks.len(), steps);
    let (mut seen, mut past_ramp) = (images(1), 0);
    check_standing_statistics(&cks[0].1);
    for pair in cks.windows(2) {
        let ((_, before), (t, now)) = (&pair[0], &pair[1]);
        seen += images(*t);
        let beta = decay(images(*t), seen, half_life);
        past_ramp += usize::from(0.05 * seen >= half_life);
        let (prev, g, avg) = (averaged(before), read_safetensors(&now.join("G.safetensors")), averaged(now));
        assert_eq!(avg.keys().collect::<Vec<_>>(), g.keys().collect::<Vec<_>>());
        for (name, w) in g.iter().filter(|(n, _)| !n.contains("running")) {
            let (e0, e1) = (&prev[name], &avg[name]);
            for i in 0..w.len() {
                let (e, w) = (e0[i] as f64, w[i] as f64);
                let want = beta * e + (1.0 - beta) * w;
                // Two f32 roundings of values of the size of e and w.
                let tol = 4.0 * f32::EPSILON as f64 * (e.abs() + w.abs()) + 1e-30;
                assert!(
                    (e1[i] as f64 - want).abs() <= tol,
                    "{ranks} ranks {extra:?}, step {t}, {name}[{i}]: {} against {want} (beta {beta})",
                    e1[i]
                );
            }
        }
        // Not G itself: past the first steps the average lags G.
        if beta > 0.1 {
            let differs = g.iter().any(|(n, w)| !n.contains("running") && *w != avg[n]);
            assert!(differs, "step {t}: the average equals G (beta {beta})");
        }
        check_standing_statistics(now);
    }
    assert!(past_ramp >= 3, "the run never reached the half-life past the ramp");
    // Without a checkpoint at every step G's updates land during the next step's forward,
    // not before a save: the average must come out the same.
    let plain = tmp.path().join("plain");
    train_narrow(ranks, &plain, &steps.to_string(), &[&["--g-ema", "5"][..], extra].concat());
    assert_eq!(averaged(&latest(&plain)), averaged(&latest(&run)));
}

/// `Net::standing_statistics`: after three training-mode passes, every batch norm's running
/// mean and variance are the plain mean of the three passes' batch statistics (computed here in
/// f64), whatever they held before; the forward count and the momentum are as they were.
#[test]
fn standing_statistics_are_the_mean_of_the_passes_batch_statistics() {
    let (batch, passes) = (3, 3);
    let mut g = Net::new(&Cpu, "G", &GENERATOR_28, batch, (NZ, 1, 1), BackwardOrder::DataFirst, 5).unwrap();
    g.store.bn_batches_tracked = 7;
    let state_len = g.store.layout.state_len();
    Cpu.upload(&common::random(state_len, 3.0, 9), ViewMut::whole(&mut g.store.state));
    // [passes][NZ, batch]: each pass's noise, channel-major as G's input.
    let inputs: Vec<Vec<f32>> = (0..passes).map(|k| common::random(NZ * batch, 1.0, 20 + k as u64)).collect();
    g.standing_statistics(&Cpu, passes, |k, buf| Cpu.upload(&inputs[k], ViewMut::whole(buf)));
    let mut params = vec![0.0f32; g.store.layout.param_len()];
    Cpu.download(View::whole(&g.store.value), &mut params);
    let mut state = vec![0.0f32; state_len];
    Cpu.download(View::whole(&g.store.state), &mut state);
    let params = common::to_f64(&params);
    let per_pass: Vec<_> = inputs
        .iter()
        .map(|x| r::net_forward_stats(&GENERATOR_28, batch, (NZ, 1, 1), &params, &common::to_f64(x)).1)
        .collect();
    let bns: Vec<_> = g.stages.iter().filter_map(|s| s.bn.as_ref()).collect();
    assert_eq!(bns.len(), per_pass[0].len());
    for (l, bn) in bns.iter().enumerate() {
        let ch = bn.geom.channels;
        let running = &state[bn.running.clone()];
        for c in 0..ch {
            let mean = per_pass.iter().map(|p| p[l].0[c]).sum::<f64>() / passes as f64;
            let var = per_pass.iter().map(|p| p[l].1[c]).sum::<f64>() / passes as f64;
            for (what, got, want) in [("mean", running[c], mean), ("var", running[ch + c], var)] {
                let tol = 1e-4 * want.abs().max(1e-3);
                assert!((got as f64 - want).abs() <= tol, "layer {l} channel {c} {what}: {got} against {want}");
            }
        }
        assert_eq!(bn.geom.momentum, 0.1);
    }
    assert_eq!(g.store.bn_batches_tracked, 7);
}

/// The checkpoint's averaged generator carries the standing statistics of its own weights
/// (not G's statistics, nor those of an earlier average): computed again here from its file.
fn check_standing_statistics(dir: &Path) {
    let mut g = Net::new(&Cpu, "G", &g_narrow(), 8, (NZ, 1, 1), BackwardOrder::DataFirst, 0).unwrap();
    let t = dcgan_train::checkpoint::load_generator(dir, &g.store.layout, true).unwrap();
    Cpu.upload(&t.values, ViewMut::whole(&mut g.store.value));
    // The runs here are seeded 1 (train_small's default, which train_narrow keeps).
    dcgan_train::train::ema::standing_statistics(&Cpu, &mut g, NZ, 1);
    let mut state = vec![0.0f32; g.store.layout.state_len()];
    Cpu.download(View::whole(&g.store.state), &mut state);
    let saved = averaged(dir);
    for b in &g.store.layout.buffers {
        for (i, (&got, &want)) in saved[&b.name].iter().zip(&state[b.range.clone()]).enumerate() {
            let tol = 1e-5 * want.abs().max(1e-3);
            assert!((got - want).abs() <= tol, "{} {}[{i}]: {got} against {want}", dir.display(), b.name);
        }
    }
}

/// One rank: the ramp ends at update 13 (100 images seen).
#[test]
fn the_average_follows_g_updates_on_one_rank() {
    check_the_average_follows_the_formula(1, 16, &[], |_| 8.0);
}

/// Two ranks: each update is of 16 images, and the ramp ends at update 7 (the run's
/// checkpoints are rank 0's; `quality.rs` scores what both ranks draw from their own copies).
#[test]
fn the_average_follows_g_updates_on_two_ranks() {
    check_the_average_follows_the_formula(2, 10, &[], |_| 16.0);
}

/// `--distributed-after 6`: the first 6 updates are one worker's, of 8 images, the next of 16;
/// the ramp counts each as it was (and ends at update 10, 112 images seen).
#[test]
fn the_average_counts_a_solo_starts_images_as_one_workers() {
    check_the_average_follows_the_formula(2, 13, &["--distributed-after", "6"], |t| if t <= 6 { 8.0 } else { 16.0 });
}

/// The average is kept beside training: the weights and every step's figures are those of a
/// run without it, also past the epoch ends where the average draws the sample grids in G's
/// place; only the checkpoints gain G_ema.safetensors.
#[test]
fn keeping_the_average_changes_nothing_trained() {
    let tmp = tempfile::tempdir().unwrap();
    let (with, without) = (tmp.path().join("with"), tmp.path().join("without"));
    // 4 steps an epoch.
    let base = ["--data", "synthetic:32", "--batch-size", "8", "--threads", "1", "--max-steps", "10"];
    let base = [&base[..], &common::NARROW].concat();
    // Micro-batches with deferred statistics: the standing statistics' passes must leave what
    // is deferred as it was.
    for micro in [&[][..], &["--micro-batches", "2", "--deferred-bn"][..]] {
        common::train_ranks(1, &with, &base, &[&["--g-ema", "100"][..], micro].concat());
        common::train_ranks(1, &without, &base, micro);
        assert_eq!(final_weights(&with), final_weights(&without), "{micro:?}");
        assert_eq!(step_records(&with), step_records(&without), "{micro:?}");
        assert!(latest(&with).join("G_ema.safetensors").is_file());
        assert!(!latest(&without).join("G_ema.safetensors").exists());
        std::fs::remove_dir_all(&with).unwrap();
        std::fs::remove_dir_all(&without).unwrap();
    }
}

/// A run stopped after 12 steps and resumed to 16 ends with the average of the run that went
/// through, bit for bit (past the ramp, which ends at update 10: an average that restarted its
/// ramp or from G would be far off); the half-life cannot change on resume, and a checkpoint
/// that has lost its average is refused.
#[test]
fn a_resume_continues_the_average_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, whole) = (tmp.path().join("run"), tmp.path().join("whole"));
    train_narrow(1, &whole, "16", &["--g-ema", "4"]);
    train_narrow(1, &run, "12", &["--g-ema", "4"]);
    let (ok, err) = dcgan(&["--resume", p(&run), "--g-ema", "80", "--max-steps", "16"]);
    assert!(!ok && err.contains("--g-ema 80 (the run has 4)"), "{err}");
    let last = latest(&run);
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(copy.join("checkpoints")).unwrap();
    let lost = copy.join("checkpoints").join(last.file_name().unwrap());
    std::fs::create_dir(&lost).unwrap();
    for f in ["G.safetensors", "D.safetensors", "optimizer.safetensors"] {
        std::fs::copy(last.join(f), lost.join(f)).unwrap();
    }
    let (ok, err) = dcgan(&["--resume", p(&lost), "--max-steps", "16"]);
    assert!(!ok && err.contains("has no G_ema.safetensors"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{err}");
    let (ok, err) = dcgan(&["--resume", p(&run), "--max-steps", "16", "--no-progress"]);
    assert!(ok, "{err}");
    assert_eq!(averaged(&latest(&run)), averaged(&latest(&whole)));
    assert_eq!(final_weights(&run), final_weights(&whole));
}

/// `sample` draws the averaged generator where the run kept one and G with `--generator
/// trained`; asking for an average a run did not keep is one line naming the fix.
#[test]
fn sample_draws_the_averaged_generator_unless_told() {
    let tmp = tempfile::tempdir().unwrap();
    let (with, without) = (tmp.path().join("with"), tmp.path().join("without"));
    train_narrow(1, &with, "5", &["--g-ema", "100"]);
    train_narrow(1, &without, "5", &[]);
    let draw = |run: &Path, which: &[&str]| {
        let out = tmp.path().join(format!("{}-{}.png", run.file_name().unwrap().to_string_lossy(), which.join("-")));
        let (ok, err) = dcgan(&[&["sample", "--checkpoint", p(run), "--out", p(&out)], which].concat());
        assert!(ok, "{err}");
        (common::read_png_gray(&out).0, err)
    };
    let (auto, said) = draw(&with, &[]);
    assert!(said.contains("the averaged generator (--g-ema)"), "{said}");
    let (avg, _) = draw(&with, &["--generator", "averaged"]);
    let (trained, said) = draw(&with, &["--generator", "trained"]);
    assert!(said.contains("samples from the generator of"), "{said}");
    assert_eq!(auto, avg);
    assert_ne!(auto, trained, "the averaged generator draws what G does");
    // The run's last grid is the averaged generator's.
    assert_eq!(common::read_png_gray(&with.join("samples").join("final.png")).0[..], auto[..]);
    let (plain, _) = draw(&without, &[]);
    let (also_plain, _) = draw(&without, &["--generator", "trained"]);
    assert_eq!(plain, also_plain);
    let out = tmp.path().join("none.png");
    let (ok, err) = dcgan(&["sample", "--checkpoint", p(&without), "--generator", "averaged", "--out", p(&out)]);
    assert!(!ok && err.contains("has no G_ema.safetensors") && err.contains("--generator trained"), "{err}");
    assert!(!out.exists());
}
