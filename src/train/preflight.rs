//! What every rank settles before training starts: the same options as rank 0 and the same
//! data (`resume.rs` settles the options of a resumed run before these).

use super::job::Job;
use super::recorded_options::{first_difference, training_config};
use crate::data::Dataset;
use crate::record::TrainOptions;
use anyhow::{Result, bail};
use std::path::Path;

/// Every rank runs with the options rank 0 runs with.
pub fn same_options_everywhere(job: &Job, args: &TrainOptions) -> Result<()> {
    // The algorithm per message size comes from --allreduce-tuning's file as each host reads
    // it: the same path may hold other rules there, and ranks that run different algorithms
    // on one bucket corrupt each other's data or wait forever.
    // --trace is gathered from every rank at the end: all trace or none (the path is only
    // rank 0's, and may change on resume, so it is not among the compared options).
    let mine = (training_config(args), job.comm.selection_description(), args.parallel.trace.is_some());
    // Both go in one broadcast: every rank takes part in it before any rank can fail.
    let root_bytes = job.comm.broadcast_bytes(0, serde_json::to_vec(&mine)?)?;
    let root: (serde_json::Value, String, bool) = serde_json::from_slice(&root_bytes)?;
    if let Some(diff) = first_difference(&mine.0, &root.0, &[]) {
        bail!(
            "rank {} was started with other options than rank 0 ({diff}): start every rank with the same command line",
            job.world.rank
        );
    }
    if mine.2 != root.2 {
        bail!(
            "rank {} was started {} --trace and rank 0 {}: start every rank with the same command line",
            job.world.rank,
            if mine.2 { "with" } else { "without" },
            if root.2 { "with it" } else { "without it" }
        );
    }
    if mine.1 != root.1 {
        bail!(
            "rank {} picks other allreduce algorithms than rank 0 ({} vs {}): give every host the same --allreduce-tuning file",
            job.world.rank,
            mine.1,
            root.1
        );
    }
    Ok(())
}

/// Every rank loaded the images rank 0 did. Each host reads its own copy of --data: another
/// version there trains on other images than the other ranks, silently, or with another
/// count, into collectives the others never reach. Returns the images' fingerprint.
pub fn same_data_everywhere(job: &Job, data: &Dataset) -> Result<String> {
    let fingerprint = data.fingerprint();
    let mine = format!("{} images of {}x{}, fingerprint {fingerprint}", data.count, data.height, data.width);
    let root = job.comm.broadcast_bytes(0, mine.clone().into_bytes())?;
    if root != mine.as_bytes() {
        bail!(
            "rank {} on host {} loaded other training data than rank 0 ({mine} vs {}): give every host the same --data",
            job.world.rank,
            job.world.hostname,
            String::from_utf8_lossy(&root)
        );
    }
    Ok(fingerprint)
}

/// A resumed run goes on with the images it trained on: `--data` may name another place
/// (the run moved, or is resumed from another directory), not other images. `recorded`: the
/// fingerprint its checkpoint keeps (None: the checkpoint predates the record).
pub fn same_data_as_the_run(resume: &Path, data: &str, recorded: Option<&str>, loaded: &str) -> Result<()> {
    match recorded {
        Some(run) if run != loaded => bail!(
            "--resume {}: the images --data {data} holds (fingerprint {loaded}) are not those the run trained on (fingerprint {run}): give --data the run's images, or start a new run with --out",
            resume.display()
        ),
        // Without a record, resume.rs let --data name only the run's own path.
        _ => Ok(()),
    }
}
