//! `--resume`: a run goes on with its own options, read from its checkpoint, and only the
//! command line's options that a resume may change applied over them; so `--resume RUN` alone
//! continues it. Rank 0 finds the checkpoint (a run directory or one of its checkpoints) and
//! every rank learns the run's options from it before anything is built, the comm thread's
//! allreduce settings among them.
//!
//! A run may go on with another number of ranks (a node lost, or more granted): it keeps its
//! global batch, split over the ranks it has now. The data order and the noise depend on the
//! global batch and each sample's global index only, and the learning rate on the global
//! batch, so with `--sync-bn` the run computes what it would have on its old ranks, up to the
//! order of float sums; each rank's running statistics become their mean over the old ranks.

use super::config::Settings;
use super::job::Job;
use super::recorded_options::{DATA_FINGERPRINT, TEST_DATA_FINGERPRINT, recorded_threads, resumed_options};
use crate::checkpoint::{self, Checkpoint, Progress};
use crate::comm::CommConfig;
use crate::record::TrainOptions;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where a resumed run continues from (rank 0, which reads and writes the run).
#[derive(Clone, Debug)]
pub struct ResumeFrom {
    /// The run directory, where the outputs go on.
    pub run: PathBuf,
    /// The checkpoint directory, intact (its digests checked).
    pub checkpoint: PathBuf,
    /// Broken checkpoints newer than it, set aside once the run goes on (`Outputs::begin`):
    /// a resume refused before then leaves the run as it was.
    pub broken: Vec<PathBuf>,
    /// The fingerprint of the images the run trained on (`Dataset::fingerprint`; None in a
    /// checkpoint that predates it).
    pub data_fingerprint: Option<String>,
    /// The fingerprint of the test split its sample quality was measured against (None: not
    /// measured, or a checkpoint that predates the record).
    pub test_data_fingerprint: Option<String>,
}

/// What rank 0 tells every rank: the path given to `--resume` and the checkpoint's progress.
#[derive(Serialize, Deserialize)]
struct Shared {
    asked: PathBuf,
    progress: Progress,
}

/// The options this job trains with (the run's own on a resume, the same on every rank), and
/// on rank 0 the checkpoint it resumes from. `given`: the options the command line gave
/// explicitly, by field name. Collective: every failure goes through `Job::agree`.
pub fn settle(
    job: &mut Job,
    args: &TrainOptions,
    given: &BTreeSet<String>,
) -> Result<(TrainOptions, Option<ResumeFrom>)> {
    let found = job.agree(match (&args.checkpoints.resume, job.is_root()) {
        (Some(path), true) => find(path).map(Some),
        _ => Ok(None),
    })?;
    // Rank 0 decides whether this is a resume: every rank takes the same collectives below.
    let shared = found.as_ref().map(|(_, progress)| Shared {
        asked: args.checkpoints.resume.clone().expect("found with --resume"),
        progress: progress.clone(),
    });
    let bytes = job.comm.broadcast_bytes(0, serde_json::to_vec(&shared)?)?;
    let Some(shared) = serde_json::from_slice::<Option<Shared>>(&bytes)? else {
        let mut fresh = args.clone();
        fresh.checkpoints.resume = None;
        return Ok((fresh, None));
    };
    let mut resumed = job.agree(options_of_the_run(args, given, &shared, job.world.size))?;
    // On the run's ranks, each rank's own thread count keeps the resume exact.
    if resumed.model.threads.is_none() && shared.progress.ranks == job.world.size {
        resumed.model.threads = recorded_threads(&shared.progress.config, job.world.rank);
    }
    if job.is_root() && shared.progress.ranks != job.world.size {
        announce_other_ranks(&shared.progress, job.world.size, &resumed);
    }
    // The allreduce, its fragments and the wire are the run's: the comm thread was started
    // with the command line's.
    let cfg = job.agree(CommConfig::from_options(&resumed.comm))?;
    let comm = std::rc::Rc::get_mut(&mut job.comm).context("internal error: the comm handle is shared too early")?;
    comm.reconfigure(&cfg)?;
    Ok((resumed, found.map(|(from, _)| from)))
}

/// Rank 0: the checkpoint `path` names (saying why, when it is not the one `latest` names)
/// and its progress.
fn find(path: &Path) -> Result<(ResumeFrom, Progress)> {
    let found = checkpoint::locate(path, "--resume")?;
    if let Some(fallback) = &found.fallback {
        eprintln!("warning: {fallback}");
    }
    if let Some(note) = &found.undigested {
        eprintln!("warning: {note}");
    }
    let Some(run) = checkpoint::run_dir_of(&found.dir) else {
        bail!(
            "--resume {}: the checkpoint {} is not inside a run directory (RUN/checkpoints/step-N), where the run's outputs would go on: pass the run directory, or copy the checkpoint into one's checkpoints/",
            path.display(),
            found.dir.display()
        );
    };
    let progress = checkpoint::load_progress(&found.dir)?;
    let recorded = |key: &str| progress.recorded(key).map(str::to_string);
    let (data_fingerprint, test_data_fingerprint) = (recorded(DATA_FINGERPRINT), recorded(TEST_DATA_FINGERPRINT));
    let from =
        ResumeFrom { run, checkpoint: found.dir, broken: found.skipped, data_fingerprint, test_data_fingerprint };
    Ok((from, progress))
}

/// The run's options with the command line's changes, if this job can continue the run.
fn options_of_the_run(
    args: &TrainOptions,
    given: &BTreeSet<String>,
    shared: &Shared,
    ranks: usize,
) -> Result<TrainOptions> {
    let (asked, p) = (shared.asked.display(), &shared.progress);
    // Where the run keeps a global batch (on other ranks, or its own --global-batch-size), a
    // rank's batch is that batch's share: a given --batch-size is checked against the share
    // below, not against the run's recorded --batch-size (which the global batch overrides).
    let global = if p.ranks != ranks {
        Some((p.ranks * p.batch_per_rank) as u64)
    } else {
        p.config.get("global_batch_size").and_then(serde_json::Value::as_u64)
    };
    let asks_batch = given.contains("batch_size") && global.is_some();
    // A given --global-batch-size is checked against the batch the run keeps (below), which a
    // run of a per-rank --batch-size keeps too, though it records none.
    let asks_global = given.contains("global_batch_size");
    let checked_below = |k: &String| (asks_batch && k == "batch_size") || (asks_global && k == "global_batch_size");
    let compared: BTreeSet<String> = given.iter().filter(|k| !checked_below(k)).cloned().collect();
    // `--data` may name another place holding the run's images, which the fingerprint its
    // checkpoint keeps tells apart from other images; without it, only the run's own path.
    if given.contains("data") && p.recorded(DATA_FINGERPRINT).is_none() {
        let run_data = p.recorded("data");
        if args.data.as_deref() != run_data {
            bail!(
                "--resume {asked}: --data {} (the run has {}) cannot change on resume: the run's checkpoint keeps no fingerprint of its images to check others against: leave --data out to go on with the run's own",
                args.data.as_deref().unwrap_or("(the default)"),
                run_data.unwrap_or("the default")
            );
        }
    }
    let mut resumed = resumed_options(args, &compared, &p.config, &format!("--resume {asked}"))?;
    resumed.checkpoints.resume = Some(shared.asked.clone());
    if p.ranks != ranks {
        check_other_ranks(&resumed, p, ranks, &format!("--resume {asked}"))?;
        // The run's global batch, split over the ranks of this job.
        resumed.parallel.global_batch_size = global;
    }
    if let Some(global) = global.filter(|_| asks_batch) {
        let share = global / ranks as u64;
        if args.model.batch_size != share {
            bail!(
                "--resume {asked}: --batch-size is per rank, and the run keeps its global batch of {global} images, {share} per rank on {ranks}: leave --batch-size out"
            );
        }
    }
    if let Some(asked_global) = args.parallel.global_batch_size.filter(|_| asks_global) {
        // Compared as the batch of a rank it gives, as a new run would split it: a pipeline's
        // two stages share their batch, so its global batch is half the flag's.
        let kept = Settings::resolve(&resumed, ranks)?.per_rank_batch;
        let mut asking = resumed.clone();
        asking.parallel.global_batch_size = Some(asked_global);
        if Settings::resolve(&asking, ranks).ok().map(|s| s.per_rank_batch) != Some(kept) {
            let flag = kept * ranks;
            bail!(
                "--resume {asked}: --global-batch-size {asked_global} would change the run's global batch of {flag} images, {kept} per rank on {ranks}: leave --global-batch-size out to go on with it, or start a new run with --out"
            );
        }
    }
    // Nothing left to run would still rewrite the run's summary, with no steps in it.
    if p.step >= resumed.max_steps.unwrap_or(u64::MAX) || p.epoch >= resumed.epoch_limit().unwrap_or(u64::MAX) {
        bail!(
            "--resume {asked}: the run has already done {} steps and {} of its epochs, and --max-steps {} with --epochs {} leaves none to run: raise --max-steps or --epochs to train further (the run is kept as it is)",
            p.step,
            p.epoch,
            resumed.max_steps.map_or("(none)".to_string(), |m| m.to_string()),
            resumed.epoch_limit().map_or("(none)".to_string(), |e| e.to_string())
        );
    }
    Ok(resumed)
}

/// Why a run of `p.ranks` ranks cannot go on with `ranks`, if it cannot: state that belongs to
/// each rank and has no meaning on another, or a global batch the ranks cannot share.
fn check_other_ranks(run: &TrainOptions, p: &Progress, ranks: usize, what: &str) -> Result<()> {
    let (par, was) = (&run.parallel, p.ranks);
    let global = p.ranks * p.batch_per_rank;
    // State kept per rank, with what makes it so.
    let per_rank = [
        (par.pipeline, "a pipeline's stages (--pipeline) cannot be regrouped".to_string()),
        (par.sync_every > 0, "between synchronisations each rank trains a model of its own (--sync-every)".into()),
        // A run of one rank exchanged nothing, so it holds no error feedback.
        (
            run.comm.wire == crate::comm::Wire::OneBit && was > 1,
            "each rank's 1-bit error feedback (--wire 1bit) belongs to its place in the exchange".into(),
        ),
        (
            p.step < par.distributed_after,
            format!(
                "it is still training as one worker (step {} of --distributed-after {})",
                p.step, par.distributed_after
            ),
        ),
    ];
    if let Some((_, why)) = per_rank.iter().find(|(holds, _)| *holds) {
        bail!(
            "{what}: the run was written by {was} ranks and this job has {ranks}, and {why}: resume with mpiexec -n {was}"
        );
    }
    if !global.is_multiple_of(ranks) {
        bail!(
            "{what}: the run's global batch of {global} images ({} per rank x {was} ranks) does not split over {ranks} ranks: resume with a number of ranks that divides {global} (e.g. {was})",
            p.batch_per_rank
        );
    }
    let micro = run.model.micro_batches as usize;
    if !(global / ranks).is_multiple_of(micro) {
        bail!(
            "{what}: the run's global batch of {global} images gives {} per rank on {ranks} ranks, which its --micro-batches {micro} does not divide: resume with a number of ranks whose share {micro} divides (e.g. {was})",
            global / ranks
        );
    }
    Ok(())
}

/// Rank 0 says how a run goes on with another number of ranks, and why it will not compute
/// exactly what it would have on its old ranks where it will not: batch norm's groups of
/// images follow the ranks unless `--sync-bn` spans them, and with micro-batches even then
/// (a group is one micro-batch of every rank, whose images depend on the rank count).
fn announce_other_ranks(p: &Progress, ranks: usize, run: &TrainOptions) {
    let global = p.ranks * p.batch_per_rank;
    let micro = run.model.micro_batches as usize;
    eprintln!(
        "resuming a run of {} ranks on {ranks}: its global batch of {global} images is now {} per rank; the data order, noise and learning rate go on as they were",
        p.ranks,
        global / ranks
    );
    let close = format!("so the run goes on close to, not exactly as, it would have on {} ranks", p.ranks);
    if !run.parallel.sync_bn {
        let (now, then) = (global / ranks / micro, p.batch_per_rank / micro);
        eprintln!(
            "note: without --sync-bn, batch norm now normalises over {now} images per rank instead of {then}, {close}"
        );
    } else if micro > 1 {
        eprintln!(
            "note: with --micro-batches, batch norm's groups (one micro-batch of every rank) now hold other images, {close}"
        );
    }
}

/// Rank 0: a checkpoint of another number of ranks made one of `ranks` ranks of `per_rank`
/// images each: every rank takes the mean of the old ranks' running statistics (what the end
/// of an epoch would give them). Per-rank state of other kinds was refused by
/// `check_other_ranks`.
pub fn regroup(mut ck: Checkpoint, ranks: usize, per_rank: usize) -> Checkpoint {
    let old = ck.progress.ranks;
    if old == ranks {
        return ck;
    }
    debug_assert!(ck.residuals.is_empty() && ck.block.is_none(), "refused before loading");
    let mean = |rank0: &[f32], part: usize| -> Vec<f32> {
        let others = ck.rank_states.iter().map(|s| &s[part][..]);
        let mut sum: Vec<f64> = rank0.iter().map(|&x| x as f64).collect();
        for other in others {
            sum.iter_mut().zip(other).for_each(|(s, &x)| *s += x as f64);
        }
        sum.iter().map(|s| (s / old as f64) as f32).collect()
    };
    let (g, d) = (mean(&ck.g.state, 0), mean(&ck.d.state, 1));
    ck.rank_states = vec![[g.clone(), d.clone()]; ranks - 1];
    (ck.g.state, ck.d.state) = (g, d);
    (ck.progress.ranks, ck.progress.batch_per_rank) = (ranks, per_rank);
    ck
}

/// The command that continues the run in `run` with `ranks` ranks, ready to paste: this
/// program as it was invoked, under `mpiexec -n N` for more than one rank.
pub fn resume_command(ranks: usize, run: &Path) -> String {
    let program = std::env::args_os().next().map_or("dcgan-train".into(), |p| p.to_string_lossy().to_string());
    let launcher = if ranks > 1 { format!("mpiexec -n {ranks} ") } else { String::new() };
    format!("{launcher}{} --resume {}", shell_word(&program), shell_word(&run.to_string_lossy()))
}

/// `s` as one word of a POSIX shell command line: as it is when nothing in it is special.
pub(super) fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !s.is_empty() && s.chars().all(plain) { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(values: Vec<f32>, state: Vec<f32>) -> crate::checkpoint::NetTensors {
        crate::checkpoint::NetTensors { values, state, batches_tracked: 9 }
    }

    /// A checkpoint of 3 ranks of 4 images: G's statistics [g0, g1] and D's [d0] per rank.
    fn of_three_ranks() -> Checkpoint {
        let moments = crate::checkpoint::Moments { exp_avg: vec![0.5], exp_avg_sq: vec![0.25], steps: 3 };
        Checkpoint {
            g: net(vec![1.0], vec![1.0, 2.0]),
            d: net(vec![2.0], vec![3.0]),
            g_ema: None,
            g_adam: moments.clone(),
            d_adam: moments,
            progress: Progress {
                step: 5,
                epoch: 0,
                batch_in_epoch: 5,
                seed: 1,
                ranks: 3,
                batch_per_rank: 4,
                image_size: 28,
                ngf: 64,
                rng: String::new(),
                config: serde_json::json!({}),
                block_sync_due: false,
            },
            rank_states: vec![[vec![4.0, 5.0], vec![6.0]], [vec![7.0, 11.0], vec![0.0]]],
            residuals: vec![],
            block: None,
        }
    }

    #[test]
    fn other_ranks_each_take_the_mean_of_the_running_statistics() {
        let ck = regroup(of_three_ranks(), 2, 6);
        // G: (1 + 4 + 7) / 3, (2 + 5 + 11) / 3; D: (3 + 6 + 0) / 3.
        let (g, d) = (vec![4.0, 6.0], vec![3.0]);
        assert_eq!((&ck.g.state, &ck.d.state), (&g, &d), "rank 0's");
        assert_eq!(ck.rank_states, vec![[g, d]], "rank 1's");
        assert_eq!((ck.progress.ranks, ck.progress.batch_per_rank), (2, 6));
        assert_eq!((ck.g.values.clone(), ck.d.values.clone(), ck.progress.step), (vec![1.0], vec![2.0], 5));
        // On as many ranks as the run had, every rank keeps its own.
        assert_eq!(regroup(of_three_ranks(), 3, 4), of_three_ranks());
        assert_eq!(regroup(of_three_ranks(), 6, 2).rank_states.len(), 5);
    }

    /// `--data` on resume names the run's images elsewhere (their fingerprint checks them
    /// later); a checkpoint that keeps no fingerprint allows only the run's own path.
    #[test]
    fn another_data_path_needs_the_runs_fingerprint() {
        let shared = |config: serde_json::Value| Shared {
            asked: PathBuf::from("run"),
            progress: Progress { config, ..of_three_ranks().progress },
        };
        let mut args = TrainOptions { data: Some("moved".into()), ..TrainOptions::default() };
        args.checkpoints.resume = Some(PathBuf::from("run"));
        let given: BTreeSet<String> = ["data".to_string()].into();
        let kept = serde_json::json!({"data": "fm", DATA_FINGERPRINT: "0123456789abcdef"});
        assert_eq!(options_of_the_run(&args, &given, &shared(kept), 3).unwrap().data.as_deref(), Some("moved"));
        let old = serde_json::json!({"data": "fm"});
        let e = options_of_the_run(&args, &given, &shared(old.clone()), 3).unwrap_err().to_string();
        assert!(
            e.contains(
                "--data moved (the run has fm) cannot change on resume: the run's checkpoint keeps no fingerprint"
            ),
            "{e}"
        );
        args.data = Some("fm".into());
        assert_eq!(options_of_the_run(&args, &given, &shared(old), 3).unwrap().data.as_deref(), Some("fm"));
    }

    /// A pipeline's `--global-batch-size` splits over all its ranks, though its two stages
    /// share each batch: on resume the flag is compared as the batch of a rank it gives.
    #[test]
    fn a_pipelines_global_batch_is_compared_as_a_new_run_splits_it() {
        let resume = |config: serde_json::Value, batch_per_rank: usize, global: u64| {
            let progress = Progress { config, ranks: 2, batch_per_rank, ..of_three_ranks().progress };
            let shared = Shared { asked: PathBuf::from("run"), progress };
            let mut args = TrainOptions::default();
            (args.checkpoints.resume, args.parallel.global_batch_size) = (Some(PathBuf::from("run")), Some(global));
            let given: BTreeSet<String> = ["global_batch_size".to_string()].into();
            options_of_the_run(&args, &given, &shared, 2).map_err(|e| e.to_string())
        };
        let by_global = serde_json::json!({"pipeline": true, "global_batch_size": 32, DATA_FINGERPRINT: "f"});
        assert!(resume(by_global.clone(), 16, 32).is_ok());
        let e = resume(by_global, 16, 64).unwrap_err();
        assert!(
            e.contains("--global-batch-size 64 would change the run's global batch of 32 images, 16 per rank on 2"),
            "{e}"
        );
        let per_rank = serde_json::json!({"pipeline": true, "batch_size": 16, DATA_FINGERPRINT: "f"});
        assert!(resume(per_rank.clone(), 16, 32).is_ok());
        assert!(resume(per_rank, 16, 16).unwrap_err().contains("16 would change"));
    }

    #[test]
    fn shell_words_paste_as_one_word() {
        assert_eq!(shell_word("runs/20250101-120000"), "runs/20250101-120000");
        assert_eq!(shell_word("my run"), "'my run'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
