//! What a run writes (rank 0 only): the run directory, metrics.jsonl, sample grids,
//! checkpoints. A new run never overwrites one that can be continued; a resumed run continues
//! its own; a lock keeps two runs from sharing a directory.

use super::resume::ResumeFrom;
use crate::checkpoint::best::Best;
use crate::checkpoint::{self, Checkpoint};
use crate::nn::params::ParamLayout;
use crate::record::{EpochRecord, StepRecord, StoppedRecord, Summary, TrainOptions};
use crate::report::jsonl::JsonlWriter;
use crate::report::png::{Grid, write_grid, written_here};
use crate::report::tensorboard::{EventWriter, numbers_of};
use anyhow::{Context, Result, bail};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

pub struct Outputs {
    pub dir: PathBuf,
    metrics: JsonlWriter,
    /// The TensorBoard events of this invocation (None: `--no-tensorboard`).
    events: Option<EventWriter>,
    /// The first step whose epoch events this invocation writes (see `begin`).
    events_from: u64,
    /// A resumed run not yet readied (`begin`).
    pending: Option<Resumed>,
    /// Which checkpoints each save leaves (`--keep-checkpoints`).
    keep: checkpoint::Keep,
    /// The epoch a resumed run entered part-way, and the milliseconds its steps before the
    /// resume took (their lines' `ms`): that epoch's line counts them (see `begin`).
    resumed_epoch_ms: Option<(u64, f64)>,
    /// Held while the run goes on, so that no other run takes the directory meanwhile.
    _lock: File,
}

/// Where a resumed run goes on from (`Outputs::begin`).
struct Resumed {
    step: u64,
    epoch: u64,
    tensorboard: bool,
    /// The checkpoint it goes on from, and the broken ones beside it to set aside.
    checkpoint: PathBuf,
    broken: Vec<PathBuf>,
}

/// The default run directory, `runs/<local time>`, made here and this run's alone: a run
/// started in the same second as another takes `runs/<local time>-2` (-3, ...).
pub fn default_dir() -> Result<PathBuf> {
    claim_dir(Path::new("runs"), &chrono::Local::now().format("%Y%m%d-%H%M%S").to_string())
}

/// Makes `parent/stem`, or the first of `stem-2`, `stem-3`, ... not taken. `create_dir` fails
/// on a name that exists, so of two processes asking at once each gets its own directory
/// (checking first and creating after would let both see the same name free).
pub fn claim_dir(parent: &Path, stem: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    for n in 1..=1000 {
        let dir = parent.join(if n == 1 { stem.to_string() } else { format!("{stem}-{n}") });
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create the run directory {}", dir.display())),
        }
    }
    bail!("{}: {stem} to {stem}-1000 are all taken: pass --out DIR", parent.display())
}

/// The lock of the run in `dir`, taken; an error when another run holds it.
fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(".lock");
    let f = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(TryLockError::WouldBlock) => bail!(
            "{} is in use by a run that is still going (it holds {}): choose another --out, or wait for it",
            dir.display(),
            path.display()
        ),
        Err(TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Whether the run in `dir` wrote a checkpoint (a `checkpoints/step-*` directory).
/// Whether `path` is a run's records: empty (a run that failed before its first step), or
/// a first line that is one of its JSON records (an object with a "type").
fn metrics_of_a_run(path: &Path) -> bool {
    let Some(first) = first_line(path) else { return false };
    first.trim().is_empty()
        || serde_json::from_str::<serde_json::Value>(&first).is_ok_and(|v| v.get("type").is_some_and(|t| t.is_string()))
}

/// The first line of file `path`, where it can be read (the rest need not be text).
fn first_line(path: &Path) -> Option<String> {
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(File::open(path).ok()?), &mut first).ok()?;
    Some(first)
}

fn has_checkpoint(dir: &Path) -> bool {
    let entries = std::fs::read_dir(dir.join("checkpoints")).into_iter().flatten().flatten();
    entries.map(|e| e.file_name()).any(|n| n.to_string_lossy().starts_with("step-"))
}

/// Set the broken checkpoints `broken` aside, then those after `from`, which becomes the run's
/// latest; each said in a note.
fn set_aside_all(broken: &[PathBuf], from: &Path, replaced: Option<&Path>) -> Result<()> {
    for dir in broken {
        let aside = checkpoint::set_aside(dir, "broken")?;
        eprintln!(
            "note: the broken checkpoint {} is set aside as {}, out of the checkpoints kept",
            dir.display(),
            aside.display()
        );
    }
    let later = checkpoint::go_on_from(from)?;
    if !later.is_empty() {
        let names: Vec<String> = later.iter().map(|p| p.display().to_string()).collect();
        let records = replaced.map(|p| format!(", and the records after it kept in {}", p.display()));
        eprintln!(
            "note: {} is older than the run's last checkpoint: the {} after it {} set aside as {}, out of the checkpoints kept{} (the run goes on from here; to take that continuation up again, rename one back and resume from it)",
            from.display(),
            if later.len() == 1 { "one" } else { "ones" },
            if later.len() == 1 { "is" } else { "are" },
            names.join(", "),
            records.unwrap_or_default()
        );
    }
    Ok(())
}

/// The file a resume keeps the records it replaces in.
const REPLACED: &str = "metrics.replaced.jsonl";

/// Keeps the lines of metrics.jsonl that a resume at `step` replaces (the records after its
/// checkpoint, and a line a crash left torn) in the run's `metrics.replaced.jsonl`, after a
/// line saying which resume replaced them: a continuation a resume from an older checkpoint
/// leaves behind keeps its record. Appended and synced (with the directory) before
/// metrics.jsonl is rewritten, so a crash between the two leaves a line in
/// both files rather than in neither. Returns the file, where there was anything to keep.
fn keep_replaced(dir: &Path, step: u64, lines: &[&str]) -> Result<Option<PathBuf>> {
    if lines.is_empty() {
        return Ok(None);
    }
    let path = dir.join(REPLACED);
    let header = serde_json::json!({"type": "replaced", "by_resume_at_step": step, "lines": lines.len()});
    let text: String =
        std::iter::once(header.to_string()).chain(lines.iter().map(|l| l.to_string())).map(|l| l + "\n").collect();
    let context = || format!("cannot keep the replaced records in {}", path.display());
    let earlier = match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        read => read.with_context(context)?,
    };
    // A resume retried after one that failed before its rewrite replaces the same lines
    // (a resumed run's own lines differ, in their times at least): they are kept once.
    if !earlier.ends_with(text.as_bytes()) {
        append_whole(&path, &earlier, text).with_context(context)?;
    }
    // The file's entry too is on disk (the failed try may not have got this far).
    crate::report::sync_dir(dir).with_context(context)?;
    Ok(Some(path))
}

/// Appends `text` to file `path`, which held `earlier`, and syncs it; a failed append is cut
/// back off, so that no half record stays for the next append to run into.
fn append_whole(path: &Path, earlier: &[u8], text: String) -> std::io::Result<()> {
    // A line a crash cut short here ends before the header, which starts a line of its own.
    let torn = earlier.last().is_some_and(|b| *b != b'\n');
    let text = if torn { format!("\n{text}") } else { text };
    let mut f = std::fs::OpenOptions::new().append(true).create(true).open(path)?;
    let written = std::io::Write::write_all(&mut f, text.as_bytes()).and_then(|_| f.sync_all());
    if written.is_err() {
        let _ = f.set_len(earlier.len() as u64);
    }
    written
}

/// Whether `path` is a file a resume kept replaced records in (its first line says so).
fn kept_replaced_records(path: &Path) -> bool {
    first_line(path)
        .and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .is_some_and(|v| v["type"] == "replaced")
}

impl Outputs {
    /// A fresh run directory, whose checkpoints are kept as `keep` says. One that holds a
    /// checkpoint is refused; one whose run ended before its first checkpoint is not: nothing
    /// there can be continued, so this run starts over in it.
    pub fn create(dir: &Path, keep: checkpoint::Keep, tensorboard: bool) -> Result<Outputs> {
        let earlier = dir.join("metrics.jsonl").exists();
        // Checkpoints alone (the records gone, or a checkpoint copied in) are a run that can
        // be continued: this run's first save would prune them.
        if has_checkpoint(dir) {
            bail!(
                "{} already holds a run ({}checkpoints/): choose another --out, continue it with --resume {}, or move it away",
                dir.display(),
                if earlier { "metrics.jsonl, " } else { "" },
                dir.display()
            );
        }
        if earlier && !metrics_of_a_run(&dir.join("metrics.jsonl")) {
            bail!(
                "{} holds a metrics.jsonl this program did not write: choose another --out, or move the file away",
                dir.display()
            );
        }
        std::fs::create_dir_all(dir.join("samples"))
            .with_context(|| format!("cannot create --out {}", dir.display()))?;
        let lock = lock(dir)?;
        if earlier {
            eprintln!(
                "{}: the run there ended before its first checkpoint; starting over in it (its metrics.jsonl and samples/ are replaced)",
                dir.display()
            );
            // Its grids (those that carry the mark: another PNG put there stays), its
            // TensorBoard events and the records its resumes replaced go with its metrics.
            let files = |d: &Path| std::fs::read_dir(d).into_iter().flatten().flatten().map(|e| e.path());
            let grids =
                files(&dir.join("samples")).filter(|p| p.extension().is_some_and(|x| x == "png") && written_here(p));
            let events = files(dir)
                .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents.")));
            let replaced = Some(dir.join(REPLACED)).filter(|p| kept_replaced_records(p));
            for old in grids.chain(events).chain(replaced) {
                std::fs::remove_file(&old).with_context(|| format!("cannot remove {}", old.display()))?;
            }
        }
        let metrics = JsonlWriter::create(&dir.join("metrics.jsonl"))?;
        let events = tensorboard.then(|| EventWriter::create(dir)).transpose()?;
        Ok(Outputs {
            dir: dir.to_path_buf(),
            metrics,
            events,
            events_from: 0,
            pending: None,
            keep,
            resumed_epoch_ms: None,
            _lock: lock,
        })
    }

    /// The run of `from`, to continue after its checkpoint at `step` completed steps and
    /// `epoch` completed epochs: only locked and opened here, so that a resume refused before
    /// its first step changes nothing; `begin` readies it.
    pub fn resume(
        from: &ResumeFrom,
        step: u64,
        epoch: u64,
        keep: checkpoint::Keep,
        tensorboard: bool,
    ) -> Result<Outputs> {
        let dir = &from.run;
        let lock = lock(dir)?;
        let metrics = JsonlWriter::append(&dir.join("metrics.jsonl"))?;
        let (checkpoint, broken) = (from.checkpoint.clone(), from.broken.clone());
        let pending = Some(Resumed { step, epoch, tensorboard, checkpoint, broken });
        Ok(Outputs {
            dir: dir.to_path_buf(),
            metrics,
            events: None,
            events_from: 0,
            pending,
            keep,
            resumed_epoch_ms: None,
            _lock: lock,
        })
    }

    /// Ready a resumed run to write: broken checkpoints and any after the one it goes on from
    /// are set aside and `latest` names that one; the records the interrupted run wrote after
    /// it give way (the resumed run writes them again, with the same values), also where it is
    /// an older one than the run's last (a stop after it is no longer the run's), and are kept
    /// in `metrics.replaced.jsonl`; its
    /// TensorBoard events go to a file of its own that starts with a restart. Returns the
    /// epoch lines it keeps (none for a new run), whose sample quality summary.json lists.
    pub fn begin(&mut self) -> Result<Vec<EpochRecord>> {
        let Some(Resumed { step, epoch, tensorboard, checkpoint, broken }) = self.pending.take() else {
            return Ok(Vec::new());
        };
        let path = self.dir.join("metrics.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let parsed = text.lines().map(|l| (l, serde_json::from_str::<serde_json::Value>(l).ok()));
        let (kept, dropped): (Vec<_>, Vec<_>) = parsed.partition(|(_, v)| match v {
            Some(v) if v["type"] == "step" => v["step"].as_u64().is_some_and(|s| s <= step),
            Some(v) if v["type"] == "epoch" => v["epoch"].as_u64().is_some_and(|e| e < epoch),
            Some(v) if v["type"] == "stopped" => v["step"].as_u64().is_some_and(|s| s <= step),
            Some(_) => true,
            None => false,
        });
        let ms_in_epoch = kept
            .iter()
            .filter_map(|(_, v)| v.as_ref().filter(|v| v["type"] == "step" && v["epoch"] == epoch))
            .filter_map(|v| v["ms"].as_f64())
            .sum();
        let lines: Vec<&str> = dropped.iter().map(|(l, _)| *l).collect();
        let replaced = keep_replaced(&self.dir, step, &lines)?;
        set_aside_all(&broken, &checkpoint, replaced.as_deref())?;
        self.resumed_epoch_ms = Some((epoch, ms_in_epoch));
        let earlier = kept
            .iter()
            .filter_map(|(_, v)| v.as_ref().filter(|v| v["type"] == "epoch"))
            .filter_map(|v| serde_json::from_value::<EpochRecord>(v.clone()).ok())
            .collect();
        let kept: String = kept.iter().map(|(l, _)| format!("{l}\n")).collect();
        crate::report::write_atomically(&path, |f| Ok(std::io::Write::write_all(f, kept.as_bytes())?))
            .with_context(|| format!("cannot rewrite {}", path.display()))?;
        // The file was replaced: append to the new one.
        self.metrics = JsonlWriter::append(&path)?;
        let samples = self.dir.join("samples");
        std::fs::create_dir_all(&samples).with_context(|| format!("cannot create {}", samples.display()))?;
        if tensorboard {
            let mut events = EventWriter::create(&self.dir)?;
            events.restart_at(step + 1)?;
            self.events = Some(events);
        }
        // An epoch the earlier run closed at the step resumed from (its checkpoint saved
        // before the epoch closed) is in the earlier event file: not written twice. One it
        // did not close is written at that step.
        let closed =
            dropped.iter().any(|(_, v)| v.as_ref().is_some_and(|v| v["type"] == "epoch" && v["epoch"] == epoch));
        self.events_from = if closed { step + 1 } else { step };
        Ok(earlier)
    }

    /// The milliseconds of `epoch`'s steps before the resume, once, where this run resumed
    /// part-way through it.
    pub fn earlier_part_of(&mut self, epoch: u64) -> f64 {
        match self.resumed_epoch_ms.take() {
            Some((e, ms)) if e == epoch => ms,
            _ => 0.0,
        }
    }

    /// A step's line, and its numbers as TensorBoard scalars `train/<field>`.
    pub fn step(&mut self, rec: &StepRecord) -> Result<()> {
        self.metrics.write(rec)?;
        if let Some(events) = self.events.as_mut() {
            events.scalars(rec.step, &numbers_of("train", &serde_json::to_value(rec)?, &["step", "epoch"]))?;
        }
        Ok(())
    }

    /// Why the run stopped, synced to disk at once.
    pub fn stopped(&mut self, rec: &StoppedRecord) -> Result<()> {
        self.metrics.write(rec)?;
        self.metrics.sync()
    }

    /// An epoch's line, synced; to TensorBoard its numbers as scalars `epoch/<field>` and its
    /// sample grid as the image `samples`, at `step`, the steps completed at its end.
    pub fn epoch(&mut self, rec: &EpochRecord, step: u64, grid: Grid) -> Result<()> {
        self.metrics.write(rec)?;
        self.metrics.sync()?;
        if let Some(events) = self.events.as_mut().filter(|_| step >= self.events_from) {
            events.scalars(step, &numbers_of("epoch", &serde_json::to_value(rec)?, &["epoch"]))?;
            events.image(step, "samples", grid.png, grid.width, grid.height)?;
        }
        Ok(())
    }

    /// `samples/<name>.png` from images `[64, side, side]`: its path, and the grid.
    pub fn grid(&self, name: &str, images: &[f32], side: usize) -> Result<(PathBuf, Grid)> {
        let path = self.dir.join("samples").join(format!("{name}.png"));
        let grid = write_grid(&path, images, images.len() / (side * side), side, side, 8)?;
        Ok((path, grid))
    }

    pub fn checkpoint(&mut self, layouts: (&ParamLayout, &ParamLayout), ck: &Checkpoint) -> Result<PathBuf> {
        self.metrics.sync()?;
        checkpoint::save(&self.dir, layouts, ck, self.keep)
    }

    /// Point `checkpoints/best` at `best`, and remove the checkpoint it named before where the
    /// run keeps it no more.
    pub fn mark_best(&mut self, best: &Best) -> Result<()> {
        let root = self.dir.join("checkpoints");
        checkpoint::best::supersede(&root, best)?;
        checkpoint::prune(&root, self.keep, &best.checkpoint);
        Ok(())
    }

    /// Markdown for TensorBoard's text tab under `tag`, at `step`.
    pub fn text(&mut self, step: u64, tag: &str, markdown: &str) -> Result<()> {
        self.events.as_mut().map_or(Ok(()), |e| e.text(step, tag, markdown))
    }

    pub fn summary(&self, summary: &Summary) -> Result<()> {
        let path = self.dir.join("summary.json");
        let text = serde_json::to_string_pretty(summary)? + "\n";
        crate::report::write_atomically(&path, |f| Ok(std::io::Write::write_all(f, text.as_bytes())?))
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// The run's command line and the options that decide what it computes, as Markdown: what
/// tells one run from another in TensorBoard's text tab.
pub fn options_markdown(args: &TrainOptions) -> String {
    let words: Vec<String> = std::env::args_os().map(|a| super::resume::shell_word(&a.to_string_lossy())).collect();
    let mut md = format!("`{}`\n\n| option | value |\n|---|---|\n", words.join(" "));
    if let serde_json::Value::Object(options) = crate::train::recorded_options::training_config(args) {
        for (k, v) in options {
            // A `|` would end the table's cell; JSON has no bare newline to break its row.
            md.push_str(&format!("| {} | {} |\n", k.replace('_', "-"), v.to_string().replace('|', "\\|")));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retried resume keeps the lines it replaces once, a torn last line stays apart from
    /// the next header, and every record read back is whole JSON.
    #[test]
    fn replaced_records_are_kept_once_and_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(REPLACED);
        let lines = [r#"{"type":"step","step":5}"#, r#"{"type":"step","step":6}"#];
        assert_eq!(keep_replaced(tmp.path(), 4, &[]).unwrap(), None, "nothing to keep");
        assert!(!path.exists());
        assert_eq!(keep_replaced(tmp.path(), 4, &lines).unwrap().as_deref(), Some(path.as_path()));
        let once = std::fs::read_to_string(&path).unwrap();
        keep_replaced(tmp.path(), 4, &lines).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), once, "the retry kept them again");
        assert!(kept_replaced_records(&path));
        let theirs = tmp.path().join("theirs.jsonl");
        std::fs::write(&theirs, "{\"type\":\"step\"}\n{\"type\":\"replaced\"}\n").unwrap();
        assert!(!kept_replaced_records(&theirs), "a file whose first line is no replaced header");
        // A crash cut the file's last line short; the next resume's header is a line of its own.
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, br#"{"type":"st"#).unwrap();
        keep_replaced(tmp.path(), 2, &lines[..1]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed: Vec<_> = text.lines().map(serde_json::from_str::<serde_json::Value>).collect();
        assert_eq!(parsed.iter().filter(|v| v.is_err()).count(), 1, "only the torn line: {text}");
        let headers: Vec<u64> = parsed
            .iter()
            .flatten()
            .filter(|v| v["type"] == "replaced")
            .map(|v| v["by_resume_at_step"].as_u64().unwrap())
            .collect();
        assert_eq!(headers, [4, 2], "{text}");
        assert_eq!(text.lines().count(), 3 + 1 + 2, "{text}");
    }

    /// An append the disk stops part-way (here a file-size limit, in a child process of its
    /// own, as the limit is the whole process's) leaves the file as it was.
    #[test]
    fn a_failed_append_is_cut_back_off() {
        const CHILD: &str = "DCGAN_TEST_APPEND_UNDER_LIMIT";
        let earlier = b"{\"type\":\"replaced\"}\n";
        if let Some(path) = std::env::var_os(CHILD) {
            let limit = libc::rlimit { rlim_cur: earlier.len() as u64 + 10, rlim_max: libc::RLIM_INFINITY };
            // SAFETY: plain calls; without SIG_IGN a write past the limit kills the process.
            unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0) };
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
            let written = append_whole(Path::new(&path), earlier, "x".repeat(100));
            assert!(written.is_err(), "the append passed the limit");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(REPLACED);
        std::fs::write(&path, earlier).unwrap();
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .arg("train::outputs::tests::a_failed_append_is_cut_back_off")
            .env(CHILD, &path)
            .output()
            .unwrap();
        assert!(child.status.success(), "{}", String::from_utf8_lossy(&child.stdout));
        assert!(String::from_utf8_lossy(&child.stdout).contains("1 passed"), "the child ran no test");
        assert_eq!(std::fs::read(&path).unwrap(), earlier, "a part of the failed append stayed");
    }

    #[test]
    fn runs_started_in_the_same_second_get_directories_of_their_own() {
        let tmp = tempfile::tempdir().unwrap();
        let first = claim_dir(tmp.path(), "20260101-120000").unwrap();
        let second = claim_dir(tmp.path(), "20260101-120000").unwrap();
        assert_eq!(first, tmp.path().join("20260101-120000"));
        assert_eq!(second, tmp.path().join("20260101-120000-2"));
        assert!(first.is_dir() && second.is_dir());
        // Many at once: every one gets a name of its own.
        let claimed: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| claim_dir(tmp.path(), "same").unwrap())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::HashSet<_> = claimed.iter().collect();
        assert_eq!(distinct.len(), 8, "{claimed:?}");
    }
}
