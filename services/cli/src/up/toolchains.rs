//! The toolchains of the user who starts `toolgate up`, made visible read-only inside runs so
//! real development commands (`cargo test`, `python -m unittest`, `npm test`) work offline.
//!
//! Only a toolchain's own directory is exposed: never `/`, the home directory or one of its
//! ancestors, a directory that holds the user's dotfiles, or one inside a credential
//! directory. A `node` whose prefix is shared with other things (`~/bin`, `~/.local`) is
//! narrowed to the directory of its real binary and its `lib/node_modules`. Credential files
//! that toolchains keep in their own directories (registry tokens in cargo's `credentials` and
//! `config`, `npmrc`, `pip.conf`, `.pypirc`, `.netrc`, `.git-credentials`) are hidden in runs.

use std::collections::BTreeMap;
use std::ffi::OsString;
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
    /// Credential files inside `read_only`, hidden in runs (an empty file is mounted over each).
    pub hidden: Vec<PathBuf>,
    /// What was narrowed or left out, and why; `up` prints these.
    pub notes: Vec<String>,
}

/// The parts of the starting environment detection reads (a struct, so tests can fake it).
#[derive(Debug, Default, Clone)]
pub(crate) struct Environment {
    pub home: Option<PathBuf>,
    pub cargo_home: Option<PathBuf>,
    pub rustup_home: Option<PathBuf>,
    pub virtual_env: Option<PathBuf>,
    pub path: Option<OsString>,
}

impl Environment {
    /// This process's environment.
    pub(crate) fn current() -> Environment {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Environment {
            home: var("HOME"),
            cargo_home: var("CARGO_HOME"),
            rustup_home: var("RUSTUP_HOME"),
            virtual_env: var("VIRTUAL_ENV"),
            path: std::env::var_os("PATH"),
        }
    }
}

/// Entries whose presence makes a directory a home directory (or a copy of one): it is
/// never exposed whole.
const HOME_MARKERS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".config",
    ".local",
    ".bashrc",
    ".bash_profile",
    ".bash_history",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".gitconfig",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
];

/// Directories that hold credentials; nothing inside them is exposed.
const CREDENTIAL_DIRS: &[&str] = &[".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker"];

/// File names that hold registry, index or network credentials, looked for in each exposed
/// directory and its `etc/`. Cargo's `config`/`config.toml` can carry a registry token; they
/// are hidden whole (cargo runs without them).
const CREDENTIAL_FILES: &[&str] = &[
    "credentials",
    "credentials.toml",
    "config",
    "config.toml",
    "npmrc",
    ".npmrc",
    "pip.conf",
    "pip.ini",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    ".yarnrc",
    ".yarnrc.yml",
];

impl Toolchains {
    /// Finds the toolchains in this process's environment.
    pub(crate) fn detect() -> Toolchains {
        Toolchains::detect_in(&Environment::current())
    }

    /// Finds the toolchains in `env`: `CARGO_HOME` / `RUSTUP_HOME` or their defaults under
    /// `HOME`, an active virtualenv, and a node installed outside the system directories.
    pub(crate) fn detect_in(env: &Environment) -> Toolchains {
        let home = env
            .home
            .as_deref()
            .and_then(|h| std::fs::canonicalize(h).ok());
        let mut t = Toolchains::default();
        let or_default = |v: &Option<PathBuf>, default: &str| {
            v.clone()
                .or_else(|| env.home.as_ref().map(|h| h.join(default)))
        };
        if let Some(cargo) = or_default(&env.cargo_home, ".cargo").filter(|p| p.is_dir()) {
            t.add(home.as_deref(), &cargo, Some("CARGO_HOME"), true);
        }
        if let Some(rustup) = or_default(&env.rustup_home, ".rustup").filter(|p| p.is_dir()) {
            t.add(home.as_deref(), &rustup, Some("RUSTUP_HOME"), false);
        }
        if let Some(venv) = env.virtual_env.as_ref().filter(|p| p.is_dir()) {
            t.add(home.as_deref(), venv, Some("VIRTUAL_ENV"), true);
        }
        if let Some(path) = &env.path {
            t.add_node(home.as_deref(), path);
        }
        t
    }

    /// Exposes `dir` (canonical) when it is safe to, with its variable and `bin`.
    fn add(&mut self, home: Option<&Path>, dir: &Path, var: Option<&str>, bin: bool) -> bool {
        let Ok(dir) = std::fs::canonicalize(dir) else {
            return false;
        };
        if let Err(why) = exposable(home, &dir) {
            self.notes.push(format!(
                "toolchain directory {} is not exposed to runs: {why}",
                dir.display()
            ));
            return false;
        }
        if let Some(var) = var {
            self.env.insert(var.to_owned(), dir.display().to_string());
        }
        if bin && dir.join("bin").is_dir() {
            self.path_prepend.push(dir.join("bin"));
        }
        self.hide_credentials(&dir);
        self.read_only.push(dir);
        true
    }

    /// Exposes a directory exactly as given (no `bin`, no variable), when it is safe to.
    fn add_plain(&mut self, home: Option<&Path>, dir: &Path) -> bool {
        if let Err(why) = exposable(home, dir) {
            self.notes
                .push(format!("{} is not exposed to runs: {why}", dir.display()));
            return false;
        }
        self.hide_credentials(dir);
        self.read_only.push(dir.to_path_buf());
        true
    }

    fn hide_credentials(&mut self, dir: &Path) {
        for sub in [dir.to_path_buf(), dir.join("etc")] {
            for name in CREDENTIAL_FILES {
                let p = sub.join(name);
                if std::fs::symlink_metadata(&p).is_err() {
                    continue;
                }
                // The sandbox hides files, not links: hide where a link leads too.
                if let Ok(real) = std::fs::canonicalize(&p)
                    && real != p
                {
                    self.hidden.push(real);
                }
                self.hidden.push(p);
            }
        }
    }

    /// The `node` first on `PATH`, unless it is a system one (already visible).
    fn add_node(&mut self, home: Option<&Path>, path: &OsString) {
        let Some(node) = std::env::split_paths(path)
            .map(|d| d.join("node"))
            .find(|p| p.is_file())
        else {
            return;
        };
        let Ok(real) = std::fs::canonicalize(&node) else {
            return;
        };
        let Some(bin) = real.parent().map(Path::to_path_buf) else {
            return;
        };
        let Some(prefix) = bin.parent().map(Path::to_path_buf) else {
            return;
        };
        let system = ["/usr", "/bin", "/lib", "/etc", "/sbin"]
            .iter()
            .any(|s| prefix.starts_with(s));
        if system || prefix == Path::new("/") {
            return;
        }
        if node_owns(&prefix, &real) && exposable(home, &prefix).is_ok() {
            self.add(home, &prefix, None, true);
            return;
        }
        // A prefix shared with other things (`~/bin` makes it the home directory, `~/.local`
        // holds other programs' data): only node's own parts.
        let mut note = format!(
            "node's prefix {} is not node's own; runs see only {}",
            prefix.display(),
            bin.display()
        );
        if !self.add_plain(home, &bin) {
            self.notes.push(format!(
                "node ({}) is not available in runs",
                real.display()
            ));
            return;
        }
        self.path_prepend.push(bin);
        let modules = prefix.join("lib/node_modules");
        if modules.is_dir() && self.add_plain(home, &modules) {
            note.push_str(&format!(" and {}", modules.display()));
        }
        self.notes.push(note);
    }
}

/// Whether `prefix` holds one node install and nothing else: its `bin` has the real binary
/// and links into its `lib/node_modules` only, its `lib` only `node_modules`, and it has no
/// dotfiles.
fn node_owns(prefix: &Path, real: &Path) -> bool {
    let names = |dir: &Path| -> Option<Vec<OsString>> {
        Some(
            std::fs::read_dir(dir)
                .ok()?
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .collect(),
        )
    };
    let Some(top) = names(prefix) else {
        return false;
    };
    if top.iter().any(|n| n.to_string_lossy().starts_with('.')) {
        return false;
    }
    if real != prefix.join("bin/node") {
        return false;
    }
    let modules = prefix.join("lib/node_modules");
    let Some(bins) = names(&prefix.join("bin")) else {
        return false;
    };
    let bins_ok = bins.iter().all(|n| {
        n == "node"
            || std::fs::canonicalize(prefix.join("bin").join(n))
                .is_ok_and(|t| t.starts_with(&modules))
    });
    let lib_ok = names(&prefix.join("lib")).is_none_or(|l| l.iter().all(|n| n == "node_modules"));
    bins_ok && lib_ok
}

/// Why `dir` (canonical) must not be exposed to runs, if it must not.
fn exposable(home: Option<&Path>, dir: &Path) -> Result<(), String> {
    if dir == Path::new("/") {
        return Err("it is the root directory".to_owned());
    }
    if let Some(home) = home {
        if dir == home {
            return Err("it is the home directory".to_owned());
        }
        if home.starts_with(dir) {
            return Err("it contains the home directory".to_owned());
        }
    }
    if let Some(c) = dir.components().find(|c| {
        CREDENTIAL_DIRS
            .iter()
            .any(|d| c.as_os_str() == std::ffi::OsStr::new(d))
    }) {
        return Err(format!(
            "it is inside a credential directory ({})",
            c.as_os_str().to_string_lossy()
        ));
    }
    if let Some(m) = HOME_MARKERS
        .iter()
        .find(|m| std::fs::symlink_metadata(dir.join(m)).is_ok())
    {
        return Err(format!("it holds the user's dotfiles ({m})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake home with dotfiles and credentials, and an environment pointing into it.
    struct Home {
        _tmp: tempfile::TempDir,
        home: PathBuf,
    }

    impl Home {
        fn new() -> Home {
            let tmp = tempfile::tempdir().unwrap();
            let home = std::fs::canonicalize(tmp.path()).unwrap().join("u");
            for d in [
                ".ssh",
                ".aws",
                ".config/gh",
                "bin",
                ".local/bin",
                ".local/share",
            ] {
                std::fs::create_dir_all(home.join(d)).unwrap();
            }
            for f in [
                ".ssh/id_rsa",
                ".aws/credentials",
                ".git-credentials",
                ".bashrc",
            ] {
                std::fs::write(home.join(f), "SECRET").unwrap();
            }
            Home { _tmp: tmp, home }
        }

        fn env(&self, path: &[&str]) -> Environment {
            Environment {
                home: Some(self.home.clone()),
                path: Some(std::env::join_paths(path.iter().map(|p| self.home.join(p))).unwrap()),
                ..Environment::default()
            }
        }

        /// A node install at `prefix` (relative to home): `bin/node`, npm linked into
        /// `lib/node_modules`, and a global `etc/npmrc`.
        fn node_install(&self, prefix: &str) -> PathBuf {
            let p = self.home.join(prefix);
            std::fs::create_dir_all(p.join("bin")).unwrap();
            std::fs::create_dir_all(p.join("lib/node_modules/npm/bin")).unwrap();
            std::fs::create_dir_all(p.join("etc")).unwrap();
            std::fs::write(p.join("bin/node"), "#!/bin/sh\n").unwrap();
            std::fs::write(p.join("lib/node_modules/npm/bin/npm-cli.js"), "").unwrap();
            std::os::unix::fs::symlink("../lib/node_modules/npm/bin/npm-cli.js", p.join("bin/npm"))
                .unwrap();
            std::fs::write(p.join("etc/npmrc"), "//registry.npmjs.org/:_authToken=x\n").unwrap();
            p
        }

        /// No exposed directory lets a run reach the home's secrets.
        fn assert_secrets_unexposed(&self, t: &Toolchains) {
            for dir in &t.read_only {
                for secret in [".ssh/id_rsa", ".aws/credentials", ".git-credentials"] {
                    let s = self.home.join(secret);
                    assert!(
                        !s.starts_with(dir),
                        "{} exposes {}",
                        dir.display(),
                        s.display()
                    );
                }
                assert!(
                    !self.home.starts_with(dir),
                    "{} exposes home",
                    dir.display()
                );
            }
        }
    }

    #[test]
    fn a_toolchain_adds_its_dir_its_variable_and_its_bin() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let mut t = Toolchains::default();
        t.add(None, dir.path(), Some("CARGO_HOME"), true);
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(t.read_only, vec![real.clone()]);
        assert_eq!(t.path_prepend, vec![real.join("bin")]);
        assert_eq!(t.env["CARGO_HOME"], real.display().to_string());
        // A missing directory adds nothing.
        t.add(None, &dir.path().join("missing"), Some("X"), true);
        assert_eq!(t.read_only.len(), 1);
        assert!(!t.env.contains_key("X"));
    }

    #[test]
    fn node_in_home_bin_linked_into_nvm_exposes_only_the_nvm_version() {
        let h = Home::new();
        let install = h.node_install(".nvm/versions/node/v20.1.0");
        std::os::unix::fs::symlink(install.join("bin/node"), h.home.join("bin/node")).unwrap();
        let t = Toolchains::detect_in(&h.env(&["bin"]));
        assert_eq!(t.read_only, vec![install.clone()]);
        assert_eq!(t.path_prepend, vec![install.join("bin")]);
        assert_eq!(t.hidden, vec![install.join("etc/npmrc")]);
        h.assert_secrets_unexposed(&t);
    }

    #[test]
    fn node_copied_into_home_bin_never_exposes_the_home_directory() {
        let h = Home::new();
        std::fs::write(h.home.join("bin/node"), "#!/bin/sh\n").unwrap();
        std::fs::create_dir_all(h.home.join("lib/node_modules/npm")).unwrap();
        let t = Toolchains::detect_in(&h.env(&["bin"]));
        assert_eq!(
            t.read_only,
            vec![h.home.join("bin"), h.home.join("lib/node_modules")]
        );
        assert_eq!(t.path_prepend, vec![h.home.join("bin")]);
        assert!(t.notes[0].contains("not node's own"), "{:?}", t.notes);
        h.assert_secrets_unexposed(&t);
    }

    #[test]
    fn node_in_dot_local_bin_does_not_expose_dot_local() {
        let h = Home::new();
        std::fs::write(h.home.join(".local/bin/node"), "#!/bin/sh\n").unwrap();
        std::fs::write(h.home.join(".local/bin/other-tool"), "#!/bin/sh\n").unwrap();
        std::fs::write(h.home.join(".local/share/keyring"), "SECRET").unwrap();
        let t = Toolchains::detect_in(&h.env(&[".local/bin"]));
        assert_eq!(t.read_only, vec![h.home.join(".local/bin")]);
        assert!(!t.read_only.contains(&h.home.join(".local")));
        h.assert_secrets_unexposed(&t);
    }

    #[test]
    fn a_toolchain_variable_pointing_at_home_or_its_parent_is_refused() {
        let h = Home::new();
        let parent = h.home.parent().unwrap().to_path_buf();
        for (dir, why) in [
            (h.home.clone(), "home directory"),
            (parent, "contains the home"),
            (PathBuf::from("/"), "root"),
            (h.home.join(".ssh"), "credential directory"),
        ] {
            let env = Environment {
                home: Some(h.home.clone()),
                cargo_home: Some(dir.clone()),
                virtual_env: Some(dir.clone()),
                ..Environment::default()
            };
            let t = Toolchains::detect_in(&env);
            assert!(
                t.read_only.is_empty(),
                "{}: {:?}",
                dir.display(),
                t.read_only
            );
            assert!(t.env.is_empty());
            assert!(t.notes.iter().all(|n| n.contains(why)), "{:?}", t.notes);
        }
        // A copy of a home elsewhere (dotfiles in it) is refused too.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join(".ssh")).unwrap();
        let mut t = Toolchains::default();
        assert!(!t.add(Some(&h.home), other.path(), Some("VIRTUAL_ENV"), true));
        assert!(t.notes[0].contains("dotfiles"), "{:?}", t.notes);
    }

    #[test]
    fn registry_tokens_in_cargo_venv_and_node_dirs_are_hidden() {
        let h = Home::new();
        let cargo = h.home.join(".cargo");
        std::fs::create_dir_all(cargo.join("bin")).unwrap();
        for f in ["credentials.toml", "config.toml", ".crates.toml"] {
            std::fs::write(cargo.join(f), "token = \"x\"").unwrap();
        }
        let venv = h.home.join("proj-venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pip.conf"), "index-url = https://u:p@host/").unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin").unwrap();
        let env = Environment {
            virtual_env: Some(venv.clone()),
            path: None,
            ..h.env(&[])
        };
        let t = Toolchains::detect_in(&env);
        assert_eq!(t.read_only, vec![cargo.clone(), venv.clone()]);
        assert_eq!(
            t.hidden,
            vec![
                cargo.join("credentials.toml"),
                cargo.join("config.toml"),
                venv.join("pip.conf")
            ]
        );
    }
}
