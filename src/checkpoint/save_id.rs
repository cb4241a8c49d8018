//! The id every file of one checkpoint save records, so that files of different saves (one
//! copied in from another step or run) are not loaded together as one checkpoint.

use anyhow::{Result, bail};
use std::collections::HashMap;
use std::path::Path;

/// The metadata key that holds the save's id.
pub const KEY: &str = "checkpoint_id";

/// A new save's id: random, since two saves of one step (a checkpoint written again) must
/// differ too.
pub fn fresh() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Whether the files of checkpoint `dir` (name, metadata) come from one save; a checkpoint
/// written before saves had ids has none in any file and passes.
pub fn check_one_save(dir: &Path, files: &[(&str, &HashMap<String, String>)]) -> Result<()> {
    let Some((first, id)) = files.iter().find_map(|(name, m)| Some((*name, m.get(KEY)?))) else { return Ok(()) };
    if let Some((other, _)) = files.iter().find(|(_, m)| m.get(KEY) != Some(id)) {
        bail!(
            "{}: {other} and {first} come from different saves (a file copied in from another checkpoint?): put back the checkpoint's own {other}, or pass another checkpoint",
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_other_saves_are_named_and_files_without_ids_pass() {
        let with = |id: &str| HashMap::from([(KEY.to_string(), id.to_string())]);
        let (a, b, none) = (with("a"), with("b"), HashMap::new());
        let dir = Path::new("ck");
        assert!(check_one_save(dir, &[("G", &a), ("D", &a), ("optimizer", &a)]).is_ok());
        assert!(check_one_save(dir, &[("G", &none), ("D", &none)]).is_ok(), "an older checkpoint");
        let e = check_one_save(dir, &[("G", &a), ("D", &b), ("optimizer", &a)]).unwrap_err().to_string();
        assert!(e.contains("D and G come from different saves"), "{e}");
        let e = check_one_save(dir, &[("G", &none), ("D", &a)]).unwrap_err().to_string();
        assert!(e.contains("G and D come from different saves"), "{e}");
        assert_ne!(fresh(), fresh());
    }
}
