//! `toolgate-executor`: parses configuration, installs telemetry and serves.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use toml::Value;
use toolgate_executor::{Config, serve};
use toolgate_runtime::{config, shutdown, telemetry};

/// The toolgate executor: runs filesystem operations and processes confined to one workspace.
#[derive(Debug, Parser)]
#[command(name = "toolgate-executor", version)]
struct Args {
    /// A TOML config file.
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// The workspace root (overrides `workspace.root`).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// gRPC listen address, `ip:port`; port 0 picks a free one (overrides `listen`).
    #[arg(long)]
    listen: Option<String>,
    /// Prometheus `/metrics` listen address, `ip:port` (overrides `metrics_listen`).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Serve without TLS on an address other than loopback, when something else (a service
    /// mesh) encrypts the traffic (sets `transport.insecure_plaintext`).
    #[arg(long)]
    insecure_plaintext: bool,
    /// Print the effective configuration with secrets redacted, then exit.
    #[arg(long)]
    print_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = Vec::new();
    if let Some(w) = &args.workspace {
        overrides.push((
            "workspace.root".to_owned(),
            Value::String(w.display().to_string()),
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
    let cfg: Config = config::load(&config::Sources {
        file: args.config.as_deref(),
        env: std::env::vars().collect(),
        overrides,
    })?;
    if args.print_config {
        config::print(&config::redacted(&cfg))?;
        return Ok(());
    }
    if let Err(field) = cfg.validate() {
        anyhow::bail!("invalid configuration: {field}");
    }
    // Logs, plus OTLP trace export when the standard OTEL_* variables ask for it.
    let telemetry = telemetry::init("toolgate-executor", cfg.log.format, &cfg.log.filter)?;
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
