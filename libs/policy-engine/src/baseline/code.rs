//! Programs and variables that run code: shells, interpreters and their inline programs, the
//! commands a program text spells in string literals, and variables that change what runs.

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
        // A version or help probe prints and exits.
        if matches!(a.as_str(), "--version" | "-V" | "-VV" | "--help" | "-h")
            || (a == "-v" && (name.starts_with("node") || matches!(name, "deno" | "bun")))
        {
            return false;
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

/// The program text an interpreter is given inline (`-c`, `-e`, `-E`, `-r`, `--eval`).
pub(super) fn inline_code<'a>(name: &str, args: &'a [String]) -> Vec<&'a str> {
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

/// Whether interpreter code may destroy work: it calls a deletion, truncation or move API,
/// runs programs through an API that takes an argument list (`subprocess`, `child_process`,
/// `exec*`), or names `rm`, `git` or another deleting program as a string literal (the
/// argument-list form of running it). A cheap scan of the text: it only ever asks more.
pub(crate) fn code_destroys(code: &str) -> bool {
    const CALLS: &[&str] = &[
        "rmtree",
        "remove(",
        "removedirs",
        "remove_tree",
        "remove_dir",
        "remove_file",
        "unlink",
        "rmdir",
        "rm_rf",
        "rm_r",
        "rm_f",
        "fileutils.rm",
        "fs.rm",
        "rmsync",
        "rimraf",
        "deleterecursively",
        "delete(",
        "deletefile",
        "truncate",
        "rename(",
        "renames(",
        "move(",
        "subprocess",
        "child_process",
        "os.exec",
        "os.spawn",
        "spawn(",
        "posix_spawn",
        "runtime.getruntime",
        "processbuilder",
        "open3",
        "proc_open",
        "pcntl_exec",
        "os.execute",
        "io.popen",
        "cmd::new",
        "command::new",
    ];
    const PROGRAMS: &[&str] = &[
        "rm", "rmdir", "unlink", "shred", "git", "find", "mv", "dd", "truncate", "xargs", "sh",
        "bash",
    ];
    let lower = code.to_ascii_lowercase();
    if CALLS.iter().any(|c| lower.contains(c)) {
        return true;
    }
    // `["rm", "-rf", d]`, `%w(rm -rf)`, `qw(rm -rf)`: a program name as a whole literal or
    // as the first word of one.
    let b = code.as_bytes();
    for (i, &q) in b.iter().enumerate() {
        if !matches!(q, b'"' | b'\'' | b'(' | b'[' | b'`') {
            continue;
        }
        let rest = &code[i + 1..];
        let word: &str = rest
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '/' || c == '-' || c == '_'))
            .next()
            .unwrap_or("");
        let base = word.rsplit('/').next().unwrap_or(word);
        let after = rest[word.len()..].chars().next();
        if PROGRAMS.contains(&base)
            && after.is_none_or(|c| matches!(c, '"' | '\'' | ' ' | ')' | ']' | '`' | ','))
        {
            return true;
        }
    }
    false
}
