//! What the options mean once the number of ranks is known: batch sizes, the learning-rate
//! schedule, and the options every rank (and a resumed run) must agree on.

use crate::record::{LrScaling, TrainOptions};
use anyhow::{Result, bail};
use serde_json::Value;

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
        let global_batch = per_rank_batch * ranks;
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
const NOT_COMPARED: [&str; 10] = [
    "threads",
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

/// Options that may change when resuming (how long to train, how often to save).
pub const RESUMABLE: [&str; 4] = ["epochs", "max_steps", "checkpoint_every", "keep_checkpoints"];

/// The flags a run with `config` (a checkpoint's `training_config`) was started with beyond
/// the defaults, less those a resume may change: what to repeat with `--resume`.
pub fn flags_beyond_defaults(config: &Value) -> String {
    let defaults = training_config(&TrainOptions::default());
    let Value::Object(given) = config else {
        return String::new();
    };
    let mut keys: Vec<&String> = given.keys().filter(|k| !RESUMABLE.contains(&k.as_str())).collect();
    keys.sort();
    let mut flags = Vec::new();
    for k in keys {
        let v = &given[k];
        if Some(v) == defaults.get(k) {
            continue;
        }
        let flag = format!("--{}", k.replace('_', "-"));
        match v {
            Value::Bool(true) => flags.push(flag),
            Value::Bool(false) | Value::Null => {}
            Value::String(s) if s.contains(char::is_whitespace) => flags.push(format!("{flag} '{s}'")),
            Value::String(s) => flags.push(format!("{flag} {s}")),
            other => flags.push(format!("{flag} {other}")),
        }
    }
    flags.join(" ")
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
}
