//! What every rank settles before training starts: the same options as rank 0, the same
//! data, and (with `--resume`) a checkpoint this job can continue.

use super::config::{RESUMABLE, first_difference, flags_beyond_defaults, training_config};
use super::job::Job;
use crate::checkpoint::{self, Checkpoint};
use crate::data::Dataset;
use crate::record::TrainOptions;
use anyhow::{Result, bail};

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
/// count, into collectives the others never reach.
pub fn same_data_everywhere(job: &Job, data: &Dataset) -> Result<()> {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same bytes give the same value in every process.
    let mut h = std::hash::DefaultHasher::new();
    data.images.hash(&mut h);
    let mine = format!("{} images of {}x{}, fingerprint {:016x}", data.count, data.height, data.width, h.finish());
    let root = job.comm.broadcast_bytes(0, mine.clone().into_bytes())?;
    if root != mine.as_bytes() {
        bail!(
            "rank {} on host {} loaded other training data than rank 0 ({mine} vs {}): give every host the same --data",
            job.world.rank,
            job.world.hostname,
            String::from_utf8_lossy(&root)
        );
    }
    Ok(())
}

/// On rank 0: the checkpoint to resume from, checked against this job.
pub fn load_resume(
    args: &TrainOptions,
    job: &Job,
    layouts: (&crate::nn::params::ParamLayout, &crate::nn::params::ParamLayout),
) -> Result<Checkpoint> {
    let dir = args.checkpoints.resume.as_ref().expect("called with --resume");
    // The run goes on writing in DIR: a checkpoint (or one of its files) is not a run.
    if dir.is_file() || dir.join("G.safetensors").is_file() {
        bail!(
            "--resume {}: pass the run's directory (the one holding checkpoints/ and metrics.jsonl), not a checkpoint",
            dir.display()
        );
    }
    // The progress first: a run started with other options (another --image-size, say) is
    // told which, rather than that its tensors do not fit.
    let ck_dir = checkpoint::resolve(dir)?;
    let p = &checkpoint::load_progress(&ck_dir)?;
    if p.ranks != job.world.size {
        bail!(
            "the checkpoint in {} was written by {} ranks and this job has {}: resume with mpiexec -n {} (the data order depends on the rank count)",
            dir.display(),
            p.ranks,
            job.world.size,
            p.ranks
        );
    }
    if let Some(diff) = first_difference(&training_config(args), &p.config, &RESUMABLE) {
        let flags = flags_beyond_defaults(&p.config);
        let flags = if flags.is_empty() { "none beyond the defaults".to_string() } else { flags };
        bail!(
            "--resume {}: the run was started with other options ({diff}, now vs then): resume with the options it was started with ({flags})",
            dir.display()
        );
    }
    // Nothing left to run would still rewrite the run's summary, with no steps in it.
    if p.step >= args.max_steps.unwrap_or(u64::MAX) || p.epoch >= args.epoch_limit().unwrap_or(u64::MAX) {
        bail!(
            "--resume {}: the run has already done {} steps and {} of its epochs, and --max-steps {} with --epochs {} leaves none to run: raise --max-steps or --epochs to train further (the run is kept as it is)",
            dir.display(),
            p.step,
            p.epoch,
            args.max_steps.map_or("(none)".to_string(), |m| m.to_string()),
            args.epoch_limit().map_or("(none)".to_string(), |e| e.to_string())
        );
    }
    checkpoint::load(&ck_dir, layouts)
}
