//! Which checkpoint a path names, checked before anything is loaded from it: a checkpoint
//! directory (or one of its files) as it is, or a run directory (or its `checkpoints/`
//! folder) through `latest`. When `latest` names a checkpoint that is missing, incomplete or
//! fails its digests, the newest intact one beside it is taken instead, and a note says
//! which and why: a crash or a bad disk sector should cost the steps since that checkpoint,
//! not the run. A marker file (`checkpoints/best`, `checkpoints/latest`) names its checkpoint.

use super::digest::{self, Verdict};
use super::tensors;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The files of a checkpoint, G first (the one a generator on its own has).
pub const FILES: [&str; 3] = ["G.safetensors", "D.safetensors", "optimizer.safetensors"];

/// `--g-ema`'s averaged generator, in the checkpoints of runs that keep one.
pub const AVERAGED_G: &str = "G_ema.safetensors";

/// A checkpoint found, and what to say about it.
#[derive(Debug)]
pub struct Located {
    pub dir: PathBuf,
    /// Why `latest` was passed over for this one.
    pub fallback: Option<String>,
    /// Which of its files have no digests.
    pub undigested: Option<String>,
    /// The broken checkpoints passed over that are there (set aside on resume, so that they
    /// do not count among the checkpoints a run keeps).
    pub skipped: Vec<PathBuf>,
}

impl Located {
    /// The lines to show (as warnings).
    pub fn notes(&self) -> Vec<String> {
        self.fallback.iter().chain(&self.undigested).cloned().collect()
    }
}

/// A checkpoint file that does not match its digests.
#[derive(Debug)]
pub struct Corrupt {
    pub file: PathBuf,
    pub why: String,
}

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is corrupt: {}", self.file.display(), self.why)
    }
}

impl std::error::Error for Corrupt {}

/// The bytes of checkpoint file `path`, parsed and checked against its digests (a `Corrupt`
/// error if they differ), and whether it had digests at all.
pub fn read_checked(path: &Path) -> Result<(Vec<u8>, bool)> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read {}: the checkpoint is incomplete or unreadable", path.display()))?;
    checked(bytes, path, tensors::CHECKPOINT_FIX)
}

/// `bytes` read from `path`, parsed (errors ending in `fix`) and checked against their
/// digests, and whether they had digests at all.
pub fn checked(bytes: Vec<u8>, path: &Path, fix: &str) -> Result<(Vec<u8>, bool)> {
    let (st, meta) = tensors::parse_for(&bytes, &path.display().to_string(), fix)?;
    let digested = match digest::verify(&st, &meta) {
        Verdict::Intact => true,
        Verdict::NoDigests => false,
        Verdict::Corrupt(why) => return Err(Corrupt { file: path.to_path_buf(), why }.into()),
    };
    drop(st);
    Ok((bytes, digested))
}

/// What to do instead of using the corrupt checkpoint in `dir`: the newest intact one older
/// than it, if one is kept beside it.
pub fn instead_of(dir: &Path) -> String {
    let (Some(root), Some(key)) = (dir.parent(), dir.file_name().and_then(|n| order_key(&n.to_string_lossy()))) else {
        return "restore it from a copy, or start the run again".into();
    };
    let older = checkpoint_names(root)
        .into_iter()
        .filter(|(k, _)| *k < key)
        .find(|(_, n)| fault(&root.join(n), true).0.is_none());
    match older {
        Some((_, n)) => format!("use the older checkpoint {}, which is intact", root.join(n).display()),
        None => "no older checkpoint beside it is intact: restore it from a copy, or start the run again".into(),
    }
}

/// Find the checkpoint `path` names; `flag` names the path in errors (`--resume`).
pub fn locate(path: &Path, flag: &str) -> Result<Located> {
    if let Some(dir) = checkpoint_dir(path) {
        return checked_as_given(dir);
    }
    let marker = path.file_name().is_some_and(|n| n == super::best::MARKER || n == "latest");
    if marker && path.is_file() {
        return checked_as_given(super::best::target_of(path)?);
    }
    for root in [path.join("checkpoints"), path.to_path_buf()] {
        if root.join("latest").is_file() || !checkpoint_names(&root).is_empty() {
            return newest_intact(&root, path, flag);
        }
    }
    if !path.exists() {
        bail!(
            "{flag} {} does not exist: pass a run directory (the --out of an earlier run) or one of its checkpoints (RUN/checkpoints/step-N)",
            path.display()
        );
    }
    bail!(
        "{flag} {}: it holds no checkpoint (no G.safetensors, no checkpoints/latest): pass a run directory this program wrote, or one of its checkpoints",
        path.display()
    )
}

/// Move the checkpoint `dir` out of the run's checkpoints (to `<name>.<why>`, a name that is
/// no checkpoint's: `broken`, or `abandoned` for one a resume from an older checkpoint left
/// behind) rather than delete it: kept for a look, it no longer counts among the newest
/// checkpoints a run keeps, which would otherwise remove an intact one before it.
pub fn set_aside(dir: &Path, why: &str) -> Result<PathBuf> {
    let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let aside = std::iter::once(format!("{name}.{why}"))
        .chain((2..).map(|k| format!("{name}.{why}{k}")))
        .map(|n| dir.with_file_name(n))
        .find(|p| !p.exists())
        .expect("an unused name");
    std::fs::rename(dir, &aside).with_context(|| {
        format!(
            "cannot set the {why} checkpoint {} aside as {}: move it out of checkpoints/ yourself",
            dir.display(),
            aside.display()
        )
    })?;
    Ok(aside)
}

/// The run directory a checkpoint directory belongs to (`RUN/checkpoints/step-N`), if it
/// sits in one.
pub fn run_dir_of(dir: &Path) -> Option<PathBuf> {
    let root = dir.parent()?;
    if root.file_name()? != "checkpoints" {
        return None;
    }
    let run = root.parent()?;
    Some(if run.as_os_str().is_empty() { PathBuf::from(".") } else { run.to_path_buf() })
}

/// The checkpoint directory `path` is, or holds one of the files of.
fn checkpoint_dir(path: &Path) -> Option<PathBuf> {
    if path.join(FILES[0]).is_file() {
        return Some(path.to_path_buf());
    }
    path.parent().filter(|d| path.is_file() && d.join(FILES[0]).is_file()).map(Path::to_path_buf)
}

/// A checkpoint named directly: whatever of its files are there must pass their digests (G
/// alone is a generator on its own, which `sample` draws from).
fn checked_as_given(dir: PathBuf) -> Result<Located> {
    let mut undigested = Vec::new();
    for f in FILES {
        let path = dir.join(f);
        if !path.exists() {
            continue;
        }
        match read_checked(&path) {
            Ok((_, true)) => {}
            Ok((_, false)) => undigested.push(f),
            Err(e) if e.downcast_ref::<Corrupt>().is_some() => bail!("{e}: {}", instead_of(&dir)),
            Err(e) => return Err(e),
        }
    }
    let undigested = undigested_note(&dir, &undigested);
    Ok(Located { dir, fallback: None, undigested, skipped: Vec::new() })
}

/// The checkpoint `latest` in `root` names, or the newest intact one beside it.
fn newest_intact(root: &Path, asked: &Path, flag: &str) -> Result<Located> {
    let latest = std::fs::read_to_string(root.join("latest")).ok().map(|s| s.trim().to_string());
    let mut names: Vec<String> = checkpoint_names(root).into_iter().map(|(_, n)| n).collect();
    if let Some(l) = &latest {
        names.retain(|n| n != l);
        names.insert(0, l.clone());
    }
    let mut faults = Vec::new();
    for name in names {
        let dir = root.join(&name);
        let (fault, undigested) = fault(&dir, true);
        if let Some(why) = fault {
            faults.push((name, why));
            continue;
        }
        let fallback = first_fault_of_latest(root, &latest, &faults)
            .map(|why| format!("{why}: using {}, the newest intact checkpoint", dir.display()));
        let skipped = faults.iter().map(|(n, _)| root.join(n)).filter(|d| d.is_dir()).collect();
        let undigested = undigested_note(&dir, &undigested);
        return Ok(Located { dir, fallback, undigested, skipped });
    }
    let what = first_fault_of_latest(root, &latest, &faults).unwrap_or_else(|| format!("{} is empty", root.display()));
    let others = faults.len().saturating_sub(latest.is_some() as usize);
    let others = match others {
        0 => String::new(),
        1 => "; the 1 other checkpoint is not intact either".into(),
        n => format!("; the {n} other checkpoints are not intact either"),
    };
    bail!(
        "{flag} {}: no intact checkpoint: {what}{others}: restore a checkpoint from a copy, or start the run again with another --out",
        asked.display()
    )
}

/// Why `latest` was not used: it is missing, or what is wrong with the checkpoint it names.
fn first_fault_of_latest(root: &Path, latest: &Option<String>, faults: &[(String, String)]) -> Option<String> {
    let path = root.join("latest");
    match latest {
        None => Some(format!("{} is missing", path.display())),
        Some(l) => faults.iter().find(|(n, _)| n == l).map(|(n, why)| format!("{} names {n}, {why}", path.display())),
    }
}

/// Why the checkpoint in `dir` cannot be used (a clause after its name: "which has no
/// D.safetensors"), or None; and its files that have no digests. `whole`: every file must be
/// there (a run's checkpoint), else G alone will do.
fn fault(dir: &Path, whole: bool) -> (Option<String>, Vec<&'static str>) {
    if !dir.is_dir() {
        return (Some("which does not exist".into()), Vec::new());
    }
    let mut undigested = Vec::new();
    for f in FILES.into_iter().chain([AVERAGED_G]) {
        let path = dir.join(f);
        if !path.is_file() {
            if (whole && f != AVERAGED_G) || f == FILES[0] {
                return (Some(format!("which has no {f} (it is incomplete)")), undigested);
            }
            continue;
        }
        match read_checked(&path) {
            Ok((_, true)) => {}
            Ok((_, false)) => undigested.push(f),
            Err(e) => {
                let why = match e.downcast_ref::<Corrupt>() {
                    Some(c) => format!("whose {f} is corrupt ({})", c.why),
                    None => format!("whose {f} cannot be read as a checkpoint file"),
                };
                return (Some(why), undigested);
            }
        }
    }
    (None, undigested)
}

/// The warning for a checkpoint written before checkpoints carried digests.
fn undigested_note(dir: &Path, files: &[&str]) -> Option<String> {
    if files.is_empty() {
        return None;
    }
    Some(format!(
        "{} has no digests in {} (written before checkpoints carried them): loaded without checking it for corruption",
        dir.display(),
        files.join(", ")
    ))
}

/// The order of a checkpoint's name, `step-N` or `step-N.K`: (N, K) as numbers.
pub(super) fn order_key(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("step-")?;
    let (step, k) = rest.split_once('.').unwrap_or((rest, "1"));
    Some((step.parse().ok()?, k.parse().ok()?))
}

/// The checkpoints (`step-...` directories) in `root`, newest first.
pub(super) fn checkpoint_names(root: &Path) -> Vec<((u64, u64), String)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            Some((order_key(&n)?, n))
        })
        .collect();
    v.sort_by(|a, b| b.cmp(a));
    v
}
