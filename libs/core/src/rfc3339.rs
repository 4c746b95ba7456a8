//! Times as clients read them in error metadata and messages: RFC 3339 in UTC, with as many
//! fraction digits as the time needs (none, 3, 6 or 9), the way the v1 timestamps print.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `t` as RFC 3339 UTC (`2026-01-02T03:04:05Z`, `2026-01-02T03:04:05.678Z`). A time before
/// the epoch prints as a negative offset from it, which no toolgate time is.
pub fn rfc3339(t: SystemTime) -> String {
    let (secs, nanos) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d: Duration = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - n)
            }
        }
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    let fraction = match nanos {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1_000 == 0 => format!(".{:06}", n / 1_000),
        n => format!(".{n:09}"),
    };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The civil date of `days` since 1970-01-01 (Howard Hinnant's days-to-civil algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> String {
        rfc3339(UNIX_EPOCH + Duration::new(secs, nanos))
    }

    #[test]
    fn prints_the_fraction_the_time_needs() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(at(1_767_323_045, 678_000_000), "2026-01-02T03:04:05.678Z");
        assert_eq!(
            at(1_767_323_045, 678_901_000),
            "2026-01-02T03:04:05.678901Z"
        );
        assert_eq!(at(1_767_323_045, 1), "2026-01-02T03:04:05.000000001Z");
        // A leap day and the end of a century year that is a leap year.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(at(978_307_199, 0), "2000-12-31T23:59:59Z");
    }

    #[test]
    fn a_time_before_the_epoch_counts_back() {
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_millis(1500)),
            "1969-12-31T23:59:58.500Z"
        );
    }
}
