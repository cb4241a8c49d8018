//! `dcgan-train [train]`: the flags of a training run (the default command), converted into
//! the run's `TrainOptions`.

use super::comm_args::CommArgs;
use super::parse::{
    adam_beta, at_least_one, batch_size, evaluation_images, feature_maps, image_size, non_negative_f32, parse_bytes,
    positive_f32, positive_f64,
};
use crate::device::{DeviceChoice, Precision};
use crate::record::{
    CheckpointOptions, CriticNorm, EvalOptions, GanLoss, LrScaling, ModelOptions, ParallelOptions, ProgressChoice,
    TrainOptions,
};
use clap::Args;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Options shared by training and the step benchmark.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Image side: 28 (the default model) or 64 (the DCGAN paper's; 28x28 data is resized).
    #[arg(long, default_value_t = 28, value_parser = image_size)]
    pub image_size: usize,
    /// G's width: its last hidden layer's feature maps (the layers before hold 2, 4 and 8
    /// times as many), as in the PyTorch DCGAN example. A step's work grows with its square.
    #[arg(long, default_value_t = 64, value_parser = feature_maps)]
    pub ngf: usize,
    /// D's width: its first layer's feature maps (the layers after hold 2, 4 and 8 times as
    /// many).
    #[arg(long, default_value_t = 64, value_parser = feature_maps)]
    pub ndf: usize,
    /// Images per rank per step (at most 2^20).
    #[arg(long, default_value_t = 64, value_parser = batch_size)]
    pub batch_size: u64,
    /// The GAN's loss: dcgan (the DCGAN paper's binary cross-entropy) or wgan-gp (a
    /// Wasserstein critic without batch norm, held near 1-Lipschitz by a gradient penalty).
    #[arg(long, value_enum, default_value_t = GanLoss::Dcgan)]
    pub loss: GanLoss,
    /// WGAN-GP: the critic's normalization: none, or layer where DCGAN has batch norm (batch
    /// norm would tie each sample's penalty to the rest of the batch) [default: none]
    #[arg(long, value_enum)]
    pub critic_norm: Option<CriticNorm>,
    /// WGAN-GP: critic steps per generator step (each takes a batch of real images).
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
    pub n_critic: u64,
    /// WGAN-GP: the gradient penalty's weight lambda (0 skips the penalty's passes: an
    /// unconstrained critic, for measuring what the penalty costs).
    #[arg(long, default_value_t = 10.0, value_parser = non_negative_f32)]
    pub gp_lambda: f32,
    /// Adam learning rate [default: 2e-4; 1e-4 with --loss wgan-gp, as its authors' code].
    #[arg(long, value_parser = positive_f64)]
    pub lr: Option<f64>,
    /// Adam's beta1 [default: 0.5, the DCGAN paper's and WGAN-GP's MNIST code's; their
    /// CIFAR code uses 0].
    #[arg(long, value_parser = adam_beta)]
    pub adam_beta1: Option<f32>,
    /// Adam's beta2 [default: 0.999; 0.9 with --loss wgan-gp].
    #[arg(long, value_parser = adam_beta)]
    pub adam_beta2: Option<f32>,
    /// Adam's epsilon (PyTorch's default 1e-8).
    #[arg(long, default_value_t = 1e-8, value_parser = positive_f32)]
    pub adam_eps: f32,
    /// Seed for weights, data order and noise: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Compute threads per rank (default: the cores of this host divided by its ranks).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where each rank computes: auto (a GPU when one is usable, else the CPU), cpu, cuda, or
    /// cuda-emulated (the CUDA kernels on the CPU: slow, for checking without a GPU).
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// How the CUDA convolutions multiply: fp32 (FFMA), tf32 (tensor cores, operands rounded
    /// to 10 mantissa bits: about 1e-3 relative error) or 3xtf32 (tensor cores, three TF32
    /// products per product: fp32's accuracy). Needs a GPU of compute capability 8.0+ for
    /// tf32 and 3xtf32; the CPU computes in fp32 only.
    #[arg(long, value_enum, default_value_t = Precision::Fp32)]
    pub precision: Precision,
    /// CUDA: record the first step's kernels and replay the steps after it as CUDA graphs,
    /// one launch for each stretch between host interactions (uploads, gradient copies,
    /// downloads); a step that launches differently runs eagerly and is recorded again.
    #[arg(long)]
    pub cuda_graphs: bool,
    /// Compute each rank's batch in M micro-batches (a divisor of it), summing their
    /// gradients: batch norm sees M-th batches, as M data-parallel ranks would, and the
    /// activations of one micro-batch at a time are in flight (--recompute).
    #[arg(long, default_value_t = 1, value_parser = at_least_one, value_name = "M")]
    pub micro_batches: u64,
    /// With --micro-batches: keep only G's noise of each micro-batch and compute its forward
    /// again before its backward (GPipe's recomputation: less memory, one more G forward).
    #[arg(long)]
    pub recompute: bool,
    /// With --micro-batches: batch norm's running statistics move once per pass from the
    /// whole batch's statistics (torchgpipe's deferred batch norm), not once per micro-batch;
    /// each micro-batch is still normalized by its own.
    #[arg(long)]
    pub deferred_bn: bool,
    /// Keep an exponential moving average of G's weights with a half-life of IMAGES generated
    /// images (G's updates count their global batch; e.g. 2500; shorter early in the run): the
    /// averaged generator draws the sample grids, is saved beside G as G_ema.safetensors and is
    /// scored beside it (0 = none).
    #[arg(long, default_value_t = 0, value_name = "IMAGES")]
    pub g_ema: u64,
}

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training images: a directory with train-images-idx3-ubyte[.gz] (MNIST or
    /// Fashion-MNIST), or synthetic:N for N generated images. Default: the Debian package
    /// dataset-fashion-mnist in /usr/share/datasets/fashion-mnist.
    #[arg(long)]
    pub data: Option<String>,
    /// Passes over the data (default 5, or as many as --max-steps takes when that is given).
    #[arg(long, value_parser = at_least_one)]
    pub epochs: Option<u64>,
    /// Stop after this many steps in total; without --epochs, however many epochs they take.
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Output directory (default runs/<timestamp>, or runs/<timestamp>-2, -3... where a run
    /// started in the same second took it).
    // The text is --help's, where `<timestamp>` reads as meant: not an HTML tag.
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write no TensorBoard event file (by default the run directory holds one:
    /// `tensorboard --logdir runs` shows every run's losses, times, quality and grids).
    #[arg(long)]
    pub no_tensorboard: bool,
    /// No progress bar and no periodic progress lines (the same as --progress none).
    #[arg(long, conflicts_with = "progress")]
    pub no_progress: bool,
    /// Progress on stderr: auto (a bar on a terminal, else a line every few seconds), bar
    /// (also where stderr is not a terminal: under mpiexec, for a launcher on a terminal),
    /// lines, or none.
    #[arg(long, value_enum, default_value_t = ProgressChoice::Auto)]
    pub progress: ProgressChoice,
    #[command(flatten)]
    pub parallel: ParallelArgs,
    #[command(flatten)]
    pub checkpoints: CheckpointArgs,
    #[command(flatten)]
    pub comm: CommArgs,
    #[command(flatten)]
    pub eval: EvalArgs,
}

/// Sample quality measured as the run goes (`evaluate`'s figures, after epochs).
#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// Every this many epochs, the Fréchet distance and KID of the generator's images to the
    /// test split, in metrics.jsonl and summary.json (0 = never). Default: every epoch where
    /// the data has a test split and its feature network has been trained (`dcgan-train
    /// classifier`); given, it trains that network first if needed.
    #[arg(long, value_name = "EPOCHS")]
    pub eval_every: Option<u64>,
    /// Images generated for each evaluation (distances are comparable only at the same n).
    #[arg(long, default_value_t = 10_000, value_parser = evaluation_images)]
    pub eval_n: u64,
    /// The feature network (default: the data's, where `dcgan-train classifier` writes it).
    #[arg(long, value_name = "FILE")]
    pub classifier: Option<PathBuf>,
    /// End the run once this many evaluations in a row have not beaten the best FID (its
    /// checkpoint is kept as checkpoints/best): a GAN that collapsed rarely recovers. 0: never
    /// (a resume of a run that stopped early goes on with a larger value, or 0).
    #[arg(long, value_name = "EVALUATIONS")]
    pub patience: Option<u64>,
}

impl From<EvalArgs> for EvalOptions {
    fn from(a: EvalArgs) -> EvalOptions {
        // Made absolute: a resume measures with the run's, perhaps from another directory.
        let classifier = a.classifier.map(|p| std::path::absolute(&p).unwrap_or(p));
        EvalOptions { eval_every: a.eval_every, eval_n: a.eval_n, classifier, patience: a.patience }
    }
}

/// Data parallelism: how the batch is split and how gradients are exchanged.
#[derive(Args, Debug, Clone)]
pub struct ParallelArgs {
    /// A fixed global batch split over the ranks (strong scaling) instead of --batch-size per
    /// rank (weak scaling); must be divisible by the number of ranks.
    #[arg(long, value_parser = at_least_one, conflicts_with = "batch_size")]
    pub global_batch_size: Option<u64>,
    /// Scale the learning rate with the global batch relative to 64: none, linear or sqrt.
    #[arg(long, value_enum, default_value_t = LrScaling::None)]
    pub lr_scaling: LrScaling,
    /// Ramp the learning rate linearly from 0 over this many steps.
    #[arg(long, default_value_t = 0)]
    pub warmup_steps: u64,
    /// Train the first STEPS steps as one worker would (every rank computes a 1-rank run's
    /// step on its data and noise, nothing exchanged), then take rank 0's weights everywhere
    /// and go data-parallel (CNTK's distributed_after: a large global batch from the start
    /// can stall a GAN).
    #[arg(long, default_value_t = 0, value_name = "STEPS")]
    pub distributed_after: u64,
    /// Pipeline parallelism: G on rank 0 and D on rank 1, each step's batch passing between
    /// them in --micro-batches (GPipe's schedule). Under mpiexec -n 2P, P pipelines side by
    /// side (ranks 2i and 2i+1), each stage averaging its gradients with its replicas.
    #[arg(long)]
    pub pipeline: bool,
    /// Block momentum (BMUF): each rank trains K steps alone on its shard with its own Adam,
    /// then one allreduce averages the models and a momentum filters the block's step: 1/K of
    /// the bytes of exchanging gradients (0: exchange gradients every step).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub sync_every: u64,
    /// With --sync-every: the block momentum [default: 1 - 1/ranks; 0 with --block-lr 1 is
    /// plain model averaging].
    #[arg(long, value_parser = adam_beta)]
    pub block_momentum: Option<f32>,
    /// With --sync-every: the block learning rate (the step's scale before the momentum).
    #[arg(long, default_value_t = 1.0, value_parser = positive_f32)]
    pub block_lr: f32,
    /// With --sync-every: Nesterov's lookahead (every rank starts the block at w - bm v).
    #[arg(long)]
    pub block_nesterov: bool,
    /// With --sync-every: zero each rank's Adam moments at every sync (CNTK resets its
    /// momentum per block) instead of keeping them.
    #[arg(long)]
    pub block_reset_adam: bool,
    /// Batch-norm statistics over all ranks (one allreduce per BN layer per pass) instead of
    /// per rank.
    #[arg(long)]
    pub sync_bn: bool,
    /// Fuse neighbouring layers' gradients into buckets of at most this size (B/KiB/MiB). The
    /// layer whose gradient backward completes last always travels alone: nothing is left to
    /// hide its exchange before D's update.
    #[arg(long, default_value = "1MiB", value_parser = parse_bytes)]
    pub bucket_bytes: usize,
    /// Exchange gradients only after the whole backward (for comparison with the default,
    /// which sends each bucket as soon as backward completes it); with --sync-every, average
    /// the models before the next step instead of during it.
    #[arg(long)]
    pub no_overlap: bool,
    /// Benchmarking only: skip the gradient exchange (ranks drift apart) to isolate its cost.
    /// The per-step losses are still averaged, so the ranks stay in step as in a real run.
    #[arg(long)]
    pub no_exchange: bool,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of every rank to FILE.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Steps recorded in the trace.
    #[arg(long, default_value_t = 20)]
    pub trace_steps: u64,
    /// Every K steps, check that all ranks hold identical parameters (0 = never; with
    /// --sync-every, only the block ends among them). With --no-exchange the ranks drift
    /// apart by design, so the check fails: a test of the check.
    #[arg(long, default_value_t = 0)]
    pub check_consistency: u64,
    /// A 1-rank run's summary.json: the summary then reports the weak-scaling speedup of the
    /// MPI paper's eq. (1) against it.
    #[arg(long)]
    pub baseline_summary: Option<PathBuf>,
}

/// Checkpoints and resuming.
#[derive(Args, Debug, Clone)]
pub struct CheckpointArgs {
    /// Write a checkpoint every N steps (default: at the end of every epoch), and always at
    /// the end and when stopped by SIGINT/SIGTERM.
    #[arg(long, value_parser = at_least_one)]
    pub checkpoint_every: Option<u64>,
    /// How many checkpoints to keep, newest first (0 = all; default 1, or on --resume the
    /// run's own): a GAN's last checkpoint is not always its best, so keep some to pick from.
    #[arg(long)]
    pub keep_checkpoints: Option<usize>,
    /// Do not keep the best checkpoint: by default, where sample quality is measured, the
    /// checkpoint of the epoch with the lowest FID is kept as well, named by checkpoints/best.
    #[arg(long)]
    pub no_keep_best: bool,
    /// Continue the run in DIR from its latest checkpoint (same ranks and options); its
    /// outputs go on in DIR, so --out is not taken with it.
    #[arg(long, conflicts_with = "out")]
    pub resume: Option<PathBuf>,
}

impl From<ModelArgs> for ModelOptions {
    fn from(a: ModelArgs) -> ModelOptions {
        // The loss's own optimizer settings, where the flags leave them.
        let (lr, beta1, beta2) = a.loss.optimizer_defaults();
        ModelOptions {
            image_size: a.image_size,
            ngf: a.ngf,
            ndf: a.ndf,
            batch_size: a.batch_size,
            loss: a.loss,
            // A WGAN-GP run records its critic's norm, given or not, so that a resume naming
            // the default names the run's own.
            critic_norm: match a.loss {
                GanLoss::WganGp => Some(a.critic_norm.unwrap_or_default()),
                GanLoss::Dcgan => a.critic_norm,
            },
            n_critic: a.n_critic,
            gp_lambda: a.gp_lambda,
            lr: a.lr.unwrap_or(lr),
            adam_beta1: a.adam_beta1.unwrap_or(beta1),
            adam_beta2: a.adam_beta2.unwrap_or(beta2),
            adam_eps: a.adam_eps,
            seed: a.seed,
            threads: a.threads,
            device: a.device,
            precision: a.precision,
            cuda_graphs: a.cuda_graphs,
            micro_batches: a.micro_batches,
            recompute: a.recompute,
            deferred_bn: a.deferred_bn,
            g_ema: a.g_ema,
        }
    }
}

impl From<ParallelArgs> for ParallelOptions {
    fn from(a: ParallelArgs) -> ParallelOptions {
        ParallelOptions {
            global_batch_size: a.global_batch_size,
            lr_scaling: a.lr_scaling,
            warmup_steps: a.warmup_steps,
            distributed_after: a.distributed_after,
            pipeline: a.pipeline,
            sync_every: a.sync_every,
            block_momentum: a.block_momentum,
            block_lr: a.block_lr,
            block_nesterov: a.block_nesterov,
            block_reset_adam: a.block_reset_adam,
            sync_bn: a.sync_bn,
            bucket_bytes: a.bucket_bytes,
            no_overlap: a.no_overlap,
            no_exchange: a.no_exchange,
            trace: a.trace,
            trace_steps: a.trace_steps,
            check_consistency: a.check_consistency,
            baseline_summary: a.baseline_summary,
        }
    }
}

impl From<TrainArgs> for TrainOptions {
    fn from(a: TrainArgs) -> TrainOptions {
        let c = a.checkpoints;
        TrainOptions {
            model: a.model.into(),
            data: a.data,
            epochs: a.epochs,
            max_steps: a.max_steps,
            out: a.out,
            no_tensorboard: a.no_tensorboard,
            no_progress: a.no_progress,
            progress: a.progress,
            parallel: a.parallel.into(),
            checkpoints: CheckpointOptions {
                checkpoint_every: c.checkpoint_every,
                keep_checkpoints: c.keep_checkpoints,
                no_keep_best: c.no_keep_best,
                resume: c.resume,
            },
            comm: a.comm.into(),
            eval: a.eval.into(),
        }
    }
}

/// `given`: the options the command line gave explicitly, which a resume applies.
pub fn run(args: TrainArgs, given: &BTreeSet<String>) -> anyhow::Result<()> {
    crate::train::run::run(&args.into(), given)
}

/// The options `matches` got from the command line itself (not a default), by field name:
/// a resume takes every other training option from the run.
pub fn given_options(matches: &clap::ArgMatches) -> BTreeSet<String> {
    // The matches also hold the argument groups (one per flattened struct): only flags count.
    let cmd = <super::Cli as clap::CommandFactory>::command();
    let flags: BTreeSet<&str> = cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
    matches
        .ids()
        .filter(|id| flags.contains(id.as_str()))
        .filter(|id| matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::recorded_options::{RESUMABLE, first_difference, training_config};
    use clap::Parser;

    fn options(line: &[&str]) -> TrainOptions {
        let mut v = vec!["dcgan-train"];
        v.extend_from_slice(line);
        super::super::Cli::parse_from(v).train.into()
    }

    #[test]
    fn the_flags_defaults_are_the_options_defaults() {
        assert_eq!(options(&[]), TrainOptions::default());
    }

    /// A run records its feature network's path as an absolute one, which a resume from
    /// another directory still finds.
    #[test]
    fn the_classifier_is_recorded_absolute() {
        let net = options(&["--classifier", "nets/f.safetensors"]).eval.classifier.unwrap();
        assert_eq!(net, std::env::current_dir().unwrap().join("nets/f.safetensors"));
    }

    /// The options a resume applies: those the line gives, told apart from defaults, by the
    /// names of the options they set.
    #[test]
    fn the_options_given_are_told_apart_from_the_defaults() {
        use clap::CommandFactory;
        let line = ["--lr", "0.001", "--sync-bn", "--resume", "r", "--stall-timeout", "5s", "--batch-size", "64"];
        let want: BTreeSet<String> =
            ["lr", "sync_bn", "resume", "stall_timeout", "batch_size"].iter().map(|s| s.to_string()).collect();
        let m = super::super::Cli::command().get_matches_from(std::iter::once("dcgan-train").chain(line));
        assert_eq!(given_options(&m), want);
        let m = super::super::Cli::command().get_matches_from(["dcgan-train", "train"].into_iter().chain(line));
        assert_eq!(given_options(m.subcommand_matches("train").unwrap()), want);
    }

    /// Every flag of a run sets the option of its own name, so that what a resume is given is
    /// known to be a training option or one a resume may change.
    #[test]
    fn every_flag_is_an_option_of_the_same_name() {
        use clap::CommandFactory;
        fn keys(v: &serde_json::Value, out: &mut BTreeSet<String>) {
            if let serde_json::Value::Object(m) = v {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
        }
        let mut options = BTreeSet::new();
        keys(&serde_json::to_value(TrainOptions::default()).unwrap(), &mut options);
        let cmd = super::super::Cli::command();
        let ids: Vec<String> = cmd.get_arguments().map(|a| a.get_id().to_string()).collect();
        for id in ids.iter().filter(|id| !["help", "version"].contains(&id.as_str())) {
            assert!(options.contains(id), "--{id} sets no option named {id}");
        }
        assert!(ids.len() > 30, "{ids:?}");
    }

    #[test]
    fn max_steps_without_epochs_is_not_cut_to_the_default_epochs() {
        assert_eq!(options(&[]).epoch_limit(), Some(5));
        assert_eq!(options(&["--max-steps", "100"]).epoch_limit(), None);
        assert_eq!(options(&["--max-steps", "100", "--epochs", "2"]).epoch_limit(), Some(2));
        assert_eq!(options(&["--epochs", "7"]).epoch_limit(), Some(7));
    }

    #[test]
    fn progress_is_chosen_once() {
        assert_eq!(options(&[]).progress_choice(), ProgressChoice::Auto);
        for (word, choice) in
            [("bar", ProgressChoice::Bar), ("lines", ProgressChoice::Lines), ("none", ProgressChoice::None)]
        {
            assert_eq!(options(&["--progress", word]).progress_choice(), choice);
        }
        assert_eq!(options(&["--no-progress"]).progress_choice(), ProgressChoice::None);
        let parse = |line: &[&str]| super::super::Cli::try_parse_from(["dcgan-train"].iter().chain(line)).err();
        let e = parse(&["--no-progress", "--progress", "bar"]).expect("a conflict").to_string();
        assert!(e.contains("--no-progress") && e.contains("--progress"), "{e}");
        let e = parse(&["--progress", "fancy"]).expect("an unknown value").to_string();
        assert!(e.contains("--progress") && e.contains("lines"), "{e}");
        // Where progress goes changes nothing a resume compares.
        let a = training_config(&options(&["--progress", "bar"]));
        assert_eq!(first_difference(&a, &training_config(&options(&["--no-progress"])), &RESUMABLE), None);
    }

    #[test]
    fn the_first_differing_option_is_named_as_its_flag() {
        let a = training_config(&options(&["--batch-size", "32", "--seed", "3"]));
        let b = training_config(&options(&["--batch-size", "64", "--seed", "3", "--no-progress"]));
        assert_eq!(first_difference(&a, &b, &[]).unwrap(), "--batch-size 32 vs 64");
        let c = training_config(&options(&["--batch-size", "32", "--seed", "3", "--allreduce", "ring"]));
        assert_eq!(first_difference(&a, &c, &[]).unwrap(), "--allreduce \"auto\" vs \"ring\"");
    }
}
