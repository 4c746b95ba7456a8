//! `toolgate-policy`: parses configuration, installs logging and serves.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use toml::Value;
use toolgate_policy::{Config, serve};
use toolgate_runtime::{config, logging, shutdown};

/// The toolgate policy service: classifies every tool call as auto, ask or deny.
#[derive(Debug, Parser)]
#[command(name = "toolgate-policy", version)]
struct Args {
    /// A TOML config file.
    #[arg(long, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// The policy document (overrides `policy_file`).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// gRPC listen address, `ip:port`; port 0 picks a free one (overrides `listen`).
    #[arg(long)]
    listen: Option<String>,
    /// Print the effective configuration with secrets redacted, then exit.
    #[arg(long)]
    print_config: bool,
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
    let cfg: Config = config::load(&config::Sources {
        file: args.config.as_deref(),
        env: std::env::vars().collect(),
        overrides,
    })?;
    if args.print_config {
        println!("{}", config::redacted(&cfg));
        return Ok(());
    }
    if let Err(field) = cfg.validate() {
        anyhow::bail!("invalid configuration: {field}");
    }
    logging::init(cfg.log.format, &cfg.log.filter);
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let shutdown = shutdown::on_signals()?;
    serve(cfg, listener, shutdown).await?;
    Ok(())
}
