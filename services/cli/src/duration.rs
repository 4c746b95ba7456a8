//! Durations on the command line: `90`, `90s`, `1500ms`, `5m`, `2h`, `1d` (bare numbers are seconds).

use std::time::Duration;

/// Parses a duration flag.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (for example 30, 30s, 500ms, 5m, 2h)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` (use ms, s, m, h or d)"
            ));
        }
    };
    Duration::try_from_secs_f64(n * scale).map_err(|e| format!("`{s}`: {e}"))
}

/// The wire form.
pub(crate) fn to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("0.5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse("5 parsecs").is_err());
        assert!(parse("").is_err());
        assert!(parse("-3").is_err());
    }
}
