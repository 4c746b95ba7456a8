//! `toolgate run`: one ProcessService.Run, its output streamed live, its exit status as ours;
//! or with `--background`, its run id as soon as it started.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use toolgate_contracts::common::v1::{self as common, CallContext, exit_status::Status};
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_core::Reason;

use crate::client::{self, CallError, Exit};

/// Exit code when the run hit its timeout (as `timeout(1)`).
pub(crate) const EXIT_TIMEOUT: u8 = 124;
/// Exit code when toolgate itself failed: unreachable service, bad request, no credential,
/// executor busy, run cancelled, call id already used.
pub(crate) const EXIT_TOOLGATE: u8 = 125;
/// Exit code when the call was refused: a policy deny, or an approver denied it.
pub(crate) const EXIT_REFUSED: u8 = 126;
/// Exit code when the program could not be started.
pub(crate) const EXIT_SPAWN_FAILED: u8 = 127;
/// Exit code when the call needs an approval that is still pending (or expired): approve it,
/// then repeat the same command (EX_TEMPFAIL).
pub(crate) const EXIT_APPROVAL_PENDING: u8 = 75;

const EXIT_CODES: &str = "\
EXIT STATUS:
  0                         with --background, once the run started (it goes on)
  the child's exit code     when it exited normally
  128 + N                   when it was killed by signal N
  75                        approval required and still pending (or expired) when --wait ran out:
                            approve it (toolgate approvals approve ID), then repeat the command
  124                       the run hit its timeout
  125                       toolgate failed: service unreachable, invalid request, no credential,
                            executor busy, run cancelled, or --call-id already used
  126                       refused: denied by the policy or by an approver
  127                       the program could not be started";

/// Arguments of `toolgate run`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct Args {
    /// The executor endpoint.
    #[arg(long, env = "TOOLGATE_EXECUTOR", default_value = client::DEFAULT_EXECUTOR)]
    executor: String,
    #[command(flatten)]
    token: client::TokenArgs,
    /// The session the call belongs to (approvals are bound to it).
    #[arg(long, env = "TOOLGATE_SESSION", default_value = "cli")]
    session: String,
    /// The idempotency key; a fresh UUID when omitted. Reusing one that already ran does not run
    /// the command again.
    #[arg(long)]
    call_id: Option<String>,
    /// Working directory, workspace-relative.
    #[arg(long, default_value = "")]
    cwd: String,
    /// Wall-clock limit (30, 30s, 5m; default: the executor's).
    #[arg(long, value_parser = crate::duration::parse)]
    timeout: Option<Duration>,
    /// How long to wait for a human when the policy asks (0: fail at once with exit 75).
    #[arg(long, value_parser = crate::duration::parse, default_value = "0")]
    wait: Duration,
    /// An environment addition `NAME=VALUE` (repeatable; the executor's allowlist applies).
    #[arg(long = "env", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Feed this file to the child's stdin (`-` for ours); default /dev/null.
    #[arg(long)]
    stdin_file: Option<PathBuf>,
    /// Free text shown to the approver.
    #[arg(long, default_value = "toolgate run")]
    description: String,
    /// The sandbox profile to run under (`workspace`, `readonly`, `network`, ...; default: the
    /// executor's). A policy rule that names a profile for the command wins.
    #[arg(long, value_name = "PROFILE", default_value = "")]
    profile: String,
    /// Print start and exit details to stderr.
    #[arg(short, long)]
    verbose: bool,
    /// Print every event as one JSON line on stdout (`awaiting_approval`, `started`,
    /// `output` with `data` as UTF-8 or `data_base64`, `exited`, or `refused`) instead of the
    /// child's raw output; the exit status is the same.
    #[arg(long)]
    json: bool,
    /// Start the run in the background: print its run id (with `--json`, one JSON object with
    /// `run_id`, `session_id`, `executor`, `decision_id`, `pid`) as soon as it started and exit
    /// 0 while it goes on. Read it with `toolgate runs logs RUN_ID`, stop it with `toolgate
    /// runs stop RUN_ID`.
    #[arg(long)]
    background: bool,
    /// Start in the session's working directory (when `--cwd` is empty; a relative `--cwd` is
    /// resolved from it) with its kept variables, and keep the script's final working
    /// directory and the allowed variables it exported for the session's next
    /// `--persist-cwd` runs.
    #[arg(long)]
    persist_cwd: bool,
    /// Run this bash script instead of an argv.
    #[arg(long, conflicts_with = "argv")]
    script: Option<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true)]
    argv: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))
}

/// Runs the command and exits with its status.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let command = match (&args.script, args.argv.is_empty()) {
        (Some(s), true) => pb::run_request::Command::Script(s.clone()),
        (None, false) => pb::run_request::Command::Argv(pb::Argv {
            args: args.argv.clone(),
        }),
        _ => anyhow::bail!(
            "give a command after `--` (toolgate run -- ls -la) or a script (toolgate run --script 'make test')"
        ),
    };
    let stdin = match &args.stdin_file {
        None => None,
        Some(p) if p.as_os_str() == "-" => Some(crate::client::read_capped(
            std::io::stdin(),
            "standard input",
        )?),
        Some(p) => {
            let file =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            Some(crate::client::read_capped(file, &p.display().to_string())?)
        }
    };
    let request = pb::RunRequest {
        context: Some(CallContext {
            call_id: args
                .call_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            session_id: args.session.clone(),
            approval_wait: (!args.wait.is_zero()).then(|| crate::duration::to_proto(args.wait)),
            description: args.description.clone(),
        }),
        command: Some(command),
        cwd: args.cwd.clone(),
        env: args.env.iter().cloned().collect::<HashMap<_, _>>(),
        stdin,
        timeout: args.timeout.map(crate::duration::to_proto),
        limits: None,
        sandbox_profile: args.profile.clone(),
        background: args.background,
        persist_cwd: args.persist_cwd,
    };
    let channel = match client::connect("executor", &args.executor, &args.token).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolgate: {e:#}");
            return Err(Exit(EXIT_TOOLGATE).into());
        }
    };
    let mut client = ProcessServiceClient::new(channel);
    let code = match (client.run(request).await, args.json) {
        (Ok(stream), json) if args.background => {
            started_in_background(stream.into_inner(), &args.session, json, args.verbose).await
        }
        (Ok(stream), false) => follow(stream.into_inner(), args.verbose).await,
        (Ok(stream), true) => follow_json(stream.into_inner()).await,
        (Err(status), false) => refused(status),
        (Err(status), true) => refused_json(status),
    };
    Err(Exit(code).into())
}

/// Streams events until `exited`; returns the exit code to use.
async fn follow(mut stream: tonic::Streaming<pb::RunResponse>, verbose: bool) -> u8 {
    use pb::run_response::Event;
    loop {
        let event = match stream.message().await {
            Ok(Some(m)) => m.event,
            Ok(None) => {
                eprintln!("toolgate: the run ended without an exit status");
                return EXIT_TOOLGATE;
            }
            Err(status) => return refused(status),
        };
        let result = match event {
            Some(Event::AwaitingApproval(a)) if !a.destination.is_empty() => {
                // A connection of the running command, held by the executor's egress gate.
                eprintln!(
                    "toolgate: connection to {} waits for approval {}: toolgate approvals approve {}",
                    a.destination, a.approval_id, a.approval_id
                );
                Ok(())
            }
            Some(Event::AwaitingApproval(a)) => {
                eprintln!(
                    "toolgate: {}\ntoolgate: waiting until {} for a decision; approve with: toolgate approvals approve {}\ntoolgate: awaiting approval {}",
                    a.message,
                    crate::render::time(a.wait_deadline.as_ref()),
                    a.approval_id,
                    a.approval_id
                );
                Ok(())
            }
            Some(Event::Started(s)) => {
                if verbose {
                    eprintln!(
                        "toolgate: started pid {} (decision {})",
                        s.pid, s.decision_id
                    );
                }
                Ok(())
            }
            Some(Event::Output(chunk)) => write_chunk(chunk.stream, &chunk.data),
            Some(Event::Exited(e)) => return exited(&e, verbose),
            None => Ok(()),
        };
        if let Err(e) = result {
            // A closed stdout (`| head`) ends us like it ends any Unix tool; the executor
            // sees the disconnect and kills the child.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return 128 + 13;
            }
            eprintln!("toolgate: cannot write output: {e}");
            return EXIT_TOOLGATE;
        }
    }
}

/// [`follow`] for `--json`: one JSON line per event on stdout.
async fn follow_json(mut stream: tonic::Streaming<pb::RunResponse>) -> u8 {
    use pb::run_response::Event;
    loop {
        let (line, code) = match stream.message().await {
            Ok(Some(m)) => match m.event {
                Some(Event::AwaitingApproval(a)) => (
                    serde_json::json!({"event": "awaiting_approval", "approval_id": a.approval_id,
                        "message": a.message, "wait_deadline": a.wait_deadline.map(|t| t.to_string()),
                        "destination": (!a.destination.is_empty()).then_some(a.destination)}),
                    None,
                ),
                Some(Event::Started(s)) => (
                    serde_json::json!({"event": "started", "pid": s.pid, "decision_id": s.decision_id,
                        "decision": s.decision, "approval_id": s.approval_id, "rule_id": s.rule_id,
                        "sandbox_profile": s.isolation.map(|i| i.sandbox_profile),
                        "run_id": s.run_id, "cwd": s.cwd,
                        "executor": s.executor.as_ref().map(executor_json)}),
                    None,
                ),
                Some(Event::Output(c)) => {
                    let stream = if c.stream == pb::Stream::Stderr as i32 {
                        "stderr"
                    } else {
                        "stdout"
                    };
                    let mut v = serde_json::json!({"event": "output", "stream": stream, "offset": c.offset});
                    put_data(&mut v, "data", &c.data);
                    (v, None)
                }
                Some(Event::Exited(e)) => {
                    let mut v = serde_json::json!({"event": "exited",
                        "status": crate::render::exit_status(e.status.as_ref())});
                    if let Some(Status::Exited(c)) =
                        e.status.as_ref().and_then(|s| s.status.as_ref())
                    {
                        v["exit_code"] = (*c).into();
                    }
                    for (name, summary) in [("stdout", &e.stdout), ("stderr", &e.stderr)] {
                        let Some(s) = summary else { continue };
                        let stats = s.stats.unwrap_or_default();
                        let mut o = serde_json::json!({"total_bytes": stats.total_bytes,
                            "dropped_bytes": stats.dropped_bytes, "truncated": stats.truncated});
                        if !s.tail.is_empty() {
                            put_data(&mut o, "tail", &s.tail);
                        }
                        v[name] = o;
                    }
                    if let Some(a) = &e.audit {
                        v["audit"] = audit_json(a);
                    }
                    if !e.network.is_empty() {
                        v["network"] = e.network.iter().map(destination_json).collect();
                    }
                    if let Some(state) = &e.session {
                        v["session"] = session_json(state);
                    }
                    (v, Some(exit_code(e.status.as_ref())))
                }
                None => continue,
            },
            Ok(None) => {
                eprintln!("toolgate: the run ended without an exit status");
                return EXIT_TOOLGATE;
            }
            Err(status) => return refused_json(status),
        };
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return 128 + 13;
            }
            eprintln!("toolgate: cannot write output: {e}");
            return EXIT_TOOLGATE;
        }
        if let Some(code) = code {
            return code;
        }
    }
}

/// The end of a `--background` run's call: waits for `started` (printing an approval wait
/// like [`follow`]), prints the run id (or with `json` one JSON object) and returns 0 while
/// the run goes on. A run refused or failed before it started gets the usual codes.
async fn started_in_background(
    mut stream: tonic::Streaming<pb::RunResponse>,
    session: &str,
    json: bool,
    verbose: bool,
) -> u8 {
    use pb::run_response::Event;
    loop {
        let event = match stream.message().await {
            Ok(Some(m)) => m.event,
            Ok(None) => {
                eprintln!("toolgate: the call ended before the run started");
                return EXIT_TOOLGATE;
            }
            Err(status) if json => return refused_json(status),
            Err(status) => return refused(status),
        };
        match event {
            Some(Event::AwaitingApproval(a)) => eprintln!(
                "toolgate: {}\ntoolgate: waiting until {} for a decision; approve with: toolgate approvals approve {}\ntoolgate: awaiting approval {}",
                a.message,
                crate::render::time(a.wait_deadline.as_ref()),
                a.approval_id,
                a.approval_id
            ),
            Some(Event::Started(s)) => {
                // The executor ends the call right after `started`; reading its end (briefly)
                // lets the call finish instead of being reset by our exit.
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while let Ok(Some(_)) = stream.message().await {}
                })
                .await;
                return print_background(&s, session, json, verbose);
            }
            // A run that could not start still ends with `exited`.
            Some(Event::Exited(e)) => return exited(&e, verbose),
            Some(Event::Output(_)) | None => {}
        }
    }
}

/// Prints what a caller needs to come back to a background run.
fn print_background(s: &pb::Started, session: &str, json: bool, verbose: bool) -> u8 {
    let mut out = std::io::stdout().lock();
    let written = if json {
        let v = serde_json::json!({"run_id": s.run_id, "session_id": session,
            "executor": s.executor.as_ref().map(executor_json), "decision_id": s.decision_id,
            "pid": s.pid, "cwd": s.cwd, "background": s.background});
        writeln!(out, "{}", crate::render::safe_json(&v))
    } else {
        writeln!(out, "{}", toolgate_core::display::escape(&s.run_id))
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        eprintln!("toolgate: cannot write output: {e}");
        return EXIT_TOOLGATE;
    }
    if !s.background {
        // An executor that ignored the flag ran it in the call, which is over: it was killed.
        eprintln!("toolgate: the executor did not start the run in the background");
        return EXIT_TOOLGATE;
    }
    if verbose || !json {
        let id = toolgate_core::display::escape(&s.run_id);
        eprintln!(
            "toolgate: run {id} goes on in the background (pid {}, decision {}); read it with: toolgate runs logs {id}; stop it with: toolgate runs stop {id}",
            s.pid, s.decision_id
        );
    }
    0
}

/// An executor's identity as JSON (the executor that holds the run and its session).
pub(crate) fn executor_json(e: &common::ExecutorIdentity) -> serde_json::Value {
    serde_json::json!({"executor_id": e.executor_id, "pod": e.pod, "namespace": e.namespace,
        "node": e.node, "version": e.version})
}

/// A session's kept state as JSON.
fn session_json(s: &common::SessionState) -> serde_json::Value {
    serde_json::json!({"cwd": s.cwd, "env": s.env})
}

/// `bytes` under `key` as text when it is UTF-8, else under `<key>_base64`.
fn put_data(v: &mut serde_json::Value, key: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(t) => v[key] = t.into(),
        Err(_) => {
            use base64::Engine as _;
            v[format!("{key}_base64")] = base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .into();
        }
    }
}

/// [`refused`] for `--json`: the refusal as a JSON line too.
fn refused_json(status: tonic::Status) -> u8 {
    let err = CallError::new(status);
    let v = serde_json::json!({"event": "refused", "code": toolgate_contracts::status::code_name(err.status.code()),
        "reason": err.reason, "message": err.status.message(),
        "metadata": err.metadata.iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
            .collect::<serde_json::Map<_, _>>()});
    println!("{v}");
    refused(err.status)
}

fn write_chunk(stream: i32, data: &[u8]) -> std::io::Result<()> {
    if stream == pb::Stream::Stderr as i32 {
        let mut err = std::io::stderr().lock();
        err.write_all(data)?;
        err.flush()
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(data)?;
        out.flush()
    }
}

fn exited(e: &pb::Exited, verbose: bool) -> u8 {
    for (stream, summary) in [
        (pb::Stream::Stdout, &e.stdout),
        (pb::Stream::Stderr, &e.stderr),
    ] {
        let Some(s) = summary else { continue };
        let stats = s.stats.unwrap_or_default();
        if stats.truncated {
            eprintln!(
                "\ntoolgate: {} exceeded its cap: {} of {} bytes dropped{}",
                if stream == pb::Stream::Stdout {
                    "stdout"
                } else {
                    "stderr"
                },
                stats.dropped_bytes,
                stats.total_bytes,
                if s.tail.is_empty() {
                    ""
                } else {
                    "; its last bytes follow"
                }
            );
            if !s.tail.is_empty() {
                let _ = write_chunk(stream as i32, &s.tail);
            }
        }
    }
    if let Some(a) = &e.audit {
        report_audit(a);
    }
    report_network(&e.network, verbose);
    if let (Some(state), true) = (&e.session, verbose) {
        eprintln!(
            "toolgate: the session's working directory is now {}",
            toolgate_core::display::escape(&state.cwd)
        );
    }
    if verbose {
        eprintln!(
            "toolgate: {}",
            crate::render::exit_status(e.status.as_ref())
        );
    }
    exit_code(e.status.as_ref())
}

/// Tells the person at the terminal which destinations the run's egress gate refused, and
/// with `verbose` every destination with its bytes.
fn report_network(network: &[common::NetworkDestination], verbose: bool) {
    for d in network {
        let target = if d.port == 0 {
            format!("lookup of {}", d.host)
        } else {
            format!("connection to {}:{}", d.host, d.port)
        };
        if d.refused > 0 {
            eprintln!(
                "toolgate: {target} refused ({}, {} of {}): {}",
                d.refusal,
                d.refused,
                d.connections.max(d.refused),
                d.message
            );
        } else if verbose {
            eprintln!(
                "toolgate: {target} via {}: {} connection(s), {} bytes sent, {} received",
                d.address, d.connections, d.bytes_sent, d.bytes_received
            );
        }
    }
}

/// A destination of the run's report as `--json` prints it.
fn destination_json(d: &common::NetworkDestination) -> serde_json::Value {
    serde_json::json!({"host": d.host, "port": d.port, "protocol": d.protocol,
        "address": d.address, "tier": crate::render::tier(d.tier), "rule_id": d.rule_id,
        "approval_id": d.approval_id, "connections": d.connections, "refused": d.refused,
        "bytes_sent": d.bytes_sent, "bytes_received": d.bytes_received,
        "refusal": d.refusal, "message": d.message})
}

/// Tells the person at the terminal what the run changed in the protected set and what the
/// executor undid (nothing when the run left it alone).
fn report_audit(a: &common::IntegrityAudit) {
    for v in &a.violations {
        eprintln!(
            "toolgate: the run {} protected path `{}`; {}",
            change_name(v.change),
            toolgate_core::display::escape(&v.path),
            if v.reverted {
                "the executor reverted it"
            } else {
                "the executor could NOT revert it: check it before running git, python or your editor here"
            }
        );
    }
    for g in &a.git {
        let kind = toolgate_contracts::convert::git_kind_from_wire(g.kind)
            .map_or("changed", toolgate_core::GitChangeKind::as_str);
        eprintln!(
            "toolgate: git {}: {} `{}`{}{}",
            toolgate_core::display::escape(&g.repository),
            kind.replace('_', " "),
            toolgate_core::display::escape(&g.name),
            if g.old.is_empty() && g.new.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} -> {})",
                    toolgate_core::display::escape(short(&g.old)),
                    toolgate_core::display::escape(short(&g.new))
                )
            },
            if g.reverted {
                "; the executor put it back"
            } else {
                ""
            }
        );
    }
    if !a.completed {
        eprintln!(
            "toolgate: the after-run check of the protected set did not finish: {}",
            toolgate_core::display::escape(&a.error)
        );
    }
}

/// An object id shortened as git shows one; anything else as it is.
fn short(v: &str) -> &str {
    if v.len() >= 40 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        &v[..12]
    } else if v.is_empty() {
        "none"
    } else {
        v
    }
}

fn change_name(c: i32) -> &'static str {
    match common::IntegrityChange::try_from(c) {
        Ok(common::IntegrityChange::Created) => "created",
        Ok(common::IntegrityChange::Modified) => "modified",
        Ok(common::IntegrityChange::Removed) => "removed",
        _ => "changed",
    }
}

/// The `audit` of a `--json` `exited` line.
fn audit_json(a: &common::IntegrityAudit) -> serde_json::Value {
    serde_json::json!({
        "completed": a.completed,
        "error": a.error,
        "violations": a.violations.iter().map(|v| serde_json::json!({
            "path": v.path,
            "change": change_name(v.change),
            "reverted": v.reverted,
        })).collect::<Vec<_>>(),
        "git": a.git.iter().map(|g| serde_json::json!({
            "repository": g.repository,
            "name": g.name,
            "kind": toolgate_contracts::convert::git_kind_from_wire(g.kind)
                .map_or("unspecified", toolgate_core::GitChangeKind::as_str),
            "old": g.old,
            "new": g.new,
            "reverted": g.reverted,
        })).collect::<Vec<_>>(),
    })
}

/// The exit code for a run's final status.
pub(crate) fn exit_code(status: Option<&common::ExitStatus>) -> u8 {
    match status.and_then(|s| s.status.as_ref()) {
        Some(Status::Exited(c)) => u8::try_from(*c).unwrap_or(EXIT_TOOLGATE),
        Some(Status::Signaled(s)) => u8::try_from(128 + s.signal.clamp(0, 127)).unwrap_or(255),
        Some(Status::TimedOut(_)) => {
            eprintln!("toolgate: the run timed out");
            EXIT_TIMEOUT
        }
        Some(Status::SpawnFailed(f)) => {
            eprintln!("toolgate: cannot start the program: {}", f.reason);
            EXIT_SPAWN_FAILED
        }
        Some(Status::Cancelled(c)) => {
            eprintln!("toolgate: the run was cancelled ({})", c.cause);
            EXIT_TOOLGATE
        }
        Some(Status::Completed(_)) | None => EXIT_TOOLGATE,
    }
}

/// Prints a status that ended the run before it started and picks the exit code.
fn refused(status: tonic::Status) -> u8 {
    let err = CallError::new(status);
    eprintln!("toolgate: {err}");
    let reason = |r: Reason| err.reason == r.as_str();
    if reason(Reason::ApprovalRequired) || reason(Reason::ApprovalExpired) {
        if let Some(id) = err.get("approval_id") {
            eprintln!(
                "toolgate: approve it (toolgate approvals approve {id}), then repeat this command\ntoolgate: awaiting approval {id}"
            );
        }
        EXIT_APPROVAL_PENDING
    } else if reason(Reason::PolicyDenied) || reason(Reason::ApprovalDenied) {
        EXIT_REFUSED
    } else if reason(Reason::Timeout) {
        EXIT_TIMEOUT
    } else {
        EXIT_TOOLGATE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(s: Status) -> common::ExitStatus {
        common::ExitStatus { status: Some(s) }
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(Some(&st(Status::Exited(3)))), 3);
        assert_eq!(
            exit_code(Some(&st(Status::Signaled(common::Signaled {
                signal: 9,
                name: "SIGKILL".into(),
                core_dumped: false
            })))),
            137
        );
        assert_eq!(
            exit_code(Some(&st(Status::TimedOut(common::TimedOut::default())))),
            EXIT_TIMEOUT
        );
        assert_eq!(
            exit_code(Some(&st(Status::SpawnFailed(
                common::SpawnFailed::default()
            )))),
            EXIT_SPAWN_FAILED
        );
    }

    #[test]
    fn refusals_have_their_own_codes() {
        let deny = toolgate_contracts::status::status(
            Reason::PolicyDenied,
            "no",
            [("rule_id", "r".to_owned())],
        );
        assert_eq!(refused(deny), EXIT_REFUSED);
        let ask = toolgate_contracts::status::status(
            Reason::ApprovalRequired,
            "ask",
            [("approval_id", "a".to_owned())],
        );
        assert_eq!(refused(ask), EXIT_APPROVAL_PENDING);
        assert_eq!(refused(tonic::Status::unavailable("down")), EXIT_TOOLGATE);
    }
}
