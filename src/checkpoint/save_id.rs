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
/// written before saves had ids has none in any file and passes. The save is the one most
/// files name (a tie goes to the first file's), so that the error names the file copied in,
/// not a good one beside it.
pub fn check_one_save(dir: &Path, files: &[(&str, &HashMap<String, String>)]) -> Result<()> {
    let id_of = |m: &HashMap<String, String>| m.get(KEY).cloned();
    let count = |id: &Option<String>| files.iter().filter(|(_, m)| id_of(m) == *id).count();
    let mut save = files.first().map(|(_, m)| id_of(m)).unwrap_or_default();
    for (_, m) in files {
        if count(&id_of(m)) > count(&save) {
            save = id_of(m);
        }
    }
    let names = |of_save: bool| -> Vec<&str> {
        files.iter().filter(|(_, m)| (id_of(m) == save) == of_save).map(|(n, _)| *n).collect()
    };
    let (same, other) = (names(true), names(false));
    if !other.is_empty() {
        let others = list(&other);
        bail!(
            "{}: {others} {} not from the save of {} (a file copied in from another checkpoint?): put back the checkpoint's own {others}, or pass another checkpoint",
            dir.display(),
            if other.len() == 1 { "is" } else { "are" },
            list(&same)
        );
    }
    Ok(())
}

/// `a`, `a and b`, `a, b and c`.
fn list(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
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
        assert!(e.contains("D is not from the save of G and optimizer"), "{e}");
        let e = check_one_save(dir, &[("G", &b), ("D", &a), ("optimizer", &a)]).unwrap_err().to_string();
        assert!(e.contains("G is not from the save of D and optimizer"), "the first file copied in: {e}");
        let files = [("optimizer", &a), ("G", &a), ("D", &b), ("G_ema", &b)];
        let e = check_one_save(dir, &files).unwrap_err().to_string();
        assert!(e.contains("D and G_ema are not from the save of optimizer and G"), "a tie trusts the first: {e}");
        assert!(e.contains("put back the checkpoint's own D and G_ema"), "{e}");
        let e = check_one_save(dir, &[("G", &none), ("D", &a)]).unwrap_err().to_string();
        assert!(e.contains("D is not from the save of G"), "a tie goes to the first file: {e}");
        assert_ne!(fresh(), fresh());
    }
}
