//! `toolgate`: the command line for people.
//!
//! Exit status: 0 on success, 1 on any error (printed to stderr with the gRPC code, the
//! ErrorInfo reason and its metadata), except `run`, which exits with the child's status
//! (see `toolgate run --help`), `check`, which exits 0 / 2 / 3 for auto / ask / deny, and
//! `ledger verify`, which exits 1 on a broken chain.

mod approvals;
mod check;
mod client;
mod doctor;
mod duration;
mod fs;
mod ledger;
mod mcp;
mod render;
mod rules;
mod run;
mod runs;
mod up;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    /// The runs an executor holds (background runs): list them, read or follow their output,
    /// stop them.
    Runs(runs::Args),
    /// See and decide parked calls (needs an approver or admin token).
    Approvals(approvals::Args),
    /// List and revoke the rules learned from approvals with `approvals approve --remember`
    /// (needs an approver or admin token).
    Rules(rules::Args),
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
    /// Classify a call against a policy, with no server needed. Exits 0 for auto, 2 for ask,
    /// 3 for deny (1: the call could not be classified).
    Check(check::CheckArgs),
    /// Print a completion script: `toolgate completions bash >
    /// ~/.local/share/bash-completion/completions/toolgate`, `toolgate completions zsh >
    /// "${fpath[1]}/_toolgate"`, `toolgate completions fish >
    /// ~/.config/fish/completions/toolgate.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
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
    /// Explain a script command by command: tier, matching rules, and which guarantee of the
    /// sandbox profile made it auto or why it asks. Exits 0 auto, 2 ask, 3 deny.
    Explain(check::ExplainArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that print and exit end quietly when their reader goes away (`| head`); the
    // two that serve keep running and treat a closed pipe as an error.
    if !matches!(cli.command, Command::Up(_) | Command::Mcp(_)) {
        toolgate_process::exit_quietly_on_broken_pipe();
    }
    let result = match cli.command {
        Command::Fs(args) => fs::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Runs(args) => runs::run(args).await,
        Command::Approvals(args) => approvals::run(args).await,
        Command::Rules(args) => rules::run(args).await,
        Command::Ledger(args) => ledger::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Up(args) => up::run(args).await,
        Command::Check(args) => check::check(args),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "toolgate",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Doctor(args) => doctor::run(&args),
        Command::Policy {
            command: PolicyCommand::Validate { file },
        } => check::validate(&file),
        Command::Policy {
            command: PolicyCommand::Explain(args),
        } => check::explain(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<client::Exit>() {
            Some(client::Exit(code)) => ExitCode::from(*code),
            None => {
                eprintln!(
                    "toolgate: {}",
                    toolgate_runtime::logging::said_once(e.as_ref())
                );
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_chain_says_each_thing_once() {
        #[derive(Debug)]
        struct Leaf;
        impl std::fmt::Display for Leaf {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("tcp connect error")
            }
        }
        impl std::error::Error for Leaf {}
        let e = anyhow::Error::new(Leaf)
            .context("tcp connect error")
            .context("cannot reach the executor at http://127.0.0.1:1");
        assert_eq!(
            toolgate_runtime::logging::said_once(e.as_ref()),
            "cannot reach the executor at http://127.0.0.1:1: tcp connect error"
        );
    }
}
