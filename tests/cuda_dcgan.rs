//! The real model and training step (model/, train/step.rs) on the CUDA engines against the
//! CPU backend: every gradient of the first step within 1e-4 of the CPU's (relative to the
//! tensor's size), and the losses of 20 steps within 1e-3 (at lr 2e-5; COMPARED_LR says
//! why). On a GPU the DCGAN's own widths run; on the (slow) CPU emulator of the kernels, the
//! same architecture narrowed.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::*;
use dcgan_train::backend::cpu::Cpu;
use dcgan_train::backend::{Backend, View};
use dcgan_train::data::{DataSource, Dataset};
use dcgan_train::model::dcgan::{DISCRIMINATOR_28, Dcgan, Discriminator, GENERATOR_28, Widths, critic_specs};
use dcgan_train::model::net::StageSpec;
use dcgan_train::record::StepMetrics;
use dcgan_train::train::ddp::exchange::{SoloExchange, plan_buckets};
use dcgan_train::train::step::{GanTrainer, StepConfig};
use dcgan_train::train::timeline::Timeline;

/// The 28x28 architecture with every width divided by `div` (nz too), as on the emulator.
fn narrowed(specs: &[StageSpec], div: usize) -> Vec<StageSpec> {
    let n = specs.len();
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // The image channel (1) stays; everything inside shrinks.
            let c_in = if i == 0 && s.c_in == 1 { 1 } else { s.c_in / div };
            let c_out = if i == n - 1 && s.c_out == 1 { 1 } else { s.c_out / div };
            StageSpec { c_in, c_out, ..*s }
        })
        .collect()
}

fn trainer<B: Backend>(be: B, small: bool, seed: u64) -> GanTrainer<B> {
    let (g, d, batch) = if small {
        (narrowed(&GENERATOR_28, 8), narrowed(&DISCRIMINATOR_28, 4), 4)
    } else {
        (GENERATOR_28.to_vec(), DISCRIMINATOR_28.to_vec(), 64)
    };
    let model = Dcgan::from_specs(&be, &g, &d, 28, batch, seed).unwrap();
    let exchange = Box::new(SoloExchange::new(plan_buckets(&model, 1 << 20)));
    let cfg = StepConfig { seed, rank: 0, world: 1, overlap_steps: true };
    GanTrainer::new(be, model, exchange, cfg, Timeline::disabled()).unwrap()
}

fn images(batch: usize, t: u64) -> Vec<f32> {
    random(&mut rng(1000 + t), batch * 784, 1.0)
}

fn download<B: Backend>(be: &B, buf: &B::Buf) -> Vec<f32> {
    let mut v = vec![0.0; dcgan_train::backend::DeviceBuf::len(buf)];
    be.download(View::whole(buf), &mut v);
    v
}

fn losses(m: &StepMetrics) -> [f32; 2] {
    let (d, g) = m.losses.pair();
    [d, g]
}

#[test]
fn generator_and_discriminator_gradients_match_the_cpu() {
    for cu in engines("dcgan gradients") {
        let small = small(&cu);
        let mut gpu = trainer(cu, small, 11);
        let mut cpu = trainer(Cpu, small, 11);
        let x = images(cpu.batch(), 1);
        let (mc, mg) = (cpu.step(&x, 2e-4, 2e-4, false).unwrap(), gpu.step(&x, 2e-4, 2e-4, false).unwrap());
        let (lc, lg) = (losses(&mc), losses(&mg));
        assert!((lc[0] - lg[0]).abs() < 1e-4 && (lc[1] - lg[1]).abs() < 1e-4, "{mc:?} vs {mg:?}");
        // The gradients of the step (D's from its update, G's from its backward) per tensor.
        for (name, c_net, g_net) in [("G", &cpu.model.g, &gpu.model.g), ("D", &cpu.model.d, &gpu.model.d)] {
            let (gc, gg) = (download(&cpu.be, &c_net.store.grad), download(&gpu.be, &g_net.store.grad));
            for t in &c_net.store.layout.params {
                let (c, g) = (&gc[t.range.clone()], &gg[t.range.clone()]);
                assert!(c.iter().any(|&v| v != 0.0), "{name} {}: the CPU gradient is all zero", t.name);
                assert_close(&format!("{name} {}", t.name), g, c, 1e-4);
            }
        }
    }
}

/// Batch `t` of the synthetic data set (blobs, rings and strokes), as training reads it.
fn data_batch(set: &Dataset, batch: usize, t: usize) -> Vec<f32> {
    let indices: Vec<usize> = (0..batch).map(|i| (t * batch + i) % set.count).collect();
    let mut out = vec![0.0; batch * 784];
    set.fill_batch(&indices, 28, &mut out);
    out
}

/// The learning rate of the 20-step comparison. At the default 2e-4 this comparison cannot
/// pass for any two implementations that round differently: measured on the CPU backend
/// against itself, a relative change of 1e-6 in the input pixels moved the losses by 1.3e-3
/// by step 5 and 1.2e-2 by step 18 (Adam's first steps move every weight by about lr
/// whatever the gradient's size, so rounding noise in a near-zero gradient becomes a full
/// step). At 2e-5 the same change stays below 1.6e-4 for 20 steps, and the losses still
/// move (D from 1.97 to 1.20), so the comparison can tell a wrong kernel from rounding.
const COMPARED_LR: f32 = 2e-5;

#[test]
fn twenty_training_steps_follow_the_cpu_losses() {
    let set = Dataset::load(&DataSource::Synthetic(4096)).unwrap();
    for cu in engines("dcgan training") {
        let small = small(&cu);
        let mut gpu = trainer(cu, small, 12);
        let mut cpu = trainer(Cpu, small, 12);
        let mut seen = Vec::new();
        for t in 1..=20 {
            let x = data_batch(&set, cpu.batch(), t);
            let lr = COMPARED_LR;
            let (lc, lg) =
                (losses(&cpu.step(&x, lr, lr, false).unwrap()), losses(&gpu.step(&x, lr, lr, false).unwrap()));
            assert!(
                (lc[0] - lg[0]).abs() <= 1e-3 && (lc[1] - lg[1]).abs() <= 1e-3,
                "step {t}: losses (D, G) CPU {lc:?} vs CUDA {lg:?}"
            );
            seen.push(lc);
        }
        // The run must actually train, or matching losses would prove little.
        assert_ne!(seen[0], seen[19], "the losses never changed");
    }
}

/// WGAN-GP's step (the critic's passes, the penalty's double backward, the generator step)
/// on the CUDA backend against the CPU's: the metrics of every step and, after the last, every
/// weight. n_critic 1, so that every step runs all of it; the critic without a norm and with
/// layer norm.
#[test]
fn wgan_gp_steps_follow_the_cpu() {
    let set = Dataset::load(&DataSource::Synthetic(4096)).unwrap();
    for (cu, layer_norm) in
        [false, true].into_iter().flat_map(|ln| engines("wgan-gp training").into_iter().map(move |cu| (cu, ln)))
    {
        let small = small(&cu);
        let (mut gpu, mut cpu) = (wgan_trainer(cu, small, 13, layer_norm), wgan_trainer(Cpu, small, 13, layer_norm));
        for t in 1..=3 {
            let x = data_batch(&set, cpu.batch(), t);
            let (mc, mg) = (
                cpu.step(&x, COMPARED_LR, COMPARED_LR, false).unwrap(),
                gpu.step(&x, COMPARED_LR, COMPARED_LR, false).unwrap(),
            );
            let (rc, rg) = (mc.losses.to_raw(), mg.losses.to_raw());
            for i in 0..5 {
                let what = format!("layer norm {layer_norm}, step {t}: CPU {mc:?} vs CUDA {mg:?}");
                assert!((rc[i] - rg[i]).abs() <= 1e-3 * rc[i].abs().max(1.0), "{what}");
            }
        }
        cpu.finish_pending();
        gpu.finish_pending();
        for (name, c_net, g_net) in [("G", &cpu.model.g, &gpu.model.g), ("D", &cpu.model.d, &gpu.model.d)] {
            let (wc, wg) = (download(&cpu.be, &c_net.store.value), download(&gpu.be, &g_net.store.value));
            assert_close(&format!("{name} weights after 3 steps, layer norm {layer_norm}"), &wg, &wc, 1e-4);
        }
    }
}

/// `--cuda-graphs`: DCGAN steps replayed from graphs (steps 3 and 4: steps 1 and 2 are
/// recorded, of two kinds: step 2's G forward first lands an update left in flight) compute
/// what launching their kernels does, bit for bit: every step's metrics, then every weight
/// and Adam moment, and `--g-ema`'s average (its rate changes every step of its ramp).
#[test]
fn graphed_training_steps_equal_launched_ones() {
    let set = Dataset::load(&DataSource::Synthetic(4096)).unwrap();
    for cu in engines("dcgan graphs") {
        let small = small(&cu);
        let mut graphed = trainer(graphed_twin(&cu), small, 14);
        let mut launched = trainer(cu, small, 14);
        let batch = launched.batch();
        launched.use_g_ema(40, batch).unwrap();
        graphed.use_g_ema(40, batch).unwrap();
        for t in 1..=4 {
            let x = data_batch(&set, launched.batch(), t);
            let (ml, mg) =
                (launched.step(&x, 2e-4, 2e-4, false).unwrap(), graphed.step(&x, 2e-4, 2e-4, false).unwrap());
            assert_eq!(ml.losses.to_raw(), mg.losses.to_raw(), "step {t}");
        }
        launched.finish_pending();
        graphed.finish_pending();
        for (name, l, g) in [("G", &launched.model.g, &graphed.model.g), ("D", &launched.model.d, &graphed.model.d)] {
            for (what, lb, gb) in [
                ("weights", &l.store.value, &g.store.value),
                ("Adam m", &l.store.m, &g.store.m),
                ("Adam v", &l.store.v, &g.store.v),
            ] {
                assert!(download(&launched.be, lb) == download(&graphed.be, gb), "{name} {what} after 4 steps");
            }
        }
        let (la, ga) = (launched.g_ema.as_ref().unwrap(), graphed.g_ema.as_ref().unwrap());
        let (la, ga) = (download(&launched.be, &la.value), download(&graphed.be, &ga.value));
        assert!(la == ga, "G's average after 4 steps");
        assert!(la != download(&launched.be, &launched.model.g.store.value), "the average is G");
        let s = graphed.be.graph_stats().unwrap();
        assert!(s.recorded_steps == 2 && s.replayed_steps == 2 && s.diverged_steps == 0, "{s:?}");
        assert!(s.patched_kernels > 0, "Adam's bias corrections were never patched: {s:?}");
    }
}

/// `trainer`'s model with D as WGAN-GP's critic (no batch norm; with `layer_norm`, layer norm
/// in its place), taking WGAN-GP steps.
fn wgan_trainer<B: Backend>(be: B, small: bool, seed: u64, layer_norm: bool) -> GanTrainer<B> {
    let (g, d, batch) = if small {
        (narrowed(&GENERATOR_28, 8), narrowed(&DISCRIMINATOR_28, 4), 4)
    } else {
        (GENERATOR_28.to_vec(), DISCRIMINATOR_28.to_vec(), 64)
    };
    let d = critic_specs(&d, layer_norm);
    let model = Dcgan::from_specs(&be, &g, &d, 28, batch, seed).unwrap();
    let exchange = Box::new(SoloExchange::new(plan_buckets(&model, 1 << 20)));
    let cfg = StepConfig { seed, rank: 0, world: 1, overlap_steps: true };
    let mut t = GanTrainer::new(be, model, exchange, cfg, Timeline::disabled()).unwrap();
    t.use_wgan_gp(1, 10.0).unwrap();
    t
}

#[test]
fn step_flops_match_bench_torch() {
    // bench-torch.py --flops-only: 17.078 GFLOP at batch 64, 68.31 at 256 (28x28 model).
    for (batch, gflop) in [(64, 17.078), (256, 68.31)] {
        let model = Dcgan::new(&Cpu, 28, Widths::DCGAN, batch, 1, Discriminator::Dcgan).unwrap();
        let got = 2.0 * dcgan_train::train::bench::step_macs(&model) as f64 / 1e9;
        assert!((got - gflop).abs() < 1e-3, "batch {batch}: {got} GFLOP, bench-torch.py says {gflop}");
    }
}
