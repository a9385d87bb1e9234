//! Parsing of sizes given on the command line: `123`, `64K`, `512M`, `4G`, `1T`, `50%` (of RAM).

/// Parses a size in bytes; a percentage is of `physical_bytes`.
pub fn parse_size(text: &str, physical_bytes: u64) -> Result<u64, String> {
    let t = text.trim();
    let bad =
        || format!("invalid size {text:?}: use bytes, a K/M/G/T suffix, or a percentage like 50%");
    if let Some(pct) = t.strip_suffix('%') {
        let p: f64 = pct.trim().parse().map_err(|_| bad())?;
        if p.is_nan() || p <= 0.0 || p > 100.0 {
            return Err(format!(
                "invalid size {text:?}: a percentage must be in (0, 100]"
            ));
        }
        return Ok((physical_bytes as f64 * p / 100.0) as u64);
    }
    let upper = t.to_ascii_uppercase();
    let digits_end = upper
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(upper.len());
    let (number, suffix) = upper.split_at(digits_end);
    let n: f64 = number.parse().map_err(|_| bad())?;
    let shift = match suffix.trim().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(bad()),
    };
    let bytes = n * (1u64 << shift) as f64;
    if bytes.is_nan() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096", 0), Ok(4096));
        assert_eq!(parse_size("64M", 0), Ok(64 << 20));
        assert_eq!(parse_size("2GiB", 0), Ok(2 << 30));
        assert_eq!(parse_size("1.5k", 0), Ok(1536));
        assert_eq!(parse_size("50%", 1000), Ok(500));
        assert!(parse_size("lots", 0).is_err());
        assert!(parse_size("0", 0).is_err());
        assert!(parse_size("150%", 0).is_err());
        assert!(parse_size("12Q", 0).is_err());
    }
}
