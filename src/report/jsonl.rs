//! JSON Lines files (metrics.jsonl): one JSON object per line, each line written whole.

use anyhow::{Context, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes one record per line. Each record goes to the file in a single `write` call, so
/// `tail -f` and a crash both see whole lines, and nothing waits in a buffer.
pub struct JsonlWriter {
    file: File,
    path: PathBuf,
    /// Reused between records: serializing does not allocate once it has grown.
    line: Vec<u8>,
}

impl JsonlWriter {
    /// Creates the file, or truncates it: a new run starts a new file.
    pub fn create(path: &Path) -> Result<JsonlWriter> {
        Self::open(path, OpenOptions::new().write(true).create(true).truncate(true))
    }

    /// Opens the file to add records at its end (a resumed run continues its metrics).
    pub fn append(path: &Path) -> Result<JsonlWriter> {
        Self::open(path, OpenOptions::new().create(true).append(true))
    }

    fn open(path: &Path, options: &OpenOptions) -> Result<JsonlWriter> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file = options.open(path).with_context(|| format!("cannot open {} for writing", path.display()))?;
        Ok(JsonlWriter { file, path: path.to_path_buf(), line: Vec::with_capacity(512) })
    }

    /// Appends `record` as one line of JSON.
    pub fn write<T: Serialize>(&mut self, record: &T) -> Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record)
            .with_context(|| format!("cannot encode a record for {}", self.path.display()))?;
        self.line.push(b'\n');
        self.file.write_all(&self.line).with_context(|| format!("cannot write to {}", self.path.display()))
    }

    /// Forces the written records to disk (fsync): at the end of an epoch, not every step.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data().with_context(|| format!("cannot sync {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Step {
        step: u64,
        loss_d: f32,
        name: String,
    }

    #[test]
    fn lines_parse_back_and_create_truncates_and_append_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run").join("metrics.jsonl");
        let rec = |step| Step { step, loss_d: 0.25 * step as f32, name: format!("a \"quoted\"\nname {step}") };
        let mut w = JsonlWriter::create(&path).unwrap();
        for s in 0..3 {
            w.write(&rec(s)).unwrap();
        }
        w.sync().unwrap();
        // Readable while the writer is still open: nothing is held back.
        let read = || -> Vec<Step> {
            std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
        };
        assert_eq!(read(), vec![rec(0), rec(1), rec(2)]);
        drop(w);
        let mut w = JsonlWriter::append(&path).unwrap();
        w.write(&rec(3)).unwrap();
        assert_eq!(read(), vec![rec(0), rec(1), rec(2), rec(3)]);
        let mut w = JsonlWriter::create(&path).unwrap();
        w.write(&rec(9)).unwrap();
        assert_eq!(read(), vec![rec(9)]);
    }

    #[test]
    fn unwritable_path_names_it() {
        let msg = format!("{:#}", JsonlWriter::create(Path::new("/proc/no/such/metrics.jsonl")).err().unwrap());
        assert!(msg.contains("/proc/no/such"), "{msg}");
    }
}
