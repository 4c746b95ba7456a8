//! `toolgate-policy`: parses configuration, installs telemetry and serves (or migrates).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use toml::Value;
use toolgate_policy::{Config, serve};
use toolgate_runtime::{config, shutdown, telemetry};

/// The toolgate policy service: classifies every tool call as auto, ask or deny and keeps
/// the approval ledger.
#[derive(Debug, Parser)]
#[command(name = "toolgate-policy", version)]
struct Args {
    #[command(flatten)]
    service: config::ServiceFlags,
    /// The policy document (overrides `policy_file`).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The ledger database, `postgres://…` or `sqlite:path` (overrides `ledger.url`).
    #[arg(long, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the ledger's migrations to `--database-url` (or `ledger.url`), print the schema
    /// version, and exit. Safe to run from several replicas at once.
    Migrate,
}

/// Runs, and on an error prints it once, chain included, and exits 1.
fn main() -> std::process::ExitCode {
    // Before any thread: a huge script's parse is handed back, not kept (see the function).
    toolgate_process::keep_little_free_memory();
    toolgate_runtime::logging::run_main("toolgate-policy", run())
}

async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = Vec::new();
    if let Some(p) = &args.policy {
        overrides.push((
            "policy_file".to_owned(),
            Value::String(p.display().to_string()),
        ));
    }
    if let Some(u) = &args.database_url {
        overrides.push(("ledger.url".to_owned(), Value::String(u.clone())));
    }
    let cfg: Config = args.service.load(overrides)?;
    if args.service.print_config {
        config::print(&config::redacted(&cfg))?;
        return Ok(());
    }
    if let Some(Command::Migrate) = args.command {
        let url = cfg
            .ledger
            .url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            .context("ledger.url: required; pass --database-url or set it in the config")?;
        let version = toolgate_ledger::migrate(url)
            .await
            .with_context(|| format!("migrating {}", toolgate_ledger::redact_url(url)))?;
        println!("{}", serde_json::json!({"schema_version": version}));
        return Ok(());
    }
    if let Err(field) = cfg.validate() {
        anyhow::bail!("invalid configuration: {field}");
    }
    // Logs, plus OTLP trace export when the standard OTEL_* variables ask for it.
    let telemetry = telemetry::init("toolgate-policy", cfg.log.format, &cfg.log.filter)?;
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .with_context(|| format!("listen (--listen): cannot listen on {}", cfg.listen))?;
    let shutdown = shutdown::on_signals()?;
    let served = serve(cfg, listener, shutdown).await;
    // Flush the spans of the last calls even when serving failed.
    if let Err(e) = telemetry.shutdown().await {
        tracing::warn!(error = %e, "spans lost at exit");
    }
    served?;
    Ok(())
}
