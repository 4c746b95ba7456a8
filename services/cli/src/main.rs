//! `toolgate`: the command line for people.

mod check;
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
    /// Classify a call against a policy, with no server needed.
    Check(check::CheckArgs),
    /// Policy document tools.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Load a policy document, check its rules and run its examples.
    Validate {
        /// The policy document.
        file: std::path::PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Fs(args) => fs::run(args).await,
        Command::Check(args) => check::check(args),
        Command::Policy {
            command: PolicyCommand::Validate { file },
        } => check::validate(&file),
    }
}
