//! Lexical path handling for shell-derived paths and the built-in path rules.
//!
//! Shell words name paths relative to a tracked working directory; the policy speaks about
//! canonical workspace-relative paths. Everything here is lexical: the executor resolves the
//! real file against a directory handle, the policy only needs the name the call spells.

use crate::baseline::{self, BaselineRule};

/// Whether a path is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// The call only reads the path.
    Read,
    /// The call creates, changes or removes the path.
    Write,
}

impl Access {
    /// The lowercase name used in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Joins `word` onto `cwd` and normalises `.` and `..` lexically.
///
/// Returns `None` when the working directory is unknown and the word is relative. Absolute
/// and `~` paths are kept absolute; a relative path that climbs above the workspace root keeps
/// its leading `..` so the path rules can see it leaves the workspace.
pub(crate) fn resolve(cwd: Option<&str>, word: &str) -> Option<String> {
    if word.starts_with('/') || word == "~" || word.starts_with("~/") {
        return Some(normalise(word));
    }
    let cwd = cwd?;
    if cwd == "." || cwd.is_empty() {
        Some(normalise(word))
    } else {
        Some(normalise(&format!("{cwd}/{word}")))
    }
}

/// Lexically normalises a path: drops `.` and empty components and folds `..`.
pub(crate) fn normalise(path: &str) -> String {
    let (prefix, rest) = if let Some(rest) = path.strip_prefix('/') {
        ("/", rest)
    } else if path == "~" {
        ("~/", "")
    } else if let Some(rest) = path.strip_prefix("~/") {
        ("~/", rest)
    } else {
        ("", path)
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if prefix.is_empty() {
                    // Climbing above the workspace root stays visible as a leading `..`.
                    parts.push("..");
                }
                // `/..` is `/`, and `~/..` is outside the home we reason about: keep it at `~`.
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (prefix, joined.is_empty()) {
        ("", true) => ".".to_owned(),
        ("", false) => joined,
        ("~/", true) => "~".to_owned(),
        (p, _) => format!("{p}{joined}"),
    }
}

/// Whether a normalised path lies inside the workspace (relative and not climbing out).
pub(crate) fn inside_workspace(path: &str) -> bool {
    !(path.starts_with('/') || path.starts_with('~') || path == ".." || path.starts_with("../"))
}

const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
];

const SYSTEM_DIRS: &[&str] = &[
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/root",
    "/var/spool",
    "/var/lib",
];

/// Shell start-up files, credentials and autostart locations under a home directory.
const HOME_PERSISTENCE: &[&str] = &[
    ".ssh",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".inputrc",
    ".gitconfig",
    ".config",
    ".local/bin",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".aws",
    ".gnupg",
    ".kube",
    ".docker",
];

const SECRET_READS: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/root",
];

const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".netrc",
    ".docker/config.json",
    ".kube",
    ".config/gh",
    ".git-credentials",
    ".pgpass",
];

fn under(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// The part of `path` below a home directory (`~/x` or `/home/u/x`), if any.
fn home_relative(path: &str) -> Option<&str> {
    if let Some(rest) = path.strip_prefix("~/") {
        return Some(rest);
    }
    let rest = path.strip_prefix("/home/")?;
    rest.split_once('/').map(|(_, r)| r)
}

/// Devices any command may read or write (`/dev/null`, `/dev/stdout`, `/dev/fd/N`...).
pub(crate) fn is_harmless_device(path: &str) -> bool {
    HARMLESS_DEVICES.contains(&path) || path.starts_with("/dev/fd/")
}

/// The built-in rule a path access triggers, if any. `path` is normalised.
pub(crate) fn baseline_rule(path: &str, access: Access) -> Option<&'static BaselineRule> {
    if is_harmless_device(path) {
        return None;
    }
    if path.starts_with("/proc/") && path.ends_with("/environ") {
        return Some(&baseline::SECRET_READ);
    }
    if SECRET_READS.iter().any(|d| under(path, d))
        || home_relative(path).is_some_and(|r| HOME_SECRETS.iter().any(|d| under(r, d)))
    {
        return Some(match access {
            Access::Read => &baseline::SECRET_READ,
            Access::Write => &baseline::SYSTEM_WRITE,
        });
    }
    if access == Access::Write {
        if path == "/" || path == "~" || SYSTEM_DIRS.iter().any(|d| under(path, d)) {
            return Some(&baseline::SYSTEM_WRITE);
        }
        if home_relative(path).is_some_and(|r| HOME_PERSISTENCE.iter().any(|d| under(r, d))) {
            return Some(&baseline::SYSTEM_WRITE);
        }
    }
    if !inside_workspace(path) {
        return Some(match access {
            Access::Read => &baseline::OUTSIDE_READ,
            Access::Write => &baseline::OUTSIDE_WRITE,
        });
    }
    if access == Access::Write {
        // Without a `.git` of its own, the root with HEAD, objects/ and refs/ is a bare
        // repository to git's discovery; HEAD is the one file git insists on.
        if path == "HEAD" {
            return Some(&baseline::GIT_ROOT_HEAD);
        }
        let mut components = path.split('/');
        if components.clone().any(|c| c == ".git") {
            return Some(&baseline::GIT_INTERNALS_WRITE);
        }
        if components.clone().any(|c| c == ".claude") {
            return Some(&baseline::AGENT_CONFIG_WRITE);
        }
        if components.any(|c| {
            matches!(
                c,
                ".vscode" | ".idea" | ".envrc" | ".devcontainer" | ".husky"
            )
        }) || path.starts_with(".github/workflows")
            || path.contains("/.github/workflows")
        {
            return Some(&baseline::TOOL_CONFIG_WRITE);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_folds_dots_and_keeps_escapes_visible() {
        assert_eq!(normalise("a/./b/../c"), "a/c");
        assert_eq!(normalise("./"), ".");
        assert_eq!(normalise("../x"), "../x");
        assert_eq!(normalise("a/../../x"), "../x");
        assert_eq!(normalise("/etc/../etc//passwd"), "/etc/passwd");
        assert_eq!(normalise("~/.ssh/"), "~/.ssh");
        assert_eq!(
            resolve(Some(".claude"), "settings.json").unwrap(),
            ".claude/settings.json"
        );
        assert_eq!(resolve(None, "x"), None);
        assert_eq!(resolve(None, "/x").unwrap(), "/x");
    }

    #[test]
    fn dev_null_is_harmless_but_devices_are_system_paths() {
        assert!(baseline_rule("/dev/null", Access::Write).is_none());
        assert!(baseline_rule("/dev/fd/3", Access::Write).is_none());
        assert_eq!(
            baseline_rule("/dev/sda", Access::Write).unwrap().id,
            "baseline.system-path-write"
        );
        assert_eq!(
            baseline_rule("~/.bashrc", Access::Write).unwrap().id,
            "baseline.system-path-write"
        );
        assert_eq!(
            baseline_rule("~/.ssh/my_id_rsa", Access::Write).unwrap().id,
            "baseline.system-path-write"
        );
        assert_eq!(
            baseline_rule("/etc/shadow", Access::Read).unwrap().id,
            "baseline.secret-read"
        );
        assert_eq!(
            baseline_rule(".git/hooks/pre-commit", Access::Write)
                .unwrap()
                .id,
            "baseline.git-internals-write"
        );
        assert!(baseline_rule("src/main.rs", Access::Write).is_none());
        assert!(baseline_rule(".git/config", Access::Read).is_none());
    }
}
