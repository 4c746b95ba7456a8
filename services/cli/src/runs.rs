//! `toolgate runs`: the background runs an executor holds, listed, read (or followed) and
//! stopped through `ProcessService`.

use std::io::Write;

use clap::Subcommand;
use serde_json::{Value, json};
use toolgate_contracts::common::v1::{self as common, exit_status::Status};
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_core::Reason;
use toolgate_core::display::escape;

use crate::client::{self, AuthChannel, CallError, call_error};
use crate::render;

/// Arguments of `toolgate runs`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The executor endpoint: the one holding the runs (`Started.executor` names it).
    #[arg(
        long,
        global = true,
        env = "TOOLGATE_EXECUTOR",
        default_value = client::DEFAULT_EXECUTOR
    )]
    executor: String,
    #[command(flatten)]
    token: client::TokenArgs,
    /// Only this session's runs (`list`), or refuse a run of another session (`logs`,
    /// `stop`); default: `TOOLGATE_SESSION`, else every session of the caller.
    #[arg(long, global = true, env = "TOOLGATE_SESSION")]
    session: Option<String>,
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, Subcommand)]
enum Op {
    /// List the runs, oldest first: run id, session, state, pid, start, exit, command.
    List {
        /// Also runs that ended and are still retained.
        #[arg(short, long)]
        all: bool,
        /// Print a JSON object (`runs`) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a run's output (stdout, or stderr with --stderr) on stdout: from --offset to what
    /// is retained now, or with --follow live to the run's end. Bytes the executor did not
    /// keep (between a stream's head cap and its tail) are reported on stderr and skipped.
    Logs {
        /// The run (from `toolgate run --background` or `runs list`).
        run_id: String,
        /// Follow the run: retained output, then live output until it ends; its exit status
        /// is printed on stderr.
        #[arg(short, long)]
        follow: bool,
        /// Start at this byte offset of the stream.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// The run's stderr instead of its stdout.
        #[arg(long)]
        stderr: bool,
    },
    /// Stop a run: SIGTERM to every process of it (SIGKILL after the executor's grace
    /// period), or SIGKILL at once with --kill. A run that already ended answers its final
    /// state.
    Stop {
        /// The run.
        run_id: String,
        /// SIGKILL at once.
        #[arg(long)]
        kill: bool,
        /// Print the run as a JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `toolgate runs` command.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let channel = client::connect("executor", &args.executor, &args.token).await?;
    let mut client = ProcessServiceClient::new(channel);
    let session = args.session.filter(|s| !s.is_empty());
    match args.op {
        Op::List { all, json } => {
            let runs = client
                .list_runs(pb::ListRunsRequest {
                    session_id: session.unwrap_or_default(),
                    include_finished: all,
                })
                .await
                .map_err(call_error)?
                .into_inner()
                .runs;
            let mut out = std::io::stdout().lock();
            if json {
                let v = json!({"runs": runs.iter().map(run_json).collect::<Vec<_>>()});
                writeln!(out, "{}", render::safe_json(&v))?;
            } else {
                out.write_all(table(&runs).as_bytes())?;
            }
            out.flush()?;
        }
        Op::Logs {
            run_id,
            follow,
            offset,
            stderr,
        } => {
            if let Some(s) = &session {
                in_session(&mut client, &run_id, s).await?;
            }
            let stream = if stderr {
                pb::Stream::Stderr
            } else {
                pb::Stream::Stdout
            };
            if follow {
                follow_run(&mut client, &run_id, stream, offset).await?;
            } else {
                read_retained(&mut client, &run_id, stream, offset).await?;
            }
        }
        Op::Stop { run_id, kill, json } => {
            if let Some(s) = &session {
                in_session(&mut client, &run_id, s).await?;
            }
            let signal = if kill {
                pb::RunSignal::Kill
            } else {
                pb::RunSignal::Term
            };
            let run = client
                .signal_run(pb::SignalRunRequest {
                    run_id: run_id.clone(),
                    signal: signal as i32,
                })
                .await
                .map_err(call_error)?
                .into_inner()
                .run
                .unwrap_or_default();
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", render::safe_json(&run_json(&run)))?;
            } else {
                let id = escape(&run_id);
                match pb::RunState::try_from(run.state) {
                    Ok(pb::RunState::Running) if kill => {
                        writeln!(out, "run {id}: SIGKILL sent")?;
                    }
                    Ok(pb::RunState::Running) => writeln!(
                        out,
                        "run {id}: SIGTERM sent; SIGKILL follows after the executor's grace period"
                    )?,
                    Ok(pb::RunState::Lost) => writeln!(
                        out,
                        "run {id}: lost (the executor that held it stopped; its outcome is unknown)"
                    )?,
                    _ => writeln!(
                        out,
                        "run {id}: {}",
                        render::exit_status(run.status.as_ref())
                    )?,
                }
            }
            out.flush()?;
        }
    }
    Ok(())
}

/// Refuses, before acting, a run that is not one of `session`'s on this executor.
async fn in_session(
    client: &mut ProcessServiceClient<AuthChannel>,
    run_id: &str,
    session: &str,
) -> anyhow::Result<()> {
    let runs = client
        .list_runs(pb::ListRunsRequest {
            session_id: session.to_owned(),
            include_finished: true,
        })
        .await
        .map_err(call_error)?
        .into_inner()
        .runs;
    anyhow::ensure!(
        runs.iter().any(|r| r.run_id == run_id),
        "run {} is not a run of session {} on this executor (`toolgate runs list --all --session {}` lists them; `--session ''` takes any of yours)",
        escape(run_id),
        escape(session),
        escape(session),
    );
    Ok(())
}

/// `ReadRunOutput` from `offset` until the stream's retained end: the data on stdout, each
/// gap (bytes not retained) on stderr.
async fn read_retained(
    client: &mut ProcessServiceClient<AuthChannel>,
    run_id: &str,
    stream: pb::Stream,
    mut offset: u64,
) -> anyhow::Result<()> {
    let read = |offset: u64, max_bytes: u64| pb::ReadRunOutputRequest {
        run_id: run_id.to_owned(),
        stream: stream as i32,
        offset,
        max_bytes,
    };
    loop {
        let r = match client.read_run_output(read(offset, 0)).await {
            Ok(r) => r.into_inner(),
            Err(status) => {
                let err = CallError::new(status);
                if err.reason != Reason::OutputNotRetained.as_str() {
                    return Err(err.into());
                }
                // An offset inside a gap: go on at the next retained range, which a read at
                // the stream's start lists.
                let Some(next) = next_retained(client, read(0, 1), offset).await else {
                    return Err(err.into());
                };
                gap(offset, next);
                offset = next;
                continue;
            }
        };
        write_out(&r.data)?;
        let end = r.offset + r.data.len() as u64;
        if r.next_offset > end {
            gap(end, r.next_offset);
        }
        let stalled = r.data.is_empty() && r.next_offset <= offset;
        if r.eof || stalled || r.next_offset >= r.total_bytes {
            return Ok(());
        }
        offset = r.next_offset;
    }
}

/// The start of the first retained range after `offset`, from a one-byte read (`probe`).
async fn next_retained(
    client: &mut ProcessServiceClient<AuthChannel>,
    probe: pb::ReadRunOutputRequest,
    offset: u64,
) -> Option<u64> {
    let r = client.read_run_output(probe).await.ok()?.into_inner();
    r.retained
        .iter()
        .map(|range| range.start)
        .filter(|start| *start > offset)
        .min()
}

/// `AttachRun` from `offset`: `stream`'s bytes on stdout as they come, gaps on stderr, and the
/// run's end on stderr.
async fn follow_run(
    client: &mut ProcessServiceClient<AuthChannel>,
    run_id: &str,
    stream: pb::Stream,
    offset: u64,
) -> anyhow::Result<()> {
    use pb::run_response::Event;
    let (stdout_offset, stderr_offset) = match stream {
        pb::Stream::Stderr => (0, offset),
        _ => (offset, 0),
    };
    let mut events = client
        .attach_run(pb::AttachRunRequest {
            run_id: run_id.to_owned(),
            stdout_offset,
            stderr_offset,
        })
        .await
        .map_err(call_error)?
        .into_inner();
    let mut shown = Shown { next: offset };
    while let Some(m) = events.message().await.map_err(call_error)? {
        match m.event.and_then(|e| e.event) {
            Some(Event::Output(c)) if c.stream == stream as i32 => shown.put(c.offset, &c.data)?,
            Some(Event::AwaitingApproval(a)) if !a.destination.is_empty() => eprintln!(
                "toolgate: connection to {} waits for approval {}: toolgate approvals approve {}",
                a.destination, a.approval_id, a.approval_id
            ),
            Some(Event::Exited(x)) => {
                let summary = match stream {
                    pb::Stream::Stderr => x.stderr,
                    _ => x.stdout,
                };
                // The end of a stream past its cap comes as the exit's tail.
                if let Some(s) = summary.filter(|s| !s.tail.is_empty()) {
                    shown.put(s.tail_offset, &s.tail)?;
                }
                eprintln!(
                    "toolgate: run {} {}",
                    escape(run_id),
                    render::exit_status(x.status.as_ref())
                );
                return Ok(());
            }
            _ => {}
        }
    }
    anyhow::bail!(
        "the executor ended run {}'s stream without its exit event",
        escape(run_id)
    )
}

/// How far a followed stream has been written out.
struct Shown {
    next: u64,
}

impl Shown {
    /// Writes what of `data` (at `offset`) is new, reporting the bytes skipped before it.
    fn put(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        let end = offset + data.len() as u64;
        if end <= self.next {
            return Ok(());
        }
        if offset > self.next {
            gap(self.next, offset);
        }
        let skip = usize::try_from(self.next.saturating_sub(offset)).unwrap_or(data.len());
        write_out(&data[skip.min(data.len())..])?;
        self.next = end;
        Ok(())
    }
}

fn gap(start: u64, end: u64) {
    eprintln!("toolgate: bytes {start}..{end} not retained");
}

fn write_out(data: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(data)?;
    out.flush()
}

/// `running`, `exited`, `lost`.
fn state(v: i32) -> &'static str {
    match pb::RunState::try_from(v) {
        Ok(pb::RunState::Running) => "running",
        Ok(pb::RunState::Exited) => "exited",
        Ok(pb::RunState::Lost) => "lost",
        _ => "unspecified",
    }
}

/// The exit column: the code, the signal, or what else ended it; `-` while it runs.
fn exit_column(s: Option<&common::ExitStatus>) -> String {
    match s.and_then(|s| s.status.as_ref()) {
        Some(Status::Exited(c)) => c.to_string(),
        Some(Status::Signaled(sig)) => sig.name.clone(),
        Some(Status::TimedOut(_)) => "timeout".into(),
        Some(Status::Cancelled(_)) => "cancelled".into(),
        Some(Status::SpawnFailed(_)) => "spawn-failed".into(),
        Some(Status::Completed(_)) => "0".into(),
        None => "-".into(),
    }
}

/// The `runs list` table.
fn table(runs: &[pb::RunInfo]) -> String {
    use std::fmt::Write as _;
    let width = |f: fn(&pb::RunInfo) -> usize, min: usize, max: usize| {
        runs.iter().map(f).max().unwrap_or(0).clamp(min, max)
    };
    let id_w = width(|r| escape(&r.run_id).chars().count(), 6, 40);
    let session_w = width(|r| escape(&r.session_id).chars().count(), 7, 24);
    let mut out = format!(
        "{:<id_w$}  {:<session_w$}  {:<7}  {:>7}  {:<20}  {:<12}  {}\n",
        "RUN ID", "SESSION", "STATE", "PID", "STARTED", "EXIT", "COMMAND"
    );
    for r in runs {
        // To the second: a table has no room for nanoseconds.
        let started = render::time(
            r.started_at
                .map(|t| prost_types::Timestamp {
                    seconds: t.seconds,
                    nanos: 0,
                })
                .as_ref(),
        );
        let command = escape(&r.command).replace('\n', "; ");
        let _ = writeln!(
            out,
            "{:<id_w$}  {:<session_w$}  {:<7}  {:>7}  {:<20}  {:<12}  {}",
            escape(&r.run_id),
            clip(&escape(&r.session_id), session_w),
            state(r.state),
            if r.pid > 0 {
                r.pid.to_string()
            } else {
                "-".into()
            },
            clip(&started, 20),
            exit_column(r.status.as_ref()),
            clip(&command, 70),
        );
    }
    out
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// A run as one JSON object (state as a lowercase name, times as RFC 3339).
fn run_json(r: &pb::RunInfo) -> Value {
    let mut v = json!({
        "run_id": r.run_id,
        "session_id": r.session_id,
        "call_id": r.call_id,
        "state": state(r.state),
        "pid": r.pid,
        "command": r.command,
        "cwd": r.cwd,
        "decision_id": r.decision_id,
        "background": r.background,
        "started_at": render::time(r.started_at.as_ref()),
        "finished_at": render::time(r.finished_at.as_ref()),
        "status": r.status.as_ref().map(|s| render::exit_status(Some(s))),
        "stdout_bytes": r.stdout_bytes,
        "stderr_bytes": r.stderr_bytes,
        "sandbox_profile": r.sandbox_profile,
    });
    if let Some(Status::Exited(c)) = r.status.as_ref().and_then(|s| s.status.as_ref()) {
        v["exit_code"] = (*c).into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, state: pb::RunState, status: Option<Status>) -> pb::RunInfo {
        pb::RunInfo {
            run_id: id.into(),
            session_id: "s".into(),
            state: state as i32,
            pid: if status.is_none() { 42 } else { 0 },
            command: "python -m http.server\x1b[2K".into(),
            status: status.map(|s| common::ExitStatus { status: Some(s) }),
            ..Default::default()
        }
    }

    #[test]
    fn the_table_shows_state_pid_and_exit_and_nothing_a_terminal_obeys() {
        let t = table(&[
            info("run_a", pb::RunState::Running, None),
            info("run_b", pb::RunState::Exited, Some(Status::Exited(3))),
            info(
                "run_c",
                pb::RunState::Exited,
                Some(Status::Signaled(common::Signaled {
                    signal: 15,
                    name: "SIGTERM".into(),
                    core_dumped: false,
                })),
            ),
        ]);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 4, "{t}");
        assert!(rows[1].contains("running") && rows[1].contains("42"), "{t}");
        assert!(rows[2].contains("exited") && rows[2].contains(" 3 "), "{t}");
        assert!(rows[3].contains("SIGTERM"), "{t}");
        assert!(!t.contains('\x1b'), "{t}");
        let v = run_json(&info(
            "run_b",
            pb::RunState::Exited,
            Some(Status::Exited(3)),
        ));
        assert_eq!(v["exit_code"], 3);
        assert_eq!(v["state"], "exited");
    }

    #[test]
    fn a_followed_stream_writes_each_byte_once_and_names_what_it_skipped() {
        let mut s = Shown { next: 4 };
        // Entirely before the start: nothing.
        s.put(0, b"abcd").unwrap();
        assert_eq!(s.next, 4);
        // Overlapping the start: only the new part.
        s.put(2, b"cdef").unwrap();
        assert_eq!(s.next, 6);
        // After a gap: the next offset jumps.
        s.put(10, b"xy").unwrap();
        assert_eq!(s.next, 12);
    }
}
