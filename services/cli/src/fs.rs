//! `toolgate fs`: thin client commands for every FilesystemService RPC.

use std::io::{Read, Write};

use clap::Subcommand;
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;

use crate::client::call_error;

/// Arguments of `toolgate fs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The executor endpoint.
    #[arg(
        long,
        global = true,
        alias = "endpoint",
        env = "TOOLGATE_EXECUTOR",
        default_value = crate::client::DEFAULT_EXECUTOR
    )]
    executor: String,
    #[command(flatten)]
    token: crate::client::TokenArgs,
    /// The session id sent with each call.
    #[arg(long, global = true, env = "TOOLGATE_SESSION", default_value = "cli")]
    session: String,
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, Subcommand)]
enum Op {
    /// Print a file's content to stdout.
    Read {
        /// The file.
        path: String,
    },
    /// Write stdin to a file (created with its parents).
    Write {
        /// The file.
        path: String,
    },
    /// List a directory.
    Ls {
        /// The directory.
        #[arg(default_value = ".")]
        path: String,
        /// Recurse.
        #[arg(short, long)]
        recursive: bool,
        /// Show dotfiles.
        #[arg(short, long)]
        all: bool,
    },
    /// Search file contents with a regex.
    Search {
        /// The regex.
        pattern: String,
        /// Where to search.
        #[arg(default_value = ".")]
        path: String,
    },
    /// Find paths by glob.
    Find {
        /// The glob, for example `**/*.rs`.
        pattern: String,
    },
    /// Describe a path.
    Stat {
        /// The path.
        path: String,
    },
}

/// Runs one `toolgate fs` command.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let channel = crate::client::connect("executor", &args.executor, &args.token).await?;
    let mut client = FilesystemServiceClient::new(channel);
    let ctx = || {
        Some(CallContext {
            call_id: uuid::Uuid::new_v4().to_string(),
            session_id: args.session.clone(),
            approval_wait: None,
            description: "toolgate cli".into(),
        })
    };
    let mut stdout = std::io::stdout().lock();
    match args.op {
        Op::Read { path } => {
            let r = client
                .read_file(pb::ReadFileRequest {
                    context: ctx(),
                    path,
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            stdout.write_all(&r.content)?;
            if r.truncated {
                eprintln!(
                    "[truncated: {} of {} bytes shown]",
                    r.content.len(),
                    r.total_size
                );
            }
        }
        Op::Write { path } => {
            let mut content = Vec::new();
            std::io::stdin().read_to_end(&mut content)?;
            let r = client
                .write_file(pb::WriteFileRequest {
                    context: ctx(),
                    path,
                    content,
                    create_parents: true,
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            writeln!(stdout, "{} {} bytes sha256={}", r.path, r.size, r.sha256)?;
        }
        Op::Ls {
            path,
            recursive,
            all,
        } => {
            let r = client
                .list_directory(pb::ListDirectoryRequest {
                    context: ctx(),
                    path,
                    recursive,
                    include_hidden: all,
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            for e in r.entries {
                let kind = match pb::EntryType::try_from(e.r#type) {
                    Ok(pb::EntryType::Directory) => "dir ",
                    Ok(pb::EntryType::Symlink) => "link",
                    Ok(pb::EntryType::File) => "file",
                    _ => "othr",
                };
                writeln!(stdout, "{kind} {:>10} {}", e.size, e.path)?;
            }
            if r.truncated {
                eprintln!("[truncated]");
            }
        }
        Op::Search { pattern, path } => {
            let r = client
                .search_files(pb::SearchFilesRequest {
                    context: ctx(),
                    pattern,
                    path,
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            for m in r.matches {
                writeln!(stdout, "{}:{}:{}", m.path, m.line_number, m.line)?;
            }
            if r.truncated {
                eprintln!("[truncated]");
            }
        }
        Op::Find { pattern } => {
            let r = client
                .find_files(pb::FindFilesRequest {
                    context: ctx(),
                    patterns: vec![pattern],
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            for p in r.paths {
                writeln!(stdout, "{p}")?;
            }
        }
        Op::Stat { path } => {
            let r = client
                .stat_path(pb::StatPathRequest {
                    context: ctx(),
                    path,
                    compute_sha256: true,
                })
                .await
                .map_err(call_error)?
                .into_inner();
            writeln!(
                stdout,
                "{} type={:?} size={} mode={:o} nlink={} sha256={}",
                r.path,
                pb::EntryType::try_from(r.r#type).unwrap_or_default(),
                r.size,
                r.mode,
                r.nlink,
                r.sha256
            )?;
        }
    }
    Ok(())
}
