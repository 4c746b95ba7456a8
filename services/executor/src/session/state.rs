//! What a `persist_cwd` run carries out of its shell: the wrapper that reports the shell's
//! final working directory and exported variables on the run's state pipe, and the strict
//! reading of what arrives there.
//!
//! The policy classifies the script the caller sent; only the executed argv changes, to
//! `bash --noprofile --norc -c PRELUDE bash SCRIPT`. The prelude moves the state pipe (fd 3)
//! out of the script's way, sets an `EXIT` trap that writes the state, and `eval`s the script
//! with no positional parameters, so `exit`, `set -e` and the exit status behave as under
//! `bash -c SCRIPT`. A script that replaces the `EXIT` trap (or `exec`s) reports nothing, and
//! the session's state stays as it was; so does anything on the pipe that is not exactly one
//! record set as the trap writes it.

use std::collections::BTreeMap;

use toolgate_process::EnvAllow;

use toolgate_policy_api::SessionState;

/// The first record of a state report.
const MAGIC: &[u8] = b"toolgate-state-v1";

/// Largest state report read; a longer one is refused whole.
pub(crate) const MAX_REPORT_BYTES: usize = 256 << 10;

/// Most variables one session keeps.
pub(crate) const MAX_VARS: usize = 64;

/// Longest value of a kept variable.
pub(crate) const MAX_VALUE_BYTES: usize = 16 << 10;

/// Name fragments that mark a variable as a credential: never kept, allowlisted or not.
const SECRET_MARKS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "PRIVATE",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "AUTH",
    "COOKIE",
    "SESSION_KEY",
    "SIGNING_KEY",
];

/// The argv that runs `script` under the state-reporting wrapper. `allowed` are the
/// executor's `allowed_env` patterns: only exported variables they admit are reported.
pub(crate) fn wrapped_argv(script: &str, allowed: &EnvAllow) -> Vec<String> {
    vec![
        "bash".to_owned(),
        "--noprofile".to_owned(),
        "--norc".to_owned(),
        "-c".to_owned(),
        prelude(allowed),
        "bash".to_owned(),
        script.to_owned(),
    ]
}

/// The wrapper. The state pipe moves to a descriptor bash picks (10 or above) and fd 3 is
/// closed, as it is for a plain run; the trap writes only when that descriptor is still a
/// pipe (a script that reused the number for a file of its own gets nothing written there).
/// `pwd -P` is the physical directory, so a symlink is resolved as the workspace resolves it.
fn prelude(allowed: &EnvAllow) -> String {
    let names = match allowed {
        EnvAllow::Any => "*".to_owned(),
        EnvAllow::Only(p) if p.is_empty() => "''".to_owned(),
        // Patterns are validated names or `PREFIX*`: safe as `case` patterns.
        EnvAllow::Only(_) => allowed.patterns().join("|"),
    };
    format!(
        concat!(
            "exec {{__toolgate_fd}}>&3 3>&-\n",
            "__toolgate_state() {{\n",
            "  set +e +u\n",
            "  [ -p \"/dev/fd/$__toolgate_fd\" ] || return 0\n",
            "  {{\n",
            "    printf 'toolgate-state-v1\\0cwd='\n",
            "    pwd -P\n",
            "    printf '\\0'\n",
            "    local __toolgate_n\n",
            "    for __toolgate_n in $(compgen -e); do\n",
            "      case $__toolgate_n in {names}) printf 'env=%s=%s\\0' \"$__toolgate_n\" \"${{!__toolgate_n}}\";; esac\n",
            "    done\n",
            "    printf 'end\\0'\n",
            "  }} >&\"$__toolgate_fd\" 2>/dev/null\n",
            "}}\n",
            "trap __toolgate_state EXIT\n",
            "eval \"shift\n$1\"\n",
        ),
        names = names
    )
}

/// A state report read strictly: the shell's final directory (absolute, as the run saw it)
/// and the reported variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// `pwd -P` at exit.
    pub cwd: String,
    /// Exported variables the wrapper reported.
    pub env: BTreeMap<String, String>,
}

/// Reads a report, or says why it is not one (then the session's state stays unchanged).
pub(crate) fn parse(bytes: &[u8]) -> Result<Report, &'static str> {
    if bytes.is_empty() {
        return Err(
            "nothing was reported (the script replaced the EXIT trap, exec'd, or was killed)",
        );
    }
    if bytes.len() > MAX_REPORT_BYTES {
        return Err("the report is too long");
    }
    let Some(body) = bytes.strip_suffix(b"\0") else {
        return Err("the report does not end with a complete record");
    };
    let mut records = body.split(|b| *b == 0);
    if records.next() != Some(MAGIC) {
        return Err("the report does not start with the state header");
    }
    let cwd = records
        .next()
        .and_then(|r| r.strip_prefix(b"cwd="))
        .and_then(|r| r.strip_suffix(b"\n"))
        .ok_or("the report has no working directory")?;
    let cwd = std::str::from_utf8(cwd).map_err(|_| "the working directory is not UTF-8")?;
    if !cwd.starts_with('/') {
        return Err("the working directory is not absolute");
    }
    let mut env = BTreeMap::new();
    let mut ended = false;
    for r in records {
        if ended {
            return Err("records follow the end of the report");
        }
        if r == b"end" {
            ended = true;
            continue;
        }
        let var = r.strip_prefix(b"env=").ok_or("an unknown record")?;
        let var = std::str::from_utf8(var).map_err(|_| "a variable is not UTF-8")?;
        let (name, value) = var.split_once('=').ok_or("a variable without `=`")?;
        if !toolgate_process::config::is_env_name(name) {
            return Err("a variable name is invalid");
        }
        if env.insert(name.to_owned(), value.to_owned()).is_some() {
            return Err("a variable is reported twice");
        }
    }
    if !ended {
        return Err("the report has no end record");
    }
    Ok(Report {
        cwd: cwd.to_owned(),
        env,
    })
}

/// Whether a variable may be kept for a session: allowed for callers (`allowed_env`, never a
/// reserved name, never one the operator sets for every run), not credential-like by name,
/// its value without URL credentials and of bounded size.
pub(crate) fn keepable(
    name: &str,
    value: &str,
    allowed: &EnvAllow,
    operator_env: &[(String, String)],
) -> bool {
    let upper = name.to_ascii_uppercase();
    allowed.allows(name)
        && !operator_env.iter().any(|(n, _)| n == name)
        && !SECRET_MARKS.iter().any(|m| upper.contains(m))
        && !upper.ends_with("_KEY")
        && value.len() <= MAX_VALUE_BYTES
        && toolgate_fs::redact_url_credentials(value.as_bytes()).is_none()
}

/// The variables of `report` a session keeps, at most [`MAX_VARS`], and the names dropped.
pub(crate) fn kept_env(
    env: BTreeMap<String, String>,
    allowed: &EnvAllow,
    operator_env: &[(String, String)],
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut dropped = Vec::new();
    for (name, value) in env {
        if kept.len() < MAX_VARS && keepable(&name, &value, allowed, operator_env) {
            kept.insert(name, value);
        } else {
            dropped.push(name);
        }
    }
    (kept, dropped)
}

/// The state `SessionState` carries on the wire.
pub(crate) fn to_wire(s: &SessionState) -> toolgate_contracts::common::v1::SessionState {
    toolgate_contracts::common::v1::SessionState {
        cwd: if s.cwd.is_empty() {
            ".".to_owned()
        } else {
            s.cwd.clone()
        },
        env: s.env.clone().into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(p: &[&str]) -> EnvAllow {
        EnvAllow::from_patterns(p.iter().copied()).unwrap()
    }

    /// Runs `script` under the wrapper with a pipe on fd 3; answers (exit code, report bytes).
    fn run(script: &str, allowed: &EnvAllow) -> (i32, Vec<u8>) {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg("\"$@\" 3>&1 1>/dev/null 2>/dev/null")
            .arg("outer")
            .args(wrapped_argv(script, allowed))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
            .stderr(std::process::Stdio::null())
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), out.stdout)
    }

    #[test]
    fn the_wrapper_reports_cwd_and_allowed_exports_and_keeps_exit_semantics() {
        let a = allow(&["FOO", "APP_*"]);
        let (code, out) = run("cd /usr; export FOO=$'a\\nb' BAR=2 APP_X=3; echo $#", &a);
        assert_eq!(code, 0);
        let r = parse(&out).unwrap();
        assert_eq!(r.cwd, "/usr");
        assert_eq!(
            r.env,
            BTreeMap::from([
                ("APP_X".to_owned(), "3".to_owned()),
                ("FOO".to_owned(), "a\nb".to_owned())
            ])
        );
        // `exit` and `set -e` keep their status, and the state is still reported.
        let (code, out) = run("cd /tmp; exit 7", &a);
        assert_eq!(code, 7);
        assert_eq!(parse(&out).unwrap().cwd, "/tmp");
        let (code, out) = run("set -eu; cd /usr; false; cd /", &a);
        assert_eq!(code, 1);
        assert_eq!(parse(&out).unwrap().cwd, "/usr");
        // No positional parameters, as under `bash -c SCRIPT`.
        let (code, _) = run("exit $#", &a);
        assert_eq!(code, 0);
        // A script's own EXIT trap replaces the report: nothing arrives.
        let (_, out) = run("trap 'true' EXIT; cd /usr", &a);
        assert!(parse(&out).is_err());
        // fd 3 is not the script's to write to (as for a plain run).
        let (code, out) = run("echo junk >&3", &a);
        assert_eq!(code, 1);
        assert_eq!(parse(&out).unwrap().cwd, "/");
    }

    #[test]
    fn reports_are_read_strictly() {
        let good = b"toolgate-state-v1\0cwd=/w/sub\n\0env=A=1\0end\0";
        assert_eq!(parse(good).unwrap().cwd, "/w/sub");
        for bad in [
            &b""[..],
            b"junk",
            b"junktoolgate-state-v1\0cwd=/w\n\0end\0",
            b"toolgate-state-v1\0cwd=/w\n\0end\0junk\0",
            b"toolgate-state-v1\0cwd=/w\n\0env=A=1\0",
            b"toolgate-state-v1\0cwd=w\n\0end\0",
            b"toolgate-state-v1\0cwd=/w\n\0env=1A=1\0end\0",
            b"toolgate-state-v1\0cwd=/w\n\0env=A=1\0env=A=2\0end\0",
            b"toolgate-state-v1\0cwd=/w\n\0env=A\0end\0",
            b"toolgate-state-v1\0cwd=/w\n\0end",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn secrets_reserved_and_operator_names_are_never_kept() {
        let a = allow(&["*"]);
        let op = vec![("CARGO_HOME".to_owned(), "/c".to_owned())];
        assert!(keepable("APP_MODE", "dev", &a, &op));
        for name in [
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "MY_KEY",
            "PATH",
            "LD_PRELOAD",
            "CARGO_HOME",
        ] {
            assert!(!keepable(name, "x", &a, &op), "{name}");
        }
        assert!(!keepable("REPO", "https://u:ghp_x@github.com/o/r", &a, &op));
        assert!(!keepable("APP_MODE", "dev", &allow(&["FOO"]), &op));
    }
}
