//! `--resume`: a run goes on with its own options, read from its checkpoint, and only the
//! command line's options that a resume may change applied over them; so `--resume RUN` alone
//! continues it. Rank 0 finds the checkpoint (a run directory or one of its checkpoints) and
//! every rank learns the run's options from it before anything is built, the comm thread's
//! allreduce settings among them.

use super::config::resumed_options;
use super::job::Job;
use crate::checkpoint::{self, Progress};
use crate::comm::CommConfig;
use crate::record::TrainOptions;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where a resumed run continues from (rank 0, which reads and writes the run).
#[derive(Clone, Debug)]
pub struct ResumeFrom {
    /// The run directory, where the outputs go on.
    pub run: PathBuf,
    /// The checkpoint directory, intact (its digests checked).
    pub checkpoint: PathBuf,
}

/// What rank 0 tells every rank: the path given to `--resume` and the checkpoint's progress.
#[derive(Serialize, Deserialize)]
struct Shared {
    asked: PathBuf,
    progress: Progress,
}

/// The options this job trains with (the run's own on a resume, the same on every rank), and
/// on rank 0 the checkpoint it resumes from. `given`: the options the command line gave
/// explicitly, by field name. Collective: every failure goes through `Job::agree`.
pub fn settle(
    job: &mut Job,
    args: &TrainOptions,
    given: &BTreeSet<String>,
) -> Result<(TrainOptions, Option<ResumeFrom>)> {
    let found = job.agree(match (&args.checkpoints.resume, job.is_root()) {
        (Some(path), true) => find(path).map(Some),
        _ => Ok(None),
    })?;
    // Rank 0 decides whether this is a resume: every rank takes the same collectives below.
    let shared = found.as_ref().map(|(_, progress)| Shared {
        asked: args.checkpoints.resume.clone().expect("found with --resume"),
        progress: progress.clone(),
    });
    let bytes = job.comm.broadcast_bytes(0, serde_json::to_vec(&shared)?)?;
    let Some(shared) = serde_json::from_slice::<Option<Shared>>(&bytes)? else {
        let mut fresh = args.clone();
        fresh.checkpoints.resume = None;
        return Ok((fresh, None));
    };
    let resumed = job.agree(options_of_the_run(args, given, &shared, job.world.size))?;
    // The allreduce, its fragments and the wire are the run's: the comm thread was started
    // with the command line's.
    let cfg = job.agree(CommConfig::from_options(&resumed.comm))?;
    let comm = std::rc::Rc::get_mut(&mut job.comm).context("internal error: the comm handle is shared too early")?;
    comm.reconfigure(&cfg)?;
    Ok((resumed, found.map(|(from, _)| from)))
}

/// Rank 0: the checkpoint `path` names (saying why, when it is not the one `latest` names)
/// and its progress.
fn find(path: &Path) -> Result<(ResumeFrom, Progress)> {
    let found = checkpoint::locate(path, "--resume")?;
    let aside: Vec<String> = found
        .skipped
        .iter()
        .map(|d| checkpoint::set_aside(d).map(|a| a.display().to_string()))
        .collect::<Result<_>>()?;
    if let Some(fallback) = &found.fallback {
        let aside = match aside.is_empty() {
            true => String::new(),
            false => format!(
                " ({} set aside as {}, out of the checkpoints kept)",
                if aside.len() == 1 { "it is" } else { "they are" },
                aside.join(", ")
            ),
        };
        eprintln!("warning: {fallback}{aside}");
    }
    if let Some(note) = &found.undigested {
        eprintln!("warning: {note}");
    }
    let Some(run) = checkpoint::run_dir_of(&found.dir) else {
        bail!(
            "--resume {}: the checkpoint {} is not inside a run directory (RUN/checkpoints/step-N), where the run's outputs would go on: pass the run directory, or copy the checkpoint into one's checkpoints/",
            path.display(),
            found.dir.display()
        );
    };
    let progress = checkpoint::load_progress(&found.dir)?;
    Ok((ResumeFrom { run, checkpoint: found.dir }, progress))
}

/// The run's options with the command line's changes, if this job can continue the run.
fn options_of_the_run(
    args: &TrainOptions,
    given: &BTreeSet<String>,
    shared: &Shared,
    ranks: usize,
) -> Result<TrainOptions> {
    let (asked, p) = (shared.asked.display(), &shared.progress);
    if p.ranks != ranks {
        bail!(
            "the checkpoint in {asked} was written by {} ranks and this job has {ranks}: resume with mpiexec -n {} (the data order depends on the rank count)",
            p.ranks,
            p.ranks
        );
    }
    let mut resumed = resumed_options(args, given, &p.config, &format!("--resume {asked}"))?;
    resumed.checkpoints.resume = Some(shared.asked.clone());
    // Nothing left to run would still rewrite the run's summary, with no steps in it.
    if p.step >= resumed.max_steps.unwrap_or(u64::MAX) || p.epoch >= resumed.epoch_limit().unwrap_or(u64::MAX) {
        bail!(
            "--resume {asked}: the run has already done {} steps and {} of its epochs, and --max-steps {} with --epochs {} leaves none to run: raise --max-steps or --epochs to train further (the run is kept as it is)",
            p.step,
            p.epoch,
            resumed.max_steps.map_or("(none)".to_string(), |m| m.to_string()),
            resumed.epoch_limit().map_or("(none)".to_string(), |e| e.to_string())
        );
    }
    Ok(resumed)
}

/// The command that continues the run in `run` with `ranks` ranks, ready to paste: this
/// program as it was invoked, under `mpiexec -n N` for more than one rank.
pub fn resume_command(ranks: usize, run: &Path) -> String {
    let program = std::env::args_os().next().map_or("dcgan-train".into(), |p| p.to_string_lossy().to_string());
    let launcher = if ranks > 1 { format!("mpiexec -n {ranks} ") } else { String::new() };
    format!("{launcher}{} --resume {}", shell_word(&program), shell_word(&run.to_string_lossy()))
}

/// `s` as one word of a POSIX shell command line: as it is when nothing in it is special.
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !s.is_empty() && s.chars().all(plain) { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_paste_as_one_word() {
        assert_eq!(shell_word("runs/20250101-120000"), "runs/20250101-120000");
        assert_eq!(shell_word("my run"), "'my run'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
