//! The built-in baseline: argv-level knowledge of dangerous programs, flags and wrappers.
//!
//! Every check here looks at one command's argv after bash quote removal (the shell module
//! produces it). Findings are static [`BaselineRule`]s so a classification allocates nothing
//! for them. A user policy is evaluated next to the baseline and the worst tier wins, so a
//! user `auto` can never weaken a baseline `ask` or `deny`.

use toolgate_core::Tier;

use crate::access::Access;
use crate::paths;

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

/// Network clients whose output is remote content (for fetch-and-execute detection).
pub(crate) fn is_fetcher(name: &str) -> bool {
    matches!(
        name,
        "curl"
            | "wget"
            | "nc"
            | "ncat"
            | "netcat"
            | "socat"
            | "ssh"
            | "aria2c"
            | "http"
            | "https"
            | "xh"
            | "lynx"
            | "links"
            | "w3m"
            | "fetch"
            | "tftp"
            | "ftp"
    )
}

/// Shells whose `-c` string is bash-like enough to analyse with the bash grammar.
pub(crate) fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "ash" | "yash" | "rbash"
    )
}

/// Programs that execute code they read (shells and language interpreters).
pub(crate) fn is_interpreter(name: &str) -> bool {
    is_shell(name)
        || ["python", "pypy", "perl", "ruby", "php", "lua", "node"]
            .iter()
            .any(|p| name.starts_with(p))
        || matches!(
            name,
            "fish"
                | "csh"
                | "tcsh"
                | "nodejs"
                | "deno"
                | "bun"
                | "Rscript"
                | "R"
                | "tclsh"
                | "wish"
                | "osascript"
                | "pwsh"
                | "powershell"
                | "jshell"
                | "groovy"
                | "julia"
                | "guile"
                | "racket"
                | "sbcl"
                | "erl"
                | "elixir"
                | "irb"
        )
}

/// Whether an interpreter invocation takes its program from stdin (no script operand and no
/// inline-code flag), as in `curl x | python3`.
pub(crate) fn reads_program_from_stdin(name: &str, args: &[String]) -> bool {
    let mut positional = Vec::new();
    let mut iter = args.iter();
    while let Some(a) = iter.next() {
        if a == "--" {
            positional.extend(iter.by_ref());
            break;
        }
        if a == "-" || !a.starts_with('-') {
            positional.push(a);
            // The first operand is the script; the rest are its arguments.
            break;
        }
        let inline = if is_shell(name) {
            a.starts_with('-') && !a.starts_with("--") && a[1..].contains('c')
        } else {
            matches!(
                a.as_str(),
                "-c" | "-e" | "-E" | "-m" | "-p" | "-r" | "--eval" | "--print" | "--command"
            ) || (name.starts_with("perl") && (a.starts_with("-e") || a.starts_with("-E")))
        };
        if inline {
            return false;
        }
        if is_shell(name) && a.starts_with('-') && a[1..].contains('s') && !a.starts_with("--") {
            return true;
        }
    }
    match positional.first() {
        None => true,
        Some(p) => p.as_str() == "-" || p.as_str() == "/dev/stdin",
    }
}

/// Whether a non-shell interpreter is given its program inline (`python3 -c`, `perl -e`).
pub(crate) fn has_inline_code(name: &str, args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--" && a.starts_with('-'))
        .any(|a| {
            matches!(
                a.as_str(),
                "-c" | "-e" | "-E" | "-p" | "-r" | "--eval" | "--print" | "--command"
            ) || (name.starts_with("perl")
                && a.len() > 1
                && a[1..].contains(['e', 'E'])
                && !a.starts_with("--"))
                || a.starts_with("--eval=")
        })
}

/// Variables that change which code a program loads or runs.
pub(crate) fn is_sensitive_variable(name: &str) -> bool {
    name.starts_with("GIT_")
        || name.starts_with("LD_")
        || name.starts_with("DYLD_")
        || name.starts_with("BASH_FUNC_")
        || matches!(
            name,
            "BASH_ENV"
                | "ENV"
                | "PATH"
                | "PAGER"
                | "MANPAGER"
                | "SYSTEMD_PAGER"
                | "EDITOR"
                | "VISUAL"
                | "BROWSER"
                | "PYTHONPATH"
                | "PYTHONSTARTUP"
                | "PYTHONHOME"
                | "PYTHONUSERBASE"
                | "NODE_OPTIONS"
                | "NODE_PATH"
                | "PROMPT_COMMAND"
                | "PS1"
                | "PS2"
                | "PS3"
                | "PS4"
                | "IFS"
                | "SHELLOPTS"
                | "BASHOPTS"
                | "CDPATH"
                | "PERL5LIB"
                | "PERL5OPT"
                | "PERLLIB"
                | "RUBYOPT"
                | "RUBYLIB"
                | "LESSOPEN"
                | "LESSCLOSE"
                | "SSH_ASKPASS"
                | "SUDO_ASKPASS"
                | "HOME"
                | "ZDOTDIR"
                | "XDG_CONFIG_HOME"
                | "EXINIT"
                | "VIMINIT"
                | "GCONV_PATH"
                | "HOSTALIASES"
                | "RUSTC_WRAPPER"
                | "CARGO_BUILD_RUSTC_WRAPPER"
                | "NPM_CONFIG_PREFIX"
        )
}

/// Operands (non-option words; everything after `--`).
pub(crate) fn operands(args: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut after = false;
    for a in args {
        if !after && a == "--" {
            after = true;
        } else if after || !a.starts_with('-') || a == "-" {
            out.push(a.as_str());
        }
    }
    out
}

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

/// The words a command pattern's subcommand list is compared with.
pub(crate) fn subcommand_words(name: &str, args: &[String]) -> Vec<String> {
    if name == "git" {
        let (_, sub, rest) = git_split(args);
        sub.into_iter()
            .map(str::to_owned)
            .chain(operands(rest).into_iter().map(str::to_owned))
            .collect()
    } else {
        operands(args).into_iter().map(str::to_owned).collect()
    }
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

/// The program text an interpreter is given inline (`-c`, `-e`, `-E`, `-r`, `--eval`).
fn inline_code<'a>(name: &str, args: &'a [String]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" || !a.starts_with('-') {
            break;
        }
        let takes =
            matches!(
                a.as_str(),
                "-c" | "-e" | "-E" | "-r" | "-p" | "--eval" | "--print" | "--command"
            ) || (name.starts_with("perl") && !a.starts_with("--") && a.ends_with(['e', 'E']));
        if takes && let Some(code) = it.next() {
            out.push(code.as_str());
        } else if let Some(code) = a.strip_prefix("--eval=") {
            out.push(code);
        }
    }
    out
}

/// Shell commands a program text runs through a string literal: `system("...")`,
/// `popen`, `os.system`, `execSync`, backticks, and awk's `| "cmd"` / `"cmd" |` pipes. Only
/// literals are found; a computed command string is already a reason to ask.
pub(crate) fn embedded_commands(program: &str) -> Vec<String> {
    const CALLS: &[&str] = &[
        "system",
        "popen",
        "execSync",
        "exec",
        "spawnSync",
        "shell_exec",
        "passthru",
    ];
    let b = program.as_bytes();
    let mut out = Vec::new();
    // A string literal starting at `i` (after optional spaces): its unescaped text.
    let literal = |mut i: usize| -> Option<String> {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let q = *b.get(i)?;
        if !matches!(q, b'"' | b'\'' | b'`') {
            return None;
        }
        let mut s = Vec::new();
        i += 1;
        while let Some(&c) = b.get(i) {
            match c {
                b'\\' if q != b'\'' || b.get(i + 1) == Some(&b'\'') => {
                    let n = *b.get(i + 1)?;
                    s.push(match n {
                        b'n' => b'\n',
                        b't' => b'\t',
                        other => other,
                    });
                    i += 2;
                }
                c if c == q => return String::from_utf8(s).ok(),
                c => {
                    s.push(c);
                    i += 1;
                }
            }
        }
        None
    };
    for call in CALLS {
        let mut from = 0;
        while let Some(at) = program[from..].find(call) {
            let mut i = from + at + call.len();
            from = i;
            while b.get(i).is_some_and(u8::is_ascii_whitespace) {
                i += 1;
            }
            // `system("...")`, and perl's and ruby's `system "..."` / `exec "..."`.
            if b.get(i) == Some(&b'(') {
                out.extend(literal(i + 1));
            } else if i > from {
                out.extend(literal(i));
            }
        }
    }
    // Backticks open and close in turn; parity is tracked as we go so that a long program
    // costs one pass.
    let mut backticks = 0usize;
    for (i, c) in program.char_indices() {
        match c {
            // `print x | "cmd"` and `"cmd" | getline`.
            '|' => {
                out.extend(literal(i + 1));
                if let Some(end) = program[..i].trim_end().strip_suffix('"')
                    && let Some(start) = end.rfind('"')
                {
                    out.push(end[start + 1..].to_owned());
                }
            }
            // Backticks run their text in perl, ruby and php.
            '`' => {
                if backticks.is_multiple_of(2) {
                    out.extend(literal(i));
                }
                backticks += 1;
            }
            _ => {}
        }
    }
    out.retain(|s| !s.trim().is_empty());
    out.dedup();
    out
}

/// The double-quoted string literals of an awk program.
fn awk_strings(program: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = program.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => s.extend(chars.next()),
                '"' => break,
                c => s.push(c),
            }
        }
        if !s.trim().is_empty() {
            out.push(s);
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
            // man has no table, so every letter of a cluster counts.
            unsafe_flag |= parsed.may_have(&[
                "-H",
                "--html",
                "-P",
                "--pager",
                "--preprocessor",
                "-p",
                "-l",
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

fn git(args: &[String], f: &mut ArgvFindings, unsafe_flag: &mut bool) {
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
        || (sub == Some("grep") && opts.may_have(&["-O"]));
    let rest_ops = &opts.operands;
    // Paths git reads outside the index: `diff --no-index a b`, and pathspecs after `--`.
    if sub == Some("diff") && rest.iter().any(|a| a == "--no-index") {
        f.paths
            .extend(rest_ops.iter().map(|o| ((*o).to_owned(), Access::Read)));
    } else if let Some(dd) = rest.iter().position(|a| a == "--") {
        f.paths
            .extend(rest[dd + 1..].iter().map(|o| (o.clone(), Access::Read)));
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
        Some("update-ref") if opts.may_have(&["-d"]) => f.rules.push(&HISTORY_REWRITE),
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
        Some("config")
            if !rest.iter().any(|a| {
                a.starts_with("--get") || matches!(a.as_str(), "-l" | "--list" | "get" | "list")
            }) =>
        {
            f.rules.push(&GIT_CONFIG);
        }
        Some("submodule") if rest_ops.first() == Some(&"foreach") => f.rules.push(&GIT_CONFIG),
        Some("bisect") if rest_ops.first() == Some(&"run") => f.rules.push(&GIT_CONFIG),
        _ => {}
    }
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
fn git_is_read_only(name: &str, args: &[String]) -> bool {
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
            | "merge-base" | "name-rev" | "count-objects" | "check-ignore" | "version" | "help",
        ) => true,
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
        Some("reflog") => ops.first().is_none_or(|s| *s == "show"),
        _ => false,
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

/// Returns (any unsafe sed flag, whether scripts came from -e/-f/--expression).
fn sed_flags(parsed: &crate::argv::Args<'_>) -> (bool, bool) {
    // A script from a file nobody reviewed.
    let mut bad = parsed.values_of(&["-f", "--file"]).next().is_some();
    let mut from_flags = bad;
    for script in parsed.values_of(&["-e", "--expression"]) {
        from_flags = true;
        bad |= !sed_script_is_safe(script);
    }
    // In place, however spelled: `-i`, `-ni.bak`, `--in-pl`, `--in-place=.bak`.
    bad |= parsed.has(&["-i", "--in-place", "--follow-symlinks"]);
    (bad, from_flags)
}

/// The shell commands a sed script's `e command` and `s/re/replacement/e` run, where the
/// script spells them. Only called for scripts already refused by [`sed_script_is_safe`]:
/// the scan is loose (an `e` inside a regex may be taken for the command), which can only
/// add commands to an analysis that asks anyway.
fn sed_exec_commands(script: &str) -> Vec<String> {
    let c: Vec<char> = script.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let starts_command = i == 0
            || c[..i].iter().rev().find(|x| **x != ' ').is_none_or(|p| {
                p.is_ascii_digit() || matches!(p, ';' | '{' | '}' | '$' | '/' | ',' | '!' | '\n')
            });
        if starts_command && c[i] == 'e' {
            let end = c[i + 1..]
                .iter()
                .position(|x| *x == '\n')
                .map_or(c.len(), |p| i + 1 + p);
            let cmd: String = c[i + 1..end].iter().collect();
            if !cmd.trim().is_empty() {
                out.push(cmd.trim().to_owned());
            }
            i = end;
            continue;
        }
        if starts_command && c[i] == 's' && i + 1 < c.len() && c[i + 1] != '\n' {
            let d = c[i + 1];
            // Three delimited parts: pattern, replacement, flags up to the next separator.
            let mut parts = vec![String::new()];
            let mut j = i + 2;
            while j < c.len() && parts.len() < 3 {
                if c[j] == '\\' && j + 1 < c.len() {
                    // `\/` is the delimiter itself; other escapes are kept for the regex.
                    if c[j + 1] != d {
                        parts.last_mut().unwrap_or(&mut String::new()).push('\\');
                    }
                    if let Some(p) = parts.last_mut() {
                        p.push(c[j + 1]);
                    }
                    j += 2;
                    continue;
                }
                if c[j] == d {
                    parts.push(String::new());
                } else if let Some(p) = parts.last_mut() {
                    p.push(c[j]);
                }
                j += 1;
            }
            let flags: String = c[j.min(c.len())..]
                .iter()
                .take_while(|x| !matches!(x, ';' | '\n' | '}'))
                .collect();
            if parts.len() == 3 && flags.contains('e') && !parts[1].trim().is_empty() {
                out.push(parts[1].clone());
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Whether a sed script uses only commands that neither write files nor run programs.
///
/// A small parser over sed's grammar: addresses, then a command letter; `s` and `y` have
/// delimited arguments whose flags are checked; `w`, `W`, `r`, `R` and `e` are refused, as is
/// anything this parser does not recognise.
pub(crate) fn sed_script_is_safe(script: &str) -> bool {
    let b: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i].is_whitespace() || b[*i] == ';') {
            *i += 1;
        }
    };
    // Skips a delimited section starting after the opening delimiter; returns false if unterminated.
    let delimited = |i: &mut usize, d: char| -> bool {
        while *i < b.len() {
            if b[*i] == '\\' {
                *i += 2;
                continue;
            }
            if b[*i] == d {
                *i += 1;
                return true;
            }
            *i += 1;
        }
        false
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return true;
        }
        // Addresses: numbers, $, /re/, \cREc, with , ~ + and ! modifiers.
        loop {
            match b.get(i) {
                Some(c) if c.is_ascii_digit() || matches!(c, '$' | ',' | '~' | '+' | '!' | ' ') => {
                    i += 1;
                }
                Some('/') => {
                    i += 1;
                    if !delimited(&mut i, '/') {
                        return false;
                    }
                    while matches!(b.get(i), Some('I' | 'M')) {
                        i += 1;
                    }
                }
                Some('\\') => {
                    let Some(&d) = b.get(i + 1) else { return false };
                    i += 2;
                    if !delimited(&mut i, d) {
                        return false;
                    }
                }
                _ => break,
            }
        }
        let Some(&cmd) = b.get(i) else { return true };
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P'
            | 'x' | 'z' | 'F' => {}
            'q' | 'Q' | 'L' => {
                while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == ' ') {
                    i += 1;
                }
            }
            ':' | 'b' | 't' | 'T' => {
                while b.get(i).is_some_and(|c| *c != ';' && *c != '\n') {
                    i += 1;
                }
            }
            '#' => {
                while b.get(i).is_some_and(|c| *c != '\n') {
                    i += 1;
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line (with backslash continuations).
                while i < b.len() && b[i] != '\n' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            's' | 'y' => {
                let Some(&d) = b.get(i) else { return false };
                if d == '\n' || d == '\\' {
                    return false;
                }
                i += 1;
                if !delimited(&mut i, d) || !delimited(&mut i, d) {
                    return false;
                }
                if cmd == 's' {
                    while let Some(&c) = b.get(i) {
                        match c {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' => i += 1,
                            c if c.is_ascii_digit() => i += 1,
                            // `e` executes the pattern space, `w` writes a file.
                            'e' | 'w' | 'W' => return false,
                            _ => break,
                        }
                    }
                }
            }
            _ => return false,
        }
    }
}

/// Whether an awk program avoids `system()`, pipes, `getline` from commands and output
/// redirection. Comparisons with `>` are refused too: telling them from redirection needs a
/// full awk parser, and approval is the safe answer when unsure.
pub(crate) fn awk_program_is_safe(program: &str) -> bool {
    !(program.contains("system")
        || program.contains('|')
        || program.contains('>')
        || program.contains("getline")
        || program.contains("@load")
        || program.contains("ENVIRON"))
}

/// The built-in rule a path access triggers, if any. `path` is normalised.
pub(crate) fn path_rule(path: &str, access: Access) -> Option<&'static BaselineRule> {
    if paths::is_harmless_device(path) {
        return None;
    }
    if path.starts_with("/proc/") && path.ends_with("/environ") {
        return Some(&SECRET_READ);
    }
    if paths::SECRET_READS.iter().any(|d| paths::under(path, d))
        || paths::home_relative(path)
            .is_some_and(|r| paths::HOME_SECRETS.iter().any(|d| paths::under(r, d)))
    {
        return Some(match access {
            Access::Read => &SECRET_READ,
            Access::Write => &SYSTEM_WRITE,
        });
    }
    if access == Access::Write {
        if path == "/" || path == "~" || paths::SYSTEM_DIRS.iter().any(|d| paths::under(path, d)) {
            return Some(&SYSTEM_WRITE);
        }
        if paths::home_relative(path)
            .is_some_and(|r| paths::HOME_PERSISTENCE.iter().any(|d| paths::under(r, d)))
        {
            return Some(&SYSTEM_WRITE);
        }
    }
    if !paths::inside_workspace(path) {
        return Some(match access {
            Access::Read => &OUTSIDE_READ,
            Access::Write => &OUTSIDE_WRITE,
        });
    }
    if access == Access::Write {
        // Without a `.git` of its own, the root with HEAD, objects/ and refs/ is a bare
        // repository to git's discovery; HEAD is the one file git insists on.
        if path == "HEAD" {
            return Some(&GIT_ROOT_HEAD);
        }
        let mut components = path.split('/');
        if components.clone().any(|c| c == ".git") {
            return Some(&GIT_INTERNALS_WRITE);
        }
        if components.clone().any(|c| c == ".claude") {
            return Some(&AGENT_CONFIG_WRITE);
        }
        if components.any(|c| {
            matches!(
                c,
                ".vscode" | ".idea" | ".envrc" | ".devcontainer" | ".husky"
            )
        }) || path.starts_with(".github/workflows")
            || path.contains("/.github/workflows")
        {
            return Some(&TOOL_CONFIG_WRITE);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn dev_null_is_harmless_but_devices_are_system_paths() {
        assert!(path_rule("/dev/null", Access::Write).is_none());
        assert!(path_rule("/dev/fd/3", Access::Write).is_none());
        assert_eq!(
            path_rule("/dev/sda", Access::Write).unwrap().id,
            "baseline.system-path-write"
        );
        assert_eq!(
            path_rule("~/.bashrc", Access::Write).unwrap().id,
            "baseline.system-path-write"
        );
        assert_eq!(
            path_rule("~/.ssh/my_id_rsa", Access::Write).unwrap().id,
            "baseline.system-path-write"
        );
        assert_eq!(
            path_rule("/etc/shadow", Access::Read).unwrap().id,
            "baseline.secret-read"
        );
        assert_eq!(
            path_rule(".git/hooks/pre-commit", Access::Write)
                .unwrap()
                .id,
            "baseline.git-internals-write"
        );
        assert!(path_rule("src/main.rs", Access::Write).is_none());
        assert!(path_rule(".git/config", Access::Read).is_none());
    }

    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    fn ids(s: &str) -> Vec<&'static str> {
        let a = argv(s);
        classify_argv(&a[0], &a[1..])
            .rules
            .iter()
            .map(|r| r.id)
            .collect()
    }

    fn safe(s: &str) -> bool {
        let a = argv(s);
        classify_argv(&a[0], &a[1..]).safe
    }

    #[test]
    fn rm_flag_spellings_all_ask() {
        for c in [
            "rm -rf x",
            "rm -fr x",
            "rm -r -f x",
            "rm --recursive x",
            "rm -R x",
            "rm -f x",
            "rm --force x",
            "rm -vrf x",
        ] {
            assert!(ids(c).contains(&"baseline.rm-recursive-or-forced"), "{c}");
        }
        assert!(ids("rm x").is_empty());
    }

    #[test]
    fn rm_of_root_or_home_is_denied() {
        for c in [
            "rm -rf /",
            "rm -rf /*",
            "rm -rf ~",
            "rm -r ~/",
            "rm --no-preserve-root -rf /",
            "rm -fr //",
        ] {
            assert!(ids(c).contains(&"baseline.rm-root"), "{c}");
        }
        assert!(!ids("rm -rf build").contains(&"baseline.rm-root"));
    }

    #[test]
    fn sed_scripts() {
        for ok in [
            "1,5p",
            "s/a/b/g",
            "/x/d",
            "$!N;P;D",
            "y/abc/xyz/",
            "1~2p",
            "s|a|b|2",
        ] {
            assert!(sed_script_is_safe(ok), "{ok}");
        }
        for bad in [
            "w /tmp/o",
            "1,1w/tmp/o",
            "r/etc/passwd",
            "e",
            "s/x/id/e",
            "1p; s/x/id/e",
            "s/a/b/w /tmp/o",
            "$ W /tmp/o",
            "1e id",
            "R x",
        ] {
            assert!(!sed_script_is_safe(bad), "{bad}");
        }
    }

    #[test]
    fn git_subcommands_and_global_options() {
        assert!(safe("git log -p -1"));
        assert!(safe("git status"));
        assert!(safe("git -C sub diff HEAD"));
        assert!(!safe("git -p status"));
        assert!(!safe("git push"));
        assert!(ids("git push --force origin main").contains(&"baseline.git-force-push"));
        assert!(ids("git push origin +main").contains(&"baseline.git-force-push"));
        assert!(ids("git push --force-with-lease").contains(&"baseline.git-force-push"));
        assert!(ids("git reset --hard HEAD~1").contains(&"baseline.git-history-rewrite"));
        assert!(ids("git commit --amend").contains(&"baseline.git-history-rewrite"));
        assert!(!ids("git reset HEAD~1").contains(&"baseline.git-history-rewrite"));
        assert_eq!(
            git_chdir(&argv("-C /path/to/repo push origin main")),
            vec!["/path/to/repo"]
        );
    }

    fn has(s: &str, id: &str) -> bool {
        ids(s).contains(&id)
    }

    #[test]
    fn git_push_force_in_a_cluster_after_an_operand_or_abbreviated_asks() {
        for c in [
            "git push -fq",
            "git push -qf origin main",
            "git push origin main -f",
            "git push -uf origin main",
            "git push --force-with-lease=main",
            "git push --force-with-lease=main:abc origin main",
            "git push --force-w origin main",
            "git push --force-i origin main",
            "git push --forc origin main",
            "git push --fo origin main",
            "git -c x=y push --forc origin main",
            "git push --no-force -f",
            "git push --mir origin",
            "git push -d origin topic",
            "git push -vd origin topic",
            "git push --del origin topic",
            "git push --pru origin",
            "git push --end-of-options -f",
            "git push origin :topic",
        ] {
            assert!(has(c, "baseline.git-force-push"), "{c}");
        }
    }

    #[test]
    fn git_push_option_values_are_not_flags() {
        for c in [
            "git push -o -f origin main",
            "git push -o-f origin main",
            "git push --push-option -d origin main",
            "git push --push-opt=-f origin main",
            "git push --repo -f",
            "git push -- -f",
        ] {
            assert!(!has(c, "baseline.git-force-push"), "{c}");
        }
        // A refspec is still read after an option that takes a value.
        assert!(has(
            "git push -o ci.skip origin +main",
            "baseline.git-force-push"
        ));
    }

    #[test]
    fn git_push_ambiguous_prefix_asks_as_ambiguous() {
        // git itself refuses `--forc`: --force, --force-with-lease, --force-if-includes.
        assert!(has("git push --forc", "baseline.ambiguous-option"));
        assert!(has("git push --rec x", "baseline.ambiguous-option"));
        assert!(has("git push --rec x", "baseline.exec-or-write-flag"));
    }

    #[test]
    fn git_push_receive_pack_spellings_are_unsafe() {
        for c in [
            "git push --receive-pack=x origin",
            "git push --recei x origin",
            "git push --exec x origin",
            "git push --ex=x origin",
        ] {
            assert!(has(c, "baseline.exec-or-write-flag"), "{c}");
        }
    }

    #[test]
    fn git_clean_force_in_any_cluster_asks() {
        for c in [
            "git clean -xdf",
            "git clean -dfx",
            "git clean -qfd",
            "git clean -e x -f",
            "git clean --force",
            "git clean --fo",
            "git clean -n --force",
        ] {
            assert!(has(c, "baseline.git-discard-changes"), "{c}");
        }
        // `-e` takes the rest of the word or the next one: a pattern called `f`, no force.
        assert!(!has("git clean -ef", "baseline.git-discard-changes"));
        assert!(!has("git clean -e -f", "baseline.git-discard-changes"));
    }

    #[test]
    fn git_reset_hard_however_spelled_asks() {
        for c in [
            "git reset --hard",
            "git reset --ha HEAD~1",
            "git reset --hard=",
            "git reset -q --hard",
            "git reset HEAD~1 --hard",
            "git reset --hard -- f",
        ] {
            assert!(has(c, "baseline.git-discard-changes"), "{c}");
        }
        assert!(has(
            "git reset --kee HEAD~1",
            "baseline.git-history-rewrite"
        ));
        // `--m` is --mixed or --merge: git refuses it, and the baseline asks.
        assert!(has("git reset --m HEAD~1", "baseline.git-history-rewrite"));
        // A file named `--hard` listing pathspecs is not a hard reset.
        assert!(!has(
            "git reset --pathspec-from-file --hard",
            "baseline.git-discard-changes"
        ));
    }

    #[test]
    fn git_commit_message_is_not_amend() {
        assert!(!has(
            "git commit -m --amend",
            "baseline.git-history-rewrite"
        ));
        assert!(!has("git commit -m--amend", "baseline.git-history-rewrite"));
        assert!(!has(
            "git commit --message --amend",
            "baseline.git-history-rewrite"
        ));
        for c in [
            "git commit --amend",
            "git commit -am x --amend",
            "git commit --am -m x",
            "git commit -m x --amen",
        ] {
            assert!(has(c, "baseline.git-history-rewrite"), "{c}");
        }
        assert!(has(
            "git commit --template x",
            "baseline.exec-or-write-flag"
        ));
        assert!(has("git commit --templ=x", "baseline.exec-or-write-flag"));
    }

    #[test]
    fn git_checkout_and_switch_force_and_values() {
        for c in [
            "git checkout -qf main",
            "git checkout main -f",
            "git checkout --forc main",
            "git switch -fc new",
            "git switch --disc main",
            "git checkout -2 f",
            "git checkout --the f",
            "git checkout -b new main -- f",
        ] {
            assert!(has(c, "baseline.git-discard-changes"), "{c}");
        }
        // Branch names are option values, not a second operand that would be a path.
        for c in [
            "git checkout -qb new main",
            "git checkout -bnew main",
            "git checkout --orphan=new main",
            "git switch -c -f",
            "git switch -C new main",
        ] {
            assert!(!has(c, "baseline.git-discard-changes"), "{c}");
        }
    }

    #[test]
    fn git_restore_staged_only_when_it_is_an_option() {
        assert!(!has(
            "git restore --staged f",
            "baseline.git-discard-changes"
        ));
        assert!(!has("git restore -qS f", "baseline.git-discard-changes"));
        assert!(!has("git restore --stag f", "baseline.git-discard-changes"));
        for c in [
            // `-s` takes `-S` as the source; the work tree is restored.
            "git restore -s -S f",
            "git restore -sS f",
            "git restore -SW f",
            "git restore --staged --work f",
            // `--s` is --source or --staged: ambiguous, so not taken for --staged.
            "git restore --s f",
        ] {
            assert!(has(c, "baseline.git-discard-changes"), "{c}");
        }
    }

    #[test]
    fn git_update_ref_delete_not_its_message() {
        assert!(has(
            "git update-ref -d refs/heads/x",
            "baseline.git-history-rewrite"
        ));
        assert!(has(
            "git update-ref -zd refs/heads/x",
            "baseline.git-history-rewrite"
        ));
        assert!(!has(
            "git update-ref -m -d refs/heads/x HEAD",
            "baseline.git-history-rewrite"
        ));
    }

    #[test]
    fn git_tag_lists_only_with_a_real_list_option() {
        assert!(safe("git tag"));
        assert!(safe("git tag -l v*"));
        assert!(safe("git tag -n5 -l v*"));
        assert!(safe("git tag --list v*"));
        assert!(safe("git tag --list=v*"));
        // A message `-l` creates a tag.
        assert!(!safe("git tag -m -l v1"));
        assert!(!safe("git tag -ml v1"));
        assert!(!safe("git tag v1"));
        // Only the full spelling of a flag that makes a command safer counts.
        assert!(!safe("git tag --lis v*"));
        assert!(!safe("git tag --c"));
    }

    #[test]
    fn git_branch_changes_are_not_read_only() {
        assert!(safe("git branch"));
        assert!(safe("git branch -vv"));
        assert!(safe("git branch --sort=-committerdate"));
        assert!(safe("git branch --format %(refname)"));
        assert!(safe("git branch --contains HEAD"));
        for c in [
            "git branch -vd x",
            "git branch -D x",
            "git branch -uorigin/main",
            "git branch --set-up=origin/main",
            "git branch --del x",
            "git branch --contains HEAD -d x",
            "git branch x",
            "git branch --unset",
        ] {
            assert!(!safe(c), "{c}");
        }
    }

    #[test]
    fn git_subcommands_without_a_table_count_every_cluster_letter() {
        assert!(has("git ls-remote -qu x .", "baseline.exec-or-write-flag"));
        assert!(has("git grep -nO x", "baseline.exec-or-write-flag"));
        assert!(has("git log --out=x", "baseline.exec-or-write-flag"));
        assert!(has("git diff --ext", "baseline.exec-or-write-flag"));
        assert!(safe("git log -n 3 --stat"));
    }

    #[test]
    fn rg_preprocessor_and_zip_spellings() {
        for c in [
            "rg -uuz pat .",
            "rg -z pat .",
            "rg -nz pat .",
            "rg --pre=x pat .",
            "rg --pr x pat .",
            "rg --search-z pat .",
            "rg --host=x pat .",
        ] {
            assert!(has(c, "baseline.exec-or-write-flag"), "{c}");
        }
        assert!(safe("rg -n pat src"));
        assert!(!has(
            "rg --pre-glob *.x pat .",
            "baseline.exec-or-write-flag"
        ));
    }

    #[test]
    fn man_pager_and_tree_output_in_clusters() {
        assert!(has("man -aP cat ls", "baseline.exec-or-write-flag"));
        assert!(has("man --pag=sh ls", "baseline.exec-or-write-flag"));
        assert!(has("man -kH x", "baseline.exec-or-write-flag"));
        assert!(has("tree -ao out", "baseline.exec-or-write-flag"));
        assert!(has("tree -R", "baseline.exec-or-write-flag"));
        assert!(has("xxd -r -p x", "baseline.exec-or-write-flag"));
        assert!(safe("tree -a src"));
    }

    #[test]
    fn history_writes_in_clusters() {
        let a = argv("history -aw f");
        let f = classify_argv(&a[0], &a[1..]);
        assert_eq!(f.paths, [("f".to_owned(), Access::Write)]);
    }

    #[test]
    fn package_manager_short_install_flags() {
        assert!(has("dpkg -i x.deb", "baseline.package-install"));
        assert!(has("rpm -Uvhi x.rpm", "baseline.package-install"));
        assert!(has("rpm -ivh x.rpm", "baseline.package-install"));
    }

    #[test]
    fn interpreters_reading_stdin() {
        assert!(reads_program_from_stdin("sh", &[]));
        assert!(reads_program_from_stdin("bash", &argv("-s -- x")));
        assert!(reads_program_from_stdin("python3", &argv("-u")));
        assert!(reads_program_from_stdin("python3", &argv("-")));
        assert!(!reads_program_from_stdin("python3", &argv("script.py")));
        assert!(!reads_program_from_stdin("python3", &argv("-m json.tool")));
        assert!(!reads_program_from_stdin("bash", &argv("-c true")));
        assert!(!reads_program_from_stdin("perl", &argv("-e 1")));
    }

    #[test]
    fn package_installs_ask() {
        for c in [
            "pip install x",
            "npm i left-pad",
            "cargo install ripgrep",
            "apt-get install -y x",
            "python3 -m pip install x",
            "npx cowsay",
            "yarn",
        ] {
            assert!(ids(c).contains(&"baseline.package-install"), "{c}");
        }
        assert!(!ids("cargo build").contains(&"baseline.package-install"));
    }
}
