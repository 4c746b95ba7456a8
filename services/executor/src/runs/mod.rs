//! The runs this executor holds: every run while it runs (foreground or background), and
//! background runs for `finished_retention_s` after they ended.
//!
//! A foreground run's entry lives as long as its call's stream. A background run's call ends
//! after `Started`; a task of the registry then consumes the run's events (the same stream a
//! foreground call would get, so the outcome is recorded exactly the same way), writes its
//! output to the spool (`spool.rs`), and keeps the entry and the spool for the retention.
//!
//! Every lookup is scoped to the caller's principal: another principal's run is
//! `RUN_NOT_FOUND`, exactly like a run that never existed.

mod follow;
pub(crate) mod spool;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use tokio::sync::watch;
use tonic::Status;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_process::CancelHandle;

use crate::config::SessionsSection;
use spool::{Spool, SpoolRoot};

pub(crate) use follow::AttachStream;

/// A run's event stream as `Run` answers it.
pub(crate) type RunStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::RunResponse, Status>> + Send>>;

/// Longest `RunInfo.command` kept: a listing names the command, it does not store scripts.
pub(crate) const COMMAND_CAP: usize = 4096;

/// `command` cut to [`COMMAND_CAP`] bytes at a character boundary, marked with `…`.
pub(crate) fn listed_command(command: &str) -> String {
    if command.len() <= COMMAND_CAP {
        return command.to_owned();
    }
    let mut end = COMMAND_CAP - '…'.len_utf8();
    while !command.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &command[..end])
}

/// Default `max_bytes` of `ReadRunOutput`.
const DEFAULT_READ: u64 = 64 << 10;
/// Largest `max_bytes` of `ReadRunOutput`.
const MAX_READ: u64 = 1 << 20;

/// The `[sessions]` bounds on background runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Background runs one session may hold at once.
    pub per_session: u32,
    /// Background runs one principal may hold at once.
    pub per_principal: u32,
    /// How long a finished background run stays listed and readable.
    pub retention: Duration,
}

impl Settings {
    /// The bounds `[sessions]` configures.
    pub(crate) fn from_config(s: &SessionsSection) -> Self {
        Settings {
            per_session: s.max_background_per_session,
            per_principal: s.max_background_per_principal,
            retention: Duration::from_secs(s.finished_retention_s),
        }
    }
}

/// The registry of runs; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Runs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    spool: SpoolRoot,
    table: Mutex<Table>,
    /// Orders runs by start (oldest first in `ListRuns`).
    seq: AtomicU64,
}

#[derive(Debug, Default)]
struct Table {
    runs: HashMap<String, Arc<Entry>>,
    /// Background runs held per (principal, session): counted from the bound check until the
    /// run ended (or the call was refused).
    held: HashMap<(String, String), u32>,
}

/// What the registry knows of a run from its call.
#[derive(Debug)]
pub(crate) struct Meta {
    /// The principal that started it.
    pub principal: String,
    /// Its session.
    pub session_id: String,
    /// The call that started it.
    pub call_id: String,
    /// The command as the policy saw it.
    pub command: String,
    /// The working directory, workspace-relative.
    pub cwd: String,
    /// The authorizing decision.
    pub decision_id: String,
    /// The profile it runs under.
    pub sandbox_profile: String,
}

/// One run.
#[derive(Debug)]
pub(crate) struct Entry {
    run_id: String,
    seq: u64,
    meta: Meta,
    background: bool,
    cancel: CancelHandle,
    spool: Option<Spool>,
    /// Bytes seen per stream (foreground runs; a background run's spool counts its own).
    counted: [AtomicU64; 2],
    live: Mutex<Live>,
    /// Bumped whenever output is spooled or the run's state changes: wakes followers.
    changed: watch::Sender<()>,
}

#[derive(Debug, Default)]
struct Live {
    state: State,
    pid: i32,
    started_at: Option<SystemTime>,
    finished_at: Option<SystemTime>,
    status: Option<common::ExitStatus>,
    /// The `Started` event, replayed to followers (background runs).
    started: Option<pb::Started>,
    /// The final `Exited` event, replayed to followers (background runs).
    exited: Option<pb::Exited>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Running,
    Exited,
    Lost,
}

/// A run id and spool made before the run starts.
pub(crate) struct Prepared {
    run_id: String,
    spool: Option<Spool>,
}

impl Prepared {
    /// The run's id.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run never started: its spool goes.
    pub(crate) fn discard(self) {
        if let Some(s) = &self.spool {
            s.remove();
        }
    }
}

/// A background run's place under the per-session and per-principal bounds, from the bound
/// check until the run ends; a refused call gives it back when it is dropped.
#[derive(Debug)]
pub(crate) struct Held {
    runs: Runs,
    key: (String, String),
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut t = self.runs.table();
        if let Some(n) = t.held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                t.held.remove(&self.key);
            }
        }
    }
}

/// A run's place in the registry: removed (with its spool) when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    runs: Runs,
    entry: Arc<Entry>,
}

impl Registration {
    /// The registered run.
    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.runs.table().runs.remove(&self.entry.run_id);
        if let Some(s) = &self.entry.spool {
            s.remove();
        }
    }
}

impl Entry {
    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The child started (pid in the executor's namespace).
    pub(crate) fn started(&self, pid: u32, at: SystemTime) {
        let mut l = self.live();
        l.pid = i32::try_from(pid).unwrap_or(0);
        l.started_at = Some(at);
    }

    /// `n` bytes of `stream` went to the caller (foreground runs).
    pub(crate) fn count(&self, stream: toolgate_process::Stream, n: usize) {
        self.counted[stream_index(stream)].fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A foreground run ended.
    pub(crate) fn ended(&self, status: common::ExitStatus, at: SystemTime) {
        {
            let mut l = self.live();
            l.state = State::Exited;
            l.status = Some(status);
            l.finished_at = Some(at);
        }
        self.changed.send_replace(());
    }

    /// The run's `RunInfo` as it is now.
    pub(crate) fn info(&self) -> pb::RunInfo {
        let l = self.live();
        let bytes = |s: toolgate_process::Stream| match &self.spool {
            Some(spool) => spool.stream(s).extent().total,
            None => self.counted[stream_index(s)].load(Ordering::Relaxed),
        };
        pb::RunInfo {
            run_id: self.run_id.clone(),
            session_id: self.meta.session_id.clone(),
            call_id: self.meta.call_id.clone(),
            state: match l.state {
                State::Running => pb::RunState::Running,
                State::Exited => pb::RunState::Exited,
                State::Lost => pb::RunState::Lost,
            } as i32,
            pid: if l.state == State::Running { l.pid } else { 0 },
            command: self.meta.command.clone(),
            cwd: self.meta.cwd.clone(),
            decision_id: self.meta.decision_id.clone(),
            background: self.background,
            started_at: l.started_at.map(prost_types::Timestamp::from),
            finished_at: l.finished_at.map(prost_types::Timestamp::from),
            status: l.status.clone(),
            stdout_bytes: bytes(toolgate_process::Stream::Stdout),
            stderr_bytes: bytes(toolgate_process::Stream::Stderr),
            sandbox_profile: self.meta.sandbox_profile.clone(),
        }
    }

    fn running(&self) -> bool {
        self.live().state == State::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_command_is_listed_cut_at_a_character_boundary() {
        assert_eq!(listed_command("ls -la"), "ls -la");
        let long = "é".repeat(COMMAND_CAP);
        let listed = listed_command(&long);
        assert!(listed.len() <= COMMAND_CAP, "{}", listed.len());
        assert!(listed.ends_with('…'));
    }
}

fn stream_index(s: toolgate_process::Stream) -> usize {
    match s {
        toolgate_process::Stream::Stdout => 0,
        toolgate_process::Stream::Stderr => 1,
    }
}

/// What `SignalRun` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// TERM, then KILL after the grace period.
    Term,
    /// KILL at once.
    Kill,
}

/// Sends `signal` to every process of the run behind `cancel`.
fn send(cancel: &CancelHandle, signal: Signal) {
    cancel.stop(match signal {
        Signal::Term => toolgate_process::StopSignal::Term,
        Signal::Kill => toolgate_process::StopSignal::Kill,
    });
}

impl Runs {
    /// The registry, spooling background output under `spool` (see [`SpoolRoot::open`]).
    pub(crate) fn new(settings: Settings, spool: SpoolRoot) -> Runs {
        tracing::info!(spool = %spool.path().display(), "background run output spool ready");
        Runs {
            inner: Arc::new(Inner {
                settings,
                spool,
                table: Mutex::new(Table::default()),
                seq: AtomicU64::new(0),
            }),
        }
    }

    /// The configured bounds.
    pub(crate) fn settings(&self) -> Settings {
        self.inner.settings
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a background place for `session_id` of `principal`, or refuses with
    /// RESOURCE_EXHAUSTED / TOO_MANY_RUNS (metadata `limit`, `scope`) when the session or the
    /// principal holds as many as allowed. Called before the policy is asked.
    pub(crate) fn hold_background(
        &self,
        principal: &str,
        session_id: &str,
    ) -> Result<Held, Status> {
        let s = self.inner.settings;
        let mut t = self.table();
        let in_session = t
            .held
            .get(&(principal.to_owned(), session_id.to_owned()))
            .copied()
            .unwrap_or(0);
        let of_principal: u32 = t
            .held
            .iter()
            .filter(|((p, _), _)| p == principal)
            .map(|(_, n)| *n)
            .sum();
        let refuse = |scope: &'static str, limit: u32, key: &str| {
            let message = if limit == 0 {
                format!(
                    "background runs are disabled on this executor (sessions.{key} = 0); run the command in the foreground"
                )
            } else {
                format!(
                    "the {scope} already holds {limit} background run(s), the most this executor allows (sessions.{key}); stop one with SignalRun or wait for one to end"
                )
            };
            status::status(
                Reason::TooManyRuns,
                message,
                [("limit", limit.to_string()), ("scope", scope.to_owned())],
            )
        };
        if in_session >= s.per_session {
            return Err(refuse(
                "session",
                s.per_session,
                "max_background_per_session",
            ));
        }
        if of_principal >= s.per_principal {
            return Err(refuse(
                "principal",
                s.per_principal,
                "max_background_per_principal",
            ));
        }
        let key = (principal.to_owned(), session_id.to_owned());
        *t.held.entry(key.clone()).or_default() += 1;
        Ok(Held {
            runs: self.clone(),
            key,
        })
    }

    /// A fresh run id (and, for a background run, its spool) before the run starts.
    pub(crate) fn prepare(&self, background: bool) -> Result<Prepared, Status> {
        let run_id = {
            let t = self.table();
            loop {
                let id = format!("run_{:016x}", fastrand::u64(..));
                if !t.runs.contains_key(&id) {
                    break id;
                }
            }
        };
        let spool = if background {
            Some(self.inner.spool.create(&run_id).map_err(|e| {
                status::status(
                    Reason::Internal,
                    format!("cannot spool the background run's output: {e}"),
                    [],
                )
            })?)
        } else {
            None
        };
        Ok(Prepared { run_id, spool })
    }

    /// Registers a started run.
    pub(crate) fn register(
        &self,
        prepared: Prepared,
        meta: Meta,
        cancel: CancelHandle,
    ) -> Registration {
        let Prepared { run_id, spool } = prepared;
        let entry = Arc::new(Entry {
            seq: self.inner.seq.fetch_add(1, Ordering::Relaxed),
            background: spool.is_some(),
            run_id,
            meta,
            cancel,
            spool,
            counted: Default::default(),
            live: Mutex::new(Live::default()),
            changed: watch::Sender::new(()),
        });
        self.table()
            .runs
            .insert(entry.run_id.clone(), entry.clone());
        Registration {
            runs: self.clone(),
            entry,
        }
    }

    /// The run `run_id` of `principal`, or RUN_NOT_FOUND (also for another principal's).
    fn find(&self, principal: &str, run_id: &str) -> Result<Arc<Entry>, Status> {
        let t = self.table();
        t.runs
            .get(run_id)
            .filter(|e| e.meta.principal == principal)
            .cloned()
            .ok_or_else(|| {
                status::status(
                    Reason::RunNotFound,
                    format!(
                        "no run `{run_id}` on this executor: unknown, past its retention, or started on another executor (ListRuns lists the runs here)"
                    ),
                    [("run_id", run_id.to_owned())],
                )
            })
    }

    /// Stops (KILL) every run of `session_id`, foreground and background; returns how many.
    pub(crate) fn stop_session(&self, session_id: &str) -> usize {
        let running: Vec<Arc<Entry>> = self
            .table()
            .runs
            .values()
            .filter(|e| e.meta.session_id == session_id)
            .cloned()
            .collect();
        running
            .iter()
            .filter(|e| e.running())
            .inspect(|e| send(&e.cancel, Signal::Kill))
            .count()
    }

    /// Runs of the session still running (foreground or background).
    pub(crate) fn running_in_session(&self, session_id: &str) -> usize {
        let entries: Vec<Arc<Entry>> = self
            .table()
            .runs
            .values()
            .filter(|e| e.meta.session_id == session_id)
            .cloned()
            .collect();
        entries.iter().filter(|e| e.running()).count()
    }

    /// Removes the spool root at executor stop. Background runs died with the runner; their
    /// outcomes stay unrecorded (the ledger reads them as lost).
    pub(crate) fn close(&self) {
        self.inner.spool.remove();
    }

    /// Takes over a background run's event `stream`: a task consumes it (output to the
    /// spool, the outcome recorded as for any run) and holds the entry for the retention.
    /// The call's answer is the run's first event (`Started`, or `Exited` when it failed to
    /// spawn) or its refusal.
    pub(crate) fn detach(
        &self,
        registration: Registration,
        held: Held,
        stream: RunStream,
    ) -> RunStream {
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let retention = self.inner.settings.retention;
        tokio::spawn(consume(registration, held, stream, first_tx, retention));
        Box::pin(futures::stream::once(async move {
            first_rx.await.unwrap_or_else(|_| {
                Err(status::status(
                    Reason::Internal,
                    "the background run ended before it reported its start",
                    [],
                ))
            })
        }))
    }

    /// `ListRuns` for `principal`.
    pub(crate) fn list(&self, principal: &str, r: &pb::ListRunsRequest) -> pb::ListRunsResponse {
        let mut entries: Vec<Arc<Entry>> = self
            .table()
            .runs
            .values()
            .filter(|e| e.meta.principal == principal)
            .filter(|e| r.session_id.is_empty() || e.meta.session_id == r.session_id)
            .cloned()
            .collect();
        entries.sort_by_key(|e| e.seq);
        pb::ListRunsResponse {
            runs: entries
                .iter()
                .map(|e| e.info())
                .filter(|i| r.include_finished || i.state == pb::RunState::Running as i32)
                .collect(),
        }
    }

    /// `SignalRun` for `principal`: the signal goes to a running run; a run that ended
    /// answers its final state.
    pub(crate) fn signal(
        &self,
        principal: &str,
        r: &pb::SignalRunRequest,
    ) -> Result<pb::SignalRunResponse, Status> {
        let signal = match pb::RunSignal::try_from(r.signal) {
            Ok(pb::RunSignal::Unspecified | pb::RunSignal::Term) => Signal::Term,
            Ok(pb::RunSignal::Kill) => Signal::Kill,
            Err(_) => {
                return Err(status::invalid(
                    "signal",
                    format!("signal {} is not a RunSignal (TERM or KILL)", r.signal),
                ));
            }
        };
        let entry = self.find(principal, &r.run_id)?;
        if entry.running() {
            tracing::info!(run_id = %entry.run_id, ?signal, "stopping a run on request");
            send(&entry.cancel, signal);
        }
        Ok(pb::SignalRunResponse {
            run: Some(entry.info()),
        })
    }

    /// `ReadRunOutput` for `principal`.
    pub(crate) async fn read(
        &self,
        principal: &str,
        r: pb::ReadRunOutputRequest,
    ) -> Result<pb::ReadRunOutputResponse, Status> {
        let max = match r.max_bytes {
            0 => DEFAULT_READ,
            n if n > MAX_READ => {
                return Err(status::invalid(
                    "max_bytes",
                    format!(
                        "max_bytes must be at most {MAX_READ} (1 MiB); read on from next_offset"
                    ),
                ));
            }
            n => n,
        };
        let stream = wire_stream(r.stream)?;
        let entry = self.find(principal, &r.run_id)?;
        let spool = spool_of(&entry)?;
        let s = spool.stream(stream).clone();
        let extent = s.extent();
        let retained = extent.retained();
        let info = entry.info();
        let ranges = || {
            retained
                .iter()
                .map(|&(start, end)| pb::RetainedRange { start, end })
                .collect()
        };
        if r.offset == extent.total {
            return Ok(pb::ReadRunOutputResponse {
                data: Default::default(),
                offset: r.offset,
                next_offset: r.offset,
                total_bytes: extent.total,
                retained: ranges(),
                run: Some(info),
                eof: extent.ended,
            });
        }
        let at = match extent.locate(r.offset) {
            Some(at) if at.offset == r.offset => at,
            _ => return Err(not_retained(&entry.run_id, stream, r.offset, &extent)),
        };
        let data = tokio::task::spawn_blocking(move || s.read(at, max))
            .await
            .map_err(|e| internal(&e))?
            .map_err(|e| internal(&e))?;
        let end = r.offset + data.len() as u64;
        // At the end of the head, reading goes on at the tail window.
        let next_offset = match retained.iter().find(|(start, _)| *start >= end) {
            Some(&(start, _)) if retained.iter().any(|&(_, e)| e == end) => start,
            _ => end,
        };
        Ok(pb::ReadRunOutputResponse {
            data,
            offset: r.offset,
            next_offset,
            total_bytes: extent.total,
            retained: ranges(),
            run: Some(info),
            eof: extent.ended && next_offset >= extent.total,
        })
    }

    /// `AttachRun` for `principal`.
    pub(crate) fn attach(
        &self,
        principal: &str,
        r: &pb::AttachRunRequest,
    ) -> Result<AttachStream, Status> {
        let entry = self.find(principal, &r.run_id)?;
        spool_of(&entry)?;
        Ok(follow::follow(entry, [r.stdout_offset, r.stderr_offset]))
    }
}

fn spool_of(entry: &Entry) -> Result<&Spool, Status> {
    entry.spool.as_ref().ok_or_else(|| {
        status::status(
            Reason::OutputNotRetained,
            format!(
                "run `{}` runs in the foreground: its output goes only to the call that started it (start it with `background` to read it again)",
                entry.run_id
            ),
            [("run_id", entry.run_id.clone()), ("retained", String::new())],
        )
    })
}

fn wire_stream(s: i32) -> Result<toolgate_process::Stream, Status> {
    match pb::Stream::try_from(s) {
        Ok(pb::Stream::Unspecified | pb::Stream::Stdout) => Ok(toolgate_process::Stream::Stdout),
        Ok(pb::Stream::Stderr) => Ok(toolgate_process::Stream::Stderr),
        Err(_) => Err(status::invalid(
            "stream",
            format!("stream {s} is not STDOUT or STDERR"),
        )),
    }
}

/// OUT_OF_RANGE / OUTPUT_NOT_RETAINED naming the ranges that can be read.
fn not_retained(
    run_id: &str,
    stream: toolgate_process::Stream,
    offset: u64,
    extent: &spool::Extent,
) -> Status {
    let ranges = extent
        .retained()
        .iter()
        .map(|(s, e)| format!("{s}-{e}"))
        .collect::<Vec<_>>()
        .join(",");
    let name = match stream {
        toolgate_process::Stream::Stdout => "stdout",
        toolgate_process::Stream::Stderr => "stderr",
    };
    let why = if offset > extent.total {
        "is past what the run has written"
    } else {
        "lies between the head cap and the tail window, which were not kept"
    };
    status::status(
        Reason::OutputNotRetained,
        format!(
            "offset {offset} of {name} of run `{run_id}` {why}; retained ranges (start-end, end exclusive): [{ranges}], total {} bytes",
            extent.total
        ),
        [
            ("run_id", run_id.to_owned()),
            ("retained", ranges),
            ("total_bytes", extent.total.to_string()),
        ],
    )
}

fn internal(e: &dyn std::fmt::Display) -> Status {
    status::status(
        Reason::Internal,
        format!("cannot read the run's spooled output: {e}"),
        [],
    )
}

/// The background task of one run: see [`Runs::detach`].
async fn consume(
    registration: Registration,
    held: Held,
    mut stream: RunStream,
    first: tokio::sync::oneshot::Sender<Result<pb::RunResponse, Status>>,
    retention: Duration,
) {
    use pb::run_response::Event as E;
    let entry = registration.entry().clone();
    let Some(spool) = entry.spool.as_ref() else {
        return;
    };
    let mut first = Some(first);
    let mut held = Some(held);
    let mut spool_failed = false;
    while let Some(item) = stream.next().await {
        let event = match item {
            Ok(pb::RunResponse { event: Some(e) }) => e,
            Ok(_) => continue,
            Err(refused) => {
                if let Some(tx) = first.take() {
                    let _ = tx.send(Err(refused));
                }
                break;
            }
        };
        match event {
            E::Started(s) => {
                entry.live().started = Some(s.clone());
                entry.changed.send_replace(());
                if let Some(tx) = first.take() {
                    let _ = tx.send(Ok(pb::RunResponse {
                        event: Some(E::Started(s)),
                    }));
                }
            }
            E::Output(o) => {
                let Ok(stream) = wire_stream(o.stream) else {
                    continue;
                };
                let s = spool.stream(stream).clone();
                let written = tokio::task::spawn_blocking(move || s.append_head(o.offset, &o.data))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))
                    .and_then(|r| r);
                match written {
                    Ok(()) => {
                        entry.changed.send_replace(());
                    }
                    Err(e) if !spool_failed => {
                        spool_failed = true;
                        tracing::warn!(run_id = %entry.run_id, error = %e, "cannot spool a background run's output: what follows is not kept");
                    }
                    Err(_) => {}
                }
            }
            E::Exited(x) => {
                for (stream, summary) in [
                    (toolgate_process::Stream::Stdout, &x.stdout),
                    (toolgate_process::Stream::Stderr, &x.stderr),
                ] {
                    let s = spool.stream(stream).clone();
                    let (total, tail_offset, tail) = summary.as_ref().map_or_else(
                        || (0, 0, bytes::Bytes::new()),
                        |sum| {
                            (
                                sum.stats.as_ref().map_or(0, |st| st.total_bytes),
                                sum.tail_offset,
                                sum.tail.clone(),
                            )
                        },
                    );
                    let written =
                        tokio::task::spawn_blocking(move || s.finish(total, tail_offset, &tail))
                            .await;
                    if let Ok(Err(e)) = written {
                        tracing::warn!(run_id = %entry.run_id, error = %e, "cannot spool a background run's output tail");
                    }
                }
                // Stopped by the executor's own shutdown: the run dies with the executor and
                // its outcome is not recorded (the ledger reads it as lost).
                let lost = matches!(
                    x.status.as_ref().and_then(|s| s.status.as_ref()),
                    Some(common::exit_status::Status::Cancelled(c))
                        if c.cause == toolgate_process::CancelCause::Shutdown.as_str()
                );
                // Its place under the bounds is free before anyone can see it ended.
                held.take();
                {
                    let mut l = entry.live();
                    l.state = if lost { State::Lost } else { State::Exited };
                    l.status = x.status.clone();
                    l.finished_at = x
                        .finished_at
                        .and_then(|t| SystemTime::try_from(t).ok())
                        .or_else(|| Some(SystemTime::now()));
                    l.exited = Some(x.clone());
                }
                entry.changed.send_replace(());
                if let Some(tx) = first.take() {
                    let _ = tx.send(Ok(pb::RunResponse {
                        event: Some(E::Exited(x)),
                    }));
                }
                break;
            }
            // A connection of the run waiting for a human: nobody follows the call any more;
            // the approval is in the ledger for whoever decides it.
            E::AwaitingApproval(_) => {}
        }
    }
    drop(held);
    drop(stream);
    if entry.running() {
        // The events stopped without `Exited`: the executor is stopping and the run dies
        // with it, its outcome unknown.
        entry.live().state = State::Lost;
        for s in [
            toolgate_process::Stream::Stdout,
            toolgate_process::Stream::Stderr,
        ] {
            spool.stream(s).end();
        }
        entry.changed.send_replace(());
        return;
    }
    tokio::time::sleep(retention).await;
    drop(registration);
}
