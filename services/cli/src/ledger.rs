//! `toolgate ledger`: migrate the ledger database and verify its audit hash chain, directly
//! against the database (no service needed).

use std::path::Path;

use anyhow::Context;
use clap::Subcommand;
use toolgate_ledger::{Ledger, LedgerConfig, SqlLedger};

use crate::client::Exit;

/// Arguments of `toolgate ledger`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The ledger database: `postgres://…` or `sqlite:PATH`.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, Subcommand)]
enum Op {
    /// Recompute the audit hash chain and check every row against it; exit 1 when broken.
    Verify {
        /// Print one JSON object (`ledger`, `events`, `head`, `ok`, `broken_at`, `problem`).
        #[arg(long)]
        json: bool,
    },
    /// Apply the embedded schema migrations and print the schema version.
    Migrate,
}

/// Runs one `toolgate ledger` command.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let url = args
        .database_url
        .context("give --database-url (or set DATABASE_URL): postgres://… or sqlite:PATH")?;
    let shown = toolgate_ledger::redact_url(&url);
    match args.op {
        Op::Migrate => {
            let version = toolgate_ledger::migrate(&url)
                .await
                .with_context(|| format!("cannot migrate {shown}"))?;
            println!("ledger {shown}: schema version {version}");
            Ok(())
        }
        Op::Verify { json } => verify(&url, &shown, json).await,
    }
}

async fn verify(url: &str, shown: &str, json: bool) -> anyhow::Result<()> {
    // Opening a SQLite url creates a missing file; verifying nothing is an error instead.
    if let Some(path) = sqlite_path(url) {
        anyhow::ensure!(Path::new(path).exists(), "no ledger database at {path}");
    }
    let mut config = LedgerConfig::new(url);
    // Verification reads; it must not change the schema of the database it checks.
    config.migrate = false;
    config.max_connections = 2;
    let ledger = SqlLedger::connect(config)
        .await
        .with_context(|| format!("cannot open the ledger {shown}"))?;
    let report = ledger.verify().await;
    ledger.close().await;
    let report = report.with_context(|| format!("cannot read the ledger {shown}"))?;
    if json {
        let v = serde_json::json!({
            "ledger": shown,
            "events": report.events,
            "head": report.head,
            "ok": report.broken.is_none(),
            "broken_at": report.broken.as_ref().and_then(|b| b.seq),
            "problem": report.broken.as_ref().map(|b| b.problem.clone()),
        });
        println!("{v}");
        return if report.broken.is_none() {
            Ok(())
        } else {
            Err(Exit(1).into())
        };
    }
    println!("ledger  {shown}");
    println!("events  {}", report.events);
    println!("head    {}", report.head.as_deref().unwrap_or("(empty)"));
    match report.broken {
        None => {
            println!("chain   ok");
            Ok(())
        }
        Some(b) => {
            match b.seq {
                Some(seq) => println!("chain   BROKEN at event {seq}: {}", b.problem),
                None => println!("chain   BROKEN: {}", b.problem),
            }
            Err(Exit(1).into())
        }
    }
}

/// The file a `sqlite:` url names, without its query string.
fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths() {
        assert_eq!(sqlite_path("sqlite:data/l.db"), Some("data/l.db"));
        assert_eq!(
            sqlite_path("sqlite:///abs/l.db?mode=rwc"),
            Some("/abs/l.db")
        );
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("postgres://x/y"), None);
    }
}
