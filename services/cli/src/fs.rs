//! `toolgate fs`: thin client commands for every FilesystemService RPC.

use std::io::Write;

use clap::Subcommand;
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;

use crate::client::call_error;

/// Arguments of `toolgate fs`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
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
    /// Print the response as one JSON object instead of text (`read`: the content as UTF-8
    /// with `content_base64` when it is not).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, Subcommand)]
enum Op {
    /// Print a file's content to stdout.
    Read {
        /// The file.
        path: String,
        /// Only lines `START` or `START:COUNT` (1-based).
        #[arg(long, value_name = "START[:COUNT]", conflicts_with = "bytes")]
        lines: Option<String>,
        /// Only bytes `OFFSET` or `OFFSET:LENGTH`.
        #[arg(long, value_name = "OFFSET[:LENGTH]")]
        bytes: Option<String>,
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
        /// Match case-insensitively.
        #[arg(short = 'i', long)]
        ignore_case: bool,
        /// The pattern is literal text, not a regex.
        #[arg(short = 'F', long)]
        fixed_strings: bool,
        /// Only files matching this glob (repeatable).
        #[arg(short = 'g', long = "glob", value_name = "GLOB")]
        globs: Vec<String>,
        /// Lines of context around each match.
        #[arg(short = 'C', long, value_name = "N", default_value_t = 0)]
        context: u32,
        /// Also search names starting with a dot.
        #[arg(long)]
        hidden: bool,
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
    /// Replace text in a file: OLD must occur exactly once unless --all.
    Edit {
        /// The file.
        path: String,
        /// The exact text to replace.
        old: String,
        /// The replacement.
        new: String,
        /// Replace every occurrence.
        #[arg(long)]
        all: bool,
        /// Refuse unless the file's sha256 is this (from `fs stat` or a read).
        #[arg(long, value_name = "SHA256")]
        expect_sha256: Option<String>,
    },
    /// Create a directory.
    Mkdir {
        /// The directory.
        path: String,
        /// Also create missing parents; an existing directory is fine.
        #[arg(short, long)]
        parents: bool,
    },
    /// Delete a file, a symlink (never what it points to) or an empty directory.
    Rm {
        /// What to delete.
        path: String,
        /// Delete a directory with everything beneath it (the default policy asks a human).
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// Succeed when nothing exists at the path.
        #[arg(short = 'f', long = "missing-ok", alias = "force")]
        missing_ok: bool,
        /// Refuse unless the file's sha256 is this (from `fs stat` or a read).
        #[arg(long, value_name = "SHA256")]
        expect_sha256: Option<String>,
    },
}

/// `A` or `A:B` as two numbers, the second 0 when absent.
fn range(flag: &str, s: &str) -> anyhow::Result<(u64, u64)> {
    let (a, b) = s.split_once(':').unwrap_or((s, "0"));
    let n = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| anyhow::anyhow!("--{flag} {s}: expected N or N:M with whole numbers"))
    };
    Ok((n(a)?, n(b)?))
}

fn kind(raw: i32) -> &'static str {
    match pb::EntryType::try_from(raw) {
        Ok(pb::EntryType::Directory) => "directory",
        Ok(pb::EntryType::Symlink) => "symlink",
        Ok(pb::EntryType::File) => "file",
        _ => "other",
    }
}

/// Runs one `toolgate fs` command.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
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
        Op::Read { path, lines, bytes } => {
            use pb::read_file_request::Range;
            let range = match (lines, bytes) {
                (Some(l), _) => {
                    let (start_line, line_count) = range("lines", &l)?;
                    Some(Range::Lines(pb::LineRange {
                        start_line,
                        line_count,
                    }))
                }
                (None, Some(b)) => {
                    let (offset, length) = range("bytes", &b)?;
                    Some(Range::Bytes(pb::ByteRange { offset, length }))
                }
                (None, None) => None,
            };
            let r = client
                .read_file(pb::ReadFileRequest {
                    context: ctx(),
                    path,
                    range,
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if args.json {
                let mut v = serde_json::json!({
                    "path": r.path, "truncated": r.truncated, "total_size": r.total_size,
                    "content_sha256": r.content_sha256, "file_sha256": r.file_sha256,
                    "start_line": r.start_line, "line_count": r.line_count,
                });
                match std::str::from_utf8(&r.content) {
                    Ok(text) => v["content"] = text.into(),
                    Err(_) => {
                        use base64::Engine as _;
                        v["content_base64"] = base64::engine::general_purpose::STANDARD
                            .encode(&r.content)
                            .into();
                    }
                }
                writeln!(stdout, "{v}")?;
                return Ok(());
            }
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
            let content = crate::client::read_capped(std::io::stdin(), "standard input")?;
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
            if args.json {
                let v = serde_json::json!({"path": r.path, "sha256": r.sha256, "size": r.size, "created": r.created});
                writeln!(stdout, "{v}")?;
            } else {
                writeln!(stdout, "{} {} bytes sha256={}", r.path, r.size, r.sha256)?;
            }
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
            if args.json {
                let entries: Vec<_> = r
                    .entries
                    .iter()
                    .map(|e| serde_json::json!({"path": e.path, "type": kind(e.r#type), "size": e.size, "symlink_target": e.symlink_target}))
                    .collect();
                let v = serde_json::json!({"entries": entries, "truncated": r.truncated});
                writeln!(stdout, "{v}")?;
                return Ok(());
            }
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
        Op::Search {
            pattern,
            ignore_case,
            fixed_strings,
            globs,
            context,
            hidden,
            path,
        } => {
            let r = client
                .search_files(pb::SearchFilesRequest {
                    context: ctx(),
                    pattern,
                    path,
                    case_insensitive: ignore_case,
                    literal: fixed_strings,
                    include_globs: globs,
                    context_lines: context,
                    include_hidden: hidden,
                    ..Default::default()
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if args.json {
                let lines = |v: &[pb::ContextLine]| {
                    v.iter()
                        .map(|c| serde_json::json!({"line_number": c.line_number, "line": c.line}))
                        .collect::<Vec<_>>()
                };
                let matches: Vec<_> = r
                    .matches
                    .iter()
                    .map(|m| serde_json::json!({"path": m.path, "line_number": m.line_number, "line": m.line, "before": lines(&m.before), "after": lines(&m.after)}))
                    .collect();
                let v = serde_json::json!({"matches": matches, "truncated": r.truncated, "files_searched": r.files_searched, "files_matched": r.files_matched});
                writeln!(stdout, "{v}")?;
                return Ok(());
            }
            for m in r.matches {
                for b in &m.before {
                    writeln!(stdout, "{}-{}-{}", m.path, b.line_number, b.line)?;
                }
                writeln!(stdout, "{}:{}:{}", m.path, m.line_number, m.line)?;
                for a in &m.after {
                    writeln!(stdout, "{}-{}-{}", m.path, a.line_number, a.line)?;
                }
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
            if args.json {
                let v = serde_json::json!({"paths": r.paths, "truncated": r.truncated});
                writeln!(stdout, "{v}")?;
                return Ok(());
            }
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
            if args.json {
                let v = serde_json::json!({
                    "path": r.path, "type": kind(r.r#type), "size": r.size,
                    "mode": format!("{:o}", r.mode), "nlink": r.nlink, "sha256": r.sha256,
                    "mtime": r.mtime.map(|t| t.to_string()), "symlink_target": r.symlink_target,
                });
                writeln!(stdout, "{v}")?;
                return Ok(());
            }
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
        Op::Edit {
            path,
            old,
            new,
            all,
            expect_sha256,
        } => {
            let r = client
                .edit_file(pb::EditFileRequest {
                    context: ctx(),
                    path,
                    old_text: old,
                    new_text: new,
                    replace_all: all,
                    expected_sha256: expect_sha256,
                    expected_occurrences: None,
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if args.json {
                let v = serde_json::json!({"path": r.path, "sha256": r.sha256, "occurrences": r.occurrences, "unified_diff": r.unified_diff});
                writeln!(stdout, "{v}")?;
            } else {
                stdout.write_all(r.unified_diff.as_bytes())?;
                eprintln!(
                    "{}: {} replacement{}, sha256={}",
                    r.path,
                    r.occurrences,
                    if r.occurrences == 1 { "" } else { "s" },
                    r.sha256
                );
            }
        }
        Op::Mkdir { path, parents } => {
            let r = client
                .create_directory(pb::CreateDirectoryRequest {
                    context: ctx(),
                    path,
                    parents,
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if args.json {
                let v = serde_json::json!({"path": r.path, "created": r.created});
                writeln!(stdout, "{v}")?;
            } else if r.created {
                writeln!(stdout, "created {}", r.path)?;
            } else {
                writeln!(stdout, "{} already exists", r.path)?;
            }
        }
        Op::Rm {
            path,
            recursive,
            missing_ok,
            expect_sha256,
        } => {
            let r = client
                .delete_path(pb::DeletePathRequest {
                    context: ctx(),
                    path,
                    recursive,
                    missing_ok,
                    expected_sha256: expect_sha256,
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if args.json {
                let v = serde_json::json!({
                    "path": r.path, "deleted": r.deleted, "type": r.deleted.then(|| kind(r.r#type)),
                    "files_removed": r.files_removed, "directories_removed": r.directories_removed,
                    "bytes_removed": r.bytes_removed,
                });
                writeln!(stdout, "{v}")?;
            } else if r.deleted {
                writeln!(
                    stdout,
                    "deleted {} {} ({} files, {} directories, {} bytes)",
                    kind(r.r#type),
                    r.path,
                    r.files_removed,
                    r.directories_removed,
                    r.bytes_removed
                )?;
            } else {
                writeln!(stdout, "{} does not exist", r.path)?;
            }
        }
    }
    Ok(())
}
