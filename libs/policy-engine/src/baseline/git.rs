//! git: its global options, the subcommand, and what each subcommand may rewrite, discard or
//! run. The subcommand's options are read with argv's `git <subcommand>` tables.

use super::{
    AMBIGUOUS_OPTION, ArgvFindings, FORCE_PUSH, GIT_CONFIG, GIT_DISCARD, GIT_FOREIGN,
    HISTORY_REWRITE, OUTSIDE_WRITE, PUBLISH,
};
use crate::access::Access;

/// git global options that take a separate value.
const GIT_VALUE_OPTS: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--config-env",
    "--exec-path",
    "--super-prefix",
    "--list-cmds",
    "--attr-source",
];

/// Splits a git argv (without `git`) into global options, the subcommand and its arguments.
pub(crate) fn git_split(args: &[String]) -> (Vec<&str>, Option<&str>, &[String]) {
    let mut globals = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if !a.starts_with('-') {
            return (globals, Some(a), &args[i + 1..]);
        }
        globals.push(a);
        if GIT_VALUE_OPTS.contains(&a) {
            if let Some(v) = args.get(i + 1) {
                globals.push(v.as_str());
            }
            i += 1;
        }
        i += 1;
    }
    (globals, None, &[])
}

/// The working directory `git -C dir` switches to, if given.
pub(crate) fn git_chdir(args: &[String]) -> Vec<&str> {
    let (globals, _, _) = git_split(args);
    globals
        .windows(2)
        .filter(|w| w[0] == "-C")
        .map(|w| w[1])
        .collect()
}

pub(super) fn git(args: &[String], f: &mut ArgvFindings, unsafe_flag: &mut bool) {
    let (globals, sub, rest) = git_split(args);
    let mut g = globals.iter();
    while let Some(o) = g.next() {
        // git.c compares its global options as whole words: `--git-d` is refused, so only
        // exact spellings (and `=value` forms) need to be recognised here.
        match *o {
            "-c" | "--config-env" | "--exec-path" | "--git-dir" | "--work-tree" | "--bare"
            | "--super-prefix" => f.rules.push(&GIT_FOREIGN),
            "-p" | "--paginate" => *unsafe_flag = true,
            "-C" | "--namespace" | "--list-cmds" | "--attr-source" => {
                g.next();
            }
            other
                if other.starts_with("--config-env=")
                    || other.starts_with("--exec-path=")
                    || other.starts_with("--git-dir=")
                    || other.starts_with("--work-tree=")
                    || other.starts_with("--super-prefix=") =>
            {
                f.rules.push(&GIT_FOREIGN);
            }
            _ => {}
        }
    }
    if args.iter().any(|a| a.contains("ext::")) {
        *unsafe_flag = true;
    }
    // The subcommand's options, read with its table where it has one (so that `-m -f` is a
    // message, not --force); without one, every letter of a cluster counts (`-uorigin/x`)
    // and so does any prefix of a long option.
    let opts = crate::argv::parse_subcommand("git", sub, rest);
    if opts.ambiguous.is_some() {
        f.rules.push(&AMBIGUOUS_OPTION);
    }
    *unsafe_flag |= opts.may_have(&[
        "--output",
        "--upload-pack",
        "--receive-pack",
        "--exec",
        "--ext-diff",
        "--open-files-in-pager",
        "--config",
        "--template",
    ]) || (sub == Some("ls-remote") && opts.may_have(&["-u"]))
        || (sub == Some("grep") && opts.may_have(&["-O"]))
        // `clone -c core.sshCommand=...` / `-u <cmd>`: the short forms of --config and
        // --upload-pack, each a way to make the clone run a program.
        || (sub == Some("clone") && opts.may_have(&["-c", "-u"]));
    let rest_ops = &opts.operands;
    // Files git reads because an option names them: a commit or tag message (`-F`), a
    // commit template (`-t`), a pathspec list. They are paths like any other (outside the
    // workspace, denied ones).
    if matches!(sub, Some("commit" | "tag")) {
        f.paths.extend(
            opts.values_of(&["-F", "--file", "-t", "--template"])
                .map(|v| (v.to_owned(), Access::Read)),
        );
    }
    f.paths.extend(
        opts.values_of(&["--pathspec-from-file"])
            .map(|v| (v.to_owned(), Access::Read)),
    );
    // Paths git reads outside the index: `diff --no-index a b`, and pathspecs after `--`.
    if sub == Some("diff") && rest.iter().any(|a| a == "--no-index") {
        f.paths
            .extend(rest_ops.iter().map(|o| ((*o).to_owned(), Access::Read)));
    } else if let Some(dd) = rest.iter().position(|a| a == "--") {
        f.paths
            .extend(rest[dd + 1..].iter().map(|o| (o.clone(), Access::Read)));
    }
    // Any push sends work to a remote; `send-email` and `svn dcommit` send it elsewhere.
    if matches!(sub, Some("push" | "send-email"))
        || (sub == Some("svn") && rest_ops.first() == Some(&"dcommit"))
    {
        f.rules.push(&PUBLISH);
    }
    match sub {
        Some("push")
            if (opts.may_have(&[
                "-f",
                "--force",
                "--force-with-lease",
                "--force-if-includes",
                "--mirror",
                "-d",
                "--delete",
                "--prune",
            ]) || rest_ops
                .iter()
                .any(|o| o.starts_with('+') || o.starts_with(':'))) =>
        {
            f.rules.push(&FORCE_PUSH);
        }
        Some("rebase" | "filter-branch" | "filter-repo" | "replace") => {
            f.rules.push(&HISTORY_REWRITE);
        }
        Some("reset") if opts.may_have(&["--hard"]) => {
            f.rules.push(&HISTORY_REWRITE);
            f.rules.push(&GIT_DISCARD);
        }
        Some("reset") if opts.may_have(&["--merge", "--keep"]) => {
            f.rules.push(&HISTORY_REWRITE);
        }
        Some("commit") if opts.may_have(&["--amend"]) => f.rules.push(&HISTORY_REWRITE),
        Some("clean") if opts.may_have(&["-f", "--force"]) => {
            f.rules.push(&HISTORY_REWRITE);
            f.rules.push(&GIT_DISCARD);
        }
        Some("checkout" | "switch") if opts.may_have(&["-f", "--force"]) => {
            f.rules.push(&HISTORY_REWRITE);
            f.rules.push(&GIT_DISCARD);
        }
        Some("switch") if opts.may_have(&["--discard-changes"]) => f.rules.push(&GIT_DISCARD),
        Some("checkout") if git_checkout_discards(rest, &opts) => f.rules.push(&GIT_DISCARD),
        Some("restore") if git_restore_discards(&opts) => f.rules.push(&GIT_DISCARD),
        // `--stdin` takes `delete <ref>` commands as well as updates.
        Some("update-ref") if opts.may_have(&["-d", "--stdin"]) => {
            f.rules.push(&HISTORY_REWRITE);
        }
        Some("reflog")
            if rest_ops
                .first()
                .is_some_and(|s| matches!(*s, "expire" | "delete")) =>
        {
            f.rules.push(&HISTORY_REWRITE);
        }
        Some("stash")
            if rest_ops
                .first()
                .is_some_and(|s| matches!(*s, "drop" | "clear")) =>
        {
            f.rules.push(&HISTORY_REWRITE);
            f.rules.push(&GIT_DISCARD);
        }
        // The user's or the system's configuration is outside the workspace (a run's HOME is
        // private and its global configuration pinned); the repository's is the protected set.
        Some("config")
            if !git_config_reads(rest, &opts)
                && rest
                    .iter()
                    .any(|a| matches!(a.as_str(), "--global" | "--system")) =>
        {
            f.rules.push(&OUTSIDE_WRITE);
        }
        Some("config") if !git_config_reads(rest, &opts) => f.rules.push(&GIT_CONFIG),
        // `rm -f` removes files with uncommitted changes.
        Some("rm") if opts.may_have(&["-f", "--force"]) => f.rules.push(&GIT_DISCARD),
        Some("submodule") if rest_ops.first() == Some(&"foreach") => f.rules.push(&GIT_CONFIG),
        Some("bisect") if rest_ops.first() == Some(&"run") => f.rules.push(&GIT_CONFIG),
        _ => {}
    }
}

/// Whether `git config` only reads: `--get*`, `--list`, `get`/`list`, or one name without a
/// value (`git config user.name`, `git config alias.x`), with no option that writes.
fn git_config_reads(rest: &[String], opts: &crate::argv::Args<'_>) -> bool {
    const WRITES: &[&str] = &[
        "--add",
        "--unset",
        "--unset-all",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "--edit",
        "-e",
        "--file",
        "-f",
        "--blob",
        "--global",
        "--system",
    ];
    if rest.iter().any(|a| {
        WRITES
            .iter()
            .any(|w| a == w || a.starts_with(&format!("{w}=")))
    }) {
        return false;
    }
    if rest
        .iter()
        .any(|a| a.starts_with("--get") || matches!(a.as_str(), "-l" | "--list" | "get" | "list"))
    {
        return true;
    }
    let ops = &opts.operands;
    ops.len() == 1
        && !matches!(
            ops[0],
            "set" | "unset" | "edit" | "rename-section" | "remove-section"
        )
}

/// Whether `git checkout` (arguments after the subcommand) overwrites work-tree files.
///
/// `git checkout <branch>` carries local changes over (git refuses when it cannot), but
/// `git checkout [<tree-ish>] [--] <pathspec>` overwrites the named files. A single operand
/// is a branch or a path depending on the repository, which a script does not show; it is
/// taken as a path when it looks like one (`.`, `./x`, a glob, `:(magic)`, a file extension),
/// and as a branch otherwise.
fn git_checkout_discards(rest: &[String], opts: &crate::argv::Args<'_>) -> bool {
    // Any `--`, even one that is an option's value (`-b --`), is taken as the pathspec
    // separator: that only asks more.
    if rest.iter().any(|a| a == "--")
        || opts.may_have(&[
            "-p",
            "--patch",
            "-2",
            "--ours",
            "-3",
            "--theirs",
            "--pathspec-from-file",
        ])
    {
        return true;
    }
    // The table knows which options take a value (`-b`, `-B`, `--orphan`, `--conflict`);
    // their values are not operands.
    match opts.operands.as_slice() {
        [] => false,
        [one] => looks_like_path(one),
        // `git checkout -b new start` names a start point, not paths.
        [_, _] if opts.has(&["-b", "-B", "--orphan"]) => false,
        _ => true,
    }
}

fn looks_like_path(word: &str) -> bool {
    word == "."
        || word == ".."
        || word.starts_with("./")
        || word.starts_with("../")
        || word.starts_with(':')
        || word.contains(['*', '?', '['])
        || word.rsplit_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty()
                && (1..=5).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && !ext.chars().all(|c| c.is_ascii_digit())
        })
}

/// Whether `git restore` writes the work tree: unless only `--staged` is given, it does.
fn git_restore_discards(opts: &crate::argv::Args<'_>) -> bool {
    // `--staged` makes the command safer, so only a real one counts (`-s -S` names a source
    // called `-S`); `--worktree` makes it worse, so a doubtful one counts too.
    let staged = opts.has(&["-S", "--staged"]);
    let worktree = opts.may_have(&["-W", "--worktree"]);
    !staged || worktree
}

/// For git, only listing and inspection subcommands are on the allowlist.
pub(super) fn git_is_read_only(name: &str, args: &[String]) -> bool {
    if name != "git" {
        return true;
    }
    let (_, sub, rest) = git_split(args);
    let opts = crate::argv::parse_subcommand("git", sub, rest);
    let ops = &opts.operands;
    match sub {
        Some(
            "log" | "show" | "diff" | "status" | "blame" | "shortlog" | "describe" | "rev-parse"
            | "ls-files" | "ls-tree" | "cat-file" | "grep" | "rev-list" | "whatchanged"
            | "merge-base" | "name-rev" | "count-objects" | "check-ignore" | "version" | "help"
            | "for-each-ref" | "show-ref" | "show-branch" | "cherry" | "check-attr"
            | "check-ref-format" | "verify-commit" | "verify-tag" | "fsck" | "var",
        ) => true,
        Some("config") => git_config_reads(rest, &opts),
        Some("worktree") => ops.first() == Some(&"list"),
        Some("branch") => {
            ops.is_empty()
                && !opts.may_have(&[
                    "-d",
                    "-D",
                    "-m",
                    "-M",
                    "-c",
                    "-C",
                    "-f",
                    "-u",
                    "--delete",
                    "--move",
                    "--copy",
                    "--force",
                    "--set-upstream-to",
                    "--unset-upstream",
                    "--edit-description",
                ])
        }
        // `--list` makes it read-only, so only its full spelling counts.
        Some("tag") => ops.is_empty() || opts.has(&["-l"]) || opts.has_in_full("--list"),
        Some("remote") => ops.is_empty(),
        Some("stash") => ops.first().is_some_and(|s| matches!(*s, "list" | "show")),
        // `git reflog -n 5` shows; only `expire` and `delete` change it.
        Some("reflog") => ops
            .first()
            .is_none_or(|s| !matches!(*s, "expire" | "delete")),
        _ => false,
    }
}
