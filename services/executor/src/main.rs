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
    #[command(flatten)]
    service: config::ServiceFlags,
    /// The workspace root (overrides `workspace.root`).
    #[arg(long)]
    workspace: Option<PathBuf>,
}

/// Runs, and on an error prints it once, chain included, and exits 1.
fn main() -> std::process::ExitCode {
    toolgate_runtime::logging::run_main("toolgate-executor", run())
}

async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = Vec::new();
    if let Some(w) = &args.workspace {
        overrides.push((
            "workspace.root".to_owned(),
            Value::String(w.display().to_string()),
        ));
    }
    let cfg: Config = args.service.load(overrides)?;
    if args.service.print_config {
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
