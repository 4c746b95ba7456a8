//! The tonic adapters for `ProcessService.Run` and `ExecutorService.GetCapabilities`.
//!
//! A run is resolved (command, confined working directory, effective limits), authorized
//! through the [`Gate`], and only then started with the proof. When the policy asks a human
//! and the call context asks to wait, the stream first carries `AwaitingApproval` and the run
//! starts once the approval is granted.
//!
//! A run's events flow from the runner's bounded channel straight into the response stream:
//! when the client is slow, the channel fills and the runner stops reading the child's pipe
//! (backpressure); when the client goes away, the stream is dropped, the receiver with it,
//! and the runner kills the child and every descendant.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::{Stream, StreamExt, stream};
use tonic::{Request, Response, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_server::ExecutorService;
use toolgate_contracts::executor::v1::process_service_server::ProcessService;
use toolgate_contracts::status;
use toolgate_core::{ToolCall, ToolKind};
use toolgate_fs::WorkspacePath;
use toolgate_process::{Command, Event, Isolation, RunRequest, RunSpec, Status as RunStatus};
use toolgate_runtime::metrics::{ExecutorMetrics, InFlight};
use toolgate_runtime::telemetry;
use tracing::Instrument;
use tracing::field::Empty;

use crate::admission::{Admission, Slot, Who};
use crate::authz::Finished;
use crate::authz::{Authorized, Call, Checked, Gate, Ran, Receipt, Reporter, not_started};
use crate::bound;
use crate::confined::Confined;
use crate::egress::{self, RunGate, RunInfo};
use crate::fs_service::sha256_hex;
use crate::runs::{self, Held, Runs};
use crate::session;
use crate::tool_span::ToolSpan;
use crate::wire::run::RunTag;
use crate::wire::{self, CallContext};
use toolgate_core::ExecutorIdentity;

/// Serves `ProcessService` and `ExecutorService`.
#[derive(Debug, Clone)]
pub struct ProcessAdapter {
    confined: Confined,
    admission: Admission,
    gate: Gate,
    identity: ExecutorIdentity,
    view: pb::WorkspaceView,
    egress: Arc<egress::Settings>,
    /// Every run while it runs, background runs for their retention: `ListRuns`,
    /// `ReadRunOutput`, `AttachRun`, `SignalRun`, and the sessions' reaper.
    pub(crate) runs: Runs,
    /// `identity` on the wire, as every `Started` carries it.
    identity_wire: common::ExecutorIdentity,
    /// The sessions this executor holds: claims, sandboxes, `persist_cwd` state.
    sessions: session::Sessions,
}

/// A run resolved and ready to be authorized.
struct Resolved {
    ctx: CallContext,
    spec: RunSpec,
    call: ToolCall,
    /// What it reserves of the run memory budget under the profile it asked for.
    reservation: toolgate_process::Reservation,
    /// The call inside its session (in flight until the response stream ends).
    session: session::Entry,
    /// Under `persist_cwd`: folds the run's final state into the session's.
    persist: Option<session::Persist>,
}

impl ProcessAdapter {
    /// An adapter running children confined to the workspace once `gate` allows them and
    /// `admission` has room; `view` is what `GetCapabilities` reports about the workspace.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        confined: Confined,
        admission: Admission,
        gate: Gate,
        identity: ExecutorIdentity,
        view: pb::WorkspaceView,
        egress: Arc<egress::Settings>,
        runs: Runs,
        sessions: session::Sessions,
    ) -> Self {
        ProcessAdapter {
            confined,
            admission,
            gate,
            identity_wire: toolgate_contracts::convert::identity_to_wire(identity.clone()),
            identity,
            view,
            egress,
            runs,
            sessions,
        }
    }

    /// Parses the wire request into a validated run and its canonical form for the policy.
    ///
    /// The call enters its session here (another principal's session is refused). Under
    /// `persist_cwd` the session is claimed at once (its state decides where the run starts),
    /// the run starts in the session's working directory with its variables, and a script
    /// runs under the wrapper that reports the shell's final state; the policy still sees the
    /// script as sent.
    async fn resolve(&self, r: pb::RunRequest, principal: &str) -> Result<Resolved, Status> {
        let ctx = CallContext::try_from(r.context)?;
        let command = match r.command {
            Some(pb::run_request::Command::Argv(a)) => Command::Argv(a.args),
            Some(pb::run_request::Command::Script(s)) => Command::Script(s),
            None => {
                return Err(status::invalid(
                    "command",
                    "set exactly one of `argv` or `script`",
                ));
            }
        };
        let session = self.sessions.enter(&ctx.session_id, principal)?;
        let persist = r.persist_cwd;
        if persist {
            // The session's state (restored from the ledger at the first claim here) decides
            // where the run starts. Other calls claim once admitted.
            session.claim().await?;
        }
        let kept = session.state();
        let cwd_raw = session_cwd(persist.then_some(kept.cwd.as_str()), r.cwd);
        let cwd_path = WorkspacePath::try_from(cwd_raw).map_err(|e| status::from_error(&e))?;
        let cwd = self.confined.open_directory(cwd_path).await?;
        let limits = r.limits.unwrap_or_default();
        let profile = self.confined.profile(&r.sandbox_profile)?;
        let reservation = self.confined.reservation(&profile)?;
        let request_env: std::collections::BTreeMap<String, String> = r.env.into_iter().collect();
        let mut env: std::collections::BTreeMap<String, String> = if persist {
            self.sessions.usable_env(kept.env)
        } else {
            Default::default()
        };
        env.extend(request_env.clone());
        let env: Vec<(String, String)> = env.into_iter().collect();
        let stdin_sha256 = r.stdin.as_deref().map(sha256_hex);
        // What runs: a `persist_cwd` script under the state-reporting wrapper; what the
        // policy classifies: the command as sent.
        let executed = match (&command, persist) {
            (Command::Script(script), true) => Command::Argv(self.sessions.wrapped_argv(script)),
            _ => command.clone(),
        };
        let request = RunRequest {
            command: executed,
            cwd: cwd.fd,
            env,
            stdin: r.stdin.map(bytes::Bytes::from),
            timeout: r
                .timeout
                .map(|d| wire::duration("timeout", d))
                .transpose()?,
            stdout_cap: wire::cap(limits.stdout_cap_bytes),
            stderr_cap: wire::cap(limits.stderr_cap_bytes),
            tail_bytes: wire::cap(limits.tail_bytes as usize),
            kill_on_cap: limits.kill_on_cap,
            profile: profile.clone(),
            masks: Default::default(),
        };
        let mut spec = RunSpec::try_from(request).map_err(|e| status::from_error(&e))?;
        let capture = persist && matches!(command, Command::Script(_));
        if capture {
            spec.capture_state();
        }
        let effective = self.confined.effective(&spec)?;
        let bound_files = self
            .confined
            .bound_files(&cwd.canonical, &bound::words(&command));
        let (argv, script) = match command {
            Command::Argv(a) => (Some(a), None),
            Command::Script(s) => (None, Some(s)),
        };
        let call = ToolCall {
            argv,
            script,
            cwd: Some(cwd.canonical),
            env: spec.env().iter().cloned().collect(),
            stdin_sha256,
            timeout_ms: Some(effective.timeout.as_millis() as u64),
            stdout_cap_bytes: Some(effective.stdout_cap),
            stderr_cap_bytes: Some(effective.stderr_cap),
            kill_on_cap: limits.kill_on_cap,
            // The policy decides with the guarantees of what will really confine the run.
            sandbox_profile: Some(self.confined.decided_profile(&profile)),
            bound_files,
            ..ToolCall::new(ToolKind::ProcessRun)
        };
        let persist = persist.then(|| session.persist(request_env, capture));
        Ok(Resolved {
            ctx,
            spec,
            call,
            reservation,
            session,
            persist,
        })
    }

    /// Starts an authorized run in a `process.run` span (the child's `TRACEPARENT` names it)
    /// and turns its events into the response stream; the outcome is reported when it ends,
    /// or when the client goes away first. `trace_parent` is the caller's context as the
    /// handler saw it, for when the span carries none (telemetry off).
    #[allow(clippy::too_many_arguments)]
    ///
    /// With `background` (the run's place under the background bounds), the registry takes
    /// the events over and the stream answers only the run's first event.
    fn start(
        &self,
        proof: Authorized,
        mut slot: Slot,
        spec: RunSpec,
        mut tool: ToolSpan,
        call: &Call,
        session: &session::Entry,
        persist: Option<session::Persist>,
        background: Option<Held>,
    ) -> Result<RunStream, Status> {
        let trace_parent = call.trace_parent.as_deref();
        let span = tool.span().clone();
        let span = &span;
        let run_span = tracing::info_span!(
            parent: span,
            "process.run",
            otel.name = "process.run",
            decision_id = %proof.decision_id(),
            process.pid = Empty,
            status = Empty,
        );
        let started = SystemTime::now();
        let (gate_events, gate_rx) = tokio::sync::mpsc::channel(16);
        let mut egress = None;
        let prepared = match self.runs.prepare(background.is_some()) {
            Ok(p) => p,
            Err(e) => {
                self.gate.reporter().report(&proof, not_started(&e));
                tool.fail(&e);
                return Err(e);
            }
        };
        let mut sandbox_profile = String::new();
        let run = run_span.in_scope(|| {
            // The policy may have decided the run under another profile than the request
            // named: the slot then holds what that profile reserves.
            if !proof.sandbox_profile().is_empty() {
                slot.resize(self.confined.reservation(proof.sandbox_profile())?)?;
            }
            let mut spec = match telemetry::traceparent().as_deref().or(trace_parent) {
                Some(tp) => spec.with_trace_parent(tp),
                None => spec,
            };
            // The slot is given back when the runner is done with the run (processes reaped,
            // cgroup removed), not when the client's stream ends: the next run admitted never
            // finds the runner still busy, nor the budget still in use. Refused, the spec (and
            // the slot with it) is dropped at once.
            spec.hold_until_done(slot);
            let profile = match proof.sandbox_profile() {
                "" => spec.profile().to_owned(),
                p => p.to_owned(),
            };
            sandbox_profile.clone_from(&profile);
            // A confined run joins its session's sandbox (made at the first one).
            if self.confined.confines(&profile) {
                spec.set_session(session.namespaces()?);
            }
            if self.confined.networked(&profile) {
                let run_gate = RunGate::new(
                    self.egress.clone(),
                    self.gate.clone(),
                    run_info(call, &proof, profile),
                    gate_events,
                );
                let serving = run_gate.clone();
                let runtime = tokio::runtime::Handle::current();
                spec = spec.with_egress(Box::new(move |sockets| {
                    serving.serve(sockets.into(), &runtime);
                }));
                egress = Some(run_gate);
            }
            Ok(self.confined.run(&proof, spec)?)
        });
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                // Authorized but never started: not an execution. The ledger learns why and
                // releases the call, so its retry may run and its approval is not spent.
                self.gate.reporter().report(&proof, not_started(&e));
                tool.fail(&e);
                prepared.discard();
                return Err(e);
            }
        };
        let cwd = call.call.cwd.clone().unwrap_or_else(|| ".".to_owned());
        let tag = RunTag {
            run_id: prepared.run_id().to_owned(),
            executor: self.identity_wire.clone(),
            background: background.is_some(),
            cwd: cwd.clone(),
        };
        let registration = self.runs.register(
            prepared,
            runs::Meta {
                principal: call.principal.name.clone(),
                session_id: call.ctx.session_id.clone(),
                call_id: call.ctx.call_id.clone(),
                command: run_info_command(&call.call),
                cwd,
                decision_id: proof.decision_id().to_owned(),
                sandbox_profile,
            },
            run.cancel_handle(),
        );
        let entry = registration.entry().clone();
        // A foreground run is listed while its call's stream lives; a background run's
        // registration goes to the registry's task below.
        let (foreground, registration) = match background {
            Some(_) => (None, Some(registration)),
            None => (Some(registration), None),
        };
        let (events, cancel) = run.into_parts();
        let receipt = Receipt::of(&proof);
        let metrics = self.gate.metrics().clone();
        let mut record = RunRecord {
            tool,
            reporter: self.gate.reporter().clone(),
            in_flight: Some(metrics.run_started()),
            metrics,
            proof,
            started_at: started,
            isolation: None,
            clock: std::time::Instant::now(),
            done: false,
            egress,
            background: tag.background,
        };
        // The runner's own bounded channel is the response: a slow client stops the runner
        // reading the child's pipe, and when tonic drops this stream (client gone) the
        // receiver goes with it and the runner kills the run. The cancel handle lives in
        // the closure so the run is not cancelled while the stream is alive; so does the
        // run's span, which ends with the stream.
        //
        // The stream ends at `Exited`, without waiting for the runner to close the channel
        // (it still has clean-up to do), so the trailers leave with the final event and a
        // client's call completes on that one read.
        //
        // The run's egress gate adds its `AwaitingApproval` events while the run goes on.
        let mut persist = persist;
        let runner = tokio_stream::wrappers::ReceiverStream::new(events).map(move |mut event| {
            let _keep = (&cancel, &foreground);
            let recorded = record.observe(&event);
            let settled = settle_session(&mut persist, &mut event);
            match &event {
                Event::Started(s) => {
                    run_span.record("process.pid", s.pid);
                    entry.started(s.pid, s.started_at);
                }
                Event::Exited(x) => {
                    run_span.record("status", status_label(&x.status));
                    run_span.in_scope(|| tracing::info!(status = ?x.status, "run ended"));
                    if foreground.is_some() {
                        entry.ended(wire::run::exit_status(&x.status), x.finished_at);
                    }
                }
                Event::Output(o) => entry.count(o.stream, o.data.len()),
            }
            (
                Ok(wire::run::event(event, &receipt, &tag)),
                recorded,
                settled,
            )
        });
        let waits = tokio_stream::wrappers::ReceiverStream::new(gate_rx).map(|waiting| {
            let event = pb::run_response::Event::AwaitingApproval(waiting);
            (Ok(pb::RunResponse { event: Some(event) }), None, None)
        });
        let stream = stream::select(runner, waits).scan(false, |ended, item| {
            let item = (!*ended).then_some(item);
            *ended |= matches!(
                &item,
                Some((
                    Ok(pb::RunResponse {
                        event: Some(pb::run_response::Event::Exited(_))
                    }),
                    _,
                    _
                ))
            );
            std::future::ready(item)
        });
        // `Exited` leaves once the outcome is recorded (or could not be within
        // `RECORD_WAIT`): a run the client saw end is in the ledger.
        let stream = stream.then(|(mut item, recorded, settled)| async move {
            // Under `persist_cwd`, the session's new state is stored (here and in the
            // ledger) before `Exited` leaves with it.
            if let Some(settled) = settled {
                let state = settled.await;
                if let Ok(pb::RunResponse {
                    event: Some(pb::run_response::Event::Exited(x)),
                }) = &mut item
                {
                    x.session = Some(state);
                }
            }
            if let Some(recorded) = recorded {
                let network = recorded.await;
                if let Ok(pb::RunResponse {
                    event: Some(pb::run_response::Event::Exited(x)),
                }) = &mut item
                {
                    x.network = network
                        .iter()
                        .map(|d| {
                            toolgate_contracts::policy_wire::destination_to_wire(
                                crate::authz::destination(d),
                            )
                        })
                        .collect();
                }
            }
            item
        });
        match (background, registration) {
            (Some(held), Some(registration)) => {
                Ok(self.runs.detach(registration, held, Box::pin(stream)))
            }
            _ => Ok(Box::pin(stream)),
        }
    }
}

/// The command as the policy saw it, for listings: argv joined by spaces, or the script
/// (cut at [`runs::COMMAND_CAP`]).
fn run_info_command(call: &ToolCall) -> String {
    match (&call.argv, &call.script) {
        (Some(a), _) => runs::listed_command(&a.join(" ")),
        (None, Some(s)) => runs::listed_command(s),
        (None, None) => String::new(),
    }
}

/// The working directory a run asks for: under `persist_cwd` (`session` is the session's
/// directory) an empty `cwd` is the session's and a relative one is resolved from it; an
/// absolute one, and every `cwd` without it, as sent. The result is confined like any request
/// path.
fn session_cwd(session: Option<&str>, requested: String) -> String {
    match session {
        Some(base) if requested.is_empty() && !base.is_empty() => base.to_owned(),
        Some(base) if !requested.starts_with('/') && !matches!(base, "" | ".") => {
            format!("{base}/{requested}")
        }
        _ if requested.is_empty() => ".".to_owned(),
        _ => requested,
    }
}

/// At a `persist_cwd` run's `Exited`: the work that folds its state report into the session,
/// awaited before the event leaves.
fn settle_session(
    persist: &mut Option<session::Persist>,
    event: &mut Event,
) -> Option<BoxFuture<'static, common::SessionState>> {
    let Event::Exited(x) = event else {
        return None;
    };
    let report = x.state.take();
    persist
        .take()
        .map(|p| Box::pin(p.settle(report)) as BoxFuture<'static, _>)
}

/// What the run's egress gate decides its connections for.
fn run_info(call: &Call, proof: &Authorized, profile: String) -> RunInfo {
    RunInfo {
        principal: call.principal.clone(),
        session_id: call.ctx.session_id.clone(),
        call_id: call.ctx.call_id.clone(),
        // As the policy saw it (a `persist_cwd` script runs under a wrapper).
        command: run_info_command(&call.call),
        sandbox_profile: profile,
        denied_hosts: proof.denied_hosts().to_vec(),
    }
}

/// Reports a run's outcome exactly once: at its `Exited` event, or as cancelled when the
/// stream is dropped before (the client went away and the runner killed the run).
/// The run's metrics follow the same two ends.
struct RunRecord {
    /// The call's `execute_tool` span: ends with the run (as `cancelled` when dropped first).
    tool: ToolSpan,
    reporter: Reporter,
    metrics: ExecutorMetrics,
    /// Counts the run in `runs_in_flight` until it ends.
    in_flight: Option<InFlight>,
    proof: Authorized,
    started_at: SystemTime,
    /// What the run was given, from its `Started` event; recorded with the outcome.
    isolation: Option<Isolation>,
    clock: std::time::Instant,
    done: bool,
    /// The run's egress gate, when its profile is networked: finished at `Exited`.
    egress: Option<RunGate>,
    /// A background run: nobody's stream ends it early, and when the executor's own
    /// shutdown stops it, its outcome stays unrecorded (the ledger reads it as lost).
    background: bool,
}

impl RunRecord {
    /// Notes `event`; at `Exited`, finishes the run's gate, reports the outcome and returns
    /// what to wait for before the event is sent: the destinations its gate saw.
    fn observe(&mut self, event: &Event) -> Option<BoxFuture<'static, Vec<egress::Destination>>> {
        match event {
            Event::Started(s) => {
                self.started_at = s.started_at;
                self.isolation = Some(s.isolation.clone());
            }
            Event::Exited(x)
                if !self.done
                    && self.background
                    && x.status
                        == RunStatus::Cancelled(toolgate_process::CancelCause::Shutdown) =>
            {
                self.done = true;
                self.in_flight = None;
                self.tool.finish(Some("lost"));
                tracing::info!(decision_id = %self.proof.decision_id(), "a background run stopped with the executor: its outcome stays unrecorded");
            }
            Event::Exited(x) if !self.done => {
                self.done = true;
                self.in_flight = None;
                self.metrics
                    .run_finished(status_label(&x.status), x.usage.wall_time);
                for (stream, s) in [
                    (toolgate_runtime::metrics::Stream::Stdout, &x.stdout),
                    (toolgate_runtime::metrics::Stream::Stderr, &x.stderr),
                ] {
                    self.metrics.output(stream, s.total_bytes, s.truncated);
                }
                match &x.audit {
                    Some(Ok(report)) => {
                        for v in &report.violations {
                            self.metrics.integrity_violation(v.change.as_str());
                            tracing::warn!(path = %v.path, change = %v.change, reverted = v.reverted, "the run changed the protected set");
                        }
                        for g in &report.git {
                            tracing::info!(repository = %g.repository, name = %g.name, kind = %g.kind, old = %g.old, new = %g.new, reverted = g.reverted, "the run changed git state");
                        }
                    }
                    Some(Err(why)) => {
                        self.metrics.integrity_violation("audit_failed");
                        tracing::error!(error = %why, "after-run audit failed");
                    }
                    None => {}
                }
                self.tool
                    .truncated(x.stdout.truncated || x.stderr.truncated);
                self.tool.finish(match x.status {
                    RunStatus::Exited(_) => None,
                    RunStatus::Signaled { .. } => Some("signaled"),
                    RunStatus::TimedOut { .. } => Some("timeout"),
                    RunStatus::Cancelled(_) => Some("cancelled"),
                    RunStatus::SpawnFailed { .. } => Some("spawn_failed"),
                });
                let reporter = self.reporter.clone();
                let decision_id = self.proof.decision_id().to_owned();
                let egress = self.egress.take();
                let (started_at, finished_at) = (self.started_at, x.finished_at);
                let (status, usage, limit) = (x.status.clone(), x.usage, x.limit);
                let (stdout, stderr) = (
                    crate::authz::output_stats(&x.stdout),
                    crate::authz::output_stats(&x.stderr),
                );
                let isolation = self.isolation.take().map(Box::new);
                let audit = x.audit.clone().map(Box::new);
                return Some(Box::pin(async move {
                    // Every process of the run is gone: the gate closes and its counts are
                    // final before the outcome and `Exited` carry them.
                    // In a task of its own: a client going away now must not cut short the
                    // outcomes of the run's net.connect decisions.
                    let network = match egress {
                        Some(g) => tokio::spawn(async move { g.finish().await })
                            .await
                            .unwrap_or_default(),
                        None => Vec::new(),
                    };
                    for d in network.iter().filter(|d| !d.refusal.is_empty()) {
                        tracing::info!(host = %d.host, port = d.port, refusal = d.refusal, refused = d.refused, "the run's egress gate refused a destination");
                    }
                    let ran = Ran {
                        started_at,
                        finished_at,
                        finished: Finished::Run {
                            status,
                            usage,
                            stdout,
                            stderr,
                            isolation,
                            audit,
                            limit,
                            network: network.clone(),
                        },
                    };
                    reporter.record_for(&decision_id, ran).await;
                    network
                }));
            }
            _ => {}
        }
        None
    }
}

/// The `status` label of a finished run.
fn status_label(s: &RunStatus) -> &'static str {
    match s {
        RunStatus::Exited(_) => "exited",
        RunStatus::Signaled { .. } => "signaled",
        RunStatus::TimedOut { .. } => "timed_out",
        RunStatus::Cancelled(_) => "cancelled",
        RunStatus::SpawnFailed { .. } => "spawn_failed",
    }
}

impl Drop for RunRecord {
    fn drop(&mut self) {
        if let Some(g) = self.egress.take() {
            g.abandon();
        }
        if !self.done && !self.background {
            self.metrics.run_finished("cancelled", self.clock.elapsed());
            self.reporter.report(
                &self.proof,
                Ran {
                    started_at: self.started_at,
                    finished_at: SystemTime::now(),
                    finished: Finished::Disconnected,
                },
            );
        }
    }
}

type RunStream = Pin<Box<dyn Stream<Item = Result<pb::RunResponse, Status>> + Send>>;
type AttachStream = runs::AttachStream;

#[tonic::async_trait]
impl ProcessService for ProcessAdapter {
    type RunStream = RunStream;
    type AttachRunStream = AttachStream;

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let (principal, _) = wire::caller(&request, "ProcessService/ListRuns")?;
        Ok(Response::new(
            self.runs.list(&principal.name, request.get_ref()),
        ))
    }

    async fn read_run_output(
        &self,
        request: Request<pb::ReadRunOutputRequest>,
    ) -> Result<Response<pb::ReadRunOutputResponse>, Status> {
        let (principal, _) = wire::caller(&request, "ProcessService/ReadRunOutput")?;
        let read = self
            .runs
            .read(&principal.name, request.into_inner())
            .await?;
        Ok(Response::new(read))
    }

    async fn attach_run(
        &self,
        request: Request<pb::AttachRunRequest>,
    ) -> Result<Response<Self::AttachRunStream>, Status> {
        let (principal, _) = wire::caller(&request, "ProcessService/AttachRun")?;
        let stream = self.runs.attach(&principal.name, request.get_ref())?;
        Ok(Response::new(stream))
    }

    async fn signal_run(
        &self,
        request: Request<pb::SignalRunRequest>,
    ) -> Result<Response<pb::SignalRunResponse>, Status> {
        let (principal, _) = wire::caller(&request, "ProcessService/SignalRun")?;
        let answer = self.runs.signal(&principal.name, request.get_ref())?;
        Ok(Response::new(answer))
    }

    async fn run(
        &self,
        request: Request<pb::RunRequest>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let mut tool = Some(ToolSpan::new(ToolKind::ProcessRun));
        let result = self.run_call(request, &mut tool).await;
        if let (Err(e), Some(t)) = (&result, tool.as_mut()) {
            t.fail(e);
        }
        wire::count_refusal(self.gate.metrics(), result)
    }
}

impl ProcessAdapter {
    /// `Run`: every error it returns, and every error its stream carries instead of a
    /// `Started` event, is a refusal (nothing ran).
    ///
    /// `tool` is the call's span; it moves into the response stream once the call gets
    /// that far, else it stays for the caller to end with the error.
    async fn run_call(
        &self,
        request: Request<pb::RunRequest>,
        tool: &mut Option<ToolSpan>,
    ) -> Result<Response<RunStream>, Status> {
        let (principal, trace_parent) = wire::caller(&request, "ProcessService/Run")?;
        let background = request.get_ref().background;
        let in_call = tool
            .as_ref()
            .map_or_else(tracing::Span::none, |t| t.span().clone());
        let Resolved {
            ctx,
            spec,
            mut call,
            reservation,
            session,
            persist,
        } = self
            .resolve(request.into_inner(), &principal.name)
            .instrument(in_call)
            .await?;
        // The policy sees (and the digest binds) that the run outlives its call.
        call.background = background;
        let span = match tool.as_ref() {
            Some(t) => t.bind(&ctx),
            None => tracing::Span::none(),
        };
        let call = Call {
            principal,
            ctx,
            call,
            trace_parent,
            span: span.clone(),
        };
        // A slot before the decision: a call that cannot start is refused before the
        // policy records (or consumes an approval for) anything. A parked call takes its
        // slot once the human has decided.
        let who = Who {
            principal: call.principal.name.clone(),
            session: call.ctx.session_id.clone(),
        };
        // Like admission, the background bounds refuse before anything is recorded.
        let held = if background {
            Some(
                self.runs
                    .hold_background(&call.principal.name, &call.ctx.session_id)?,
            )
        } else {
            None
        };
        let slot = self
            .admission
            .admit(who.clone(), reservation)
            .instrument(span.clone())
            .await?;
        // The session is this executor's before anything is decided: a call the ledger routes
        // elsewhere records no decision. After admission, so a flood is shed before it writes
        // claims to the ledger.
        session.claim().instrument(span.clone()).await?;
        let verdict = self.gate.check(&call).instrument(span.clone()).await?;
        let Some(mut tool) = tool.take() else {
            return Err(status::status(
                toolgate_core::Reason::Internal,
                "a run lost its span",
                [],
            ));
        };
        match verdict {
            Checked::Allowed(proof) => {
                let stream = self.start(proof, slot, spec, tool, &call, &session, persist, held)?;
                let stream = with_first_events(stream).await;
                Ok(Response::new(in_session(stream, session)))
            }
            Checked::Parked(parked) => {
                // Waiting for a human holds no slot.
                drop(slot);
                let first = pb::RunResponse {
                    event: Some(pb::run_response::Event::AwaitingApproval(parked.event())),
                };
                let this = self.clone();
                let rest = async move {
                    let admission = this.admission.clone();
                    let admit = || admission.admit(who.clone(), reservation);
                    let started = match this
                        .gate
                        .wait_admitted(&call, parked, admit)
                        .instrument(span.clone())
                        .await
                    {
                        Ok((proof, slot)) => this
                            .start(proof, slot, spec, tool, &call, &session, persist, held)
                            .map(|stream| in_session(stream, session)),
                        Err(e) => {
                            tool.fail(&e);
                            Err(e)
                        }
                    };
                    wire::count_refusal(this.gate.metrics(), started)
                        .unwrap_or_else(|e| Box::pin(stream::iter([Err(e)])))
                };
                let stream: RunStream =
                    Box::pin(stream::iter([Ok(first)]).chain(stream::once(rest).flatten()));
                Ok(Response::new(stream))
            }
        }
    }
}

/// How long a started run's answer waits for the run's next event before its headers and
/// `Started` leave. A short run (`/bin/true`) ends within it, so the headers, `Started`,
/// `Exited` and the trailers leave in one write and the client wakes once, not twice; a longer
/// run's first output is late by at most this much.
const FIRST_EVENTS_WAIT: Duration = Duration::from_millis(2);

/// The run's first event and, when it is `Started`, the event after it if that comes within
/// [`FIRST_EVENTS_WAIT`], ahead of the rest of `stream`. Nothing is dropped or reordered: on
/// the deadline the rest simply follows.
///
/// The first event (`Started`, or the `Exited` of a run that could not start) is awaited
/// without a deadline: a sandboxed run's child is cloned on the runner's spawner thread, and
/// its answer has nothing to say before the clone is done. The deadline counts from it.
async fn with_first_events(mut stream: RunStream) -> RunStream {
    let Some(first) = stream.next().await else {
        return Box::pin(stream::empty());
    };
    let started = matches!(
        &first,
        Ok(pb::RunResponse {
            event: Some(pb::run_response::Event::Started(_))
        })
    );
    let mut head = vec![first];
    if started {
        let deadline = tokio::time::Instant::now() + FIRST_EVENTS_WAIT;
        if let Ok(next) = tokio::time::timeout_at(deadline, stream.next()).await {
            match next {
                Some(item) => head.push(item),
                None => return Box::pin(stream::iter(head)),
            }
        }
    }
    Box::pin(stream::iter(head).chain(stream))
}

/// Keeps the call counted in its session until its response stream ends or is dropped.
fn in_session(stream: RunStream, session: session::Entry) -> RunStream {
    Box::pin(stream.map(move |item| {
        let _in_flight = &session;
        item
    }))
}

#[tonic::async_trait]
impl ExecutorService for ProcessAdapter {
    async fn get_capabilities(
        &self,
        request: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::GetCapabilitiesResponse>, Status> {
        wire::caller(&request, "ExecutorService/GetCapabilities")?;
        Ok(Response::new(wire::capabilities::response(
            &wire::capabilities::Offered {
                identity: &self.identity,
                capabilities: self.confined.capabilities(),
                admission: self.admission.settings(),
                disk: self.confined.disk_limits(),
                sessions: self.sessions.settings(),
                runs: self.runs.settings(),
                workspace: &self.view,
            },
        )))
    }
}
