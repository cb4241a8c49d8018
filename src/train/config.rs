//! What the options mean once the number of ranks is known: batch sizes, the learning-rate
//! schedule, and the options every rank (and a resumed run) must agree on.

use crate::model::dcgan::{Discriminator, Widths};
use crate::record::{CriticNorm, GanLoss, LrScaling, ModelOptions, TrainOptions};
use crate::train::ddp::block_momentum::BlockSettings;
use anyhow::{Result, bail};
use serde_json::Value;
use std::collections::BTreeSet;

/// The learning rate's reference batch for `--lr-scaling`.
const REFERENCE_BATCH: f64 = 64.0;

#[derive(Clone, Debug)]
pub struct Settings {
    pub per_rank_batch: usize,
    pub global_batch: usize,
    /// --lr times the scaling of the global batch.
    pub lr: f64,
    pub warmup_steps: u64,
}

impl Settings {
    pub fn resolve(args: &TrainOptions, ranks: usize) -> Result<Settings> {
        args.model.check_loss_options()?;
        check_block_options(args)?;
        check_pipeline_options(args, ranks)?;
        check_patience(args)?;
        let p = &args.parallel;
        let per_rank_batch = match p.global_batch_size {
            Some(g) => {
                let g = g as usize;
                if !g.is_multiple_of(ranks) {
                    bail!(
                        "--global-batch-size {g} is not divisible by the {ranks} ranks: use a multiple of {ranks} (e.g. {})",
                        (g / ranks).max(1) * ranks
                    );
                }
                g / ranks
            }
            None => args.model.batch_size as usize,
        };
        args.model.check_micro_batches(per_rank_batch)?;
        // A pipeline's two ranks share one batch.
        let global_batch = per_rank_batch * data_place(args, 0, ranks).1;
        let ratio = global_batch as f64 / REFERENCE_BATCH;
        let scale = match p.lr_scaling {
            LrScaling::None => 1.0,
            LrScaling::Linear => ratio,
            LrScaling::Sqrt => ratio.sqrt(),
        };
        Ok(Settings { per_rank_batch, global_batch, lr: args.model.lr * scale, warmup_steps: p.warmup_steps })
    }

    /// The learning rate of step `step` (0-based): a linear warm-up, then constant.
    pub fn lr_at(&self, step: u64) -> f32 {
        if step < self.warmup_steps {
            (self.lr * (step + 1) as f64 / self.warmup_steps as f64) as f32
        } else {
            self.lr as f32
        }
    }
}

/// (place, places): which part of the global batch (and noise) rank `rank` of `ranks`
/// computes, of how many. Both stages of a pipeline compute the same part.
pub fn data_place(args: &TrainOptions, rank: usize, ranks: usize) -> (usize, usize) {
    if args.parallel.pipeline { (rank / 2, ranks / 2) } else { (rank, ranks) }
}

/// Refuses `--pipeline` where it cannot run.
fn check_pipeline_options(args: &TrainOptions, ranks: usize) -> Result<()> {
    let p = &args.parallel;
    if !p.pipeline {
        return Ok(());
    }
    if ranks < 2 || !ranks.is_multiple_of(2) {
        bail!(
            "--pipeline puts G on one rank and D on the next: run it on an even number of ranks, mpiexec -n 2 for one pipeline or 2P for P side by side (it has {ranks})"
        );
    }
    let other = [
        (args.model.loss == GanLoss::WganGp, "--loss wgan-gp"),
        (p.sync_bn, "--sync-bn"),
        (p.sync_every > 0, "--sync-every"),
        (p.distributed_after > 0, "--distributed-after"),
        (p.no_exchange, "--no-exchange"),
        (p.check_consistency > 0, "--check-consistency"),
        (args.model.g_ema > 0, "--g-ema"),
    ];
    if let Some((_, flag)) = other.iter().find(|(given, _)| *given) {
        bail!("--pipeline is built for the DCGAN step with its two stages alone: drop {flag} or --pipeline");
    }
    if ranks > 2
        && let Some(what) = picks_native_allreduce(&args.comm, ranks)
    {
        bail!(
            "pipelines side by side average each stage among its replicas, which MPI_Allreduce cannot (it runs over the whole job), but {what} picks mpi: choose another --allreduce (auto, ring, rd, vhd) or run one pipeline (mpiexec -n 2)"
        );
    }
    Ok(())
}

/// What makes the exchange use MPI_Allreduce for some bucket: `--allreduce mpi`, or a tuning
/// file whose rules for `ranks` pick it (a file that cannot be read is reported where the
/// comm thread loads it).
fn picks_native_allreduce(comm: &crate::comm::CommOptions, ranks: usize) -> Option<String> {
    use crate::comm::{Algorithm, AllreduceChoice};
    match (comm.allreduce, &comm.allreduce_tuning) {
        (AllreduceChoice::Fixed(Algorithm::Mpi), _) => Some("--allreduce mpi".into()),
        (AllreduceChoice::Auto, Some(path)) => {
            let rules = crate::comm::allreduce::select::RulesFile::load(path).ok()?.ranges_for(ranks).ok()?;
            rules.iter().any(|r| r.2 == Algorithm::Mpi).then(|| format!("--allreduce-tuning {}", path.display()))
        }
        _ => None,
    }
}

/// Refuses `--patience` where the options leave it nothing to count (where no feature
/// network is found, the run refuses it once it knows: `train/run/best.rs`).
fn check_patience(args: &TrainOptions) -> Result<()> {
    if args.eval.patience().is_none() {
        return Ok(());
    }
    if args.eval.eval_every == Some(0) {
        bail!("{NO_FID_FOR_PATIENCE}");
    }
    if args.checkpoints.no_keep_best {
        bail!("--patience counts from the best checkpoint, which --no-keep-best declines: drop one of the two");
    }
    Ok(())
}

/// Why `--patience` is refused where no FID is measured.
pub const NO_FID_FOR_PATIENCE: &str = "--patience ends a run by its FID, which this run does not measure: pass --eval-every 1 (it trains the feature network where needed), or drop --patience";

/// Refuses block-momentum options that cannot apply.
fn check_block_options(args: &TrainOptions) -> Result<()> {
    let p = &args.parallel;
    if p.sync_every == 0 {
        if p.block_momentum.is_some() || p.block_lr != 1.0 || p.block_nesterov || p.block_reset_adam {
            bail!(
                "--block-momentum, --block-lr, --block-nesterov and --block-reset-adam apply to --sync-every K: add it"
            );
        }
        return Ok(());
    }
    if args.comm.wire != crate::comm::Wire::F32 {
        bail!(
            "--wire {} compresses gradient exchanges; --sync-every averages the models in f32: drop one of the two",
            args.comm.wire.name()
        );
    }
    if p.no_exchange {
        bail!("--no-exchange leaves the ranks alone; --sync-every averages them every K steps: drop one of the two");
    }
    if args.model.g_ema > 0 {
        bail!(
            "--g-ema averages one G's weights over time, and with --sync-every each rank's G goes its own way between syncs: drop one of the two"
        );
    }
    Ok(())
}

/// `--wire-freeze-variance`: the Adam step count of each network ([G, D]) after which its
/// variance stays frozen: the updates of the steps before the 1-bit wire takes over at step
/// `compressed_from` (0-based). WGAN-GP's G takes one update every `n_critic` steps.
pub fn variance_frozen_after(args: &TrainOptions, compressed_from: u64) -> Result<Option<[u64; 2]>> {
    if !args.comm.wire_freeze_variance {
        return Ok(None);
    }
    if args.comm.wire != crate::comm::Wire::OneBit {
        bail!("--wire-freeze-variance applies to --wire 1bit: add it or drop --wire-freeze-variance");
    }
    if compressed_from == 0 {
        bail!(
            "--wire-freeze-variance freezes Adam's variance at the end of the f32 warm-up, and there is none: give --wire-warmup-steps 1 or more"
        );
    }
    let g = match args.model.loss {
        GanLoss::Dcgan => compressed_from,
        GanLoss::WganGp => compressed_from / args.model.n_critic,
    };
    Ok(Some([g, compressed_from]))
}

/// Block momentum's settings for `ranks` (None: gradients are exchanged every step).
pub fn block_settings(args: &TrainOptions, ranks: usize) -> Option<BlockSettings> {
    let p = &args.parallel;
    (p.sync_every > 0 && ranks > 1).then(|| BlockSettings {
        every: p.sync_every,
        momentum: p.block_momentum.unwrap_or(BlockSettings::default_momentum(ranks)),
        lr: p.block_lr,
        nesterov: p.block_nesterov,
        reset_adam: p.block_reset_adam,
    })
}

/// The share of a run's steps that exchange f32 before `--wire 1bit` takes over, where
/// `--wire-warmup-steps` does not say (1-bit Adam's warm-up is 15-25% of its runs; GAN runs
/// here are short, and the error feedback needs steps to pay off).
const WIRE_WARMUP_FRACTION: u64 = 10;

/// The first step whose gradients travel in `--wire`'s form (the steps before travel f32):
/// after the warm-up for 1bit, from the start for the others.
pub fn compressed_from(args: &TrainOptions, steps_per_epoch: usize) -> u64 {
    if args.comm.wire != crate::comm::Wire::OneBit {
        return 0;
    }
    let planned = match args.epoch_limit() {
        Some(e) => (e * steps_per_epoch as u64).min(args.max_steps.unwrap_or(u64::MAX)),
        None => args.max_steps.unwrap_or(0),
    };
    args.comm.wire_warmup_steps.unwrap_or(planned / WIRE_WARMUP_FRACTION)
}

/// What a run's checkpoints record of its options: `training_config`, with the 1-bit wire's
/// warm-up resolved to its step, so that a resume asking for more (or fewer) steps goes on
/// compressing from where the run began to, rather than from a tenth of its new length, and
/// the fingerprint of the images it trains on.
pub fn recorded_config(args: &TrainOptions, steps_per_epoch: usize, data_fingerprint: &str) -> Value {
    let mut config = training_config(args);
    if args.comm.wire == crate::comm::Wire::OneBit {
        config["wire_warmup_steps"] = compressed_from(args, steps_per_epoch).into();
    }
    config[DATA_FINGERPRINT] = data_fingerprint.into();
    config
}

/// The key of the recorded config that holds the fingerprint of the images the run trains on
/// (`Dataset::fingerprint`): a resume may find them at another `--data`, not other images.
pub const DATA_FINGERPRINT: &str = "data_fingerprint";

/// The widths of G and D the options train (`--ngf`, `--ndf`).
pub fn widths(model: &ModelOptions) -> Widths {
    Widths { ngf: model.ngf, ndf: model.ndf }
}

/// The discriminator the options train: WGAN-GP's critic has no batch norm, and layer norm in
/// its place with `--critic-norm layer`.
pub fn discriminator(model: &ModelOptions) -> Discriminator {
    match model.loss {
        GanLoss::Dcgan => Discriminator::Dcgan,
        GanLoss::WganGp => Discriminator::Critic { layer_norm: model.critic_norm == Some(CriticNorm::Layer) },
    }
}

/// Options that change what training computes, as a flat JSON object keyed by flag name.
/// Ranks compare it at start; a resumed run compares it with its checkpoint's.
pub fn training_config(args: &TrainOptions) -> Value {
    let mut all = serde_json::Map::new();
    flatten(&serde_json::to_value(args).expect("options serialize"), &mut all);
    for local in NOT_COMPARED {
        all.remove(local);
    }
    Value::Object(all)
}

/// Options that do not change the numbers: where and how a run reports, and when it stops
/// waiting for another rank (`--stall-timeout`, a Duration, flattens to `secs` and `nanos`).
/// Left out of the comparisons on both sides, so that checkpoints that hold them still resume.
/// A resume takes these from its own command line, given or not: they belong to this invocation,
/// not to the run.
const NOT_COMPARED: [&str; 11] = [
    "threads",
    "no_tensorboard",
    "no_progress",
    "progress",
    "out",
    "trace",
    "trace_steps",
    "baseline_summary",
    "resume",
    "secs",
    "nanos",
];

/// Options that may change when resuming (where the run's images are, checked by their
/// fingerprint; how long to train, how often to save or check, which feature network measures
/// it): every rank must agree on them, and a resume keeps the run's unless its command line
/// gives them (so a run's figures come from one network).
pub const RESUMABLE: [&str; 11] = [
    "data",
    "epochs",
    "max_steps",
    "checkpoint_every",
    "keep_checkpoints",
    "no_keep_best",
    "check_consistency",
    "eval_every",
    "eval_n",
    "classifier",
    "patience",
];

/// The options a resumed run goes on with: the run's own (`config`, its checkpoint's
/// `training_config`), except that the command line's apply where a resume may change them:
/// those of `RESUMABLE` that it gives (`given`, by field name) and those of `NOT_COMPARED`.
/// A training option given with another value than the run's is refused, all of them named
/// in one line (`what` says whose run); given with the run's own value it changes nothing.
pub fn resumed_options(
    cli: &TrainOptions,
    given: &BTreeSet<String>,
    config: &Value,
    what: &str,
) -> Result<TrainOptions> {
    let defaults = training_config(&TrainOptions::default());
    let Value::Object(mine) = training_config(cli) else { unreachable!("options serialize as an object") };
    let mut chosen = serde_json::Map::new();
    let mut refused = Vec::new();
    for (k, now) in mine {
        // An option the run predates: it ran with its default.
        let then = config.get(&k).or(defaults.get(&k)).cloned().unwrap_or(Value::Null);
        match (given.contains(&k), RESUMABLE.contains(&k.as_str())) {
            (true, true) => continue,
            (true, false) if now != then => refused.push(changed(&k, &now, &then)),
            _ => {}
        }
        chosen.insert(k, then);
    }
    if !refused.is_empty() {
        let (they, change) = if refused.len() == 1 { ("it", "changes") } else { ("they", "change") };
        bail!(
            "{what}: {} cannot change on resume ({they} {change} what training computes): leave {} out to go on with the run's own, or start a new run with --out",
            refused.join(", "),
            if refused.len() == 1 { "it" } else { "them" }
        );
    }
    let mut tree = serde_json::to_value(cli).expect("options serialize");
    fill(&mut tree, &chosen);
    serde_json::from_value(tree).map_err(|e| {
        anyhow::anyhow!(
            "{what}: the checkpoint's options do not read back ({e}): resume with the dcgan-train that wrote it"
        )
    })
}

/// "--lr 0.001 (the run has 0.0002)": an option given on resume and the run's value.
fn changed(key: &str, now: &Value, then: &Value) -> String {
    let flag = format!("--{}", key.replace('_', "-"));
    let show = |v: &Value| match v {
        Value::Null => "the default".to_string(),
        Value::Bool(b) => if *b { "it on" } else { "it off" }.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match now {
        // A switch given is on; the run had it off.
        Value::Bool(true) => format!("{flag} (the run has {})", show(then)),
        _ => format!("{flag} {} (the run has {})", show(now), show(then)),
    }
}

/// Replace every leaf of `tree` (options serialized) that `flat` has by flat's value.
fn fill(tree: &mut Value, flat: &serde_json::Map<String, Value>) {
    if let Value::Object(m) = tree {
        for (k, v) in m.iter_mut() {
            if v.is_object() {
                fill(v, flat);
            } else if let Some(x) = flat.get(k) {
                *v = x.clone();
            }
        }
    }
}

fn flatten(v: &Value, out: &mut serde_json::Map<String, Value>) {
    if let Value::Object(m) = v {
        for (k, v) in m {
            if v.is_object() {
                flatten(v, out);
            } else {
                out.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The first option (as a flag, "--batch-size 32 vs 64") in which `mine` differs from
/// `theirs`, ignoring `skip`.
pub fn first_difference(mine: &Value, theirs: &Value, skip: &[&str]) -> Option<String> {
    let (Value::Object(a), Value::Object(b)) = (mine, theirs) else {
        return Some("the option sets".into());
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let compared = |k: &&String| !skip.contains(&k.as_str()) && !NOT_COMPARED.contains(&k.as_str());
    keys.into_iter().filter(compared).find(|k| a.get(*k) != b.get(*k)).map(|k| {
        let show = |v: Option<&Value>| match v {
            None | Some(Value::Null) => "unset".to_string(),
            Some(v) => v.to_string(),
        };
        format!("--{} {} vs {}", k.replace('_', "-"), show(a.get(k)), show(b.get(k)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CheckpointOptions, ModelOptions};

    /// The defaults with `change` applied.
    fn options(change: impl FnOnce(&mut TrainOptions)) -> TrainOptions {
        let mut o = TrainOptions::default();
        change(&mut o);
        o
    }

    #[test]
    fn global_batch_splits_and_lr_scales() {
        let a = options(|o| {
            o.parallel.global_batch_size = Some(128);
            o.parallel.lr_scaling = LrScaling::Sqrt;
            o.model.lr = 0.001;
        });
        let s = Settings::resolve(&a, 4).unwrap();
        assert_eq!((s.per_rank_batch, s.global_batch), (32, 128));
        assert!((s.lr - 0.001 * 2f64.sqrt()).abs() < 1e-12);
        let err = Settings::resolve(&a, 3).unwrap_err().to_string();
        assert!(err.contains("128") && err.contains("3 ranks"), "{err}");
        let linear = options(|o| {
            o.model.batch_size = 16;
            o.parallel.lr_scaling = LrScaling::Linear;
        });
        let s = Settings::resolve(&linear, 8).unwrap();
        assert_eq!((s.per_rank_batch, s.global_batch), (16, 128));
        assert!((s.lr - 2e-4 * 2.0).abs() < 1e-12);
        let s = Settings::resolve(&options(|o| o.parallel.warmup_steps = 4), 1).unwrap();
        assert_eq!(s.lr_at(0), (2e-4 / 4.0) as f32);
        assert_eq!(s.lr_at(3), 2e-4_f32);
        assert_eq!(s.lr_at(100), 2e-4_f32);
    }

    /// The critic's normalization is WGAN-GP's: given with DCGAN it is refused, naming the fix.
    #[test]
    fn critic_norm_is_refused_with_the_dcgan_loss() {
        use crate::record::{CriticNorm, GanLoss};
        let dcgan = options(|o| o.model.critic_norm = Some(CriticNorm::None));
        let err = Settings::resolve(&dcgan, 1).unwrap_err().to_string();
        assert!(err.contains("--critic-norm") && err.contains("--loss wgan-gp"), "{err}");
        let wgan = options(|o| (o.model.loss, o.model.critic_norm) = (GanLoss::WganGp, Some(CriticNorm::None)));
        assert!(Settings::resolve(&wgan, 1).is_ok());
        assert!(Settings::resolve(&options(|_| ()), 1).is_ok());
    }

    #[test]
    fn the_first_differing_option_is_named() {
        let a = training_config(&options(|o| (o.model.batch_size, o.model.seed) = (32, 3)));
        let b = training_config(&options(|o| (o.model.batch_size, o.model.seed, o.no_progress) = (64, 3, true)));
        assert_eq!(first_difference(&a, &b, &[]).unwrap(), "--batch-size 32 vs 64");
        assert_eq!(first_difference(&a, &a, &[]), None);
        let c = training_config(&options(|o| (o.model.batch_size, o.model.seed, o.epochs) = (32, 3, Some(9))));
        assert_eq!(first_difference(&a, &c, &RESUMABLE), None);
        assert!(first_difference(&a, &c, &[]).unwrap().starts_with("--epochs"));
        // The stall timeout is when a rank stops waiting, not what it computes: it may differ
        // between ranks and on resume (it flattened to "--secs 10 vs 60" before). Checkpoints
        // that hold it (as secs and nanos) still compare equal.
        let d = options(|o| {
            (o.model.batch_size, o.model.seed) = (32, 3);
            o.comm.stall_timeout = std::time::Duration::from_secs(10);
        });
        assert_eq!(first_difference(&a, &training_config(&d), &[]), None);
        let mut old = a.clone();
        old["secs"] = 60.into();
        old["nanos"] = 0.into();
        assert_eq!(first_difference(&a, &old, &[]), None);
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// `--resume RUN` alone goes on with the run's options; this invocation's own (threads,
    /// progress) and the resumable ones given apply; a training option given with the run's
    /// value is fine, with another value refused, every one named.
    #[test]
    fn a_resume_takes_the_runs_options_and_the_changes_it_may_make() {
        let run = options(|o| {
            (o.model.batch_size, o.model.lr, o.data) = (16, 1e-3, Some("synthetic:256".into()));
            (o.parallel.sync_bn, o.comm.wire) = (true, crate::comm::Wire::Bf16);
            (o.max_steps, o.checkpoints.keep_checkpoints) = (Some(20), Some(3));
        });
        let config = training_config(&run);
        let cli =
            options(|o| (o.model.threads, o.no_progress, o.checkpoints.resume) = (Some(1), true, Some("r".into())));
        let r = resumed_options(&cli, &names(&["threads", "no_progress", "resume"]), &config, "--resume r").unwrap();
        assert_eq!(training_config(&r), config);
        assert_eq!(
            r,
            TrainOptions {
                model: ModelOptions { threads: Some(1), ..run.model.clone() },
                no_progress: true,
                checkpoints: CheckpointOptions { resume: Some("r".into()), ..run.checkpoints.clone() },
                ..run.clone()
            }
        );

        let r = resumed_options(&options(|o| o.max_steps = Some(40)), &names(&["max_steps"]), &config, "x").unwrap();
        assert_eq!((r.max_steps, r.checkpoints.keep_checkpoints, r.model.batch_size), (Some(40), Some(3), 16));
        let same = options(|o| (o.model.batch_size, o.parallel.sync_bn) = (16, true));
        assert_eq!(
            resumed_options(&same, &names(&["batch_size", "sync_bn"]), &config, "x").unwrap().model.batch_size,
            16
        );

        let other = options(|o| (o.model.batch_size, o.parallel.no_overlap, o.max_steps) = (8, true, Some(50)));
        let err =
            resumed_options(&other, &names(&["batch_size", "lr", "no_overlap", "max_steps"]), &config, "--resume r");
        assert_eq!(
            err.unwrap_err().to_string(),
            "--resume r: --batch-size 8 (the run has 16), --lr 0.0002 (the run has 0.001), --no-overlap (the run has it off) \
             cannot change on resume (they change what training computes): leave them out to go on with the run's own, or \
             start a new run with --out"
        );
    }

    /// A checkpoint written before an option existed ran with its default; one written while
    /// the stall timeout was still among the compared options (as secs and nanos) resumes with
    /// the command line's.
    #[test]
    fn an_older_checkpoints_options_rebuild_the_run() {
        let run = options(|o| {
            (o.model.seed, o.parallel.warmup_steps) = (5, 0);
            o.comm.allreduce = crate::comm::AllreduceChoice::Fixed(crate::comm::Algorithm::Ring);
        });
        let mut config = training_config(&run);
        config.as_object_mut().unwrap().remove("warmup_steps");
        (config["secs"], config["nanos"]) = (60.into(), 0.into());
        let cli = options(|o| o.comm.stall_timeout = std::time::Duration::from_secs(5));
        let r = resumed_options(&cli, &names(&["stall_timeout"]), &config, "x").unwrap();
        assert_eq!(
            r,
            TrainOptions {
                comm: crate::comm::CommOptions { stall_timeout: cli.comm.stall_timeout, ..run.comm.clone() },
                ..run
            }
        );
    }
}
