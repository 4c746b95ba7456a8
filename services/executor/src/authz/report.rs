//! Outcome reporting: with retries, never failing the user's call.
//!
//! A call that ran is answered only once its outcome is recorded ([`Reporter::record`]), or
//! after [`RECORD_WAIT`] when the policy service cannot take it: an answer the client saw
//! then has its outcome in the ledger even if the executor dies the next instant. The
//! delivery itself runs in a background task, so it goes on (with its retries) past that wait
//! and past a client that went away.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{oneshot, watch};
use tonic::{Code, Status};
use toolgate_core::backoff::Backoff;
use toolgate_policy_api::{
    Authorizer, Ended, ExceededLimit, ExecutorIdentity, NetworkDestination, Outcome, OutcomeReport,
    OutputStats, ResourceUsage, RunIsolation, RunLimits,
};
use toolgate_process::{Isolation, Status as RunStatus, StreamSummary, Usage};

use super::Authorized;
use crate::egress::Destination;

/// Attempts per outcome before it is given up (and logged).
const ATTEMPTS: u32 = 8;
/// Ceiling of the first retry delay; doubled after each failure up to [`MAX_BACKOFF`]
/// (toolgate's one backoff policy, fully jittered).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Ceiling of the delay between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a call's answer waits for its outcome to be recorded before it leaves anyway
/// (marked not recorded where the protocol can say so); the report is still retried.
pub(crate) const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Reports outcomes to the policy service from background tasks.
#[derive(Clone)]
pub(crate) struct Reporter {
    authorizer: Arc<dyn Authorizer>,
    identity: ExecutorIdentity,
    in_flight: Arc<watch::Sender<usize>>,
}

impl Reporter {
    /// A reporter naming this executor as the one that ran the calls.
    pub(crate) fn new(authorizer: Arc<dyn Authorizer>, identity: ExecutorIdentity) -> Self {
        Reporter {
            authorizer,
            identity,
            in_flight: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Reports `outcome` for the call `proof` allowed, in the background. Safe to call from
    /// `Drop`: without a runtime the outcome is logged as lost.
    pub(crate) fn report(&self, proof: &Authorized, outcome: Ran) {
        self.spawn(proof.decision_id(), outcome);
    }

    /// Reports `outcome` and waits until it is recorded, at most [`RECORD_WAIT`]: true when
    /// it was. Call it before answering, so that what the client sees is durable.
    pub(crate) fn record(
        &self,
        proof: &Authorized,
        outcome: Ran,
    ) -> impl Future<Output = bool> + Send + 'static {
        self.record_for(proof.decision_id(), outcome)
    }

    /// [`Reporter::record`] for the decision `decision_id`.
    pub(crate) fn record_for(
        &self,
        decision_id: &str,
        outcome: Ran,
    ) -> impl Future<Output = bool> + Send + 'static {
        let recorded = self.spawn(decision_id, outcome);
        async move {
            let Some(recorded) = recorded else {
                return false;
            };
            matches!(
                tokio::time::timeout(RECORD_WAIT, recorded).await,
                Ok(Ok(true))
            )
        }
    }

    /// Starts the delivery; the receiver says whether it succeeded.
    fn spawn(&self, decision_id: &str, outcome: Ran) -> Option<oneshot::Receiver<bool>> {
        let request = OutcomeReport {
            decision_id: decision_id.to_owned(),
            outcome: outcome.into_outcome(self.identity.clone()),
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::error!(decision_id = %request.decision_id, "outcome not recorded: no runtime");
            return None;
        };
        self.in_flight.send_modify(|n| *n += 1);
        let this = self.clone();
        let (done, recorded) = oneshot::channel();
        // The report belongs to the call's trace, though it outlives the call.
        let traced = toolgate_runtime::telemetry::in_current_trace(async move {
            let _ = done.send(this.deliver(request).await);
        });
        let in_flight = Arc::clone(&self.in_flight);
        handle.spawn(async move {
            traced.await;
            // Only now, with the traced future dropped: it held the call's span, which cannot
            // end while it does. Counted down earlier, `flush` let the executor flush its spans
            // at exit before that span had ended, and the span was lost.
            in_flight.send_modify(|n| *n -= 1);
        });
        Some(recorded)
    }

    /// Delivers `request`, retrying; true when it was recorded.
    async fn deliver(&self, request: OutcomeReport) -> bool {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        for attempt in 1..=ATTEMPTS {
            match self.authorizer.record_outcome(request.clone()).await {
                Ok(()) => return true,
                Err(f) if f.is_retriable() && attempt < ATTEMPTS => {
                    tracing::warn!(decision_id = %request.decision_id, attempt, error = %f.message, "outcome report failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(f) => {
                    tracing::error!(decision_id = %request.decision_id, attempt, reason = %f.reason, error = %f.message, "outcome not recorded");
                    return false;
                }
            }
        }
        false
    }

    /// Waits (at most `limit`) until every outcome reported so far was delivered or given up.
    pub(crate) async fn flush(&self, limit: Duration) {
        let mut rx = self.in_flight.subscribe();
        if tokio::time::timeout(limit, rx.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                pending = *rx.borrow(),
                "outcome reports still pending at shutdown"
            );
        }
    }
}

/// How an allowed call ended, before it is reported.
#[derive(Debug)]
pub(crate) struct Ran {
    /// When it started.
    pub started_at: SystemTime,
    /// When it ended.
    pub finished_at: SystemTime,
    /// What happened.
    pub finished: Finished,
}

impl Ran {
    /// The protocol's form of this outcome, reported by `executor`.
    fn into_outcome(self, executor: ExecutorIdentity) -> Outcome {
        let completed = || Some(Ended::Completed("ok".to_owned()));
        let mut o = match self.finished {
            Finished::Fs { code, reason } => Outcome {
                ended: if code == "OK" { completed() } else { None },
                result_code: code.to_owned(),
                result_reason: reason,
                ..Outcome::default()
            },
            Finished::Run {
                status,
                usage,
                stdout,
                stderr,
                isolation,
                audit,
                limit,
                network,
            } => Outcome {
                ended: Some(ended(&status)),
                usage: Some(resource_usage(&usage)),
                stdout: Some(stdout),
                stderr: Some(stderr),
                isolation: isolation.map(|i| run_isolation(*i)),
                audit: audit.map(|a| *a),
                limit_exceeded: limit.map(|l| ExceededLimit {
                    resource: l.as_str().to_owned(),
                    limit: l.value(),
                    message: l.message(),
                }),
                network: network.iter().map(destination).collect(),
                ..Outcome::default()
            },
            Finished::Connection(d) => Outcome {
                ended: completed(),
                result_code: "OK".to_owned(),
                network: vec![destination(&d)],
                ..Outcome::default()
            },
            Finished::NotStarted { code, reason } => Outcome {
                not_started: true,
                result_code: code.to_owned(),
                result_reason: reason,
                ..Outcome::default()
            },
            Finished::Disconnected => Outcome {
                ended: Some(Ended::Cancelled(
                    toolgate_process::CancelCause::ClientDisconnected
                        .as_str()
                        .to_owned(),
                )),
                ..Outcome::default()
            },
        };
        o.started_at = Some(self.started_at);
        o.finished_at = Some(self.finished_at);
        o.executor = Some(executor);
        o
    }
}

/// What an allowed call did, in the executor's terms.
#[derive(Debug)]
pub(crate) enum Finished {
    /// A filesystem call: the status code it ended with (`OK`, `NOT_FOUND`) and, for an
    /// error, its reason.
    Fs {
        /// The gRPC code name.
        code: &'static str,
        /// The `ErrorInfo` reason; empty for `OK`.
        reason: String,
    },
    /// A run that ended.
    Run {
        /// How.
        status: RunStatus,
        /// What it used.
        usage: Usage,
        /// Its stdout.
        stdout: OutputStats,
        /// Its stderr.
        stderr: OutputStats,
        /// What it was given, from its `Started` event.
        isolation: Option<Box<Isolation>>,
        /// What the after-run audit of the protected set found and undid.
        audit: Option<Box<Result<toolgate_core::AuditReport, String>>>,
        /// The resource limit the run ran into, if any.
        limit: Option<toolgate_process::LimitExceeded>,
        /// The destinations its egress gate saw.
        network: Vec<Destination>,
    },
    /// A `net.connect` decision at the end of its run: the one destination it let through.
    Connection(Box<Destination>),
    /// A run whose client went away before it ended.
    Disconnected,
    /// A call refused after its decision but before it started (no run slot, sandbox
    /// unavailable, a limit): nothing ran, so the policy releases it for a retry.
    NotStarted {
        /// The gRPC code name of the refusal.
        code: &'static str,
        /// Its `ErrorInfo` reason.
        reason: String,
    },
}

/// How much of a stream a run wrote and delivered.
pub(crate) fn output_stats(s: &StreamSummary) -> OutputStats {
    OutputStats {
        total_bytes: s.total_bytes,
        dropped_bytes: s.dropped_bytes,
        truncated: s.truncated,
    }
}

/// How a run ended, in the protocol's terms.
fn ended(s: &RunStatus) -> Ended {
    match s {
        RunStatus::Exited(code) => Ended::Exited(*code),
        RunStatus::Signaled {
            signal,
            core_dumped,
        } => Ended::Signaled {
            signal: *signal,
            name: toolgate_process::signal_name(*signal),
            core_dumped: *core_dumped,
        },
        RunStatus::TimedOut { timeout, killed } => Ended::TimedOut {
            timeout: Some(*timeout),
            killed: *killed,
        },
        RunStatus::Cancelled(cause) => Ended::Cancelled(cause.as_str().to_owned()),
        RunStatus::SpawnFailed { reason, errno } => Ended::SpawnFailed {
            reason: reason.clone(),
            errno: *errno,
        },
    }
}

fn resource_usage(u: &Usage) -> ResourceUsage {
    ResourceUsage {
        wall_time: u.wall_time,
        user_cpu: u.user_cpu,
        system_cpu: u.system_cpu,
        peak_rss_bytes: u.peak_rss_bytes,
        peak_memory_bytes: u.peak_memory_bytes,
        oom_killed: u.oom_killed,
        cpu_throttled: u.cpu_throttled,
    }
}

fn run_isolation(i: Isolation) -> RunIsolation {
    let l = &i.limits;
    RunIsolation {
        sandbox_profile: i.sandbox_profile,
        sandboxed: i.sandboxed,
        namespaces: i.namespaces.iter().map(|n| (*n).to_owned()).collect(),
        landlock_abi: i.landlock_abi,
        seccomp: i.seccomp,
        network: i.network,
        pid_limit: i.pid_limit.unwrap_or(0),
        limits: Some(RunLimits {
            enforced: l.enforced.as_str().to_owned(),
            memory_bytes: l.memory_bytes.unwrap_or(0),
            pids: l.pids.unwrap_or(0),
            cpu_millicores: l.cpu_millicores.unwrap_or(0),
            cpu_seconds: l.cpu_seconds.unwrap_or(0),
            tmpfs_bytes: l.tmpfs_bytes.unwrap_or(0),
            tmpfs_inodes: l.tmpfs_inodes.unwrap_or(0),
        }),
    }
}

/// A destination a run's egress gate saw, in the protocol's terms.
pub(crate) fn destination(d: &Destination) -> NetworkDestination {
    NetworkDestination {
        host: d.host.clone(),
        port: u32::from(d.port),
        protocol: "tcp".to_owned(),
        address: d.address.clone(),
        tier: d.tier.parse().ok(),
        rule_id: d.rule_id.clone(),
        approval_id: d.approval_id.clone(),
        connections: d.connections,
        refused: d.refused,
        bytes_sent: d.bytes_sent,
        bytes_received: d.bytes_received,
        refusal: d.refusal.to_owned(),
        message: d.message.clone(),
    }
}

/// A call refused after its decision but before it started: not an execution.
pub(crate) fn not_started(refusal: &Status) -> Ran {
    let now = SystemTime::now();
    Ran {
        started_at: now,
        finished_at: now,
        finished: Finished::NotStarted {
            code: toolgate_contracts::status::code_name(refusal.code()),
            reason: toolgate_contracts::status::error_info(refusal)
                .map(|(r, _)| r)
                .unwrap_or_default(),
        },
    }
}

/// The outcome of a filesystem call: its times and the status code and reason it ended with.
pub(crate) fn fs_outcome(started_at: SystemTime, result: Result<(), &Status>) -> Ran {
    let (code, reason) = match result {
        Ok(()) => (Code::Ok, String::new()),
        Err(s) => (
            s.code(),
            toolgate_contracts::status::error_info(s)
                .map(|(r, _)| r)
                .unwrap_or_default(),
        ),
    };
    Ran {
        started_at,
        finished_at: SystemTime::now(),
        finished: Finished::Fs {
            code: toolgate_contracts::status::code_name(code),
            reason,
        },
    }
}
