//! `toolgate up --config FILE`: one TOML file for the two services `up` hosts. Its
//! `[executor]` table is what `toolgate-executor --config` reads, its `[policy]` table what
//! `toolgate-policy --config` reads; each is layered over `up`'s defaults and under the
//! `TOOLGATE_` environment and `up`'s flags, as the service binaries layer theirs.
//!
//! Settings `up` makes itself (addresses, the ledger, the credentials, how the executor reaches
//! the policy service, logging) are refused by name with the flag to use instead: a file
//! value that `up` would silently replace is a knob that does nothing.

use std::path::Path;

use toml::{Table, Value};

/// The tables `up`'s file may hold: the service each configures.
pub(crate) const EXECUTOR: &str = "executor";
pub(crate) const POLICY: &str = "policy";

/// Fields of each table that `up` sets itself, and what to use instead.
const OWNED: &[(&str, &str)] = &[
    ("executor.listen", "use --executor-listen"),
    ("executor.metrics_listen", "use --metrics-listen"),
    ("executor.log", "use --log"),
    (
        "executor.auth",
        "up generates the tokens in <data-dir>/tokens.toml",
    ),
    (
        "executor.policy",
        "up's executor asks its own policy service in process",
    ),
    ("executor.workspace.root", "use --workspace"),
    (
        "executor.transport.insecure_plaintext",
        "use --insecure-plaintext",
    ),
    (
        "executor.transport.tls",
        "up never serves TLS; run toolgate-executor for that",
    ),
    ("policy.listen", "use --policy-listen"),
    ("policy.metrics_listen", "use --metrics-listen"),
    ("policy.log", "use --log"),
    (
        "policy.auth",
        "up generates the tokens in <data-dir>/tokens.toml",
    ),
    ("policy.policy_file", "use --policy"),
    (
        "policy.ledger.url",
        "up keeps its ledger in <data-dir>/ledger.db; use --data-dir",
    ),
    (
        "policy.transport.insecure_plaintext",
        "use --insecure-plaintext",
    ),
    (
        "policy.transport.tls",
        "up never serves TLS; run toolgate-policy for that",
    ),
];

/// Reads `path` and checks that it holds only `[executor]` and `[policy]` tables and none of
/// the settings `up` makes itself. The tables' own fields are checked when each service's
/// configuration is loaded from it (unknown fields are refused there).
pub(crate) fn check(path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read --config {}: {e}", path.display()))?;
    let table: Table = text.parse().map_err(|e: toml::de::Error| {
        anyhow::anyhow!(
            "--config {} is not valid TOML: {}",
            path.display(),
            e.to_string().trim_end()
        )
    })?;
    problems(&table).map_or(Ok(()), |why| {
        Err(anyhow::anyhow!("--config {}: {why}", path.display()))
    })
}

/// What is wrong with `up`'s file, if anything.
fn problems(table: &Table) -> Option<String> {
    for (key, value) in table {
        if key != EXECUTOR && key != POLICY {
            return Some(format!(
                "unknown top-level key `{key}`: toolgate up's file holds an [{EXECUTOR}] table (the executor's configuration) and a [{POLICY}] table (the policy service's)"
            ));
        }
        if !value.is_table() {
            return Some(format!(
                "`{key}` must be a table ([{key}]) holding the {key} configuration"
            ));
        }
    }
    OWNED.iter().find_map(|(dotted, instead)| {
        lookup(table, dotted).map(|_| {
            format!(
                "`{dotted}` is set by toolgate up itself and cannot be configured here: {instead}"
            )
        })
    })
}

/// The value at `a.b.c`, when there is one.
fn lookup<'a>(table: &'a Table, dotted: &str) -> Option<&'a Value> {
    let mut parts = dotted.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.as_table()?.get(part)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_text(text: &str) -> Option<String> {
        problems(&text.parse::<Table>().expect("valid TOML"))
    }

    #[test]
    fn both_tables_with_their_own_settings_pass() {
        let text = "[executor.process.limits]\nmemory_bytes = 268435456\n\n[policy]\nmax_wait_ms = 5000\n\n[policy.transport]\nmax_connections = 64\n";
        assert_eq!(check_text(text), None);
        assert_eq!(check_text(""), None);
    }

    #[test]
    fn a_setting_up_makes_itself_is_refused_with_the_flag_to_use() {
        let why = check_text("[policy.ledger]\nurl = \"postgres://x\"\n").expect("refused");
        assert!(
            why.contains("`policy.ledger.url`") && why.contains("--data-dir"),
            "{why}"
        );
        let why = check_text("[executor]\nlisten = \"0.0.0.0:1\"\n").expect("refused");
        assert!(why.contains("--executor-listen"), "{why}");
        let why = check_text("[executor.policy]\nrequest_timeout_ms = 5\n").expect("refused");
        assert!(why.contains("`executor.policy`"), "{why}");
        // A sibling of an owned field is the file's to set.
        assert_eq!(check_text("[policy.ledger]\nmax_connections = 4\n"), None);
    }

    #[test]
    fn anything_but_the_two_tables_is_refused() {
        let why = check_text("[process]\nrequire_limits = false\n").expect("refused");
        assert!(why.contains("unknown top-level key `process`"), "{why}");
        let why = check_text("executor = 3\n").expect("refused");
        assert!(why.contains("must be a table"), "{why}");
    }
}
