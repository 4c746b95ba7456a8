//! `run_command`: one streamed `ProcessService/Run`, its output followed to the exit and
//! reported as MCP progress when the client asked for it.

use rmcp::model::ProgressNotificationParam;
use serde_json::Value;
use tonic::Status;
use toolgate_contracts::executor::v1 as pb;

use super::Cx;
use super::output::{background_text, finish, limits_output, run_text};
use crate::outcome::{Outcome, Receipt, tier_of};
use crate::tools::{RunCommandArgs, RunCommandOutput};

/// Bytes of each run stream returned live (the head) to the model by default; a model's
/// context has no room for more, and MCP clients cap a message (the Python SDK at 1 MiB).
const RUN_HEAD_BYTES: u64 = 48 << 10;
/// Bytes of each run stream's end kept after the head.
const RUN_TAIL_BYTES: u64 = 16 << 10;

impl Cx<'_> {
    pub(super) async fn run(&self, args: Value) -> Outcome {
        let a: RunCommandArgs = match self.parse(args) {
            Ok(a) => a,
            Err(o) => return *o,
        };
        let message = pb::RunRequest {
            context: Some(self.call_context()),
            command: Some(pb::run_request::Command::Script(a.script)),
            cwd: a.cwd,
            env: a.env.into_iter().collect(),
            stdin: a.stdin.map(String::into_bytes),
            timeout: a.timeout_ms.map(|ms| prost_types::Duration {
                seconds: (ms / 1000) as i64,
                nanos: ((ms % 1000) * 1_000_000) as i32,
            }),
            limits: Some(pb::OutputLimits {
                stdout_cap_bytes: RUN_HEAD_BYTES,
                stderr_cap_bytes: RUN_HEAD_BYTES,
                tail_bytes: RUN_TAIL_BYTES,
                kill_on_cap: false,
            }),
            sandbox_profile: String::new(),
            background: a.background,
            persist_cwd: a.persist_cwd,
        };
        let result = self
            .traced(
                "toolgate.executor.v1.ProcessService/Run",
                message,
                |request| async move {
                    let stream = self.shared.process().run(request).await?.into_inner();
                    self.follow(stream).await
                },
            )
            .await;
        match result {
            Ok((output, receipt)) if output.background => {
                let text = background_text(&output);
                Outcome::ran(&output, text, receipt, None)
            }
            Ok((output, receipt)) => {
                let text = run_text(&output);
                // A run that could not start, or was cut short, is the tool failing.
                let error_type = match output.status.as_str() {
                    "timed_out" => Some("timeout"),
                    "cancelled" => Some("cancelled"),
                    "spawn_failed" => Some("spawn_failed"),
                    "signaled" => Some("signaled"),
                    _ => None,
                };
                Outcome::ran(&output, text, receipt, error_type)
            }
            Err(s) => Outcome::refused(&s),
        }
    }

    /// Reads a run's events to its end, reporting output as progress when the client asked.
    async fn follow(
        &self,
        mut stream: tonic::Streaming<pb::RunResponse>,
    ) -> Result<(RunCommandOutput, Receipt), Status> {
        use pb::run_response::Event;
        let token = self.context.meta.get_progress_token();
        let mut out = RunCommandOutput::default();
        let mut receipt = Receipt::default();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut progress = 0u64;
        while let Some(event) = stream.message().await? {
            let note = match event.event {
                Some(Event::AwaitingApproval(w)) if !w.destination.is_empty() => Some(format!(
                    "the command's connection to {} waits for a human to decide approval {}: {}",
                    w.destination, w.approval_id, w.message
                )),
                Some(Event::AwaitingApproval(w)) => Some(format!(
                    "waiting for a human to decide approval {}: {}",
                    w.approval_id, w.message
                )),
                Some(Event::Started(s)) => {
                    out.run_id = s.run_id;
                    out.cwd = s.cwd;
                    if s.background {
                        out.background = true;
                        out.status = "running".to_owned();
                        out.pid = s.pid;
                    }
                    receipt = Receipt {
                        tier: Some(tier_of(&s.decision)),
                        rule_id: s.rule_id,
                        approval_id: s.approval_id,
                        decision_id: s.decision_id,
                    };
                    if let Some(i) = s.isolation {
                        out.sandbox_profile = i.sandbox_profile;
                        out.limits = i.limits.map(limits_output);
                    }
                    None
                }
                Some(Event::Output(chunk)) => {
                    progress += chunk.data.len() as u64;
                    let note = String::from_utf8_lossy(&chunk.data).into_owned();
                    if chunk.stream == pb::Stream::Stderr as i32 {
                        stderr.extend_from_slice(&chunk.data);
                    } else {
                        stdout.extend_from_slice(&chunk.data);
                    }
                    Some(note)
                }
                Some(Event::Exited(x)) => {
                    finish(&mut out, x, &stdout, &stderr);
                    return Ok((out, receipt));
                }
                None => None,
            };
            if out.background {
                // The executor ends a background run's call after `started`.
                continue;
            }
            if let (Some(token), Some(note)) = (&token, note) {
                let _ = self
                    .context
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), progress as f64)
                            .with_message(note),
                    )
                    .await;
            }
        }
        if out.background {
            return Ok((out, receipt));
        }
        Err(Status::unavailable(
            "the executor ended the run's stream without an exit event",
        ))
    }
}
