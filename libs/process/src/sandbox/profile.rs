//! What an operator configures: the named profiles, the sandbox settings and a run's masks.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The name of the profile every run gets unless it asks for another.
pub const DEFAULT_PROFILE: &str = "workspace";

/// The profile name the executor gives the policy for a run that will not be confined (an
/// unconfined profile, or the default profile's fallback when the sandbox is not required):
/// no policy knows its guarantees, so such a run is decided with none, and no configured
/// profile can carry it (names are letters, digits, `-` and `_`).
pub const UNCONFINED_NAME: &str = "(unconfined)";

/// The names of the shipped profiles, whose guarantees every policy assumes.
pub const SHIPPED_PROFILES: &[&str] = &["workspace", "readonly", "network"];

/// What a profile allows a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// No sandbox at all: the run sees the host as the executor does. Only a profile the
    /// operator defines can be unconfined; none of the shipped ones is.
    pub unconfined: bool,
    /// Egress through the executor's gate: the run gets a gated network namespace of its own
    /// whose TCP connections and DNS queries all reach the gate, which decides by destination
    /// (see [`crate::GateSockets`]). Off: the run has only its own loopback.
    pub network: bool,
    /// With `network`, the TCP ports the run may connect to at all (Landlock, ABI 4 or later),
    /// before the gate decides; empty allows every port to reach the gate.
    pub tcp_connect_ports: Vec<u16>,
    /// The workspace is read-only too.
    pub read_only_workspace: bool,
    /// What this profile changes of the executor's per-run resource limits (a build profile
    /// gets more memory than one for `ls`).
    pub limits: crate::limits::ProfileLimits,
}

impl Profile {
    /// The default profile: workspace read-write, no network.
    pub fn workspace() -> Profile {
        Profile {
            unconfined: false,
            network: false,
            tcp_connect_ports: Vec::new(),
            read_only_workspace: false,
            limits: crate::limits::ProfileLimits::default(),
        }
    }

    /// Everything read-only, no network.
    pub fn readonly() -> Profile {
        Profile {
            read_only_workspace: true,
            ..Profile::workspace()
        }
    }

    /// Workspace read-write with egress through the executor's gate, which decides per
    /// destination (host and port), so no port is ruled out here.
    pub fn network() -> Profile {
        Profile {
            network: true,
            tcp_connect_ports: Vec::new(),
            ..Profile::workspace()
        }
    }

    /// No sandbox (an explicit operator choice).
    pub fn unconfined() -> Profile {
        Profile {
            unconfined: true,
            ..Profile::workspace()
        }
    }

    /// Whether this profile confines a run at least as much as `other` in everything the
    /// policy decides with (confinement, network and its ports, a read-only workspace).
    /// Limits are not compared: they bound resources, not what a run can reach.
    pub fn confines_at_least(&self, other: &Profile) -> bool {
        let ports = !self.network
            || other.tcp_connect_ports.is_empty()
            || (!self.tcp_connect_ports.is_empty()
                && self
                    .tcp_connect_ports
                    .iter()
                    .all(|p| other.tcp_connect_ports.contains(p)));
        (!self.unconfined || other.unconfined)
            && (!self.network || other.network)
            && (self.read_only_workspace || !other.read_only_workspace)
            && ports
    }
}

/// How runs are sandboxed (`process.sandbox` in the executor's config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Refuse every run when the default profile cannot be enforced. Off is an explicit
    /// operator choice: runs then go unconfined, and `Started.isolation` says so.
    pub require: bool,
    /// The profile a run gets when it names none.
    pub default_profile: String,
    /// The profiles by name.
    pub profiles: BTreeMap<String, Profile>,
    /// The workspace root; runs see it at the same path. `None`: a run's working directory
    /// is its workspace (for library use).
    pub workspace: Option<PathBuf>,
    /// Host system directories visible read-only (a missing one is skipped; a symlink is
    /// recreated as a symlink).
    pub system_paths: Vec<PathBuf>,
    /// Host files inside the system directories that are hidden (an empty file is mounted
    /// over each that exists): secrets such as `/etc/shadow` and ssh host keys.
    pub hidden_system_paths: Vec<PathBuf>,
    /// Toolchain and cache directories visible read-only (for example `~/.cargo`,
    /// `~/.rustup`, a Python virtualenv); a missing or unreadable one is skipped.
    pub read_only_paths: Vec<PathBuf>,
    /// File names hidden wherever they appear directly inside a read-only path (credentials
    /// a toolchain keeps next to its caches).
    pub hidden_names: Vec<String>,
    /// The run's `HOME` inside the view: a private tmpfs.
    pub home: PathBuf,
    /// Size of the private `/tmp`.
    pub tmp_bytes: u64,
    /// Size of the private `/dev/shm`.
    pub shm_bytes: u64,
    /// Files (inodes) each private tmpfs (`/tmp`, `/dev/shm`, HOME) may hold: a run creating
    /// millions of empty files would otherwise pin kernel memory no size limit counts.
    pub tmpfs_inodes: u64,
    /// A host directory the view's root is staged on before the pivot (only ever mounted on
    /// inside the run's own mount namespace, so the host never sees anything there).
    pub stage: PathBuf,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        let mut profiles = BTreeMap::new();
        profiles.insert(DEFAULT_PROFILE.to_owned(), Profile::workspace());
        profiles.insert("readonly".to_owned(), Profile::readonly());
        profiles.insert("network".to_owned(), Profile::network());
        SandboxConfig {
            require: true,
            default_profile: DEFAULT_PROFILE.to_owned(),
            profiles,
            workspace: None,
            system_paths: [
                "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
            ]
            .map(PathBuf::from)
            .to_vec(),
            hidden_system_paths: [
                "/etc/shadow",
                "/etc/shadow-",
                "/etc/gshadow",
                "/etc/gshadow-",
                "/etc/security/opasswd",
                "/etc/sudoers",
                "/etc/ssl/private",
                "/etc/toolgate",
            ]
            .map(PathBuf::from)
            .to_vec(),
            read_only_paths: Vec::new(),
            hidden_names: [
                "credentials",
                "credentials.toml",
                ".netrc",
                ".npmrc",
                ".pypirc",
            ]
            .map(String::from)
            .to_vec(),
            home: PathBuf::from("/home/toolgate"),
            tmp_bytes: 512 << 20,
            shm_bytes: 64 << 20,
            tmpfs_inodes: 65_536,
            stage: PathBuf::from("/tmp"),
        }
    }
}

impl SandboxConfig {
    /// A configuration whose only profile is unconfined and not required: the explicit
    /// "no sandbox" choice (tests of the fallback kill mechanisms use it).
    pub fn unconfined() -> SandboxConfig {
        let mut profiles = BTreeMap::new();
        profiles.insert("none".to_owned(), Profile::unconfined());
        SandboxConfig {
            require: false,
            default_profile: "none".to_owned(),
            profiles,
            ..SandboxConfig::default()
        }
    }

    /// Checks names and paths; the runner refuses an invalid config.
    pub fn validate(&self) -> Result<(), String> {
        if !self.profiles.contains_key(&self.default_profile) {
            return Err(format!(
                "default_profile `{}` is not among the profiles ({})",
                self.default_profile,
                self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        // The policy decides a run under a shipped name with that name's shipped guarantees
        // (no network under `workspace`, a read-only workspace under `readonly`...), so a
        // configuration may make those profiles stricter, never weaker.
        let shipped = SandboxConfig::default().profiles;
        for (name, p) in &self.profiles {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(format!(
                    "profiles.{name}: a profile name is letters, digits, `-` and `_`"
                ));
            }
            if let Some(s) = shipped.get(name)
                && !p.confines_at_least(s)
            {
                return Err(format!(
                    "profiles.{name}: the shipped profile `{name}` may only be redefined stricter (the policy decides its runs with its shipped guarantees); define a profile under another name and declare its guarantees in the policy's [profiles.<name>]"
                ));
            }
        }
        if self.tmpfs_inodes < 64 {
            return Err("tmpfs_inodes must be at least 64".to_owned());
        }
        for (field, path) in [("home", &self.home), ("stage", &self.stage)] {
            if !path.is_absolute() {
                return Err(format!("{field} must be an absolute path"));
            }
        }
        for path in self
            .system_paths
            .iter()
            .chain(&self.read_only_paths)
            .chain(&self.hidden_system_paths)
        {
            if !path.is_absolute() {
                return Err(format!("{} must be an absolute path", path.display()));
            }
        }
        Ok(())
    }
}

/// Paths of the workspace, relative to its root, that a run's view changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masks {
    /// Regular files (or anything not a directory) hidden behind an empty read-only file.
    pub hidden_files: Vec<PathBuf>,
    /// Directories hidden behind an empty read-only directory.
    pub hidden_dirs: Vec<PathBuf>,
    /// Existing paths bound read-only onto themselves.
    pub protected: Vec<PathBuf>,
    /// Directories bound onto themselves (writable unless the workspace is read-only), parents
    /// first, so the run can neither rename nor remove them: a mount point is busy in its own
    /// namespace. Every directory on the way to a hidden or protected path is one.
    pub pinned: Vec<PathBuf>,
    /// Existing protected files the run sees read-only as this content instead (a
    /// repository's config with the credentials in its URLs redacted).
    pub redacted: Vec<(PathBuf, std::sync::Arc<[u8]>)>,
}
