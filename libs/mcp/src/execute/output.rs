//! A finished run as the model reads it: exit status, and each stream as the head it
//! streamed, a marker naming the dropped bytes, and the tail the executor kept.

use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;

use crate::tools::{
    LimitExceededOutput, NetworkDestinationOutput, RunCommandOutput, RunInfoOutput,
    RunLimitsOutput, SessionStateOutput, StreamOutput,
};

/// Fills `out` from the final event and the streamed heads.
pub(super) fn finish(out: &mut RunCommandOutput, x: pb::Exited, stdout: &[u8], stderr: &[u8]) {
    let (status, code, detail) = status_words(x.status);
    out.status = status.to_owned();
    out.exit_code = code;
    out.detail = detail;
    out.stdout = stream_output(stdout, x.stdout);
    out.stderr = stream_output(stderr, x.stderr);
    let usage = x.usage.unwrap_or_default();
    out.wall_time_ms = millis(usage.wall_time);
    out.cpu_time_ms = millis(usage.user_cpu_time) + millis(usage.system_cpu_time);
    out.peak_memory_bytes = if usage.peak_memory_bytes > 0 {
        usage.peak_memory_bytes
    } else {
        usage.peak_rss_bytes
    };
    out.oom_killed = usage.oom_killed;
    out.session = x.session.map(|s| SessionStateOutput {
        cwd: s.cwd,
        env: s.env.into_iter().collect(),
    });
    out.limit_exceeded = x.limit_exceeded.map(|l| LimitExceededOutput {
        resource: l.resource,
        limit: l.limit,
        message: l.message,
    });
    out.network = x
        .network
        .into_iter()
        .map(|d| NetworkDestinationOutput {
            decision: match common::Tier::try_from(d.tier) {
                Ok(common::Tier::Auto) => "auto",
                Ok(common::Tier::Ask) => "ask",
                Ok(common::Tier::Deny) => "deny",
                _ => "",
            }
            .to_owned(),
            host: d.host,
            port: d.port,
            connections: d.connections,
            refused: d.refused,
            bytes_sent: d.bytes_sent,
            bytes_received: d.bytes_received,
            refusal: d.refusal,
            message: d.message,
        })
        .collect();
}

/// An exit status as the tools name it: `exited` (with the code), `signaled`, `timed_out`,
/// `cancelled`, `spawn_failed`, or `unknown`; and its detail.
fn status_words(s: Option<common::ExitStatus>) -> (&'static str, Option<i32>, String) {
    use common::exit_status::Status as S;
    match s.and_then(|s| s.status) {
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
    }
}

/// The limits a run got, from its `Started` event.
pub(super) fn limits_output(l: common::RunLimits) -> RunLimitsOutput {
    RunLimitsOutput {
        enforced: l.enforced,
        memory_bytes: l.memory_bytes,
        pids: l.pids,
        cpu_millicores: l.cpu_millicores,
        cpu_seconds: l.cpu_seconds,
        tmpfs_bytes: l.tmpfs_bytes,
    }
}

fn millis(d: Option<prost_types::Duration>) -> u64 {
    d.map_or(0, |d| {
        (d.seconds.max(0) as u64) * 1000 + (d.nanos.max(0) as u64) / 1_000_000
    })
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

/// What the model reads when a command went on in the background: its id and how to come
/// back to it.
pub(super) fn background_text(o: &RunCommandOutput) -> String {
    format!(
        "started in the background as run {id} (pid {pid}, in {cwd}); it goes on after this call. \
         Read its output with read_run_output {{\"run_id\": \"{id}\", \"offset\": 0}} (then from \
         `next_offset`), see it with list_runs, stop it with stop_run {{\"run_id\": \"{id}\"}}.",
        id = o.run_id,
        pid = o.pid,
        cwd = if o.cwd.is_empty() { "." } else { &o.cwd },
    )
}

/// A run the executor holds, as the model reads it.
pub(super) fn run_info(r: pb::RunInfo) -> RunInfoOutput {
    let (status, exit_code, detail) = status_words(r.status);
    RunInfoOutput {
        state: match pb::RunState::try_from(r.state) {
            Ok(pb::RunState::Running) => "running",
            Ok(pb::RunState::Exited) => "exited",
            Ok(pb::RunState::Lost) => "lost",
            _ => "unspecified",
        }
        .to_owned(),
        run_id: r.run_id,
        session_id: r.session_id,
        pid: r.pid,
        command: r.command,
        cwd: r.cwd,
        background: r.background,
        started_at: r.started_at.map(|t| t.to_string()).unwrap_or_default(),
        finished_at: r.finished_at.map(|t| t.to_string()).unwrap_or_default(),
        status: if r.state == pb::RunState::Running as i32 {
            String::new()
        } else {
            status.to_owned()
        },
        exit_code,
        detail,
        stdout_bytes: r.stdout_bytes,
        stderr_bytes: r.stderr_bytes,
    }
}

/// One line per run: id, state, how it ended, command.
pub(super) fn run_line(r: &RunInfoOutput) -> String {
    let how = match (r.state.as_str(), r.exit_code) {
        ("running", _) => format!("running, pid {}", r.pid),
        ("lost", _) => "lost (its executor stopped; how it ended is unknown)".to_owned(),
        (_, Some(c)) => format!("exited with {c}"),
        (_, None) if !r.detail.is_empty() => format!("{} ({})", r.status, r.detail),
        _ => r.status.clone(),
    };
    format!(
        "{} [{}] session {}, started {}, stdout {} B, stderr {} B: {}",
        r.run_id, how, r.session_id, r.started_at, r.stdout_bytes, r.stderr_bytes, r.command
    )
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
    // Why it died, in the words the model needs: which limit, how large.
    if let Some(l) = &o.limit_exceeded {
        text.push_str(&format!("\n{}", l.message));
    } else if o.oom_killed {
        text.push_str("\nthe kernel's OOM killer killed a process of the run");
    }
    // What the egress gate refused: the model should not retry those blindly.
    for d in o.network.iter().filter(|d| d.refused > 0) {
        text.push_str(&format!(
            "\nnetwork: {}:{} refused ({}): {}",
            d.host, d.port, d.refusal, d.message
        ));
    }
    if let Some(state) = &o.session {
        text.push_str(&format!(
            "\nthe session's working directory is now {}",
            state.cwd
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_killed_at_its_memory_limit_says_so_in_text_and_structure() {
        let exited = pb::Exited {
            status: Some(common::ExitStatus {
                status: Some(common::exit_status::Status::Signaled(common::Signaled {
                    signal: 9,
                    name: "SIGKILL".into(),
                    core_dumped: false,
                })),
            }),
            usage: Some(common::ResourceUsage {
                user_cpu_time: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000,
                }),
                system_cpu_time: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 250_000_000,
                }),
                peak_memory_bytes: 256 << 20,
                peak_rss_bytes: 200 << 20,
                oom_killed: true,
                ..Default::default()
            }),
            limit_exceeded: Some(common::LimitExceeded {
                resource: "memory".into(),
                limit: 256 << 20,
                message: "the run exceeded its 256 MiB memory limit and was killed by the kernel"
                    .into(),
            }),
            ..Default::default()
        };
        let mut out = RunCommandOutput::default();
        finish(&mut out, exited, b"", b"");
        assert!(out.oom_killed);
        assert_eq!(out.cpu_time_ms, 1750);
        assert_eq!(out.peak_memory_bytes, 256 << 20);
        let hit = out.limit_exceeded.as_ref().expect("the limit it hit");
        assert_eq!((hit.resource.as_str(), hit.limit), ("memory", 256 << 20));
        let text = run_text(&out);
        assert!(text.starts_with("killed by SIGKILL\n"), "{text}");
        assert!(
            text.contains("the run exceeded its 256 MiB memory limit"),
            "{text}"
        );
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(json["limit_exceeded"]["resource"], "memory");
        assert_eq!(json["oom_killed"], true);
    }

    #[test]
    fn a_run_without_a_cgroup_peak_reports_its_rss_and_no_limit() {
        let exited = pb::Exited {
            usage: Some(common::ResourceUsage {
                peak_rss_bytes: 3 << 20,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut out = RunCommandOutput::default();
        finish(&mut out, exited, b"", b"");
        assert_eq!(out.peak_memory_bytes, 3 << 20);
        assert!(!out.oom_killed && out.limit_exceeded.is_none());
        let json = serde_json::to_value(&out).unwrap();
        assert!(json.get("limit_exceeded").is_none(), "{json}");
        assert!(!run_text(&out).contains("memory"));
    }
}
