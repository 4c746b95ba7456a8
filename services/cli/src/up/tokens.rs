//! The credentials `toolgate up` generates once and reuses: `<data-dir>/tokens.toml`, mode 0600.
//!
//! The file has the shape of an `auth.tokens_file` (`[[tokens]]` with `principal`, `role`,
//! `token`), so a separately started `toolgate-policy` or `toolgate-executor` can point at it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use toolgate_runtime::auth::{AuthConfig, Role, TokenEntry, generate_token};

/// The file name inside the data directory.
pub(crate) const FILE: &str = "tokens.toml";

/// One credential per role `up` needs, in the order they are printed.
pub(crate) const ROLES: [Role; 4] = [Role::Agent, Role::Approver, Role::Admin, Role::Executor];

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tokens: Vec<Entry>,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    principal: String,
    role: Role,
    token: String,
}

/// The credentials of one `up` installation.
#[derive(Clone)]
pub(crate) struct Tokens {
    entries: Vec<Entry>,
    /// Where they are stored.
    pub path: PathBuf,
    /// Whether this start generated any of them.
    pub generated: bool,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("path", &self.path)
            .field("count", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// Loads `<data_dir>/tokens.toml`, generating the credentials it lacks (all of them on
    /// first start) and tightening its mode to 0600.
    pub(crate) fn load_or_generate(data_dir: &Path) -> anyhow::Result<Tokens> {
        let path = data_dir.join(FILE);
        let mut entries = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let f: File = toml::from_str(&text)
                    .with_context(|| format!("{} is not a tokens file", path.display()))?;
                f.tokens
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let mut generated = false;
        for role in ROLES {
            if !entries.iter().any(|e| e.role == role) {
                entries.push(Entry {
                    principal: role.as_str().to_owned(),
                    role,
                    token: generate_token(),
                });
                generated = true;
            }
        }
        if generated {
            write_private(
                &path,
                &toml::to_string(&File {
                    tokens: entries.clone(),
                })?,
            )?;
        } else {
            let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
            if mode != 0o600 {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .with_context(|| format!("cannot make {} private", path.display()))?;
            }
        }
        Ok(Tokens {
            entries,
            path,
            generated,
        })
    }

    /// The first credential with `role`.
    pub(crate) fn get(&self, role: Role) -> Option<(&str, &str)> {
        self.entries
            .iter()
            .find(|e| e.role == role)
            .map(|e| (e.principal.as_str(), e.token.as_str()))
    }

    /// The `[auth]` section both embedded services use.
    pub(crate) fn auth_config(&self) -> AuthConfig {
        AuthConfig {
            tokens: self
                .entries
                .iter()
                .map(|e| TokenEntry {
                    principal: e.principal.clone(),
                    role: e.role,
                    token: Some(e.token.clone()),
                    token_file: None,
                })
                .collect(),
            tokens_file: None,
        }
    }
}

/// Writes `text` to `path` through a 0600 temp file renamed into place.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("toml.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_reused_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = Tokens::load_or_generate(dir.path()).unwrap();
        assert!(first.generated);
        let mode = std::fs::metadata(&first.path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = Tokens::load_or_generate(dir.path()).unwrap();
        assert!(!second.generated);
        for role in ROLES {
            assert_eq!(first.get(role), second.get(role));
            assert!(first.get(role).unwrap().1.len() >= 32);
        }
        // The file is a valid auth.tokens_file for the standalone binaries.
        let auth = AuthConfig {
            tokens: vec![],
            tokens_file: Some(first.path.clone()),
        };
        let a = toolgate_runtime::auth::Authenticator::from_config(&auth).unwrap();
        let p = a.check(first.get(Role::Approver).unwrap().1).unwrap();
        assert_eq!(p.role, Role::Approver);
    }

    #[test]
    fn a_loose_mode_is_tightened_and_a_missing_role_added() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::write(
            &path,
            "[[tokens]]\nprincipal = \"me\"\nrole = \"agent\"\ntoken = \"0123456789abcdef0123\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let t = Tokens::load_or_generate(dir.path()).unwrap();
        assert!(t.generated);
        assert_eq!(t.get(Role::Agent), Some(("me", "0123456789abcdef0123")));
        assert!(t.get(Role::Admin).is_some());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
