//! The on-disk cache of compiled kernels: one file per family and architecture, named by a
//! hash of everything that goes into the compile (sources, generated header, options, NVRTC
//! version), so a changed kernel or compiler never loads a stale image. Written to a
//! temporary file and renamed, so ranks that compile at the same time cannot see half a file.

use super::Family;
use super::nvrtc::{self, Output, Target};
use anyhow::Result;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Where compiled kernels (and the emulator's library) are kept: `$DCGAN_KERNEL_CACHE`, empty
/// or "off" for no cache; unset, ~/.cache/dcgan-train/kernels (no cache without `$HOME`).
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os("DCGAN_KERNEL_CACHE") {
        Some(v) if v.is_empty() || v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("dcgan-train").join("kernels")),
    }
}

/// Hex digest of every input of the compile of `family` for `target`.
pub fn cache_key(family: Family, target: &Target, nvrtc_version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    let file = family.kernels();
    h.update(file.file.as_bytes());
    h.update([0]);
    h.update(file.source.as_bytes());
    for (name, text) in nvrtc::headers() {
        h.update([0]);
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
    }
    for o in nvrtc::options(target) {
        h.update([0]);
        h.update(o.as_bytes());
    }
    h.update(format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes());
    h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
}

fn cache_path(dir: &Path, family: Family, target: &Target, key: &str) -> PathBuf {
    let stem = family.kernels().file.trim_end_matches(".cu");
    let ext = match target.output {
        Output::Ptx => "ptx",
        Output::Cubin => "cubin",
    };
    dir.join(format!("{stem}-{}-{key}.{ext}", target.arch_flag()))
}

/// The compiled image of `family`: from the cache when present, otherwise compiled (and
/// stored, when the cache directory is writable: a read-only cache only costs the compile).
/// `refresh` ignores a cached image (used after a cached one failed to load).
pub fn load_or_compile(family: Family, target: &Target, refresh: bool) -> Result<Vec<u8>> {
    let dir = cache_dir();
    let path = match &dir {
        Some(d) => Some(cache_path(d, family, target, &cache_key(family, target, nvrtc::version()?))),
        None => None,
    };
    if let (Some(p), false) = (&path, refresh)
        && let Ok(bytes) = std::fs::read(p)
        && !bytes.is_empty()
    {
        return Ok(bytes);
    }
    let compiled = nvrtc::compile_family(family, target)?;
    if let (Some(d), Some(p)) = (&dir, &path) {
        let _ = store(d, p, &compiled.image);
    }
    Ok(compiled.image)
}

fn store(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tmp = path.with_extension(format!("tmp.{}.{nanos}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
