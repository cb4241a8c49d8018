//! Byte sizes and durations as people write them (`4B`, `8KiB`, `1MiB`; `60s`, `500ms`, `5m`),
//! parsed by parse-size and humantime, and byte counts printed so that they parse back.

use std::time::Duration;

/// One byte size: a number with an optional unit `B`, `KiB`, `MiB` or `GiB` (case-insensitive;
/// `K`/`KB`, `M`/`MB`, `G`/`GB` are the same binary units, since buffers come in powers of two).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let parsed = parse_size::Config::new().with_binary().parse_size(s.trim());
    match parsed {
        Ok(n) => usize::try_from(n).map_err(|_| format!("'{s}' is too large a size")),
        Err(parse_size::Error::PosOverflow) => Err(format!("'{s}' is too large a size")),
        Err(_) => Err(format!(
            "'{s}' is not a size: write a number with an optional unit B, KiB, MiB or GiB, e.g. 4B, 8KiB, 1MiB"
        )),
    }
}

/// A byte count written so that `parse_bytes` reads it back: the largest binary unit that
/// divides it exactly (`1048576` -> `1MiB`, `1536` -> `1536B`).
pub fn format_bytes(n: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (scale, unit) in UNITS {
        if n >= scale && n.is_multiple_of(scale) {
            return format!("{}{unit}", n / scale);
        }
    }
    format!("{n}B")
}

/// A timeout: `60s`, `500ms`, `5m`, `1h`, or a plain number of seconds; `0` means never
/// (`Duration::MAX`).
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("'{s}' is longer than any run: use 0 for no timeout"))?,
        Ok(_) => return Err(format!("'{s}' is not a duration: write e.g. 60s, 500ms or 5m")),
        Err(_) => humantime::parse_duration(t).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => {
                format!("'{s}' is longer than any run: use 0 for no timeout")
            }
            _ => format!("'{s}' is not a duration ({e}): write e.g. 60s, 500ms or 5m"),
        })?,
    };
    Ok(if d.is_zero() { Duration::MAX } else { d })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_binary_units() {
        assert_eq!(parse_bytes("4B"), Ok(4));
        assert_eq!(parse_bytes("4"), Ok(4));
        assert_eq!(parse_bytes("8KiB"), Ok(8192));
        assert_eq!(parse_bytes("8k"), Ok(8192));
        assert_eq!(parse_bytes("8KB"), Ok(8192));
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse_bytes("0B"), Ok(0));
    }

    #[test]
    fn malformed_sizes_say_how_to_write_one() {
        assert!(parse_bytes("KiB").unwrap_err().contains("not a size"));
        assert!(parse_bytes("4XB").unwrap_err().contains("e.g. 4B, 8KiB"));
        assert!(parse_bytes("-4").is_err());
        assert!(parse_bytes("99999999999999999999999").unwrap_err().contains("too large"));
    }

    #[test]
    fn printed_sizes_parse_back() {
        for n in [0, 4, 1000, 1024, 1536, 1 << 20, 3 << 20, 5 << 30] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n));
        }
        assert_eq!(format_bytes(1 << 20), "1MiB");
        assert_eq!(format_bytes(1536), "1536B");
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_timeout("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout("5h"), Ok(Duration::from_secs(5 * 3600)));
        assert_eq!(parse_timeout("0"), Ok(Duration::MAX));
        assert_eq!(parse_timeout("0s"), Ok(Duration::MAX));
        assert!(parse_timeout("soon").unwrap_err().contains("e.g. 60s"));
        assert!(parse_timeout("-5").is_err());
        assert!(parse_timeout("1e30").unwrap_err().contains("use 0 for no timeout"));
        assert!(parse_timeout("99999999999999999999s").unwrap_err().contains("use 0 for no timeout"));
    }
}
