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

/// Runs one `toolgate fs` command: the request from the arguments (before any connection),
/// the call, then the answer as text or JSON.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let context = CallContext {
        call_id: uuid::Uuid::new_v4().to_string(),
        session_id: args.session.clone(),
        approval_wait: None,
        description: "toolgate cli".into(),
    };
    let request = request(args.op, context)?;
    let channel = crate::client::connect("executor", &args.executor, &args.token).await?;
    let reply = send(&mut FilesystemServiceClient::new(channel), request)
        .await
        .map_err(call_error)?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", json(&reply))?;
    } else {
        print_text(&mut stdout, &reply)?;
    }
    Ok(())
}

/// One request of the FilesystemService.
enum Request {
    Read(pb::ReadFileRequest),
    Write(pb::WriteFileRequest),
    Ls(pb::ListDirectoryRequest),
    Search(pb::SearchFilesRequest),
    Find(pb::FindFilesRequest),
    Stat(pb::StatPathRequest),
    Edit(pb::EditFileRequest),
    Mkdir(pb::CreateDirectoryRequest),
    Rm(pb::DeletePathRequest),
}

/// The executor's answer to a [`Request`].
enum Reply {
    Read(pb::ReadFileResponse),
    Write(pb::WriteFileResponse),
    Ls(pb::ListDirectoryResponse),
    Search(pb::SearchFilesResponse),
    Find(pb::FindFilesResponse),
    Stat(pb::StatPathResponse),
    Edit(pb::EditFileResponse),
    Mkdir(pb::CreateDirectoryResponse),
    Rm(pb::DeletePathResponse),
}

/// The request a command makes; `write` reads its content from stdin here.
fn request(op: Op, context: CallContext) -> anyhow::Result<Request> {
    let context = Some(context);
    Ok(match op {
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
            Request::Read(pb::ReadFileRequest {
                context,
                path,
                range,
                ..Default::default()
            })
        }
        Op::Write { path } => Request::Write(pb::WriteFileRequest {
            context,
            path,
            content: crate::client::read_capped(std::io::stdin(), "standard input")?,
            create_parents: true,
            ..Default::default()
        }),
        Op::Ls {
            path,
            recursive,
            all,
        } => Request::Ls(pb::ListDirectoryRequest {
            context,
            path,
            recursive,
            include_hidden: all,
            ..Default::default()
        }),
        Op::Search {
            pattern,
            ignore_case,
            fixed_strings,
            globs,
            context: context_lines,
            hidden,
            path,
        } => Request::Search(pb::SearchFilesRequest {
            context,
            pattern,
            path,
            case_insensitive: ignore_case,
            literal: fixed_strings,
            include_globs: globs,
            context_lines,
            include_hidden: hidden,
            ..Default::default()
        }),
        Op::Find { pattern } => Request::Find(pb::FindFilesRequest {
            context,
            patterns: vec![pattern],
            ..Default::default()
        }),
        Op::Stat { path } => Request::Stat(pb::StatPathRequest {
            context,
            path,
            compute_sha256: true,
        }),
        Op::Edit {
            path,
            old,
            new,
            all,
            expect_sha256,
        } => Request::Edit(pb::EditFileRequest {
            context,
            path,
            old_text: old,
            new_text: new,
            replace_all: all,
            expected_sha256: expect_sha256,
            expected_occurrences: None,
        }),
        Op::Mkdir { path, parents } => Request::Mkdir(pb::CreateDirectoryRequest {
            context,
            path,
            parents,
        }),
        Op::Rm {
            path,
            recursive,
            missing_ok,
            expect_sha256,
        } => Request::Rm(pb::DeletePathRequest {
            context,
            path,
            recursive,
            missing_ok,
            expected_sha256: expect_sha256,
        }),
    })
}

/// Makes the call.
async fn send(
    client: &mut FilesystemServiceClient<crate::client::AuthChannel>,
    request: Request,
) -> Result<Reply, tonic::Status> {
    Ok(match request {
        Request::Read(r) => Reply::Read(client.read_file(r).await?.into_inner()),
        Request::Write(r) => Reply::Write(client.write_file(r).await?.into_inner()),
        Request::Ls(r) => Reply::Ls(client.list_directory(r).await?.into_inner()),
        Request::Search(r) => Reply::Search(client.search_files(r).await?.into_inner()),
        Request::Find(r) => Reply::Find(client.find_files(r).await?.into_inner()),
        Request::Stat(r) => Reply::Stat(client.stat_path(r).await?.into_inner()),
        Request::Edit(r) => Reply::Edit(client.edit_file(r).await?.into_inner()),
        Request::Mkdir(r) => Reply::Mkdir(client.create_directory(r).await?.into_inner()),
        Request::Rm(r) => Reply::Rm(client.delete_path(r).await?.into_inner()),
    })
}

/// The answer as one JSON object (`--json`); a read's content as UTF-8, or
/// `content_base64` when it is not.
fn json(reply: &Reply) -> serde_json::Value {
    use serde_json::json;
    match reply {
        Reply::Read(r) => {
            let mut v = json!({
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
            v
        }
        Reply::Write(r) => {
            json!({"path": r.path, "sha256": r.sha256, "size": r.size, "created": r.created})
        }
        Reply::Ls(r) => {
            let entries: Vec<_> = r
                .entries
                .iter()
                .map(|e| json!({"path": e.path, "type": kind(e.r#type), "size": e.size, "symlink_target": e.symlink_target}))
                .collect();
            json!({"entries": entries, "truncated": r.truncated})
        }
        Reply::Search(r) => {
            let lines = |v: &[pb::ContextLine]| {
                v.iter()
                    .map(|c| json!({"line_number": c.line_number, "line": c.line}))
                    .collect::<Vec<_>>()
            };
            let matches: Vec<_> = r
                .matches
                .iter()
                .map(|m| json!({"path": m.path, "line_number": m.line_number, "line": m.line, "before": lines(&m.before), "after": lines(&m.after)}))
                .collect();
            json!({"matches": matches, "truncated": r.truncated, "files_searched": r.files_searched, "files_matched": r.files_matched})
        }
        Reply::Find(r) => json!({"paths": r.paths, "truncated": r.truncated}),
        Reply::Stat(r) => json!({
            "path": r.path, "type": kind(r.r#type), "size": r.size,
            "mode": format!("{:o}", r.mode), "nlink": r.nlink, "sha256": r.sha256,
            "mtime": r.mtime.map(|t| t.to_string()), "symlink_target": r.symlink_target,
        }),
        Reply::Edit(r) => {
            json!({"path": r.path, "sha256": r.sha256, "occurrences": r.occurrences, "unified_diff": r.unified_diff})
        }
        Reply::Mkdir(r) => json!({"path": r.path, "created": r.created}),
        Reply::Rm(r) => json!({
            "path": r.path, "deleted": r.deleted, "type": r.deleted.then(|| kind(r.r#type)),
            "files_removed": r.files_removed, "directories_removed": r.directories_removed,
            "bytes_removed": r.bytes_removed,
        }),
    }
}

/// The answer for a person: content and listings on stdout, notes (truncation, an edit's
/// count) on stderr.
fn print_text(out: &mut impl Write, reply: &Reply) -> anyhow::Result<()> {
    match reply {
        Reply::Read(r) => {
            out.write_all(&r.content)?;
            if r.truncated {
                eprintln!(
                    "[truncated: {} of {} bytes shown]",
                    r.content.len(),
                    r.total_size
                );
            }
        }
        Reply::Write(r) => writeln!(out, "{} {} bytes sha256={}", r.path, r.size, r.sha256)?,
        Reply::Ls(r) => {
            for e in &r.entries {
                let kind = match pb::EntryType::try_from(e.r#type) {
                    Ok(pb::EntryType::Directory) => "dir ",
                    Ok(pb::EntryType::Symlink) => "link",
                    Ok(pb::EntryType::File) => "file",
                    _ => "othr",
                };
                writeln!(out, "{kind} {:>10} {}", e.size, e.path)?;
            }
            if r.truncated {
                eprintln!("[truncated]");
            }
        }
        Reply::Search(r) => {
            for m in &r.matches {
                for b in &m.before {
                    writeln!(out, "{}-{}-{}", m.path, b.line_number, b.line)?;
                }
                writeln!(out, "{}:{}:{}", m.path, m.line_number, m.line)?;
                for a in &m.after {
                    writeln!(out, "{}-{}-{}", m.path, a.line_number, a.line)?;
                }
            }
            if r.truncated {
                eprintln!("[truncated]");
            }
        }
        Reply::Find(r) => {
            for p in &r.paths {
                writeln!(out, "{p}")?;
            }
        }
        Reply::Stat(r) => writeln!(
            out,
            "{} type={:?} size={} mode={:o} nlink={} sha256={}",
            r.path,
            pb::EntryType::try_from(r.r#type).unwrap_or_default(),
            r.size,
            r.mode,
            r.nlink,
            r.sha256
        )?,
        Reply::Edit(r) => {
            out.write_all(r.unified_diff.as_bytes())?;
            eprintln!(
                "{}: {} replacement{}, sha256={}",
                r.path,
                r.occurrences,
                if r.occurrences == 1 { "" } else { "s" },
                r.sha256
            );
        }
        Reply::Mkdir(r) if r.created => writeln!(out, "created {}", r.path)?,
        Reply::Mkdir(r) => writeln!(out, "{} already exists", r.path)?,
        Reply::Rm(r) if r.deleted => writeln!(
            out,
            "deleted {} {} ({} files, {} directories, {} bytes)",
            kind(r.r#type),
            r.path,
            r.files_removed,
            r.directories_removed,
            r.bytes_removed
        )?,
        Reply::Rm(r) => writeln!(out, "{} does not exist", r.path)?,
    }
    Ok(())
}
