//! Byte sizes on the command line: `4B`, `1KiB`, `4MiB`, `1GiB` (binary units) or a plain number
//! of bytes; comma-separated lists for `--sizes`.

/// Parse one byte size: digits followed by an optional unit `B`, `KiB`, `MiB` or `GiB`
/// (case-insensitive, `K`/`M`/`G` and `KB`/`MB`/`GB` accepted as the same binary units).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!("'{s}' is not a size: write a number with an optional unit, e.g. 4B, 8KiB, 1MiB"));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        other => {
            return Err(format!("unknown unit '{other}' in '{s}': use B, KiB, MiB or GiB"));
        }
    };
    let n: usize = digits.parse().map_err(|_| format!("'{s}' is too large a size"))?;
    n.checked_mul(1usize << shift).ok_or_else(|| format!("'{s}' is too large a size"))
}

const GIB: f64 = (1u64 << 30) as f64;

/// The memory this host has available to a new allocation (MemAvailable in /proc/meminfo),
/// where the system says.
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

/// Parse a comma-separated list of sizes, e.g. `4B,1KiB,4MiB`.
pub fn parse_bytes_list(s: &str) -> Result<Vec<usize>, String> {
    let list: Vec<usize> = s.split(',').filter(|p| !p.trim().is_empty()).map(parse_bytes).collect::<Result<_, _>>()?;
    if list.is_empty() {
        return Err("empty list of sizes: write e.g. 4B,1KiB,4MiB".into());
    }
    Ok(list)
}

/// Format a byte count so that `parse_bytes` reads it back: the largest binary unit that divides
/// it exactly (`1048576` -> `1MiB`, `1536` -> `1536B`).
pub fn format_bytes(n: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (scale, unit) in UNITS {
        if n >= scale && n.is_multiple_of(scale) {
            return format!("{}{unit}", n / scale);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_bytes("4B"), Ok(4));
        assert_eq!(parse_bytes("4"), Ok(4));
        assert_eq!(parse_bytes("8KiB"), Ok(8192));
        assert_eq!(parse_bytes("8k"), Ok(8192));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("0B"), Ok(0));
    }

    #[test]
    fn rejects_malformed() {
        assert!(parse_bytes("KiB").unwrap_err().contains("not a size"));
        assert!(parse_bytes("4XB").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("1.5MiB").is_err());
        assert!(parse_bytes("-4").is_err());
        assert!(parse_bytes("99999999999999999999999").is_err());
        assert!(parse_bytes_list(",").is_err());
    }

    #[test]
    fn lists_and_round_trip() {
        assert_eq!(parse_bytes_list("4B,1KiB,4MiB"), Ok(vec![4, 1024, 4 << 20]));
        for n in [0, 4, 1000, 1024, 1536, 1 << 20, 3 << 20, 5 << 30] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n));
        }
        assert_eq!(format_bytes(1 << 20), "1MiB");
        assert_eq!(format_bytes(1536), "1536B");
    }
}
