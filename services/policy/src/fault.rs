//! Crash points for fault tests, compiled into debug builds only: a release binary has none.
//!
//! `TOOLGATE_CRASH_AT=<point>[,<point>...]` makes the process abort (no unwinding, no answer,
//! no cleanup: what a SIGKILL or an OOM kill leaves behind) when it reaches a named point.
//! Points: `authorize.after_commit` (the decision is durable, the answer not yet sent).

/// Aborts the process when `point` is listed in `TOOLGATE_CRASH_AT`.
#[cfg(debug_assertions)]
pub(crate) fn crash_point(point: &str) {
    use std::sync::OnceLock;
    static POINTS: OnceLock<Vec<String>> = OnceLock::new();
    let points = POINTS.get_or_init(|| {
        std::env::var("TOOLGATE_CRASH_AT")
            .unwrap_or_default()
            .split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect()
    });
    if points.iter().any(|p| p == point) {
        eprintln!("toolgate-policy: crash point {point} reached (TOOLGATE_CRASH_AT); aborting");
        std::process::abort();
    }
}

/// Release builds carry no crash points.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn crash_point(_point: &str) {}
