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
    /// The sandbox profile the call's run executes under: the executor's default `workspace`
    /// for a `process.run`, `network` for a `--connect`, unless given. A profile the policy
    /// does not know (`unconfined`, say) is decided with no sandbox guarantee.
    #[arg(long)]
    profile: Option<String>,
    /// Classify a connection a run makes (`net.connect`) to `HOST:PORT` (`[::1]:443` for an
    /// IPv6 literal), as the run's egress gate would ask about it.
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["path", "script"])]
    connect: Option<String>,
    /// The transport of `--connect`.
    #[arg(long, default_value = "tcp", requires = "connect")]
    protocol: String,
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
    /// The sandbox profile the run executes under (the executor's default for a script,
    /// `network` for `--connect`, unless given).
    #[arg(long)]
    profile: Option<String>,
    /// Explain a connection a run makes (`net.connect`) to `HOST:PORT` instead of a script.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "script")]
    connect: Option<String>,
    /// Print the `toolgate check --json` object instead.
    #[arg(long)]
    json: bool,
    /// The bash script to explain.
    #[arg(required_unless_present = "connect")]
    script: Vec<String>,
}

/// `toolgate policy explain`: each command of a script with its tier, the rules that
/// matched it, and which sandbox guarantee made it auto or why it asks. Exits like `check`.
pub(crate) fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let policy = load(args.policy.as_deref())?;
    let call = match &args.connect {
        Some(dest) => connect_call(dest, "tcp", args.profile)?,
        None => {
            let mut call = ToolCall::script(args.script.join(" "));
            call.sandbox_profile = Some(run_profile(args.profile));
            call
        }
    };
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

/// The profile of a `process.run`: the one given, else the executor's default.
fn run_profile(given: Option<String>) -> String {
    given.unwrap_or_else(|| toolgate_process::DEFAULT_PROFILE.to_owned())
}

/// The `net.connect` the egress gate of a run under `profile` (default `network`) would ask
/// about for a connection to `dest` (`HOST:PORT`, `[v6]:PORT`).
fn connect_call(dest: &str, protocol: &str, profile: Option<String>) -> anyhow::Result<ToolCall> {
    let (host, port) = dest
        .rsplit_once(':')
        .with_context(|| format!("--connect `{dest}`: give HOST:PORT, for example pypi.org:443"))?;
    // An IPv6 literal only in brackets: unbracketed, `2001:db8::1:443` has no clear port.
    let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => v6,
        _ if !host.is_empty() && !host.contains([':', '[', ']']) => host,
        _ => anyhow::bail!(
            "--connect `{dest}`: give HOST:PORT, with an IPv6 address in brackets ([2001:db8::1]:443)"
        ),
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .with_context(|| format!("--connect `{dest}`: `{port}` is not a port (1 to 65535)"))?;
    Ok(ToolCall {
        host: Some(host.to_owned()),
        port: Some(u32::from(port)),
        protocol: Some(protocol.to_owned()),
        sandbox_profile: Some(profile.unwrap_or_else(|| "network".to_owned())),
        ..ToolCall::new(ToolKind::NetConnect)
    })
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("label `{s}` is not key=value"))
}

/// A policy document's error naming the file once (a read error already names it).
fn policy_error(path: &std::path::Path, e: toolgate_policy_engine::Error) -> anyhow::Error {
    match e {
        toolgate_policy_engine::Error::Read { .. } => anyhow::anyhow!("{e}"),
        e => anyhow::anyhow!("{}: {e}", path.display()),
    }
}

/// Loads `path`, or the shipped default policy.
fn load(path: Option<&std::path::Path>) -> anyhow::Result<Policy> {
    match path {
        Some(p) => Policy::load(p).map_err(|e| policy_error(p, e)),
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
    let tool: ToolKind = match &args.connect {
        Some(_) => ToolKind::NetConnect,
        None => args.tool.parse().map_err(|e: String| anyhow::anyhow!(e))?,
    };
    let call = match tool {
        ToolKind::NetConnect => connect_call(
            args.connect.as_deref().context(
                "net.connect needs --connect HOST:PORT, for example: toolgate check --connect pypi.org:443",
            )?,
            &args.protocol,
            args.profile,
        )?,
        ToolKind::ProcessRun => {
            anyhow::ensure!(
                !args.script.is_empty(),
                "give the script after `--`, for example: toolgate check -- 'ls && rm -rf build'"
            );
            let mut call = ToolCall::script(args.script.join(" "));
            call.sandbox_profile = Some(run_profile(args.profile));
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
    let report = toolgate_policy_engine::validate(path).map_err(|e| policy_error(path, e))?;
    println!("{report}");
    Ok(())
}
