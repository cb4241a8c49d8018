//! Micro-batches on one rank: keeping G's forwards and recomputing them train the same, and
//! what each allocates is what the memory plan says.

use super::*;
use crate::backend::cpu::{Cpu, allocated};
use crate::model::dcgan::{DISCRIMINATOR_28, GENERATOR_28};
use crate::model::net::plan_net;
use crate::train::ddp::exchange::{SoloExchange, plan_buckets};
use crate::train::step::StepConfig;
use crate::train::step::tests::narrow;
use crate::train::timeline::Timeline;

const BATCH: usize = 8;

/// A narrow 28x28 trainer whose networks are built for `batch` images.
fn built_for(batch: usize) -> GanTrainer<Cpu> {
    let model = Dcgan::from_specs(&Cpu, &narrow(&GENERATOR_28), &narrow(&DISCRIMINATOR_28), 28, batch, 5).unwrap();
    let exchange = Box::new(SoloExchange::new(plan_buckets(&model, 1 << 20)));
    let cfg = StepConfig { seed: 5, rank: 0, world: 1, overlap_steps: true };
    GanTrainer::new(Cpu, model, exchange, cfg, Timeline::disabled()).unwrap()
}

/// A narrow 28x28 trainer for BATCH images a step in `m` micro-batches (m = 1: none).
fn trainer(m: usize, recompute: bool) -> GanTrainer<Cpu> {
    let mut t = built_for(BATCH / m);
    if m > 1 {
        t.use_micro_batches(m, recompute).unwrap();
    }
    t
}

/// After `steps` steps: [G values, G running statistics, D values, D running statistics,
/// Adam's moments of both] and G's batch count, and the last step's losses.
fn train(t: &mut GanTrainer<Cpu>, steps: u64) -> (Vec<Vec<f32>>, u64, String) {
    let mut last = String::new();
    for s in 0..steps {
        let images: Vec<f32> =
            (0..BATCH * 784).map(|i| ((i as u64 * 7919 + s * 31) % 200) as f32 / 100.0 - 1.0).collect();
        last = format!("{:?}", t.step(&images, 2e-4, 2e-4, false).unwrap().losses);
    }
    t.finish_pending();
    let mut tensors = Vec::new();
    for net in [&t.model.g, &t.model.d] {
        let s = &net.store;
        for buf in [&s.value, &s.state, &s.m, &s.v] {
            tensors.push(crate::train::ddp::sync::download(&t.be, buf));
        }
    }
    (tensors, t.model.g.store.bn_batches_tracked, last)
}

/// G's forward computed again from the same weights and noise is the forward kept: the
/// weights, moments, running statistics and losses agree to the bit, and G's running
/// statistics moved once per micro-batch, not twice.
#[test]
fn recomputing_g_forwards_trains_what_keeping_them_trains() {
    let kept = train(&mut trainer(4, false), 3);
    let recomputed = train(&mut trainer(4, true), 3);
    assert_eq!(kept, recomputed);
    assert_eq!(kept.1, 3 * 4, "G's batches: 4 micro-batches a step, counted once each");
    // The micro-batches are a different computation from one batch (batch norm over 2 images,
    // not 8): the comparison above would hide nothing.
    let whole = train(&mut trainer(1, false), 3);
    assert_ne!(kept.0[0], whole.0[0]);
}

/// Keeping G's forwards allocates M of `plan_net`'s saved floats; recomputing, none.
#[test]
fn g_forwards_kept_take_what_the_plan_says() {
    let specs = narrow(&GENERATOR_28);
    let saved = plan_net(&specs, BATCH / 4, (specs[0].c_in, 1, 1)).unwrap().saved_floats;
    let [mut keep, mut recompute] = [built_for(BATCH / 4), built_for(BATCH / 4)];
    let before = allocated::floats();
    keep.use_micro_batches(4, false).unwrap();
    let with_forwards = allocated::floats() - before;
    let before = allocated::floats();
    recompute.use_micro_batches(4, true).unwrap();
    let without = allocated::floats() - before;
    assert_eq!(with_forwards - without, 4 * saved);
}

/// `--deferred-bn`: after one step, G's first batch norm (whose inputs are the same images of
/// the same noise however the batch is split) has the running statistics of one batch of 8,
/// to f32 rounding; its micro-batches undeferred move them four times, far from it.
#[test]
fn deferred_batch_norm_moves_the_running_statistics_as_one_batch_does() {
    let first_bn = |mut t: GanTrainer<Cpu>| {
        let state = train(&mut t, 1).0[1].clone();
        let channels = narrow(&GENERATOR_28)[0].c_out;
        state[..2 * channels].to_vec()
    };
    let whole = first_bn(trainer(1, false));
    let mut deferred = trainer(4, false);
    deferred.model.g.defer_bn();
    deferred.model.d.defer_bn();
    let (deferred, undeferred) = (first_bn(deferred), first_bn(trainer(4, false)));
    let distance = |a: &[f32]| a.iter().zip(&whole).fold(0.0f32, |m, (x, y)| m.max((x - y).abs() / y.abs().max(1e-3)));
    assert!(distance(&deferred) < 1e-5, "deferred: {}", distance(&deferred));
    assert!(distance(&undeferred) > 1e-2, "undeferred: {}", distance(&undeferred));
}
