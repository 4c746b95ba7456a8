//! A finished run as the model reads it: exit status, and each stream as the head it
//! streamed, a marker naming the dropped bytes, and the tail the executor kept.

use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;

use crate::tools::{RunCommandOutput, StreamOutput};

/// Fills `out` from the final event and the streamed heads.
pub(super) fn finish(out: &mut RunCommandOutput, x: pb::Exited, stdout: &[u8], stderr: &[u8]) {
    use common::exit_status::Status as S;
    let (status, code, detail) = match x.status.and_then(|s| s.status) {
        Some(S::Exited(c)) => ("exited", Some(c), String::new()),
        Some(S::Signaled(s)) => ("signaled", None, s.name),
        Some(S::TimedOut(t)) => (
            "timed_out",
            None,
            t.timeout
                .map(|d| format!("after {}s", d.seconds))
                .unwrap_or_default(),
        ),
        Some(S::Cancelled(c)) => ("cancelled", None, c.cause),
        Some(S::SpawnFailed(f)) => ("spawn_failed", None, f.reason),
        Some(S::Completed(c)) => ("exited", Some(0), c.summary),
        None => ("unknown", None, String::new()),
    };
    out.status = status.to_owned();
    out.exit_code = code;
    out.detail = detail;
    out.stdout = stream_output(stdout, x.stdout);
    out.stderr = stream_output(stderr, x.stderr);
    out.wall_time_ms = x
        .usage
        .and_then(|u| u.wall_time)
        .map_or(0, |d| d.seconds as u64 * 1000 + d.nanos as u64 / 1_000_000);
}

/// Head, a marker naming the dropped bytes, tail.
fn stream_output(head: &[u8], summary: Option<pb::StreamSummary>) -> StreamOutput {
    let summary = summary.unwrap_or_default();
    let stats = summary.stats.unwrap_or_default();
    let mut text = String::from_utf8_lossy(head).into_owned();
    if stats.truncated {
        if !text.ends_with('\n') && !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("[… {} bytes dropped …]\n", stats.dropped_bytes));
        text.push_str(&String::from_utf8_lossy(&summary.tail));
    }
    StreamOutput {
        text,
        total_bytes: stats.total_bytes,
        dropped_bytes: stats.dropped_bytes,
        truncated: stats.truncated,
    }
}

pub(super) fn run_text(o: &RunCommandOutput) -> String {
    let head = match (o.status.as_str(), o.exit_code) {
        ("exited", Some(c)) => format!("exit code {c}"),
        ("signaled", _) => format!("killed by {}", o.detail),
        ("timed_out", _) => format!("timed out {}", o.detail),
        ("cancelled", _) => format!("cancelled ({})", o.detail),
        ("spawn_failed", _) => format!("could not start: {}", o.detail),
        (s, _) => s.to_owned(),
    };
    let mut text = head;
    for (name, s) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        if !s.text.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("--- {name} ---\n{}", s.text));
        }
    }
    text
}
