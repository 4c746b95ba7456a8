//! `toolgate check` and `toolgate policy validate`: policy answers with no server needed.

use std::path::PathBuf;

use anyhow::Context;
use toolgate_core::ToolKind;
use toolgate_policy_engine::{CallContext, Policy, ToolCall, request_digest};

/// Arguments of `toolgate check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// A policy document; the shipped default policy when omitted.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Print one JSON object (top-level `decision`: auto, ask or deny) instead of a table.
    #[arg(long)]
    json: bool,
    /// The tool kind (`fs.read`, `fs.write`, ..., `process.run`).
    #[arg(long, default_value = "process.run")]
    tool: String,
    /// The canonical workspace-relative path, for filesystem tools.
    #[arg(long)]
    path: Option<String>,
    /// A recursive call: an `fs.delete` of a whole tree (or a recursive list).
    #[arg(short = 'r', long)]
    recursive: bool,
    /// The session the call belongs to.
    #[arg(long, default_value = "cli")]
    session: String,
    /// The principal the call runs for.
    #[arg(long, default_value = "cli")]
    principal: String,
    /// A workspace label `key=value` (repeatable).
    #[arg(long = "label", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// The sandbox profile a `process.run` runs under: the executor's default `workspace`
    /// unless given. A profile the policy does not know (`unconfined`, say) is decided with no
    /// sandbox guarantee.
    #[arg(long, default_value = toolgate_process::DEFAULT_PROFILE)]
    profile: String,
    /// The bash script to classify as `process.run`.
    #[arg(last = true)]
    script: Vec<String>,
}

/// Arguments of `toolgate policy explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
    /// A policy document; the shipped default policy when omitted.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The sandbox profile the script runs under (the executor's default unless given).
    #[arg(long, default_value = toolgate_process::DEFAULT_PROFILE)]
    profile: String,
    /// Print the `toolgate check --json` object instead.
    #[arg(long)]
    json: bool,
    /// The bash script to explain.
    #[arg(required = true)]
    script: Vec<String>,
}

/// `toolgate policy explain`: each command of a script with its tier, the rules that
/// matched it, and which sandbox guarantee made it auto or why it asks. Exits like `check`.
pub(crate) fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let policy = load(args.policy.as_deref())?;
    let mut call = ToolCall::script(args.script.join(" "));
    call.sandbox_profile = Some(args.profile);
    let decision = policy.classify(&call, &CallContext::default());
    if args.json {
        println!("{}", toolgate_policy_engine::to_json(&decision, None));
    } else {
        print!("{}", toolgate_policy_engine::explain_text(&decision));
    }
    exit_for(decision.tier)
}

fn exit_for(tier: toolgate_core::Tier) -> anyhow::Result<()> {
    match tier {
        toolgate_core::Tier::Auto => Ok(()),
        toolgate_core::Tier::Ask => Err(crate::client::Exit(EXIT_ASK).into()),
        toolgate_core::Tier::Deny => Err(crate::client::Exit(EXIT_DENY).into()),
    }
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("label `{s}` is not key=value"))
}

/// Loads `path`, or the shipped default policy.
fn load(path: Option<&std::path::Path>) -> anyhow::Result<Policy> {
    match path {
        Some(p) => Policy::load(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display())),
        None => Ok(Policy::builtin_default()),
    }
}

/// Exit status of `toolgate check` for an `ask`.
pub(crate) const EXIT_ASK: u8 = 2;
/// Exit status of `toolgate check` for a `deny`.
pub(crate) const EXIT_DENY: u8 = 3;

/// Classifies one call and prints the decision. The exit status is the answer, for scripts
/// and CI: 0 auto, 2 ask, 3 deny; 1 is a usage or policy error (nothing was classified).
pub(crate) fn check(args: CheckArgs) -> anyhow::Result<()> {
    let policy = load(args.policy.as_deref())?;
    let tool: ToolKind = args.tool.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let call = match tool {
        ToolKind::ProcessRun => {
            anyhow::ensure!(
                !args.script.is_empty(),
                "give the script after `--`, for example: toolgate check -- 'ls && rm -rf build'"
            );
            let mut call = ToolCall::script(args.script.join(" "));
            call.sandbox_profile = Some(args.profile);
            call
        }
        fs => {
            let path = args
                .path
                .context("filesystem tools need --path (a canonical workspace-relative path)")?;
            ToolCall {
                recursive: args.recursive,
                ..ToolCall::fs(fs, path)
            }
        }
    };
    let ctx = CallContext {
        session_id: args.session,
        principal: args.principal,
        labels: args.labels.into_iter().collect(),
    };
    let decision = policy.classify(&call, &ctx);
    let digest = request_digest(&call, &ctx.session_id, &ctx.principal, policy.version());
    if args.json {
        println!(
            "{}",
            toolgate_policy_engine::to_json(&decision, Some(&digest))
        );
    } else {
        print!(
            "{}",
            toolgate_policy_engine::to_text(&decision, Some(&digest))
        );
    }
    exit_for(decision.tier)
}

/// `toolgate policy validate FILE`.
pub(crate) fn validate(path: &std::path::Path) -> anyhow::Result<()> {
    let report = toolgate_policy_engine::validate(path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    println!("{report}");
    Ok(())
}
