//! Run outputs: sample grids (PNG), JSON lines, the progress display, the Chrome trace, and
//! the report read back from that trace.

pub mod bar_pipe;
pub mod jsonl;
pub mod png;
pub mod progress;
pub mod tensorboard;
pub mod trace;
pub mod trace_read;
pub mod trace_report;

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Whether `write_atomically` could write `path` (for `flag`'s file), found out before the
/// hours of work whose result it is: the folder made, a file created and removed there.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!("{flag} {} is a directory: name a file", path.display());
    }
    let (dir, probe) = temporary_beside(path).with_context(|| format!("{flag} {}", path.display()))?;
    std::fs::File::create(&probe)
        .with_context(|| format!("{flag} {}: cannot write in {}", path.display(), dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The folder of `path` (made if missing) and the temporary file `write_atomically` writes
/// there before renaming it over `path`.
fn temporary_beside(path: &Path) -> Result<(&Path, std::path::PathBuf)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path.file_name().context("the path has no file name")?;
    Ok((dir, dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()))))
}

/// Syncs directory `dir`, so that a file created or renamed in it stays after a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes through `write` to a temporary file next to `path`, then renames it over `path`,
/// so a reader (or a crash) never sees half a file. Creates the parent directory.
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut std::fs::File) -> Result<()>) -> Result<()> {
    let (_, tmp) = temporary_beside(path)?;
    let result = (|| -> Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        write(&mut file)?;
        file.flush()?;
        // On disk before the rename, so a crash leaves the old file or the new one.
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
