//! `toolgate`: the command line for people.

mod fs;

use clap::{Parser, Subcommand};

/// toolgate: safe tool calls for AI agents.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Filesystem calls against an executor.
    Fs(fs::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Fs(args) => fs::run(args).await,
    }
}
