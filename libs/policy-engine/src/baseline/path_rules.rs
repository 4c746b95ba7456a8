//! The built-in rules a path access triggers: secrets, system paths, the workspace's edge,
//! and files inside it that configure tools which run code.

use super::{
    AGENT_CONFIG_WRITE, BaselineRule, GIT_INTERNALS_WRITE, GIT_ROOT_HEAD, OUTSIDE_READ,
    OUTSIDE_WRITE, SECRET_READ, SYSTEM_WRITE, TOOL_CONFIG_WRITE,
};
use crate::access::Access;
use crate::paths;

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
