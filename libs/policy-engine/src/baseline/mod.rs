//! The built-in baseline: argv-level knowledge of dangerous programs, flags and wrappers.
//!
//! Every check here looks at one command's argv after bash quote removal (the shell module
//! produces it). Findings are static [`BaselineRule`]s so a classification allocates nothing
//! for them. A user policy is evaluated next to the baseline and the worst tier wins, so a
//! user `auto` can never weaken a baseline `ask` or `deny`.

use toolgate_core::Tier;

use crate::access::Access;

mod code;
mod git;
mod path_rules;
mod sed_awk;
#[cfg(test)]
mod tests;

use code::{embedded_commands, inline_code};
pub(crate) use code::{
    has_inline_code, is_fetcher, is_interpreter, is_sensitive_variable, is_shell,
    reads_program_from_stdin,
};
pub(crate) use git::git_chdir;
use git::{git, git_is_read_only, git_split};
pub(crate) use path_rules::path_rule;
use sed_awk::{awk_program_is_safe, awk_strings, sed_exec_commands, sed_flags, sed_script_is_safe};

/// A built-in rule: its id (always `baseline.*`), tier and the reason shown to the model.
#[derive(Debug, PartialEq, Eq)]
pub struct BaselineRule {
    /// Stable id, prefixed `baseline.`.
    pub id: &'static str,
    /// The tier the rule imposes.
    pub tier: Tier,
    /// Why, phrased for the model or the approver.
    pub reason: &'static str,
}

macro_rules! rules {
    ($($name:ident = $id:literal, $tier:ident, $reason:literal;)+) => {
        $(
            #[doc = concat!("Built-in rule `", $id, "`.")]
            pub static $name: BaselineRule = BaselineRule { id: $id, tier: Tier::$tier, reason: $reason };
        )+
        /// Every built-in rule, for `GetPolicy` summaries.
        pub static ALL: &[&BaselineRule] = &[$(&$name),+];
    };
}

rules! {
    MKFS = "baseline.mkfs", Deny, "formatting or wiping a file system or device is never allowed";
    DD_DEVICE = "baseline.dd-device", Deny, "dd writing to a device is never allowed";
    FORK_BOMB = "baseline.fork-bomb", Deny, "a self-replicating function (fork bomb) is never allowed";
    PRIVILEGE = "baseline.privilege-escalation", Deny, "sudo, doas, su, pkexec and similar privilege escalation are never allowed";
    FETCH_EXEC = "baseline.fetch-and-execute", Deny, "downloading code and feeding it to an interpreter is never allowed; download to a file and ask for review instead";
    SYSTEM_WRITE = "baseline.system-path-write", Deny, "writing to system paths, devices, credentials or shell start-up files is never allowed";
    SECRET_READ = "baseline.secret-read", Deny, "reading credentials or password databases is never allowed";
    RM_ROOT = "baseline.rm-root", Deny, "recursive deletion of /, ~ or with --no-preserve-root is never allowed";
    GIT_INTERNALS_WRITE = "baseline.git-internals-write", Deny, "writing inside .git (config, hooks) can run code later and is never allowed; use git commands";
    AGENT_CONFIG_WRITE = "baseline.agent-config-write", Deny, "writing agent configuration (.claude) is never allowed";
    TOOL_CONFIG_WRITE = "baseline.tool-config-write", Ask, "editor, CI and direnv configuration can run code automatically; a human must approve";
    RM_RECURSIVE = "baseline.rm-recursive-or-forced", Ask, "recursive or forced deletion needs approval";
    FORCE_PUSH = "baseline.git-force-push", Ask, "force pushes and remote deletions rewrite shared history and need approval";
    HISTORY_REWRITE = "baseline.git-history-rewrite", Ask, "rebase, reset --hard, filter-branch, commit --amend and clean -f rewrite or discard history and need approval";
    PERMISSIONS = "baseline.permission-change", Ask, "changing ownership or permissions needs approval";
    PACKAGE_INSTALL = "baseline.package-install", Ask, "installing packages runs third-party code and needs approval";
    NETWORK = "baseline.network-client", Ask, "network clients can exfiltrate data or fetch code and need approval";
    UNSAFE_FLAG = "baseline.exec-or-write-flag", Ask, "this flag makes an otherwise read-only program write files or run programs";
    MAKE = "baseline.make", Ask, "make evaluates the Makefile (even with -n, $(shell ...) runs) and needs approval";
    DYNAMIC_PROGRAM = "baseline.dynamic-program", Ask, "the program name depends on runtime expansion, so what runs cannot be known before it runs";
    DYNAMIC_ARGS = "baseline.dynamic-arguments", Ask, "arguments depend on runtime expansion (variables, substitutions, globs, braces), so the exact command cannot be checked";
    PATH_PROGRAM = "baseline.path-qualified-program", Ask, "a program given by a path may not be the system program of that name";
    LOADER = "baseline.loader-or-proc-root", Ask, "running a program through the dynamic loader or /proc/*/root hides what runs";
    SHELL_STDIN = "baseline.interpreter-stdin", Ask, "an interpreter reading its program from stdin or a heredoc needs approval";
    SCRIPT_FILE = "baseline.script-file", Ask, "running a script file executes contents that were not reviewed";
    SENSITIVE_ENV = "baseline.sensitive-variable", Ask, "this variable changes which code programs load or run (BASH_ENV, LD_PRELOAD, PATH, GIT_*, PAGER...)";
    XARGS = "baseline.xargs", Ask, "xargs builds arguments from input at runtime";
    UNPARSED = "baseline.unparsed", Ask, "the script could not be parsed as bash, so it cannot be analysed";
    BUDGET = "baseline.analysis-budget", Ask, "the script exceeds the analysis budget, so it was not fully analysed";
    UNKNOWN_PATH = "baseline.unknown-path", Ask, "a path depends on an unknown working directory or runtime expansion";
    OUTSIDE_READ = "baseline.outside-workspace-read", Ask, "reading outside the workspace needs approval";
    OUTSIDE_WRITE = "baseline.outside-workspace-write", Ask, "writing outside the workspace needs approval";
    RECURSIVE_FUNCTION = "baseline.recursive-function", Ask, "a recursive shell function needs approval";
    AMBIGUOUS_OPTION = "baseline.ambiguous-option", Ask, "an abbreviated long option matches several of the program's options, so how the program reads it cannot be known";
    INLINE_CODE = "baseline.inline-code", Ask, "interpreter code given inline (-c, -e, --eval) cannot be analysed";
    GIT_CONFIG = "baseline.git-config-write", Ask, "changing git configuration or running commands through git (submodule foreach, bisect run) can execute programs";
    GIT_FOREIGN = "baseline.git-foreign-repository", Ask, "git would use a repository, configuration or program other than the workspace's own (-C or cd elsewhere, --git-dir, --work-tree, --bare, --exec-path, -c, --config-env, GIT_* variables), and git runs commands named in a repository's configuration (core.fsmonitor, core.pager, diff.external, filters, aliases...)";
    GIT_DISCARD = "baseline.git-discard-changes", Ask, "this git command discards uncommitted changes in the work tree (checkout -- paths, checkout ., restore, reset --hard, clean -f, stash drop/clear), which cannot be recovered";
    GIT_ROOT_HEAD = "baseline.git-root-head", Ask, "a HEAD file at the workspace root can make the root itself a git repository for git's discovery, whose configuration can run programs";
    SAFE = "baseline.read-only", Auto, "a known read-only program used with read-only flags";
}

/// Programs that only read and may run without approval when their flags check out.
const SAFE_PROGRAMS: &[&str] = &[
    ":",
    "[",
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

/// The words a command pattern's subcommand list is compared with.
pub(crate) fn subcommand_words(name: &str, args: &[String]) -> Vec<String> {
    if name == "git" {
        let (_, sub, rest) = git_split(args);
        sub.into_iter()
            .map(str::to_owned)
            .chain(crate::argv::operands(rest).into_iter().map(str::to_owned))
            .collect()
    } else {
        crate::argv::operands(args)
            .into_iter()
            .map(str::to_owned)
            .collect()
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

/// Classifies one command by its program `name` (a basename) and arguments.
pub(crate) fn classify_argv(name: &str, args: &[String]) -> ArgvFindings {
    let mut f = ArgvFindings::default();
    let mut unsafe_flag = false;
    let parsed = crate::argv::parse(name, args);
    let ops = parsed.operands.clone();
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
        "dd" => {
            for a in args {
                if let Some(v) = a.strip_prefix("of=") {
                    let p = crate::paths::normalise(v);
                    if p.starts_with("/dev/") && path_rule(&p, Access::Write).is_some() {
                        f.rules.push(&DD_DEVICE);
                    }
                    f.paths.push((v.to_owned(), Access::Write));
                } else if let Some(v) = a.strip_prefix("if=") {
                    f.paths.push((v.to_owned(), Access::Read));
                }
            }
        }
        "rm" | "rmdir" | "unlink" => {
            let recursive = parsed.has(&["-r", "-R", "--recursive"]);
            let forced = parsed.has(&["-f", "--force"]);
            if recursive || forced {
                f.rules.push(&RM_RECURSIVE);
            }
            let root_target = ops.iter().any(|o| is_root_target(o));
            if parsed.has(&["--no-preserve-root"]) || ((recursive || forced) && root_target) {
                f.rules.push(&RM_ROOT);
            }
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Write)));
        }
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
        "xargs" => f.rules.push(&XARGS),
        "git" => git(args, &mut f, &mut unsafe_flag),
        "find" => {
            const BAD: &[&str] = &[
                "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
                "-fls",
            ];
            unsafe_flag |= args.iter().any(|a| BAD.contains(&a.as_str()));
            let starts = find_starts(args);
            // `find / -delete` is `rm -rf /` spelled differently.
            if args.iter().any(|a| a == "-delete") && starts.iter().any(|p| is_root_target(p)) {
                f.rules.push(&RM_ROOT);
            }
            for a in starts {
                f.paths.push((a.to_owned(), Access::Read));
            }
        }
        "rg" => {
            // rg has no table: every letter of a cluster counts, and so does any prefix of
            // a long option (`--p=sh`).
            unsafe_flag |= parsed.may_have(&["--pre", "--hostname-bin", "--search-zip", "-z"]);
            // The first operand is the pattern unless one came from -e/-f.
            let skip = usize::from(!parsed.may_have(&["-e", "-f", "--regexp", "--file"]));
            f.paths.extend(
                ops.iter()
                    .skip(skip)
                    .map(|o| ((*o).to_owned(), Access::Read)),
            );
        }
        "grep" | "egrep" | "fgrep" => {
            // The first operand is the pattern unless one came from -e/-f.
            let skip = usize::from(
                parsed
                    .values_of(&["-e", "-f", "--regexp", "--file"])
                    .next()
                    .is_none(),
            );
            f.paths.extend(
                ops.iter()
                    .skip(skip)
                    .map(|o| ((*o).to_owned(), Access::Read)),
            );
        }
        "sed" => {
            let (bad, scripts_from_flags) = sed_flags(&parsed);
            unsafe_flag |= bad;
            let skip = usize::from(!scripts_from_flags);
            if !scripts_from_flags {
                unsafe_flag |= ops.first().is_none_or(|s| !sed_script_is_safe(s));
            }
            let scripts = parsed
                .values_of(&["-e", "--expression"])
                .chain(ops.first().copied().filter(|_| !scripts_from_flags));
            for script in scripts.filter(|s| !sed_script_is_safe(s)) {
                f.scripts.extend(sed_exec_commands(script));
            }
            f.paths.extend(
                ops.iter()
                    .skip(skip)
                    .map(|o| ((*o).to_owned(), Access::Read)),
            );
        }
        "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => {
            // Program text comes from -e/--source (gawk), from files (-f, -E, -i, -l), or
            // else from the first operand.
            let sources: Vec<&str> = parsed.values_of(&["-e", "--source"]).collect();
            // `-f`/`-E` replace the program operand; `-i`/`-l` load code next to it.
            let from_file = parsed
                .values_of(&["-f", "--file", "-E", "--exec"])
                .next()
                .is_some();
            let loads = parsed
                .values_of(&["-i", "--include", "-l", "--load"])
                .next()
                .is_some();
            let program_operand = sources.is_empty() && !from_file;
            // gawk writes files with `-d`/`-o`/`-p` (dump, pretty-print, profile), reads
            // debugger commands with `-D`, and `-W` spells any gawk long option or mawk's
            // `-W exec file`.
            let writes_or_debugs = parsed.has(&[
                "-d",
                "-D",
                "-o",
                "-p",
                "-W",
                "--dump-variables",
                "--debug",
                "--pretty-print",
                "--profile",
            ]);
            let programs = sources
                .iter()
                .copied()
                .chain(ops.first().copied().filter(|_| program_operand));
            for program in programs {
                f.scripts.extend(embedded_commands(program));
                // A program that runs commands may build them from any of its strings
                // (`c="rm -rf /"; system(c)`): each string is analysed as a command too.
                if program.contains("system") || program.contains('|') {
                    f.scripts.extend(awk_strings(program));
                }
            }
            unsafe_flag |= writes_or_debugs
                || loads
                || from_file
                || sources.iter().any(|p| !awk_program_is_safe(p))
                || (program_operand && ops.first().is_none_or(|p| !awk_program_is_safe(p)));
            f.paths.extend(
                ops.iter()
                    .skip(usize::from(program_operand))
                    .filter(|o| !o.contains('='))
                    .map(|o| ((*o).to_owned(), Access::Read)),
            );
        }
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
        "uniq" | "xxd" => {
            unsafe_flag |= ops.len() > 1 || parsed.has(&["-r"]);
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
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Write)));
        }
        // `mv` writes every operand and the target (the arm above and the table's files).
        "cp" | "ln" | "install" if parsed.has(&["-t", "--target-directory"]) => {
            // Every operand is a source; the target directory is among the table's files.
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Read)));
            unsafe_flag |= parsed.has(&["--strip-program"]);
        }
        "cp" | "ln" | "install" | "rsync" | "scp" => {
            // `install --strip-program=PROG` runs PROG.
            unsafe_flag |= name == "install" && parsed.has(&["--strip-program"]);
            if let Some((last, rest)) = ops.split_last() {
                f.paths
                    .extend(rest.iter().map(|o| ((*o).to_owned(), Access::Read)));
                f.paths.push(((*last).to_owned(), Access::Write));
            }
        }
        "history" if parsed.has(&["-w", "-a"]) => {
            f.paths
                .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Write)));
        }
        _ => {}
    }
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
        }
    }
    if NETWORK_CLIENTS.contains(&name) {
        f.rules.push(&NETWORK);
    }
    if is_package_install(name, args, &parsed) {
        f.rules.push(&PACKAGE_INSTALL);
    }
    if unsafe_flag {
        f.rules.push(&UNSAFE_FLAG);
    }
    if parsed.ambiguous.is_some() {
        f.rules.push(&AMBIGUOUS_OPTION);
    }
    f.safe = SAFE_PROGRAMS.contains(&name) && f.rules.is_empty() && git_is_read_only(name, args);
    f
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
