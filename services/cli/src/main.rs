//! `toolgate`: the command line for people.
//!
//! Exit status: 0 on success, 1 on any error (printed to stderr with the gRPC code, the
//! ErrorInfo reason and its metadata), except `run`, which exits with the child's status
//! (see `toolgate run --help`), and `ledger verify`, which exits 1 on a broken chain.

mod approvals;
mod check;
mod client;
mod doctor;
mod duration;
mod fs;
mod ledger;
mod mcp;
mod render;
mod run;
mod up;

use std::process::ExitCode;

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
    /// Run a command through an executor, streaming its output; exits with its status.
    Run(run::Args),
    /// See and decide parked calls (needs an approver or admin token).
    Approvals(approvals::Args),
    /// Start the policy service and an executor in one process (SQLite ledger, generated tokens).
    Up(up::Args),
    /// Ledger database tools: verify the audit hash chain, apply migrations.
    Ledger(ledger::Args),
    /// Serve toolgate's tools over the Model Context Protocol: stdio by default, streamable
    /// HTTP with --listen. Every tool call is one executor call with the agent's token.
    Mcp(mcp::Args),
    /// What this machine can enforce for runs, and the sandbox escape self-test; exits 1 if
    /// runs would not be confined.
    Doctor(doctor::Args),
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
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fs(args) => fs::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Approvals(args) => approvals::run(args).await,
        Command::Ledger(args) => ledger::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Up(args) => up::run(args).await,
        Command::Check(args) => check::check(args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Policy {
            command: PolicyCommand::Validate { file },
        } => check::validate(&file),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<client::Exit>() {
            Some(client::Exit(code)) => ExitCode::from(*code),
            None => {
                eprintln!("toolgate: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
