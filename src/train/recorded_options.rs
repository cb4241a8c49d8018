//! The options a run records: compared between the ranks at start, kept in every
//! checkpoint, and rebuilt from it on resume with the changes a resume may make.

use super::config::compressed_from;
use crate::record::TrainOptions;
use anyhow::{Result, bail};
use serde_json::Value;
use std::collections::BTreeSet;

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
    if let Some(found) = absolute_data_dir(args.data.as_deref()) {
        config[DATA_ABSOLUTE] = found.into();
    }
    config
}

/// A relative `--data DIR` made absolute in this process's working directory. The run keeps
/// `--data` as typed (each host of a cluster may resolve it in its own working directory) and
/// this beside it, for commands run from elsewhere (`evaluate` of a checkpoint).
fn absolute_data_dir(data: Option<&str>) -> Option<String> {
    match crate::data::DataSource::parse(data).ok()? {
        crate::data::DataSource::Dir(dir) if dir.is_relative() => {
            std::path::absolute(&dir).ok().map(|p| p.display().to_string())
        }
        _ => None,
    }
}

/// The key of the recorded config that holds the fingerprint of the images the run trains on
/// (`Dataset::fingerprint`): a resume may find them at another `--data`, not other images.
pub const DATA_FINGERPRINT: &str = "data_fingerprint";

/// The key that holds every rank's thread count (by rank): a resume on the run's ranks takes
/// them where `--threads` is not given, since the GEMMs split their sums by thread.
pub const THREADS_PER_RANK: &str = "threads_per_rank";

/// The threads rank `rank` ran with, as the run recorded them.
pub fn recorded_threads(config: &Value, rank: usize) -> Option<usize> {
    config.get(THREADS_PER_RANK)?.get(rank)?.as_u64().map(|t| t as usize)
}

/// The key that holds where rank 0 found a relative `--data` (an absolute path).
pub const DATA_ABSOLUTE: &str = "data_absolute";

/// The key that holds the fingerprint of the test split the run's sample quality is measured
/// against (`Labelled::fingerprint`), where it is measured: a resume measures against the same.
pub const TEST_DATA_FINGERPRINT: &str = "test_data_fingerprint";

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
    use crate::train::config::tests::options;

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
