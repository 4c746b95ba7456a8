//! The toolchains of the user who starts `toolgate up`, made visible read-only inside runs so
//! real development commands (`cargo test`, `python -m unittest`, `npm test`) work offline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What runs see of the starting user's toolchains.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Toolchains {
    /// Directories bound read-only at the same path.
    pub read_only: Vec<PathBuf>,
    /// Variables every run gets (`CARGO_HOME`, `RUSTUP_HOME`, `VIRTUAL_ENV`).
    pub env: BTreeMap<String, String>,
    /// `bin` directories put in front of the runs' `PATH`.
    pub path_prepend: Vec<PathBuf>,
}

impl Toolchains {
    /// Finds the toolchains in this process's environment: `CARGO_HOME` / `RUSTUP_HOME` or
    /// their defaults under `HOME`, an active virtualenv, and a node installed outside the
    /// system directories (nvm, a prefix under `HOME`).
    pub(crate) fn detect() -> Toolchains {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let var_or = |name: &str, default: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)))
        };
        let mut t = Toolchains::default();
        if let Some(cargo) = var_or("CARGO_HOME", ".cargo").filter(|p| p.is_dir()) {
            t.add(&cargo, Some("CARGO_HOME"), true);
        }
        if let Some(rustup) = var_or("RUSTUP_HOME", ".rustup").filter(|p| p.is_dir()) {
            t.add(&rustup, Some("RUSTUP_HOME"), false);
        }
        if let Some(venv) = std::env::var_os("VIRTUAL_ENV")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
        {
            t.add(&venv, Some("VIRTUAL_ENV"), true);
        }
        if let Some(prefix) = node_prefix() {
            t.add(&prefix, None, true);
        }
        t
    }

    fn add(&mut self, dir: &Path, var: Option<&str>, bin: bool) {
        let Ok(dir) = std::fs::canonicalize(dir) else {
            return;
        };
        if let Some(var) = var {
            self.env.insert(var.to_owned(), dir.display().to_string());
        }
        if bin && dir.join("bin").is_dir() {
            self.path_prepend.push(dir.join("bin"));
        }
        self.read_only.push(dir);
    }
}

/// The install prefix of the `node` on `PATH`, unless it is a system one (already visible).
fn node_prefix() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let node = std::env::split_paths(&path)
        .map(|d| d.join("node"))
        .find(|p| p.is_file())?;
    let real = std::fs::canonicalize(node).ok()?;
    let prefix = real.parent()?.parent()?.to_path_buf();
    let system = ["/usr", "/bin", "/lib", "/etc", "/sbin"]
        .iter()
        .any(|s| prefix.starts_with(s) || prefix == Path::new("/"));
    (!system).then_some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toolchain_adds_its_dir_its_variable_and_its_bin() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let mut t = Toolchains::default();
        t.add(dir.path(), Some("CARGO_HOME"), true);
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(t.read_only, vec![real.clone()]);
        assert_eq!(t.path_prepend, vec![real.join("bin")]);
        assert_eq!(t.env["CARGO_HOME"], real.display().to_string());
        // A missing directory adds nothing.
        t.add(&dir.path().join("missing"), Some("X"), true);
        assert_eq!(t.read_only.len(), 1);
        assert!(!t.env.contains_key("X"));
    }
}
