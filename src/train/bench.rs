//! `dcgan-train bench-step`: time full GAN steps (D step + G step, Adam) on one rank.

use super::ddp::exchange::{SoloExchange, plan_buckets};
use super::step::{GanTrainer, StepConfig};
use super::timeline::Timeline;
use crate::model::dcgan::Dcgan;
use crate::record::{GanLoss, ModelOptions};
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

/// Multiply-adds of one step: G forward, D forward three times, D backward (data and
/// weights) twice, D backward (data) once, G backward (data and weights).
pub fn step_macs<B: crate::backend::Backend>(model: &Dcgan<B>) -> u64 {
    let per_pass = |net: &crate::model::net::Net<B>| net.stages.iter().map(|s| s.conv.geom.macs()).sum::<u64>();
    let (g, d) = (per_pass(&model.g), per_pass(&model.d));
    // Backward skips the first layer's data gradient (the images / noise need none), except
    // in the G step, where D's input gradient feeds G.
    let g_first = model.g.stages[0].conv.geom.macs();
    let d_first = model.d.stages[0].conv.geom.macs();
    g + 3 * d + 2 * (2 * d - d_first) + d + (2 * g - g_first)
}

/// What `bench-step` times.
#[derive(Clone, Debug)]
pub struct BenchStepOptions {
    pub model: ModelOptions,
    /// Timed steps, after the warm-up.
    pub steps: u64,
    /// Untimed steps first.
    pub warmup: u64,
    /// One JSON line instead of text.
    pub json: bool,
}

/// Under mpiexec every rank benchmarks alone, as training would place it: its share of the
/// host's cores, the GPU of its local rank, and its lines labelled with that rank.
pub fn run(args: BenchStepOptions) -> Result<()> {
    let (local_rank, local_size) = crate::comm::launcher_local_place();
    crate::backend::threads::setup_threads(args.model.threads, local_size)?;
    let (device, notice) = crate::device::select(args.model.device, args.model.cuda_settings(), local_rank)?;
    if let Some(n) = notice.filter(|_| local_rank == 0) {
        eprintln!("{n}");
    }
    device.run(BenchOn(args, (local_rank, local_size)))
}

/// The options and (local rank, local size).
struct BenchOn(BenchStepOptions, (usize, usize));

impl crate::device::OnBackend for BenchOn {
    type Out = Result<()>;
    fn run<B: crate::backend::Backend>(self, be: B) -> Result<()> {
        bench_on(self.0, self.1, be)
    }
}

fn bench_on<B: crate::backend::Backend>(args: BenchStepOptions, local: (usize, usize), be: B) -> Result<()> {
    let batch = args.model.batch_size as usize;
    let size = args.model.image_size;
    args.model.check_loss_options()?;
    args.model.check_micro_batches(batch)?;
    let micro = args.model.micro_batches as usize;
    // Before anything big is allocated: a batch that cannot fit is one line, not an abort.
    if let Some(limits) = super::memory_plan::MemoryLimits::now(&be, local.1) {
        super::memory_plan::check(&be, &args.model, batch, 1, &limits, false)?;
    }
    // With micro-batches the networks are built for one of them (train/micro_step.rs).
    let (widths, kind) = (super::config::widths(&args.model), super::config::discriminator(&args.model));
    let mut model = Dcgan::new(&be, size, widths, batch / micro, args.model.seed, kind)
        .with_context(|| format!("building the model for batch {batch} on {}", be.describe()))?;
    model.set_adam(args.model.adam_beta1, args.model.adam_beta2, args.model.adam_eps);
    let macs = step_macs(&model) * micro as u64;
    let exchange = Box::new(SoloExchange::new(plan_buckets(&model, 1 << 20)));
    let cfg = StepConfig { seed: args.model.seed, rank: 0, world: 1, overlap_steps: true };
    let mut trainer = GanTrainer::new(be, model, exchange, cfg, Timeline::disabled())?;
    if micro > 1 {
        trainer.use_micro_batches(micro, args.model.recompute)?;
    }
    if args.model.deferred_bn {
        trainer.model.g.defer_bn();
        trainer.model.d.defer_bn();
    }
    if args.model.g_ema > 0 {
        trainer.use_g_ema(args.model.g_ema, batch)?;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(args.model.seed);
    let images: Vec<f32> = (0..batch * size * size).map(|_| rng.random_range(-1.0..1.0)).collect();
    if args.model.loss == GanLoss::WganGp {
        return bench_critic_steps(&args, trainer, &images, local);
    }
    for _ in 0..args.warmup {
        trainer.step(&images, args.model.lr as f32, args.model.lr as f32, false)?;
    }
    let mut times = Vec::with_capacity(args.steps as usize);
    for _ in 0..args.steps {
        let t0 = Instant::now();
        trainer.step(&images, args.model.lr as f32, args.model.lr as f32, false)?;
        trainer.finish_pending();
        trainer.sync_device();
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    trainer.finish_pending();
    times.sort_by(|a, b| a.total_cmp(b));
    let median = times[times.len() / 2];
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let images_per_s = batch as f64 / (median / 1e3);
    let gflops = 2.0 * macs as f64 / (median / 1e3) / 1e9;
    let threads = rayon::current_num_threads();
    if args.json {
        let line = serde_json::json!({
            "program": crate::version::PROGRAM,
            "device": trainer.be_describe(),
            "image_size": size,
            "batch_size": batch,
            "micro_batches": micro,
            "precision": args.model.precision.name(),
            "cuda_graphs": trainer.be.graph_stats(),
            "steps": args.steps,
            "threads": threads,
            "ms_per_step": median,
            "ms_per_step_mean": mean,
            "ms_per_step_min": times[0],
            "ms_per_step_max": times[times.len() - 1],
            "images_per_s": images_per_s,
            "gflop_per_step": 2.0 * macs as f64 / 1e9,
            "gflops": gflops,
            "peak_device_memory_bytes": trainer.peak_device_bytes(),
            "local_rank": local.0,
            "local_ranks": local.1,
        });
        println!("{line}");
    } else {
        let who = if local.1 > 1 { format!(" (local rank {} of {})", local.0, local.1) } else { String::new() };
        let graphs = graphs_note(trainer.be.graph_stats());
        println!(
            "bench-step{who}: {} threads, {size}x{size}, batch {batch}: {median:.1} ms/step (median of {}; min {:.1}, max {:.1}), {images_per_s:.0} images/s, {:.2} GFLOP/step, {gflops:.1} GFLOP/s{graphs}",
            threads,
            args.steps,
            times[0],
            times[times.len() - 1],
            2.0 * macs as f64 / 1e9
        );
    }
    Ok(())
}

/// `--loss wgan-gp`: critic steps (no generator step among them) with the penalty and without
/// it (`--gp-lambda 0`'s step), taking turns step by step so that both see the same state of
/// the machine; the medians and their ratio, what the penalty's double backward costs.
fn bench_critic_steps<B: crate::backend::Backend>(
    args: &BenchStepOptions,
    mut trainer: GanTrainer<B>,
    images: &[f32],
    local: (usize, usize),
) -> Result<()> {
    let lambda = args.model.gp_lambda;
    trainer.use_wgan_gp(u64::MAX, lambda)?;
    let lr = args.model.lr as f32;
    let mut times = [Vec::new(), Vec::new()];
    for round in 0..args.warmup + args.steps {
        // Which goes first alternates too.
        for k in [round as usize % 2, 1 - round as usize % 2] {
            trainer.set_gp_lambda(if k == 0 { lambda } else { 0.0 });
            let t0 = Instant::now();
            trainer.step(images, lr, lr, false)?;
            trainer.sync_device();
            if round >= args.warmup {
                times[k].push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let [with, without] = times.map(|mut t| {
        t.sort_by(|a, b| a.total_cmp(b));
        t[t.len() / 2]
    });
    let (batch, size) = (trainer.batch(), args.model.image_size);
    if args.json {
        let line = serde_json::json!({
            "program": crate::version::PROGRAM,
            "device": trainer.be_describe(),
            "loss": "wgan-gp",
            "image_size": size,
            "batch_size": batch,
            "steps": args.steps,
            "threads": rayon::current_num_threads(),
            "ms_per_critic_step": with,
            "ms_per_critic_step_without_penalty": without,
            "penalty_cost_ratio": with / without,
            "cuda_graphs": trainer.be.graph_stats(),
            "local_rank": local.0,
            "local_ranks": local.1,
        });
        println!("{line}");
    } else {
        println!(
            "bench-step: {} threads, {size}x{size}, batch {batch}, wgan-gp critic step: {with:.1} ms with the penalty, {without:.1} ms without (medians of {} each, taking turns): the penalty costs {:.2}x{}",
            rayon::current_num_threads(),
            args.steps,
            with / without,
            graphs_note(trainer.be.graph_stats())
        );
    }
    Ok(())
}

/// "; CUDA graphs: R of N steps replayed" with `--cuda-graphs`, else nothing.
fn graphs_note(stats: Option<crate::backend::GraphStats>) -> String {
    stats.map_or_else(String::new, |g| format!("; CUDA graphs: {} of {} steps replayed", g.replayed_steps, g.steps()))
}
