//! Lexical path handling for shell-derived paths and the built-in path rules.
//!
//! Shell words name paths relative to a tracked working directory; the policy speaks about
//! canonical workspace-relative paths. Everything here is lexical: the executor resolves the
//! real file against a directory handle, the policy only needs the name the call spells.

pub use crate::access::Access;

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

pub(crate) const SYSTEM_DIRS: &[&str] = &[
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
pub(crate) const HOME_PERSISTENCE: &[&str] = &[
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

pub(crate) const SECRET_READS: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/root",
];

pub(crate) const HOME_SECRETS: &[&str] = &[
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

pub(crate) fn under(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// The part of `path` below a home directory (`~/x` or `/home/u/x`), if any.
pub(crate) fn home_relative(path: &str) -> Option<&str> {
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
}
