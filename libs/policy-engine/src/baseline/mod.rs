//! The built-in baseline: argv-level knowledge of dangerous programs, flags and wrappers.
//!
//! Every check here looks at one command's argv after bash quote removal (the shell module
//! produces it). Findings are static [`BaselineRule`]s so a classification allocates nothing
//! for them. A user policy is evaluated next to the baseline and the worst tier wins, so a
//! user `auto` can never weaken a baseline `ask` or `deny`.

use std::collections::HashSet;
use std::sync::LazyLock;

use toolgate_core::Tier;

use crate::access::Access;

mod code;
mod git;
mod path_rules;
mod programs;
mod sed_awk;
#[cfg(test)]
mod tests;

pub(crate) use code::code_destroys;
use code::{embedded_commands, inline_code};
pub(crate) use code::{
    has_inline_code, is_fetcher, is_interpreter, is_sensitive_variable, is_shell,
    reads_program_from_stdin,
};
pub(crate) use git::git_chdir;
use git::{git, git_is_read_only, git_split};
pub(crate) use path_rules::path_rule;

/// A built-in rule: its id (always `baseline.*`), tier and the reason shown to the model.
#[derive(Debug, PartialEq, Eq)]
pub struct BaselineRule {
    /// Stable id, prefixed `baseline.`.
    pub id: &'static str,
    /// The tier the rule imposes.
    pub tier: Tier,
    /// Why, phrased for the model or the approver.
    pub reason: &'static str,
    /// Which guarantees of a run's sandbox profile contain what the rule is about, so that
    /// under such a profile it does not ask.
    pub contained: Containment,
}

/// Which sandbox guarantees make a baseline rule's concern moot (see `crate::profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// Nothing a sandbox does contains it: deny rules, publishing, the protected set,
    /// privilege and sandbox changes, constructs whose program is unknown.
    Never,
    /// Only a file system effect: contained by any confining profile (writes land in the
    /// workspace or a private tmpfs, the host is hidden but the system read-only).
    Filesystem,
    /// Runs code or reaches for the network: contained by a confining profile without
    /// network (the code's effects stay in the view; a connection has nowhere to go).
    Code,
    /// Destroys work in the workspace: contained only where the workspace is read-only.
    Destruction,
}

macro_rules! rules {
    ($($name:ident = $id:literal, $tier:ident, $contained:ident, $reason:literal;)+) => {
        $(
            #[doc = concat!("Built-in rule `", $id, "`.")]
            pub static $name: BaselineRule = BaselineRule {
                id: $id,
                tier: Tier::$tier,
                reason: $reason,
                contained: Containment::$contained,
            };
        )+
        /// Every built-in rule, for `GetPolicy` summaries.
        pub static ALL: &[&BaselineRule] = &[$(&$name),+];
    };
}

rules! {
    MKFS = "baseline.mkfs", Deny, Never, "formatting or wiping a file system or device is never allowed";
    DD_DEVICE = "baseline.dd-device", Deny, Never, "dd writing to a device is never allowed";
    FORK_BOMB = "baseline.fork-bomb", Deny, Never, "a self-replicating function (fork bomb) is never allowed";
    PRIVILEGE = "baseline.privilege-escalation", Deny, Never, "sudo, doas, su, pkexec and similar privilege escalation are never allowed";
    FETCH_EXEC = "baseline.fetch-and-execute", Deny, Never, "downloading code and feeding it to an interpreter is never allowed; download to a file and ask for review instead";
    SYSTEM_WRITE = "baseline.system-path-write", Deny, Never, "writing to system paths, devices, credentials or shell start-up files is never allowed";
    SECRET_READ = "baseline.secret-read", Deny, Never, "reading credentials or password databases is never allowed";
    RM_ROOT = "baseline.rm-root", Deny, Never, "recursive deletion of /, ~ or with --no-preserve-root is never allowed";
    GIT_INTERNALS_WRITE = "baseline.git-internals-write", Deny, Never, "writing inside .git (config, hooks) can run code later and is never allowed; use git commands";
    AGENT_CONFIG_WRITE = "baseline.agent-config-write", Deny, Never, "writing agent configuration (.claude) is never allowed";
    TOOL_CONFIG_WRITE = "baseline.tool-config-write", Ask, Never, "editor, CI and direnv configuration can run code automatically; a human must approve";
    RM_RECURSIVE = "baseline.rm-recursive-or-forced", Ask, Destruction, "recursive or forced deletion needs approval";
    FORCE_PUSH = "baseline.git-force-push", Ask, Never, "force pushes and remote deletions rewrite shared history and need approval";
    HISTORY_REWRITE = "baseline.git-history-rewrite", Ask, Destruction, "rebase, reset --hard, filter-branch, commit --amend and clean -f rewrite or discard history and need approval";
    PERMISSIONS = "baseline.permission-change", Ask, Filesystem, "changing ownership or permissions needs approval";
    PACKAGE_INSTALL = "baseline.package-install", Ask, Code, "installing packages runs third-party code and needs approval";
    NETWORK = "baseline.network-client", Ask, Code, "network clients can exfiltrate data or fetch code and need approval";
    UNSAFE_FLAG = "baseline.exec-or-write-flag", Ask, Code, "this flag makes an otherwise read-only program write files or run programs";
    MAKE = "baseline.make", Ask, Code, "make evaluates the Makefile (even with -n, $(shell ...) runs) and needs approval";
    DYNAMIC_PROGRAM = "baseline.dynamic-program", Ask, Never, "the program name depends on runtime expansion, so what runs cannot be known before it runs";
    DYNAMIC_ARGS = "baseline.dynamic-arguments", Ask, Code, "arguments depend on runtime expansion (variables, substitutions, globs, braces), so the exact command cannot be checked";
    PATH_PROGRAM = "baseline.path-qualified-program", Ask, Code, "a program given by a path may not be the system program of that name";
    LOADER = "baseline.loader-or-proc-root", Ask, Never, "running a program through the dynamic loader or /proc/*/root hides what runs";
    SHELL_STDIN = "baseline.interpreter-stdin", Ask, Code, "an interpreter reading its program from stdin or a heredoc needs approval";
    SCRIPT_FILE = "baseline.script-file", Ask, Code, "running a script file executes contents that were not reviewed";
    SENSITIVE_ENV = "baseline.sensitive-variable", Ask, Never, "this variable changes which code programs load or run (BASH_ENV, LD_PRELOAD, PATH, GIT_*, PAGER...)";
    XARGS = "baseline.xargs", Ask, Code, "xargs builds arguments from input at runtime";
    UNPARSED = "baseline.unparsed", Ask, Never, "the script could not be parsed as bash, so it cannot be analysed";
    BUDGET = "baseline.analysis-budget", Ask, Never, "the script exceeds the analysis budget, so it was not fully analysed";
    UNKNOWN_PATH = "baseline.unknown-path", Ask, Filesystem, "a path depends on an unknown working directory or runtime expansion";
    OUTSIDE_READ = "baseline.outside-workspace-read", Ask, Filesystem, "reading outside the workspace needs approval";
    OUTSIDE_WRITE = "baseline.outside-workspace-write", Ask, Filesystem, "writing outside the workspace needs approval";
    RECURSIVE_FUNCTION = "baseline.recursive-function", Ask, Code, "a recursive shell function needs approval";
    AMBIGUOUS_OPTION = "baseline.ambiguous-option", Ask, Never, "an abbreviated long option matches several of the program's options, so how the program reads it cannot be known";
    INLINE_CODE = "baseline.inline-code", Ask, Code, "interpreter code given inline (-c, -e, --eval) cannot be analysed";
    GIT_CONFIG = "baseline.git-config-write", Ask, Never, "changing git configuration or running commands through git (submodule foreach, bisect run) can execute programs";
    GIT_FOREIGN = "baseline.git-foreign-repository", Ask, Never, "git would use a repository, configuration or program other than the workspace's own (-C or cd elsewhere, --git-dir, --work-tree, --bare, --exec-path, -c, --config-env, GIT_* variables), and git runs commands named in a repository's configuration (core.fsmonitor, core.pager, diff.external, filters, aliases...)";
    GIT_DISCARD = "baseline.git-discard-changes", Ask, Destruction, "this git command discards uncommitted changes in the work tree (checkout -- paths, checkout ., restore, reset --hard, clean -f, stash drop/clear), which cannot be recovered";
    GIT_ROOT_HEAD = "baseline.git-root-head", Ask, Never, "a HEAD file at the workspace root can make the root itself a git repository for git's discovery, whose configuration can run programs";
    GIT_SUBDIRECTORY = "baseline.git-subdirectory", Ask, Code, "git runs outside the workspace root (-C, cd), where a repository other than the workspace's own may be found and its configuration may run programs";
    OPAQUE_DESTRUCTION = "baseline.opaque-destruction", Ask, Destruction, "what this deletes, discards or moves away is decided at run time (a glob, a variable, a substitution, names found or piped in) or leaves the workspace, so it may destroy work the sandbox cannot bring back";
    INLINE_DELETION = "baseline.inline-code-deletes", Ask, Destruction, "inline interpreter code that deletes, truncates or moves files, or runs rm or git, may destroy work the sandbox cannot bring back";
    PUBLISH = "baseline.publish", Ask, Never, "publishing (git push, package registries, container images, releases) sends work where the sandbox cannot take it back";
    SAFE = "baseline.read-only", Auto, Never, "a known read-only program used with read-only flags";
}

/// Programs that only read, or only write the paths they name (each judged by the path
/// rules, as a redirection would be), and may run without approval when their flags check
/// out. Shell plumbing builtins are here too.
const SAFE_PROGRAMS: &[&str] = &[
    ":",
    "[",
    "arch",
    "break",
    "continue",
    "cp",
    "dirs",
    "exit",
    "export",
    "free",
    "getopts",
    "groups",
    "hostname",
    "local",
    "locale",
    "mkdir",
    "nproc",
    "popd",
    "printenv",
    "ps",
    "pushd",
    "return",
    "set",
    "shift",
    "sleep",
    "tee",
    "touch",
    "tty",
    "umask",
    "unset",
    "uptime",
    "wait",
    "awk",
    "b2sum",
    "base64",
    "basename",
    "cat",
    "cd",
    "cksum",
    "cmp",
    "column",
    "comm",
    "cut",
    "date",
    "df",
    "diff",
    "dirname",
    "du",
    "echo",
    "egrep",
    "expand",
    "false",
    "fgrep",
    "file",
    "find",
    "fmt",
    "fold",
    "gawk",
    "git",
    "grep",
    "head",
    "hexdump",
    "id",
    "jq",
    "join",
    "ls",
    "man",
    "mawk",
    "md5sum",
    "nl",
    "od",
    "paste",
    "printf",
    "pwd",
    "readlink",
    "realpath",
    "rev",
    "rg",
    "sed",
    "seq",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "shasum",
    "sort",
    "stat",
    "strings",
    "tac",
    "tail",
    "test",
    "tr",
    "tree",
    "true",
    "type",
    "uname",
    "unexpand",
    "uniq",
    "wc",
    "which",
    "whoami",
    "xxd",
];

const NETWORK_CLIENTS: &[&str] = &[
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "socat",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "ftp",
    "tftp",
    "telnet",
    "aria2c",
    "http",
    "https",
    "xh",
    "ping",
    "ping6",
    "dig",
    "nslookup",
    "host",
    "whois",
    "traceroute",
    "mtr",
    "nmap",
    "lynx",
    "links",
    "w3m",
    "fetch",
];

/// [`SAFE_PROGRAMS`] and [`NETWORK_CLIENTS`] as sets: every command is looked up in both.
static SAFE_PROGRAM_SET: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| SAFE_PROGRAMS.iter().copied().collect());
static NETWORK_CLIENT_SET: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| NETWORK_CLIENTS.iter().copied().collect());

/// The words a command pattern's subcommand list is compared with.
pub(crate) fn subcommand_words<'a>(name: &str, args: &'a [String]) -> Vec<&'a str> {
    if name == "git" {
        let (_, sub, rest) = git_split(args);
        sub.into_iter().chain(crate::argv::operands(rest)).collect()
    } else {
        crate::argv::operands(args)
    }
}

/// Whether deleting `path` recursively deletes the root, a home or all of them.
fn is_root_target(path: &str) -> bool {
    let p = crate::paths::normalise(path);
    p == "/" || p == "~" || p == "/*" || p == "~/*" || p == "/home" || p == "/root"
}

/// find's starting points: the words before the first expression token, after find's own
/// leading options (`-H`, `-L`, `-P`, `-D opts`, `-O3`).
pub(crate) fn find_starts(args: &[String]) -> Vec<&str> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            o if o.starts_with("-O") => i += 1,
            _ => break,
        }
    }
    args.iter()
        .skip(i)
        .map(String::as_str)
        .take_while(|a| !a.starts_with('-') && *a != "!" && *a != "(")
        .collect()
}

/// The commands `find -exec/-execdir/-ok/-okdir ... ;|+` runs, with `{}` replaced by each
/// starting point (what the first match of a recursive find is).
pub(crate) fn find_exec_commands(args: &[String]) -> Vec<Vec<String>> {
    let mut starts = find_starts(args);
    if starts.is_empty() {
        starts.push(".");
    }
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if !matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            continue;
        }
        let argv: Vec<&String> = it.by_ref().take_while(|w| *w != ";" && *w != "+").collect();
        if argv.is_empty() {
            continue;
        }
        for s in &starts {
            out.push(argv.iter().map(|w| w.replace("{}", s)).collect());
        }
    }
    out
}

/// What classifying one command's argv found.
#[derive(Debug, Default)]
pub(crate) struct ArgvFindings {
    /// Built-in rules that matched.
    pub rules: Vec<&'static BaselineRule>,
    /// Whether the command is on the read-only allowlist with only read-only flags.
    pub safe: bool,
    /// Paths the command's operands name, as spelled (resolved later against the cwd).
    pub paths: Vec<(String, Access)>,
    /// Shell command strings the program runs (`awk 'BEGIN{system("...")}'`,
    /// `python3 -c 'os.system("...")'`), for the shell module to analyse.
    pub scripts: Vec<String>,
}

/// Programs whose operands name what they delete.
pub(crate) fn is_deleter(name: &str) -> bool {
    matches!(
        name,
        "rm" | "rmdir" | "unlink" | "shred" | "srm" | "trash" | "trash-put" | "wipe"
    )
}

/// Programs whose arguments decide whether they delete, discard or move work away, so an
/// argument known only at run time may make them destroy work.
pub(crate) fn destroys_by_arguments(name: &str, args: &[String]) -> bool {
    if is_deleter(name) || matches!(name, "find" | "mv" | "rsync" | "xargs" | "dd" | "truncate") {
        return true;
    }
    if name == "git" {
        let (_, sub, _) = git_split(args);
        // Subcommands that neither discard work-tree changes nor move refs away.
        return !matches!(
            sub,
            Some(
                "add"
                    | "commit"
                    | "log"
                    | "show"
                    | "diff"
                    | "status"
                    | "blame"
                    | "grep"
                    | "ls-files"
                    | "ls-tree"
                    | "cat-file"
                    | "rev-parse"
                    | "rev-list"
                    | "describe"
                    | "shortlog"
                    | "tag"
                    | "fetch"
                    | "mv"
                    | "for-each-ref"
                    | "show-ref"
                    | "format-patch"
                    | "apply"
                    | "am"
                    | "notes"
                    | "archive"
                    | "bundle"
            )
        );
    }
    false
}

/// Whether `mv` or `cp`-like arguments send their sources out of the workspace: a target
/// that is absolute, in a home, or climbs out with `..`.
fn leaves_workspace(target: &str) -> bool {
    target.starts_with('/') || target.starts_with('~') || target.split('/').any(|c| c == "..")
}

/// Publishing: sending work to a registry, a remote or a deployment.
///
/// `ops` are `args`' operands read without a table ([`crate::argv::operands`]).
fn is_publish(name: &str, args: &[String], ops: &[&str]) -> bool {
    let first = ops.first().copied().unwrap_or("");
    let second = ops.get(1).copied().unwrap_or("");
    match name {
        "npm" | "pnpm" | "yarn" | "bun" => {
            matches!(
                first,
                "publish" | "unpublish" | "deprecate" | "dist-tag" | "owner"
            )
        }
        "cargo" => matches!(first, "publish" | "yank" | "owner"),
        "docker" | "podman" | "buildah" | "nerdctl" => {
            first == "push"
                || (matches!(first, "image" | "manifest") && second == "push")
                || args.iter().any(|a| a == "--push")
        }
        "twine" => first == "upload",
        "poetry" | "uv" | "flit" | "hatch" | "pdm" => first == "publish",
        "gem" => matches!(first, "push" | "yank" | "owner"),
        "mvn" | "mvnw" => ops.contains(&"deploy"),
        "gradle" | "gradlew" => ops.iter().any(|o| o.starts_with("publish")),
        "dotnet" | "nuget" => ops.windows(2).any(|w| w == ["nuget", "push"]) || first == "push",
        "helm" => first == "push",
        "gh" => {
            matches!(
                first,
                "release" | "pr" | "repo" | "gist" | "issue" | "workflow"
            ) && !matches!(second, "list" | "view" | "status" | "diff" | "checks" | "")
        }
        "vsce" | "ovsx" => first == "publish",
        "skopeo" => first == "copy",
        _ => false,
    }
}

/// Version and help probes of known tools: they print and exit.
fn is_version_probe(name: &str, args: &[String]) -> bool {
    const TOOLS: &[&str] = &[
        "node",
        "npm",
        "npx",
        "yarn",
        "pnpm",
        "bun",
        "deno",
        "cargo",
        "rustc",
        "rustup",
        "rustfmt",
        "go",
        "gofmt",
        "java",
        "javac",
        "gcc",
        "g++",
        "cc",
        "c++",
        "clang",
        "clang++",
        "make",
        "cmake",
        "ninja",
        "git",
        "docker",
        "podman",
        "ruby",
        "gem",
        "perl",
        "php",
        "pip",
        "pip3",
        "uv",
        "poetry",
        "pytest",
        "black",
        "ruff",
        "mypy",
        "flake8",
        "pylint",
        "tsc",
        "eslint",
        "prettier",
        "jq",
        "rg",
        "fd",
        "bat",
        "gh",
        "kubectl",
        "helm",
        "terraform",
        "dotnet",
        "mvn",
        "gradle",
        "kotlin",
        "scala",
        "swift",
        "zig",
        "lua",
        "tmux",
        "bash",
        "sh",
        "zsh",
        "curl",
        "wget",
        "ssh",
        "openssl",
        "sqlite3",
        "psql",
        "protoc",
        "buf",
        "clippy-driver",
        "cargo-clippy",
        "lldb",
        "gdb",
    ];
    let known = TOOLS.contains(&name)
        || name.starts_with("python")
        || name.starts_with("pip3")
        || name.starts_with("node");
    known
        && match args {
            [a] => {
                matches!(
                    a.as_str(),
                    "--version" | "-V" | "--help" | "-h" | "version" | "help"
                ) || (matches!(
                    name,
                    "node" | "npm" | "yarn" | "pnpm" | "bun" | "gcc" | "make"
                ) && a == "-v")
                    || (name == "java" && a == "-version")
            }
            _ => false,
        }
}

/// Subcommands of build tools and package managers that only print what they know.
///
/// `ops` are `args`' operands read without a table ([`crate::argv::operands`]).
fn tool_is_read_only(name: &str, args: &[String], ops: &[&str]) -> bool {
    let first = ops.first().copied().unwrap_or("");
    let second = ops.get(1).copied().unwrap_or("");
    match name {
        "cargo" => matches!(
            first,
            "tree" | "metadata" | "pkgid" | "locate-project" | "verify-project" | "version"
        ),
        "npm" | "pnpm" => {
            matches!(
                first,
                "ls" | "list" | "ll" | "la" | "root" | "prefix" | "why" | "explain"
            ) || (first == "config" && matches!(second, "get" | "list" | "ls"))
        }
        "yarn" => matches!(first, "list" | "why"),
        "pip" | "pip3" => {
            matches!(first, "list" | "show" | "freeze" | "check")
                || (first == "config" && second == "list")
        }
        "go" => matches!(first, "env" | "version") && !args.iter().any(|a| a == "-w" || a == "-u"),
        "rustup" => {
            matches!(first, "show" | "which")
                || (first == "toolchain" && second == "list")
                || (first == "target" && second == "list")
        }
        _ => false,
    }
}

/// Classifies one command by its program `name` (a basename) and arguments.
pub(crate) fn classify_argv(name: &str, args: &[String]) -> ArgvFindings {
    let mut f = ArgvFindings::default();
    let parsed = crate::argv::parse(name, args);
    let unsafe_flag = program_findings(name, args, &parsed, &mut f);
    general_findings(name, args, &parsed, unsafe_flag, &mut f);
    f
}

/// What the program's own rules find: the rules and operand paths of the programs the baseline
/// knows by name. Returns whether an option makes an otherwise read-only program unsafe.
fn program_findings(
    name: &str,
    args: &[String],
    parsed: &crate::argv::Args<'_>,
    f: &mut ArgvFindings,
) -> bool {
    let mut unsafe_flag = false;
    let ops = &parsed.operands;
    match name {
        n if n.starts_with("mkfs")
            || matches!(
                n,
                "mke2fs"
                    | "mkswap"
                    | "wipefs"
                    | "sfdisk"
                    | "fdisk"
                    | "parted"
                    | "blkdiscard"
                    | "shred"
            ) =>
        {
            f.rules.push(&MKFS);
        }
        "sudo" | "doas" | "su" | "pkexec" | "run0" | "runuser" | "sudoedit" | "setpriv"
        | "chroot" | "nsenter" | "unshare" => {
            f.rules.push(&PRIVILEGE);
        }
        "dd" => programs::dd(args, f),
        "rm" | "rmdir" | "unlink" => programs::rm(parsed, f),
        "chmod" | "chown" | "chgrp" | "chattr" | "setfacl" | "chcon" => {
            f.rules.push(&PERMISSIONS);
            let has_reference = args.iter().any(|a| a.starts_with("--reference"));
            let skip = usize::from(!has_reference);
            f.paths.extend(
                ops.iter()
                    .skip(skip)
                    .map(|o| ((*o).to_owned(), Access::Write)),
            );
        }
        "make" | "gmake" | "bmake" | "cmake" | "ninja" | "just" | "rake" => {
            f.rules.push(&MAKE);
        }
        // Archivers that delete what they archive.
        "tar" | "bsdtar" | "zip" | "7z" | "7za" | "7zz"
            if args.iter().any(|a| {
                a == "--remove-files"
                    || a == "-sdel"
                    || (name == "zip"
                        && a.starts_with('-')
                        && !a.starts_with("--")
                        && a.contains('m'))
            }) =>
        {
            f.rules.push(&OPAQUE_DESTRUCTION);
        }
        "parallel" | "xargs" => {
            f.rules.push(&XARGS);
            // The names xargs reads decide what a deleting program deletes.
            let inner = parsed.operands.first().copied().unwrap_or("");
            if destroys_by_arguments(inner.rsplit('/').next().unwrap_or(inner), &[]) {
                f.rules.push(&OPAQUE_DESTRUCTION);
            }
        }
        "git" => git(args, f, &mut unsafe_flag),
        "find" => unsafe_flag |= programs::find(args, f),
        "rg" => unsafe_flag |= programs::rg(parsed, f),
        "grep" | "egrep" | "fgrep" => programs::grep(parsed, f),
        "sed" => unsafe_flag |= programs::sed(parsed, f),
        "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => unsafe_flag |= programs::awk(parsed, f),
        "sort" => {
            // `-o` writes its file and `--compress-program` runs a program on temporary files
            // (`sort -S 64k --compress-prog=sh` runs the input's lines as shell).
            unsafe_flag |= parsed.has(&["-o", "--output", "--compress-program"]);
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Read)));
        }
        "man" => {
            // man-db reads options with argp: clusters take any value (`-P'sh -c id'`).
            // man has no table, so every letter of a cluster counts. A configuration file
            // (`-C`) can DEFINE the pager and formatters man runs.
            unsafe_flag |= parsed.may_have(&[
                "-H",
                "--html",
                "-P",
                "--pager",
                "--preprocessor",
                "-p",
                "-l",
                "--local-file",
                "-C",
                "--config-file",
            ]);
        }
        "tree" => unsafe_flag |= parsed.has(&["-o", "-R"]),
        "date" => {
            unsafe_flag |= parsed.has(&["-s", "--set", "-f", "--file"]);
        }
        "uniq" => {
            unsafe_flag |= ops.len() > 1 || parsed.has(&["-r"]);
            f.paths
                .extend(ops.iter().take(1).map(|o| ((*o).to_owned(), Access::Read)));
        }
        "xxd" => {
            // xxd's own parser: single-dash words, some taking the next word as a value
            // (`-c 10`, `-cols 10`) or an attached one (`-c10`). A second operand is the
            // output file; `-r` writes binary.
            let (ops, revert) = xxd_operands(args);
            unsafe_flag |= ops.len() > 1 || revert;
            f.paths
                .extend(ops.iter().take(1).map(|o| ((*o).to_owned(), Access::Read)));
        }
        "printf" => unsafe_flag |= args.first().is_some_and(|a| a == "-v"),
        "cat" | "head" | "tail" | "wc" | "nl" | "od" | "hexdump" | "strings" | "md5sum"
        | "sha1sum" | "sha224sum" | "sha256sum" | "sha384sum" | "sha512sum" | "shasum"
        | "b2sum" | "cksum" | "base64" | "tac" | "rev" | "cut" | "paste" | "fold" | "fmt"
        | "expand" | "unexpand" | "column" | "diff" | "cmp" | "comm" | "join" | "file" | "stat"
        | "ls" | "du" | "less" | "more" | "jq" | "readlink" | "realpath" | "source" | "." => {
            let skip = usize::from(name == "jq");
            f.paths.extend(
                ops.iter()
                    .skip(skip)
                    .filter(|o| **o != "-")
                    .map(|o| ((*o).to_owned(), Access::Read)),
            );
            if matches!(name, "source" | ".") {
                f.rules.push(&SCRIPT_FILE);
            }
        }
        "touch" | "mkdir" | "truncate" | "tee" | "mv" | "mktemp" => {
            programs::writers(name, parsed, f);
        }
        // `mv` writes every operand and the target (the arm above and the table's files).
        "cp" | "ln" | "install" if parsed.has(&["-t", "--target-directory"]) => {
            // Every operand is a source; the target directory is among the table's files.
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Read)));
            unsafe_flag |= parsed.has(&["--strip-program"]);
        }
        "cp" | "ln" | "install" | "rsync" | "scp" => {
            unsafe_flag |= programs::copy(name, args, parsed, f);
        }
        "history" if parsed.has(&["-w", "-a"]) => {
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Write)));
        }
        _ => {}
    }
    unsafe_flag
}

/// What holds whatever the program: the files its options name, inline code, publishing,
/// network clients, package installs, unsafe and ambiguous options, and whether the command
/// is on the read-only allowlist.
fn general_findings(
    name: &str,
    args: &[String],
    parsed: &crate::argv::Args<'_>,
    unsafe_flag: bool,
    f: &mut ArgvFindings,
) {
    f.paths.extend(parsed.files.iter().map(|(p, written)| {
        let access = if *written {
            Access::Write
        } else {
            Access::Read
        };
        ((*p).to_owned(), access)
    }));
    if is_interpreter(name) && !is_shell(name) {
        for code in inline_code(name, args) {
            f.scripts.extend(embedded_commands(code));
            if code_destroys(code) {
                f.rules.push(&INLINE_DELETION);
            }
        }
    }
    // Read once for both checks that compare operands with subcommand names.
    let ops = crate::argv::operands(args);
    if is_publish(name, args, &ops) {
        f.rules.push(&PUBLISH);
    }
    if NETWORK_CLIENT_SET.contains(name) {
        f.rules.push(&NETWORK);
    }
    if is_package_install(name, args, parsed) {
        f.rules.push(&PACKAGE_INSTALL);
    }
    if unsafe_flag {
        f.rules.push(&UNSAFE_FLAG);
    }
    if parsed.ambiguous.is_some() {
        f.rules.push(&AMBIGUOUS_OPTION);
    }
    f.safe = f.rules.is_empty()
        && ((SAFE_PROGRAM_SET.contains(name)
            && git_is_read_only(name, args)
            && plumbing_is_safe(name, args))
            || is_version_probe(name, args)
            || tool_is_read_only(name, args, &ops));
}

/// xxd's operands and whether it reverts (writes binary), read as xxd reads its options.
fn xxd_operands(args: &[String]) -> (Vec<&str>, bool) {
    const VALUED: &[&str] = &[
        "-c",
        "-cols",
        "-g",
        "-groupsize",
        "-l",
        "-len",
        "-o",
        "-offset",
        "-s",
        "-seek",
        "-n",
        "-name",
        "-R",
    ];
    let (mut ops, mut revert) = (Vec::new(), false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let w = a.as_str();
        if w == "--" {
            ops.extend(it.by_ref().map(String::as_str));
            break;
        }
        if w == "-" || !w.starts_with('-') {
            ops.push(w);
        } else if VALUED.contains(&w) {
            it.next();
        } else if w.starts_with("-r") {
            revert = true;
        }
    }
    (ops, revert)
}

/// The plumbing builtins and path writers that are on the allowlist only in some forms:
/// `hostname NAME` sets the host name, `cp` that links or runs nothing else is a copy.
fn plumbing_is_safe(name: &str, args: &[String]) -> bool {
    match name {
        "hostname" => crate::argv::operands(args).is_empty(),
        "cp" => !args.iter().any(|a| {
            a.starts_with("--link")
                || a.starts_with("--symbolic")
                || a.starts_with("--reflink")
                || (a.starts_with('-') && !a.starts_with("--") && a.contains(['l', 's']))
        }),
        // `set` alone prints every variable, `set -o`/`+o` options; `set -- a b` assigns.
        _ => true,
    }
}

fn is_package_install(name: &str, args: &[String], parsed: &crate::argv::Args<'_>) -> bool {
    let ops = &parsed.operands;
    let first = ops.first().copied().unwrap_or("");
    let second = ops.get(1).copied().unwrap_or("");
    match name {
        "npx" | "pnpx" | "bunx" | "uvx" | "pipx" => true,
        "pip" | "pip3" => matches!(first, "install" | "download" | "wheel"),
        n if n.starts_with("pip3.") => first == "install",
        n if n.starts_with("python") => {
            args.windows(2)
                .any(|w| w[0] == "-m" && (w[1] == "pip" || w[1] == "ensurepip"))
                && ops.contains(&"install")
        }
        "uv" => {
            matches!(first, "add" | "sync")
                || (first == "pip" && second == "install")
                || (first == "tool" && matches!(second, "install" | "run"))
        }
        "npm" | "pnpm" | "bun" | "yarn" => {
            (name == "yarn" && ops.is_empty())
                || matches!(
                    first,
                    "install"
                        | "i"
                        | "ci"
                        | "add"
                        | "exec"
                        | "x"
                        | "dlx"
                        | "update"
                        | "upgrade"
                        | "up"
                        | "link"
                        | "create"
                        | "init"
                )
        }
        "cargo" => matches!(first, "install" | "add" | "binstall"),
        "go" => matches!(first, "install" | "get"),
        "gem" | "brew" | "snap" | "flatpak" | "conda" | "mamba" | "micromamba" | "poetry"
        | "composer" | "pipenv" => {
            matches!(
                first,
                "install" | "add" | "require" | "create" | "upgrade" | "update" | "tap"
            )
        }
        "apt" | "apt-get" | "aptitude" | "dnf" | "yum" | "zypper" | "apk" | "dpkg" | "rpm" => {
            matches!(
                first,
                "install"
                    | "add"
                    | "upgrade"
                    | "dist-upgrade"
                    | "full-upgrade"
                    | "remove"
                    | "purge"
                    | "del"
                    | "update"
                    | "reinstall"
            ) || parsed.has(&["-i"])
        }
        "pacman" | "yay" | "paru" => args
            .iter()
            .any(|a| a.starts_with("-S") || a.starts_with("-U") || a.starts_with("-R")),
        _ => false,
    }
}
