//! What the options mean once the number of ranks is known: batch sizes, the learning-rate
//! schedule, the 1-bit wire's warm-up, and the combinations refused before a run starts.

use crate::model::dcgan::{Discriminator, Widths};
use crate::record::{CriticNorm, GanLoss, LrScaling, ModelOptions, TrainOptions};
use crate::train::ddp::block_momentum::BlockSettings;
use anyhow::{Result, bail};

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The defaults with `change` applied.
    pub(crate) fn options(change: impl FnOnce(&mut TrainOptions)) -> TrainOptions {
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
}
