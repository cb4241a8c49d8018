//! Run outputs: sample grids (PNG), JSON lines, the progress display, the Chrome trace.

pub mod jsonl;
pub mod png;
pub mod progress;
pub mod trace;

pub use jsonl::JsonlWriter;
pub use png::{read_png_gray, write_grid};
pub use progress::{Progress, ProgressMode};
pub use trace::{ArgValue, Trace, Track};

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Writes through `write` to a temporary file next to `path`, then renames it over `path`,
/// so a reader (or a crash) never sees half a file. Creates the parent directory.
/// Whether `write_atomically` could write `path` (for `flag`'s file), found out before the
/// hours of work whose result it is: the folder made, a file created and removed there.
pub fn check_writable(path: &Path, flag: &str) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!("{flag} {} is a directory: name a file", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().with_context(|| format!("{flag} {} has no file name", path.display()))?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag} {}: cannot create {}", path.display(), dir.display()))?;
    let probe = dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    std::fs::File::create(&probe)
        .with_context(|| format!("{flag} {}: cannot write in {}", path.display(), dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

pub fn write_atomically(path: &Path, write: impl FnOnce(&mut std::fs::File) -> Result<()>) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path.file_name().context("the path has no file name")?;
    let tmp = dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
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
