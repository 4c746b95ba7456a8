//! The tonic adapters for `ProcessService.Run` and `ExecutorService.GetCapabilities`.
//!
//! A run's events flow from the runner's bounded channel straight into the response stream:
//! when the client is slow, the channel fills and the runner stops reading the child's pipe
//! (backpressure); when the client goes away, the stream is dropped, the receiver with it,
//! and the runner kills the child and every descendant.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_server::ExecutorService;
use toolgate_contracts::executor::v1::process_service_server::ProcessService;
use toolgate_contracts::status;
use toolgate_core::ToolKind;
use toolgate_fs::{Workspace, WorkspacePath};
use toolgate_process::{
    Command, Event, Isolation, KillMechanism, RunRequest, RunSpec, Runner, Status as RunStatus,
    StreamSummary,
};

use crate::wire::{self, CallContext};

/// Serves `ProcessService` and `ExecutorService`.
#[derive(Debug, Clone)]
pub struct ProcessAdapter {
    workspace: Arc<Workspace>,
    runner: Runner,
    identity: common::ExecutorIdentity,
    view: pb::WorkspaceView,
}

impl ProcessAdapter {
    /// An adapter running children with `runner` inside `workspace`; `view` is what
    /// `GetCapabilities` reports about the workspace.
    pub fn new(
        workspace: Arc<Workspace>,
        runner: Runner,
        identity: common::ExecutorIdentity,
        view: pb::WorkspaceView,
    ) -> Self {
        ProcessAdapter {
            workspace,
            runner,
            identity,
            view,
        }
    }

    /// Parses the wire request into a validated run specification.
    async fn spec(&self, r: pb::RunRequest) -> Result<(CallContext, RunSpec), Status> {
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
        let cwd_raw = if r.cwd.is_empty() {
            ".".to_owned()
        } else {
            r.cwd
        };
        let cwd_path = WorkspacePath::try_from(cwd_raw).map_err(|e| status::from_error(&e))?;
        let ws = self.workspace.clone();
        let cwd = tokio::task::spawn_blocking(move || ws.open_directory(&cwd_path))
            .await
            .map_err(|e| status::status(toolgate_core::Reason::Internal, e.to_string(), []))?
            .map_err(|e| status::from_error(&e))?;
        let limits = r.limits.unwrap_or_default();
        let mut env: Vec<(String, String)> = r.env.into_iter().collect();
        env.sort();
        let request = RunRequest {
            command,
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
        };
        let spec = RunSpec::try_from(request).map_err(|e| status::from_error(&e))?;
        Ok((ctx, spec))
    }
}

type RunStream = Pin<Box<dyn Stream<Item = Result<pb::RunResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ProcessService for ProcessAdapter {
    type RunStream = RunStream;

    async fn run(
        &self,
        request: Request<pb::RunRequest>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let (ctx, spec) = self.spec(request.into_inner()).await?;
        let span = ctx.span(ToolKind::ProcessRun);
        let run = {
            let _entered = span.enter();
            self.runner
                .try_run(spec)
                .map_err(|e| status::from_error(&e))?
        };
        let (events, cancel) = run.into_parts();
        // The runner's own bounded channel is the response: a slow client stops the runner
        // reading the child's pipe, and when tonic drops this stream (client gone) the
        // receiver goes with it and the runner kills the run. The cancel handle lives in
        // the closure so the run is not cancelled while the stream is alive.
        let stream = tokio_stream::wrappers::ReceiverStream::new(events).map(move |event| {
            let _keep = &cancel;
            if let Event::Exited(x) = &event {
                span.in_scope(|| tracing::info!(status = ?x.status, "run ended"));
            }
            Ok(to_wire(event))
        });
        let stream: RunStream = Box::pin(stream);
        Ok(Response::new(stream))
    }
}

fn to_wire(event: Event) -> pb::RunResponse {
    use pb::run_response::Event as E;
    let event = match event {
        Event::Started(s) => E::Started(pb::Started {
            pid: s.pid as i32,
            isolation: Some(isolation(&s.isolation)),
            started_at: Some(prost_types::Timestamp::from(s.started_at)),
            decision_id: String::new(),
        }),
        Event::Output(o) => E::Output(pb::OutputChunk {
            stream: match o.stream {
                toolgate_process::Stream::Stdout => pb::Stream::Stdout,
                toolgate_process::Stream::Stderr => pb::Stream::Stderr,
            } as i32,
            offset: o.offset,
            data: o.data,
        }),
        Event::Exited(x) => E::Exited(pb::Exited {
            status: Some(exit_status(&x.status)),
            stdout: Some(summary(&x.stdout)),
            stderr: Some(summary(&x.stderr)),
            usage: Some(common::ResourceUsage {
                wall_time: Some(proto_duration(x.usage.wall_time)),
                user_cpu_time: Some(proto_duration(x.usage.user_cpu)),
                system_cpu_time: Some(proto_duration(x.usage.system_cpu)),
                peak_rss_bytes: x.usage.peak_rss_bytes,
            }),
            finished_at: Some(prost_types::Timestamp::from(x.finished_at)),
        }),
    };
    pb::RunResponse { event: Some(event) }
}

fn summary(s: &StreamSummary) -> pb::StreamSummary {
    pb::StreamSummary {
        stats: Some(common::OutputStats {
            total_bytes: s.total_bytes,
            dropped_bytes: s.dropped_bytes,
            truncated: s.truncated,
        }),
        tail: s.tail.clone(),
        tail_offset: s.tail_offset,
    }
}

/// The wire form of a run's final status.
pub(crate) fn exit_status(s: &RunStatus) -> common::ExitStatus {
    use common::exit_status::Status as S;
    let status = match s {
        RunStatus::Exited(code) => S::Exited(*code),
        RunStatus::Signaled {
            signal,
            core_dumped,
        } => S::Signaled(common::Signaled {
            signal: *signal,
            name: toolgate_process::signal_name(*signal),
            core_dumped: *core_dumped,
        }),
        RunStatus::TimedOut { timeout, killed } => S::TimedOut(common::TimedOut {
            timeout: Some(proto_duration(*timeout)),
            killed: *killed,
        }),
        RunStatus::Cancelled(cause) => S::Cancelled(common::Cancelled {
            cause: cause.as_str().to_owned(),
        }),
        RunStatus::SpawnFailed { reason, errno } => S::SpawnFailed(common::SpawnFailed {
            reason: reason.clone(),
            errno: *errno,
        }),
    };
    common::ExitStatus {
        status: Some(status),
    }
}

fn kill_mechanism(k: KillMechanism) -> pb::KillMechanism {
    match k {
        KillMechanism::PidNamespace => pb::KillMechanism::PidNamespace,
        KillMechanism::Cgroup => pb::KillMechanism::Cgroup,
        KillMechanism::ProcessGroup => pb::KillMechanism::ProcessGroup,
    }
}

fn isolation(i: &Isolation) -> pb::Isolation {
    pb::Isolation {
        kill_mechanism: kill_mechanism(i.kill_mechanism) as i32,
        own_process_group: i.own_process_group,
        no_new_privs: i.no_new_privs,
        landlock_abi: i.landlock_abi,
        seccomp: i.seccomp,
        namespaces: i.namespaces.iter().map(|s| (*s).to_owned()).collect(),
        sandbox_profile: String::new(),
    }
}

/// A wire duration; the configured limits are far below the (saturated) overflow point.
fn proto_duration(d: Duration) -> prost_types::Duration {
    d.try_into().unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

#[tonic::async_trait]
impl ExecutorService for ProcessAdapter {
    async fn get_capabilities(
        &self,
        _request: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::GetCapabilitiesResponse>, Status> {
        let c = self.runner.capabilities();
        let l = &c.limits;
        Ok(Response::new(pb::GetCapabilitiesResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            identity: Some(self.identity.clone()),
            namespaces: Some(pb::Namespaces {
                user: c.namespaces.user,
                pid: c.namespaces.pid,
                net: c.namespaces.net,
                mount: c.namespaces.mount,
            }),
            landlock_abi: c.landlock_abi,
            seccomp: c.seccomp,
            cgroup: Some(pb::CgroupSupport {
                available: c.cgroup.available,
                writable: c.cgroup.writable,
                mount_point: c
                    .cgroup
                    .mount_point
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            }),
            kill_mechanism: kill_mechanism(c.kill_mechanism) as i32,
            limits: Some(pb::RunLimitsView {
                default_timeout: Some(proto_duration(l.default_timeout)),
                max_timeout: Some(proto_duration(l.max_timeout)),
                kill_grace: Some(proto_duration(l.kill_grace)),
                default_cap_bytes: l.default_cap_bytes,
                max_cap_bytes: l.max_cap_bytes,
                default_tail_bytes: l.default_tail_bytes,
                max_concurrent_runs: l.max_concurrent_runs,
                rlimits: l
                    .rlimits
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), *v))
                    .collect(),
                allowed_env: l.allowed_env.clone(),
            }),
            workspace: Some(self.view.clone()),
            tools: ToolKind::ALL
                .iter()
                .map(|k| toolgate_contracts::convert::tool_to_wire(*k) as i32)
                .collect(),
        }))
    }
}
