//! The memory this host has for a new allocation, so that a size that cannot fit is refused
//! with a line instead of aborting the process.

const GIB: f64 = (1u64 << 30) as f64;

/// MemAvailable in /proc/meminfo, where the system says.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// An error naming `what` when `need` bytes are more than this host has available (an
/// allocation that large aborts the process instead of failing).
pub fn ensure_fits_in_memory(need: u64, what: &str) -> anyhow::Result<()> {
    if let Some(have) = available_memory()
        && need > have
    {
        anyhow::bail!(
            "{what} needs about {:.1} GiB of memory and this host has {:.1} GiB available: use smaller sizes",
            need as f64 / GIB,
            have as f64 / GIB
        );
    }
    Ok(())
}
