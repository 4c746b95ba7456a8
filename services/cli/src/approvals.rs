//! `toolgate approvals`: see and decide parked calls through the ApprovalService.

use std::io::Write;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use toolgate_contracts::common::v1::PageRequest;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;

use crate::client::{self, AuthChannel, call_error};
use crate::render;

/// Arguments of `toolgate approvals`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The policy service endpoint.
    #[arg(
        long,
        global = true,
        env = "TOOLGATE_POLICY",
        default_value = client::DEFAULT_POLICY
    )]
    policy: String,
    #[command(flatten)]
    token: client::TokenArgs,
    #[command(subcommand)]
    op: Op,
}

/// An approval state, as a filter.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum State {
    Pending,
    Approved,
    Denied,
    Expired,
    Cancelled,
    Consumed,
    Completed,
    Unknown,
}

impl State {
    fn wire(self) -> i32 {
        (match self {
            State::Pending => pb::ApprovalState::Pending,
            State::Approved => pb::ApprovalState::Approved,
            State::Denied => pb::ApprovalState::Denied,
            State::Expired => pb::ApprovalState::Expired,
            State::Cancelled => pb::ApprovalState::Cancelled,
            State::Consumed => pb::ApprovalState::Consumed,
            State::Completed => pb::ApprovalState::Completed,
            State::Unknown => pb::ApprovalState::Unknown,
        }) as i32
    }
}

/// How far an approval (or, with --remember, the rule learned from it) reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scope {
    /// Single use (the default for an approval).
    Once,
    /// An approval: reused for identical calls in the session until it expires. A rule: calls
    /// of the same shape in the session (the default with --remember).
    Session,
    /// A rule only: calls of the same shape from executors with this call's workspace labels.
    Workspace,
    /// A rule only: calls of the same shape everywhere.
    All,
}

impl Scope {
    /// The wire scope of a rule learned with `--remember --scope`.
    fn rule(self) -> anyhow::Result<pb::LearnedRuleScope> {
        match self {
            Scope::Session => Ok(pb::LearnedRuleScope::Session),
            Scope::Workspace => Ok(pb::LearnedRuleScope::Workspace),
            Scope::All => Ok(pb::LearnedRuleScope::All),
            Scope::Once => anyhow::bail!(
                "--remember --scope once: a learned rule's scope is session, workspace or all"
            ),
        }
    }
}

/// Filters shared by `list` and `watch`.
#[derive(Debug, clap::Args)]
struct Filter {
    /// Only approvals in this state (repeatable; default all).
    #[arg(long = "state", value_enum)]
    states: Vec<State>,
    /// Only this session.
    #[arg(long)]
    session: Option<String>,
    /// Only this agent principal.
    #[arg(long)]
    principal: Option<String>,
}

impl Filter {
    fn states(&self) -> Vec<i32> {
        self.states.iter().map(|s| s.wire()).collect()
    }
}

#[derive(Debug, Subcommand)]
enum Op {
    /// List approvals, newest first (every page).
    List {
        #[command(flatten)]
        filter: Filter,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one approval with its full explanation.
    Show {
        /// The approval id.
        id: String,
        /// Print a JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Approve a pending approval; the agent repeats its call to run it.
    Approve {
        /// The approval id.
        id: String,
        /// Why, for the audit trail.
        #[arg(long, default_value = "")]
        reason: String,
        /// A message returned to the model.
        #[arg(long, default_value = "")]
        message: String,
        /// `session` reuses the approval for identical calls in the session until it expires.
        /// With --remember: where the learned rule applies (session, workspace or all;
        /// default session).
        #[arg(long, value_enum)]
        scope: Option<Scope>,
        /// How long the approval stays usable (30s, 10m, 2h; default: the server's).
        #[arg(long, value_parser = crate::duration::parse)]
        ttl: Option<Duration>,
        /// Always allow: also learn a rule from this call, so later calls of the same shape
        /// in its scope run without asking. The rule is printed verbatim; when none may be
        /// learned, nothing is approved and the reason is printed (approve without
        /// --remember instead).
        #[arg(long)]
        remember: bool,
        /// With --remember: how long the rule applies (7d, 12h; default: until revoked).
        #[arg(long = "for", value_parser = crate::duration::parse, requires = "remember")]
        rule_for: Option<Duration>,
        /// Print the approval as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deny a pending approval; the call fails with the message.
    Deny {
        /// The approval id.
        id: String,
        /// Why, for the audit trail.
        #[arg(long, default_value = "")]
        reason: String,
        /// A message returned to the model (what to do instead).
        #[arg(long, default_value = "")]
        message: String,
        /// Print the approval as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a pending approval; it can never be approved afterwards.
    Cancel {
        /// The approval id.
        id: String,
        /// Why, for the audit trail.
        #[arg(long, default_value = "")]
        reason: String,
        /// Print the approval as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stream approval changes, one line per event: `CURSOR KIND ID STATE session=.. principal=.. CALL`.
    ///
    /// Without --cursor it starts with a snapshot of the matching pending approvals. Pass the last
    /// printed cursor to resume after a disconnect without missing an event.
    Watch {
        #[command(flatten)]
        filter: Filter,
        /// Resume after this cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// Print one JSON object per event (`cursor`, `kind`, `approval`).
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `toolgate approvals` command.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let channel = client::connect("policy service", &args.policy, &args.token).await?;
    let mut client = ApprovalServiceClient::new(channel);
    match args.op {
        Op::List { filter, json } => list(&mut client, &filter, json).await,
        Op::Show { id, json } => show(&mut client, id, json).await,
        Op::Approve {
            id,
            reason,
            message,
            scope,
            ttl,
            remember,
            rule_for,
            json,
        } => {
            let (scope, remember) = if remember {
                let rule = scope.unwrap_or(Scope::Session).rule()?;
                (
                    pb::ApprovalScope::Once,
                    Some(pb::Remember {
                        scope: rule as i32,
                        ttl: rule_for.map(crate::duration::to_proto),
                    }),
                )
            } else {
                let scope = match scope.unwrap_or(Scope::Once) {
                    Scope::Once => pb::ApprovalScope::Once,
                    Scope::Session => pb::ApprovalScope::Session,
                    other => anyhow::bail!(
                        "--scope {}: workspace and all are scopes of a learned rule; add --remember",
                        if other == Scope::All {
                            "all"
                        } else {
                            "workspace"
                        }
                    ),
                };
                (scope, None)
            };
            let req = pb::DecideApprovalRequest {
                approval_id: id,
                verdict: pb::Verdict::Approve as i32,
                reason,
                message_to_model: message,
                scope: scope as i32,
                ttl: ttl.map(crate::duration::to_proto),
                remember,
            };
            decide(&mut client, req, json).await
        }
        Op::Deny {
            id,
            reason,
            message,
            json,
        } => {
            let req = pb::DecideApprovalRequest {
                approval_id: id,
                verdict: pb::Verdict::Deny as i32,
                reason,
                message_to_model: message,
                scope: pb::ApprovalScope::Unspecified as i32,
                ttl: None,
                remember: None,
            };
            decide(&mut client, req, json).await
        }
        Op::Cancel { id, reason, json } => {
            let a = client
                .cancel_approval(pb::CancelApprovalRequest {
                    approval_id: id,
                    reason,
                })
                .await
                .map_err(call_error)?
                .into_inner()
                .approval
                .unwrap_or_default();
            print_one(&a, json, one_line)
        }
        Op::Watch {
            filter,
            cursor,
            json,
        } => watch(&mut client, &filter, cursor.unwrap_or_default(), json).await,
    }
}

fn one_line(a: &pb::Approval) -> String {
    let mut s = format!(
        "{} {}",
        toolgate_core::display::escape(&a.approval_id),
        render::state(a.state)
    );
    if !a.decided_by.is_empty() {
        s.push_str(&format!(
            " by {}",
            toolgate_core::display::escape(&a.decided_by)
        ));
    }
    if a.state == pb::ApprovalState::Approved as i32 {
        s.push_str(&format!(
            " (scope {}, usable until {})",
            render::scope(a.scope),
            render::time(a.expires_at.as_ref())
        ));
    }
    s.push('\n');
    s
}

fn print_one(
    a: &pb::Approval,
    json: bool,
    text: fn(&pb::Approval) -> String,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", render::safe_json(&render::approval_json(a)))?;
    } else {
        out.write_all(text(a).as_bytes())?;
    }
    Ok(())
}

async fn decide(
    client: &mut ApprovalServiceClient<AuthChannel>,
    req: pb::DecideApprovalRequest,
    json: bool,
) -> anyhow::Result<()> {
    let decided = client
        .decide_approval(req)
        .await
        .map_err(call_error)?
        .into_inner();
    let a = decided.approval.unwrap_or_default();
    let Some(rule) = decided.rule else {
        return print_one(&a, json, one_line);
    };
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({
            "approval": render::approval_json(&a),
            "rule": crate::rules::rule_json(&rule),
        });
        writeln!(out, "{}", render::safe_json(&v))?;
    } else {
        out.write_all(one_line(&a).as_bytes())?;
        out.write_all(crate::rules::learned_text(&rule).as_bytes())?;
    }
    Ok(())
}

/// `approvals show`: the approval, and for a pending one the rule `--remember` would learn
/// (or why none may be learned).
async fn show(
    client: &mut ApprovalServiceClient<AuthChannel>,
    id: String,
    json: bool,
) -> anyhow::Result<()> {
    let a = client
        .get_approval(pb::GetApprovalRequest {
            approval_id: id.clone(),
        })
        .await
        .map_err(call_error)?
        .into_inner()
        .approval
        .unwrap_or_default();
    let proposal = if a.state == pb::ApprovalState::Pending as i32 {
        Some(
            client
                .propose_rule(pb::ProposeRuleRequest {
                    approval_id: id,
                    scope: pb::LearnedRuleScope::Session as i32,
                })
                .await
                .map(tonic::Response::into_inner),
        )
    } else {
        None
    };
    let mut out = std::io::stdout().lock();
    if json {
        let mut v = render::approval_json(&a);
        if let (Some(p), Some(obj)) = (&proposal, v.as_object_mut()) {
            obj.insert("proposed_rule".into(), crate::rules::proposal_json(p));
        }
        writeln!(out, "{}", render::safe_json(&v))?;
    } else {
        out.write_all(render::show(&a).as_bytes())?;
        if let Some(p) = &proposal {
            out.write_all(crate::rules::proposal_text(p).as_bytes())?;
        }
    }
    Ok(())
}

async fn list(
    client: &mut ApprovalServiceClient<AuthChannel>,
    filter: &Filter,
    json: bool,
) -> anyhow::Result<()> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_approvals(pb::ListApprovalsRequest {
                states: filter.states(),
                session_id: filter.session.clone().unwrap_or_default(),
                principal: filter.principal.clone().unwrap_or_default(),
                page: Some(PageRequest {
                    page_size: 200,
                    page_token: token,
                }),
            })
            .await
            .map_err(call_error)?
            .into_inner();
        all.extend(page.approvals);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<_> = all.iter().map(render::approval_json).collect();
        writeln!(out, "{}", render::safe_json(&serde_json::Value::Array(v)))?;
    } else if all.is_empty() {
        writeln!(out, "no approvals match")?;
    } else {
        out.write_all(render::table(&all).as_bytes())?;
    }
    Ok(())
}

async fn watch(
    client: &mut ApprovalServiceClient<AuthChannel>,
    filter: &Filter,
    cursor: String,
    json: bool,
) -> anyhow::Result<()> {
    let mut stream = client
        .watch_approvals(pb::WatchApprovalsRequest {
            states: filter.states(),
            session_id: filter.session.clone().unwrap_or_default(),
            principal: filter.principal.clone().unwrap_or_default(),
            cursor,
        })
        .await
        .map_err(call_error)?
        .into_inner();
    let mut last = String::new();
    loop {
        let ev = match stream.message().await {
            Ok(Some(ev)) => ev,
            Ok(None) => return Ok(()),
            Err(status) => {
                if !last.is_empty() {
                    eprintln!("toolgate: the watch ended; resume with --cursor {last}");
                }
                return Err(call_error(status));
            }
        };
        let mut out = std::io::stdout().lock();
        if json {
            let v = serde_json::json!({
                "cursor": ev.cursor,
                "kind": render::event_kind(ev.kind),
                "approval": ev.approval.as_ref().map(render::approval_json),
            });
            writeln!(out, "{}", render::safe_json(&v))?;
        } else {
            writeln!(out, "{}", render::watch_line(&ev))?;
        }
        out.flush()?;
        last = ev.cursor;
    }
}
