//! Each tensor's digest in the safetensors metadata, written with the file and checked on
//! every read: safetensors checks only the header and the lengths, so a flipped byte in a
//! tensor's data would otherwise load, train on, and be copied into every later checkpoint.
//!
//! The `digests` key holds a JSON object from tensor name to the xxh3-64 of the tensor's raw
//! bytes (16 hex digits), plus `__metadata__` (a name no tensor may have) for the other
//! metadata (the training progress among it). Metadata is free-form, so PyTorch's
//! `safetensors.torch.load_file` reads these files as before.

use safetensors::tensor::SafeTensors;
use std::collections::{BTreeMap, HashMap};
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The metadata key of the digests.
pub const KEY: &str = "digests";
/// The digests' entry for the rest of the metadata.
const METADATA: &str = "__metadata__";

fn hex(d: u64) -> String {
    format!("{d:016x}")
}

/// The digest of every metadata entry but the digests themselves, in key order.
fn metadata_digest(meta: &HashMap<String, String>) -> String {
    let sorted: BTreeMap<&String, &String> = meta.iter().filter(|(k, _)| k.as_str() != KEY).collect();
    let mut h = Xxh3::new();
    for (k, v) in sorted {
        // Lengths first, so that no two different maps give the same byte stream.
        for s in [k, v] {
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
    }
    hex(h.digest())
}

/// Add the digests of `tensors` (name, raw bytes) and of the rest of `meta` to `meta`.
pub fn insert<'a>(meta: &mut HashMap<String, String>, tensors: impl Iterator<Item = (&'a str, &'a [u8])>) {
    let mut digests: BTreeMap<String, String> =
        tensors.map(|(name, bytes)| (name.to_string(), hex(xxh3_64(bytes)))).collect();
    digests.insert(METADATA.into(), metadata_digest(meta));
    meta.insert(KEY.into(), serde_json::to_string(&digests).expect("a map of strings serializes"));
}

/// What a file's digests say.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every tensor and the metadata match.
    Intact,
    /// No digests: written before checkpoints carried them.
    NoDigests,
    /// What does not match, e.g. "tensor main.3.weight does not match its digest".
    Corrupt(String),
}

/// Check every tensor of `st` and the metadata against the digests in `meta`.
pub fn verify(st: &SafeTensors<'_>, meta: &HashMap<String, String>) -> Verdict {
    let Some(text) = meta.get(KEY) else {
        return Verdict::NoDigests;
    };
    let Ok(mut digests) = serde_json::from_str::<BTreeMap<String, String>>(text) else {
        return Verdict::Corrupt("its digests are unreadable".into());
    };
    if digests.remove(METADATA).as_deref() != Some(metadata_digest(meta).as_str()) {
        return Verdict::Corrupt("its metadata does not match its digest".into());
    }
    let mut names = st.names();
    names.sort();
    for name in names {
        let Some(want) = digests.remove(name) else {
            return Verdict::Corrupt(format!("tensor {name} has no digest"));
        };
        let data = st.tensor(name).map(|t| xxh3_64(t.data()));
        if data.map(hex).ok().as_deref() != Some(want.as_str()) {
            return Verdict::Corrupt(format!("tensor {name} does not match its digest"));
        }
    }
    // A tensor that was written is gone (its name in the header damaged, say).
    match digests.into_keys().next() {
        Some(name) => Verdict::Corrupt(format!("tensor {name} is missing")),
        None => Verdict::Intact,
    }
}
