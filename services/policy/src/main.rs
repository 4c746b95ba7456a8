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
    /// A TOML config file.
    #[arg(long, env = "TOOLGATE_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// The policy document (overrides `policy_file`).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// gRPC listen address, `ip:port`; port 0 picks a free one (overrides `listen`).
    #[arg(long)]
    listen: Option<String>,
    /// Prometheus `/metrics` listen address, `ip:port` (overrides `metrics_listen`).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// The ledger database, `postgres://…` or `sqlite:path` (overrides `ledger.url`).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// Serve without TLS on an address other than loopback, when something else (a service
    /// mesh) encrypts the traffic (sets `transport.insecure_plaintext`).
    #[arg(long)]
    insecure_plaintext: bool,
    /// Print the effective configuration with secrets redacted, then exit.
    #[arg(long)]
    print_config: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the ledger's migrations to `--database-url` (or `ledger.url`), print the schema
    /// version, and exit. Safe to run from several replicas at once.
    Migrate,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = Vec::new();
    if let Some(p) = &args.policy {
        overrides.push((
            "policy_file".to_owned(),
            Value::String(p.display().to_string()),
        ));
    }
    if let Some(l) = &args.listen {
        overrides.push(("listen".to_owned(), Value::String(l.clone())));
    }
    if let Some(m) = &args.metrics_listen {
        overrides.push(("metrics_listen".to_owned(), Value::String(m.clone())));
    }
    if args.insecure_plaintext {
        overrides.push((
            "transport.insecure_plaintext".to_owned(),
            Value::Boolean(true),
        ));
    }
    if let Some(u) = &args.database_url {
        overrides.push(("ledger.url".to_owned(), Value::String(u.clone())));
    }
    let cfg: Config = config::load(&config::Sources {
        file: args.config.as_deref(),
        env: std::env::vars().collect(),
        overrides,
    })?;
    if args.print_config {
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
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let shutdown = shutdown::on_signals()?;
    let served = serve(cfg, listener, shutdown).await;
    // Flush the spans of the last calls even when serving failed.
    if let Err(e) = telemetry.shutdown().await {
        tracing::warn!(error = %e, "spans lost at exit");
    }
    served?;
    Ok(())
}
