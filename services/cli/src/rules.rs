//! `toolgate rules`: the rules learned from approvals ("always allow"), listed and revoked
//! through the ApprovalService; and how `approvals` prints a rule and a proposal.

use std::io::Write;

use clap::Subcommand;
use serde_json::{Value, json};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;
use toolgate_core::display::escape;

use crate::client::{self, call_error};
use crate::render;

/// Arguments of `toolgate rules`.
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

#[derive(Debug, Subcommand)]
enum Op {
    /// List the rules in force, oldest first.
    List {
        /// Include revoked and expired rules.
        #[arg(long)]
        all: bool,
        /// Print a JSON object (`revision`, `rules`).
        #[arg(long)]
        json: bool,
    },
    /// Revoke a rule: no call is allowed by it afterwards, on any policy replica.
    Revoke {
        /// The rule id (`rul_...`, or `learned.rul_...` as decisions name it).
        id: String,
        /// Print the revoked rule as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `toolgate rules` command.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let channel = client::connect("policy service", &args.policy, &args.token).await?;
    let mut client = ApprovalServiceClient::new(channel);
    let mut out = std::io::stdout().lock();
    match args.op {
        Op::List { all, json } => {
            let page = client
                .list_rules(pb::ListRulesRequest {
                    include_inactive: all,
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if json {
                let v = json!({
                    "revision": page.revision,
                    "rules": page.rules.iter().map(rule_json).collect::<Vec<_>>(),
                });
                writeln!(out, "{}", render::safe_json(&v))?;
            } else if page.rules.is_empty() {
                writeln!(out, "no learned rules (revision {})", page.revision)?;
            } else {
                for r in &page.rules {
                    out.write_all(rule_text(r).as_bytes())?;
                }
            }
        }
        Op::Revoke { id, json } => {
            let rule = client
                .revoke_rule(pb::RevokeRuleRequest { rule_id: id })
                .await
                .map_err(call_error)?
                .into_inner()
                .rule
                .unwrap_or_default();
            if json {
                writeln!(out, "{}", render::safe_json(&rule_json(&rule)))?;
            } else {
                writeln!(
                    out,
                    "revoked learned.{} (by {})",
                    escape(&rule.rule_id),
                    escape(&rule.revoked_by)
                )?;
            }
        }
    }
    Ok(())
}

fn scope_name(scope: i32) -> &'static str {
    match pb::LearnedRuleScope::try_from(scope) {
        Ok(pb::LearnedRuleScope::Session) => "session",
        Ok(pb::LearnedRuleScope::Workspace) => "workspace",
        Ok(pb::LearnedRuleScope::All) => "all",
        _ => "unspecified",
    }
}

fn scope_text(scope: i32, value: &str) -> String {
    match (scope_name(scope), value.is_empty()) {
        ("workspace", true) => "workspace (executors without labels)".to_owned(),
        (name, true) => name.to_owned(),
        (name, false) => format!("{name} {}", escape(value)),
    }
}

/// The rule's pattern, every line escaped and indented.
fn pattern_lines(pattern: &str) -> String {
    pattern
        .lines()
        .map(|l| format!("    {}\n", escape(l)))
        .collect()
}

/// One rule for `rules list`.
fn rule_text(r: &pb::LearnedRule) -> String {
    let mut s = format!(
        "learned.{}  {}  scope {}  by {} at {}",
        escape(&r.rule_id),
        if r.active { "active" } else { "inactive" },
        scope_text(r.scope, &r.scope_value),
        escape(&r.created_by),
        render::time(r.created_at.as_ref()),
    );
    if let Some(t) = &r.expires_at {
        s.push_str(&format!("  until {t}"));
    }
    if let Some(t) = &r.revoked_at {
        s.push_str(&format!("  revoked by {} at {t}", escape(&r.revoked_by)));
    }
    s.push_str(&format!("  from {}\n", escape(&r.source_approval_id)));
    s.push_str(&pattern_lines(&r.pattern));
    s
}

/// What `approvals approve --remember` prints after the approval.
pub(crate) fn learned_text(r: &pb::LearnedRule) -> String {
    let until = r
        .expires_at
        .as_ref()
        .map_or_else(|| "until revoked".to_owned(), |t| format!("until {t}"));
    format!(
        "learned rule learned.{} (scope {}, {until}); calls of this shape now run without asking:\n{}",
        escape(&r.rule_id),
        scope_text(r.scope, &r.scope_value),
        pattern_lines(&r.pattern)
    )
}

/// A rule as JSON.
pub(crate) fn rule_json(r: &pb::LearnedRule) -> Value {
    json!({
        "rule_id": r.rule_id,
        "decision_rule_id": format!("learned.{}", r.rule_id),
        "pattern": r.pattern,
        "scope": scope_name(r.scope),
        "scope_value": r.scope_value,
        "created_by": r.created_by,
        "created_at": r.created_at.as_ref().map(ToString::to_string),
        "expires_at": r.expires_at.as_ref().map(ToString::to_string),
        "revoked_at": r.revoked_at.as_ref().map(ToString::to_string),
        "revoked_by": r.revoked_by,
        "source_approval_id": r.source_approval_id,
        "active": r.active,
    })
}

/// What `approvals show` prints about `--remember` for a pending approval.
pub(crate) fn proposal_text(p: &Result<pb::ProposeRuleResponse, tonic::Status>) -> String {
    match p {
        Ok(p) => format!(
            "with --remember (scope {} by default), this rule would be learned:\n{}",
            scope_text(p.scope, &p.scope_value),
            pattern_lines(&p.pattern)
        ),
        Err(s) => format!(
            "no rule can be learned from this call ({}): {}\n",
            refusal_reason(s),
            escape(s.message())
        ),
    }
}

/// The proposal (or the refusal) as JSON.
pub(crate) fn proposal_json(p: &Result<pb::ProposeRuleResponse, tonic::Status>) -> Value {
    match p {
        Ok(p) => json!({
            "pattern": p.pattern,
            "scope": scope_name(p.scope),
            "scope_value": p.scope_value,
        }),
        Err(s) => json!({
            "refused": { "reason": refusal_reason(s), "message": s.message() },
        }),
    }
}

fn refusal_reason(s: &tonic::Status) -> String {
    toolgate_contracts::status::error_info(s).map_or_else(
        || toolgate_contracts::status::code_name(s.code()).to_owned(),
        |(reason, _)| reason,
    )
}
