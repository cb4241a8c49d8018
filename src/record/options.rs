//! The options of a training run, as the run uses them and as summary.json and checkpoints
//! keep them (the field names are the flags'; the command line converts its flags into these).
//! Every struct reads a missing field as its default: a run recorded before an option existed
//! ran as if it had been left at its default.

use crate::comm::CommOptions;
use crate::device::{CudaSettings, DeviceChoice, Precision};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Everything `dcgan-train train` is asked to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainOptions {
    pub model: ModelOptions,
    /// A directory of IDX files, `synthetic:N`, or None for the default data set.
    pub data: Option<String>,
    /// `--epochs` as given (None: not given; `epoch_limit` says what that means). Files
    /// written before it could be left out hold a number, which reads as given.
    pub epochs: Option<u64>,
    pub max_steps: Option<u64>,
    /// The run directory (None: `runs/<timestamp>`).
    pub out: Option<PathBuf>,
    /// No TensorBoard event file in the run directory.
    pub no_tensorboard: bool,
    pub no_progress: bool,
    /// `--progress` (`--no-progress` is its `none`: `progress_choice` says which applies).
    pub progress: ProgressChoice,
    pub parallel: ParallelOptions,
    pub checkpoints: CheckpointOptions,
    pub comm: CommOptions,
    pub eval: EvalOptions,
}

/// Sample quality measured during the run (it does not change what the run trains).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalOptions {
    /// Every this many epochs (0: never; None: every epoch where the data has a test split and
    /// its feature network has been trained, never otherwise).
    pub eval_every: Option<u64>,
    /// Images generated for each evaluation.
    pub eval_n: u64,
    /// The feature network's file (None: the data's, where `classifier` writes it).
    pub classifier: Option<PathBuf>,
    /// End the run after this many evaluations in a row that did not beat the best FID (None
    /// or 0: never; `patience()` says which).
    pub patience: Option<u64>,
}

impl EvalOptions {
    /// `--patience`, where it can end the run.
    pub fn patience(&self) -> Option<u64> {
        self.patience.filter(|&p| p > 0)
    }
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions { eval_every: None, eval_n: 10_000, classifier: None, patience: None }
    }
}

/// The model and its optimizer, shared by training and the step benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelOptions {
    /// 28 or 64.
    pub image_size: usize,
    /// G's width: the feature maps of its last hidden layer (`model::dcgan::Widths`).
    pub ngf: usize,
    /// D's width: the feature maps of its first layer.
    pub ndf: usize,
    /// Images per rank per step.
    pub batch_size: u64,
    pub loss: GanLoss,
    /// WGAN-GP: the critic's normalization (None: not given, the loss's own).
    pub critic_norm: Option<CriticNorm>,
    /// WGAN-GP: critic steps per generator step.
    pub n_critic: u64,
    /// WGAN-GP: the gradient penalty's weight.
    pub gp_lambda: f32,
    pub lr: f64,
    pub adam_beta1: f32,
    pub adam_beta2: f32,
    pub adam_eps: f32,
    pub seed: u64,
    /// Compute threads per rank (None: the host's cores divided by its ranks).
    pub threads: Option<usize>,
    pub device: DeviceChoice,
    /// How the CUDA convolutions multiply (the CPU computes in f32 only).
    pub precision: Precision,
    /// CUDA: replay each step's kernels as CUDA graphs.
    pub cuda_graphs: bool,
    /// Each rank's batch is computed in this many micro-batches, their gradients summed
    /// (batch norm's statistics per micro-batch).
    pub micro_batches: u64,
    /// With micro-batches: keep only G's input of each and compute its forward again for
    /// backward, instead of keeping every micro-batch's activations.
    pub recompute: bool,
    /// With micro-batches: the running statistics move once per pass over the whole batch.
    pub deferred_bn: bool,
    /// The half-life in images of the average of G's weights that samples and is scored (0:
    /// none; `train/ema.rs`).
    pub g_ema: u64,
}

/// How the batch is split over the ranks and how gradients are exchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParallelOptions {
    /// A fixed global batch split over the ranks (strong scaling) instead of `batch_size` per
    /// rank.
    pub global_batch_size: Option<u64>,
    pub lr_scaling: LrScaling,
    pub warmup_steps: u64,
    /// The first this many steps train as one worker would, then data parallelism starts.
    pub distributed_after: u64,
    /// G on even ranks and D on the odd rank after each: pipelines of two stages, as many as
    /// there are pairs of ranks, each stage data-parallel with its replicas.
    pub pipeline: bool,
    /// Block momentum: each rank trains this many steps alone, then the models are averaged
    /// (0: gradients are exchanged every step).
    pub sync_every: u64,
    /// The block momentum (None: 1 - 1/ranks).
    pub block_momentum: Option<f32>,
    pub block_lr: f32,
    pub block_nesterov: bool,
    pub block_reset_adam: bool,
    pub sync_bn: bool,
    pub bucket_bytes: usize,
    pub no_overlap: bool,
    pub no_exchange: bool,
    pub trace: Option<PathBuf>,
    pub trace_steps: u64,
    pub check_consistency: u64,
    pub baseline_summary: Option<PathBuf>,
}

/// `--loss`: what the discriminator learns and how G is scored against it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GanLoss {
    /// Binary cross-entropy of D's logits (the DCGAN paper's).
    #[default]
    Dcgan,
    /// WGAN-GP (Gulrajani et al. 2017): a critic's Wasserstein estimate with a gradient
    /// penalty, n_critic critic steps per generator step.
    WganGp,
}

impl GanLoss {
    /// (learning rate, Adam's beta1, beta2) where the flags do not say: the DCGAN paper's, and
    /// WGAN-GP's authors' MNIST code's.
    pub fn optimizer_defaults(self) -> (f64, f32, f32) {
        match self {
            GanLoss::Dcgan => (2e-4, 0.5, 0.999),
            GanLoss::WganGp => (1e-4, 0.5, 0.9),
        }
    }
}

/// `--critic-norm`: the normalization of WGAN-GP's critic. Batch norm is ruled out by the
/// penalty itself (it makes each sample's gradient depend on the others in the batch); layer
/// norm, which the WGAN-GP paper suggests, normalizes each sample alone.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CriticNorm {
    /// Convolutions and LeakyReLUs only, as the WGAN-GP authors' MNIST critic.
    #[default]
    None,
    /// Layer norm (PyTorch's `nn.GroupNorm(1, C)`) where DCGAN's discriminator has batch
    /// norm, as the WGAN-GP paper's critics for larger images.
    Layer,
}

impl ModelOptions {
    /// What a CUDA backend takes from these options.
    pub fn cuda_settings(&self) -> CudaSettings {
        CudaSettings { precision: self.precision, graphs: self.cuda_graphs }
    }

    /// Refuses options that belong to the other loss.
    pub fn check_loss_options(&self) -> anyhow::Result<()> {
        if self.loss == GanLoss::Dcgan && self.critic_norm.is_some() {
            anyhow::bail!(
                "--critic-norm is for --loss wgan-gp's critic (DCGAN's discriminator keeps its batch norm): add --loss wgan-gp or leave --critic-norm out"
            );
        }
        Ok(())
    }

    /// Refuses micro-batches that do not split `per_rank_batch` images evenly, or that meet
    /// what they are not built for.
    pub fn check_micro_batches(&self, per_rank_batch: usize) -> anyhow::Result<()> {
        let m = self.micro_batches as usize;
        if m == 0 || !per_rank_batch.is_multiple_of(m) {
            anyhow::bail!(
                "--micro-batches {m} does not divide the {per_rank_batch} images of a rank's batch: use a divisor of {per_rank_batch} (e.g. {})",
                (1..=m.clamp(1, per_rank_batch.max(1))).rev().find(|d| per_rank_batch.is_multiple_of(*d)).unwrap_or(1)
            );
        }
        if m > 1 && self.loss == GanLoss::WganGp {
            anyhow::bail!("--micro-batches is built for --loss dcgan only: leave it out with --loss wgan-gp");
        }
        if self.deferred_bn && m == 1 {
            anyhow::bail!(
                "--deferred-bn defers micro-batches' running statistics to the whole batch: add --micro-batches M (M > 1) or leave --deferred-bn out"
            );
        }
        if self.recompute && m == 1 {
            anyhow::bail!(
                "--recompute recomputes micro-batches' forwards and saves memory only with several: add --micro-batches M (M > 1) or leave --recompute out"
            );
        }
        Ok(())
    }
}

/// `--lr-scaling`: the learning rate against the global batch, relative to 64.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrScaling {
    #[default]
    None,
    Linear,
    Sqrt,
}

/// `--progress`: how rank 0 shows the run's progress on stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressChoice {
    /// A bar where stderr is a terminal, lines elsewhere (a log file, or mpiexec's pipe).
    #[default]
    Auto,
    /// A bar wherever stderr goes: under mpiexec, whose own output may be a terminal.
    Bar,
    /// A line every few seconds and one per epoch.
    Lines,
    /// Nothing.
    None,
}

/// Checkpoints and resuming.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointOptions {
    /// Every N steps (None: at the end of every epoch).
    pub checkpoint_every: Option<u64>,
    /// How many to keep (0: all; None: 1, or on resume the run's own).
    pub keep_checkpoints: Option<usize>,
    /// Do not keep the checkpoint of the best FID beside them.
    pub no_keep_best: bool,
    /// The run directory to continue.
    pub resume: Option<PathBuf>,
}

/// The default epochs of a run.
const DEFAULT_EPOCHS: u64 = 5;

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            image_size: 28,
            ngf: 64,
            ndf: 64,
            batch_size: 64,
            loss: GanLoss::Dcgan,
            critic_norm: None,
            n_critic: 5,
            gp_lambda: 10.0,
            lr: 2e-4,
            adam_beta1: 0.5,
            adam_beta2: 0.999,
            adam_eps: 1e-8,
            seed: 1,
            threads: None,
            device: DeviceChoice::Auto,
            precision: Precision::Fp32,
            cuda_graphs: false,
            micro_batches: 1,
            recompute: false,
            deferred_bn: false,
            g_ema: 0,
        }
    }
}

impl Default for ParallelOptions {
    fn default() -> Self {
        ParallelOptions {
            global_batch_size: None,
            lr_scaling: LrScaling::None,
            warmup_steps: 0,
            sync_bn: false,
            bucket_bytes: 1 << 20,
            distributed_after: 0,
            pipeline: false,
            sync_every: 0,
            block_momentum: None,
            block_lr: 1.0,
            block_nesterov: false,
            block_reset_adam: false,
            no_overlap: false,
            no_exchange: false,
            trace: None,
            trace_steps: 20,
            check_consistency: 0,
            baseline_summary: None,
        }
    }
}

impl ParallelOptions {
    /// Whether a job of `ranks` ranks averages gradients at all (not on one rank, nor with
    /// `--no-exchange`).
    pub fn exchanges_gradients(&self, ranks: usize) -> bool {
        ranks > 1 && !self.no_exchange
    }
}

impl TrainOptions {
    /// The progress display asked for: `--progress`, or none with `--no-progress`.
    pub fn progress_choice(&self) -> ProgressChoice {
        if self.no_progress { ProgressChoice::None } else { self.progress }
    }

    /// The epochs the run may reach (None: no limit): `--epochs` where given; else none when
    /// `--max-steps` sets the run's length (a default epoch count would cut it short), and 5
    /// when neither is given.
    pub fn epoch_limit(&self) -> Option<u64> {
        match (self.epochs, self.max_steps) {
            (Some(e), _) => Some(e),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_EPOCHS),
        }
    }
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            model: ModelOptions::default(),
            data: None,
            epochs: None,
            max_steps: None,
            out: None,
            no_tensorboard: false,
            no_progress: false,
            progress: ProgressChoice::Auto,
            parallel: ParallelOptions::default(),
            checkpoints: CheckpointOptions::default(),
            comm: CommOptions::default(),
            eval: EvalOptions::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_steps_alone_sets_the_length_and_old_files_keep_their_epochs() {
        let with = |epochs, max_steps| TrainOptions { epochs, max_steps, ..TrainOptions::default() };
        assert_eq!(with(None, None).epoch_limit(), Some(DEFAULT_EPOCHS));
        assert_eq!(with(None, Some(100)).epoch_limit(), None, "--max-steps alone");
        assert_eq!(with(Some(2), Some(100)).epoch_limit(), Some(2), "both: the first limit reached ends the run");
        assert_eq!(with(Some(9), None).epoch_limit(), Some(9));
        // A summary or checkpoint written before --epochs could be left out holds a number.
        let old: TrainOptions = serde_json::from_str(r#"{"epochs": 5, "max_steps": 100}"#).unwrap();
        assert_eq!((old.epochs, old.epoch_limit()), (Some(5), Some(5)));
        let new: TrainOptions = serde_json::from_value(serde_json::to_value(with(None, Some(100))).unwrap()).unwrap();
        assert_eq!(new.epoch_limit(), None);
    }

    /// The "e.g." divisor is searched for among the batch's divisors only: a `--micro-batches`
    /// as large as u64 allows is answered at once, with the batch itself as the example.
    #[test]
    fn a_huge_micro_batch_count_is_refused_at_once() {
        let huge = ModelOptions { micro_batches: u64::MAX, ..ModelOptions::default() };
        let err = huge.check_micro_batches(8).unwrap_err().to_string();
        assert!(err.contains("use a divisor of 8 (e.g. 8)"), "{err}");
        let three = ModelOptions { micro_batches: 3, ..ModelOptions::default() };
        assert!(three.check_micro_batches(8).unwrap_err().to_string().contains("(e.g. 2)"));
    }
}
