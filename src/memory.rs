//! Memory as the system sees it: what this host has (in all, and for a new allocation, so that
//! a size that cannot fit is refused with a line instead of aborting the process, and `info`
//! can say it), and what this process holds now and has held at most.

const GIB: f64 = (1u64 << 30) as f64;

/// The value of `key` (in kB) in a /proc file of `key: value kB` lines, in bytes.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let info = std::fs::read_to_string(path).ok()?;
    let line = info.lines().find(|l| l.strip_prefix(key).is_some_and(|rest| rest.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// MemAvailable in /proc/meminfo, where the system says.
pub fn available_memory() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemAvailable")
}

/// MemTotal in /proc/meminfo: the host's memory, where the system says.
pub fn total_memory() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemTotal")
}

/// The host's memory as `info` shows it: "23.4 GiB, 21.0 GiB available".
pub fn describe_host_memory() -> String {
    match (total_memory(), available_memory()) {
        (Some(t), Some(a)) => format!("{:.1} GiB, {:.1} GiB available", t as f64 / GIB, a as f64 / GIB),
        (Some(t), None) => format!("{:.1} GiB", t as f64 / GIB),
        _ => "memory unknown (no /proc/meminfo)".to_string(),
    }
}

/// This process's resident memory now (VmRSS), where the system says.
pub fn resident_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmRSS")
}

/// The most resident memory this process has held (VmHWM), where the system says.
pub fn peak_resident_bytes() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_memory_holds_what_is_available() {
        let (Some(total), Some(available)) = (total_memory(), available_memory()) else {
            assert!(!std::path::Path::new("/proc/meminfo").exists(), "/proc/meminfo is there but unread");
            return;
        };
        assert!(available > 0 && available <= total, "{available} of {total}");
        let shown = describe_host_memory();
        assert!(shown.ends_with(" GiB available") && shown.contains(" GiB, "), "{shown}");
    }
}
