//! Programs that run other programs: wrappers (`env`, `nice`, `timeout`, ...), the dynamic
//! loader, and how a shell is invoked.

pub(super) fn strip_proc_root(p: &str) -> Option<String> {
    let rest = p.strip_prefix("/proc/")?;
    let (who, rest) = rest.split_once('/')?;
    let who_ok = who == "self" || who == "thread-self" || who.chars().all(|c| c.is_ascii_digit());
    let rest = rest.strip_prefix("root")?;
    (who_ok && (rest.is_empty() || rest.starts_with('/'))).then(|| {
        if rest.is_empty() {
            "/".to_owned()
        } else {
            rest.to_owned()
        }
    })
}

pub(super) fn is_loader(name: &str) -> bool {
    (name.starts_with("ld-linux")
        || name.starts_with("ld-")
        || name.starts_with("ld64")
        || name == "ld.so")
        && name.contains(".so")
}

/// How many loader options precede the program a dynamic loader runs.
pub(super) fn loader_options(args: &[String]) -> usize {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "--library-path"
            | "--preload"
            | "--audit"
            | "--argv0"
            | "--inhibit-rpath"
            | "--glibc-hwcaps-prepend"
            | "--glibc-hwcaps-mask" => i += 2,
            s if s.starts_with("--") => i += 1,
            _ => break,
        }
    }
    i
}

pub(super) fn is_wrapper(name: &str) -> bool {
    matches!(
        name,
        "env"
            | "nice"
            | "nohup"
            | "timeout"
            | "setsid"
            | "stdbuf"
            | "command"
            | "exec"
            | "time"
            | "builtin"
            | "ionice"
    )
}

/// What a wrapper runs.
pub(super) struct Unwrapped<'a> {
    /// Index into args of the inner program.
    pub(super) inner: usize,
    pub(super) assigns: Vec<(&'a str, &'a str)>,
    pub(super) chdir: Option<&'a str>,
    pub(super) split: Option<&'a str>,
    pub(super) no_exec: bool,
    /// An abbreviated option matched several: where the command starts is a guess.
    pub(super) ambiguous: bool,
}

/// Parses an exec wrapper's options; `None` if `name` is not a wrapper.
pub(super) fn unwrap<'a>(name: &str, args: &'a [String]) -> Option<Unwrapped<'a>> {
    let mut w = Unwrapped {
        inner: 0,
        assigns: Vec::new(),
        chdir: None,
        split: None,
        no_exec: false,
        ambiguous: false,
    };
    // Wrappers with an argv table are read as their getopt reads them: abbreviations,
    // clusters (`env -iS'rm -rf /'`), values attached or not.
    if matches!(
        name,
        "env" | "nice" | "timeout" | "stdbuf" | "ionice" | "xargs"
    ) {
        let p = crate::argv::parse(name, args);
        let mut i = args.len() - p.operands.len();
        w.chdir = p.values_of(&["-C", "--chdir"]).last();
        w.split = p.values_of(&["-S", "--split-string"]).last();
        w.ambiguous = p.ambiguous.is_some();
        if name == "env" {
            // `env -` is `env -i`; then NAME=VALUE words up to the command.
            if args.get(i).is_some_and(|a| a == "-")
                && args.get(i.wrapping_sub(1)).is_none_or(|a| a != "--")
            {
                i += 1;
            }
            while let Some(a) = args.get(i)
                && let Some((n, v)) = a.split_once('=')
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                w.assigns.push((n, v));
                i += 1;
            }
        }
        if name == "timeout" {
            // The duration precedes the command.
            i += 1;
        }
        w.inner = i;
        return Some(w);
    }
    // (options taking a separate value, flags, whether a positional precedes the command)
    let (with_value, positional_first): (&[&str], bool) = match name {
        "env" => (
            &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
            false,
        ),
        "nice" => (&["-n", "--adjustment"], false),
        "nohup" | "builtin" | "setsid" | "busybox" => (&[], false),
        "timeout" => (&["-s", "--signal", "-k", "--kill-after"], true),
        "stdbuf" => (&["-i", "-o", "-e", "--input", "--output", "--error"], false),
        "xargs" => (
            &[
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-E",
                "--eof",
                "-I",
                "--replace",
                "-L",
                "--max-lines",
                "-n",
                "--max-args",
                "-P",
                "--max-procs",
                "-s",
                "--max-chars",
                "--process-slot-var",
            ],
            false,
        ),
        "command" | "exec" | "time" => (&["-a", "-f", "-o", "--format", "--output"], false),
        "ionice" => (&["-c", "--class", "-n", "--classdata"], false),
        _ => return None,
    };
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let a = a.as_str();
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            if name == "env"
                && let Some((n, v)) = a.split_once('=')
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                w.assigns.push((n, v));
                i += 1;
                continue;
            }
            break;
        }
        if a == "-i" && name == "env" {
            i += 1;
            continue;
        }
        if name == "command" && (a.contains('v') || a.contains('V')) {
            w.no_exec = true;
        }
        let (flag, attached) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ if !a.starts_with("--")
                && a.len() > 2
                && a.get(..2).is_some_and(|f| with_value.contains(&f)) =>
            {
                (&a[..2], Some(&a[2..]))
            }
            _ => (a, None),
        };
        let value = if with_value.contains(&flag) {
            match attached {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    args.get(i).map(String::as_str)
                }
            }
        } else {
            None
        };
        match (flag, value) {
            ("-C" | "--chdir", Some(v)) => w.chdir = Some(v),
            ("-S" | "--split-string", Some(v)) => w.split = Some(v),
            _ => {}
        }
        i += 1;
    }
    if positional_first {
        i += 1;
    }
    w.inner = i;
    Some(w)
}

pub(super) enum ShellInvocation {
    Script(usize),
    Stdin,
    File(usize),
    RcFile,
}

pub(super) fn shell_invocation(args: &[String]) -> ShellInvocation {
    let mut i = 0;
    let mut c_flag = false;
    let mut s_flag = false;
    while let Some(a) = args.get(i) {
        let a = a.as_str();
        if a == "--" || a == "-" {
            i += 1;
            break;
        }
        if a == "--rcfile" || a == "--init-file" {
            return ShellInvocation::RcFile;
        }
        if a.starts_with("--") {
            i += 1;
            continue;
        }
        if (a.starts_with('-') || a.starts_with('+')) && a.len() > 1 {
            let cluster = &a[1..];
            c_flag |= cluster.contains('c');
            s_flag |= cluster.contains('s');
            if cluster.contains('o') || cluster.contains('O') {
                i += 1;
            }
            i += 1;
            continue;
        }
        break;
    }
    if c_flag {
        return if i < args.len() {
            ShellInvocation::Script(i)
        } else {
            ShellInvocation::Stdin
        };
    }
    if s_flag || i >= args.len() {
        ShellInvocation::Stdin
    } else {
        ShellInvocation::File(i)
    }
}
