//! The step's order of work against finishing each update at its own step.

use super::*;
use crate::backend::cpu::Cpu;
use crate::model::dcgan::{DISCRIMINATOR_28, GENERATOR_28};
use crate::model::net::StageSpec;
use crate::report::trace::Trace;
use crate::train::ddp::exchange::{SoloExchange, plan_buckets};

/// The 28x28 architecture with its inner widths divided by 8 (fast; the same stages).
pub(crate) fn narrow(specs: &[StageSpec]) -> Vec<StageSpec> {
    let n = specs.len();
    let w = |c: usize, edge: bool| if edge { c } else { c / 8 };
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| StageSpec { c_in: w(s.c_in, i == 0 && s.c_in == 1), c_out: w(s.c_out, i == n - 1), ..*s })
        .collect()
}

/// A trainer whose every stage is a bucket of its own (1-byte buckets), so G's update
/// lands in three pieces.
fn trainer(overlap_steps: bool, timeline: Timeline) -> GanTrainer<Cpu> {
    let model = Dcgan::from_specs(&Cpu, &narrow(&GENERATOR_28), &narrow(&DISCRIMINATOR_28), 28, 4, 5).unwrap();
    let exchange = Box::new(SoloExchange::new(plan_buckets(&model, 1)));
    let cfg = StepConfig { seed: 5, rank: 0, world: 1, overlap_steps };
    GanTrainer::new(Cpu, model, exchange, cfg, timeline).unwrap()
}

fn train(t: &mut GanTrainer<Cpu>, steps: u64) -> Vec<f32> {
    for s in 0..steps {
        let images: Vec<f32> = (0..4 * 784).map(|i| ((i as u64 * 7919 + s * 31) % 200) as f32 / 100.0 - 1.0).collect();
        t.step(&images, 2e-4, 2e-4, false).unwrap();
    }
    t.finish_pending();
    let mut w = Vec::new();
    for net in [&t.model.g, &t.model.d] {
        let mut v = vec![0.0; net.store.value.len()];
        t.be.download(View::whole(&net.store.value), &mut v);
        w.extend(v);
    }
    w
}

/// Landing G's update stage by stage inside the next forward computes exactly what
/// finishing it at the end of its own step does; and it really is landed stage by stage:
/// G[2]'s Adam runs after G.1's forward.
#[test]
fn overtaking_lands_each_stage_before_it_runs_and_changes_no_result() {
    let mut overtaking = trainer(true, Timeline::new(Trace::enabled(0, 1024), 4));
    let mut at_step_end = trainer(false, Timeline::disabled());
    let (a, b) = (train(&mut overtaking, 4), train(&mut at_step_end, 4));
    let first_difference = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits());
    assert_eq!(first_difference, None, "weights differ (of {})", a.len());
    assert_ne!(a, train(&mut trainer(true, Timeline::disabled()), 3), "the steps must move the weights");

    let events: serde_json::Value =
        serde_json::from_slice(&[b"[".as_slice(), &overtaking.timeline.trace.to_json_events(), b"]"].concat()).unwrap();
    let order: Vec<(String, String)> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"]["step"] == 2)
        .map(|e| (e["cat"].as_str().unwrap().to_string(), e["name"].as_str().unwrap().to_string()))
        .collect();
    let at = |cat: &str, name: &str| {
        order.iter().position(|(c, n)| c == cat && n.starts_with(name)).unwrap_or_else(|| panic!("{cat} {name}"))
    };
    assert!(at("adam", "G[1]") < at("forward", "G.1 "));
    assert!(at("forward", "G.1 ") < at("adam", "G[2]"));
    assert!(at("adam", "G[2]") < at("forward", "G.2 "));
    assert!(at("forward", "G.2 ") < at("adam", "G[3]"));
}
