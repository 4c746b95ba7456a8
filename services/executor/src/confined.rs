//! The only way to the workspace and the process runner.
//!
//! Resolving a request (canonical paths, a working directory handle, effective limits) has no
//! effect and needs nothing. Performing it does: [`Confined::fs`] and [`Confined::run`] take
//! an [`Authorized`] proof, which only the policy service's `allowed` answer produces. The
//! fields are private to this module, so no other code reaches the workspace or the runner.

use std::collections::BTreeMap;
use std::sync::Arc;

use toolgate_core::{Reason, ReasonedError};
use toolgate_fs::{Canonical, OpenDirectory, Workspace, WorkspacePath};
use toolgate_process::blocking::BlockingCost;
use toolgate_process::tripwire::Watch;
use toolgate_process::{Audit, Capabilities, EffectiveLimits, Run, RunSpec, Runner};

use crate::authz::{Authorized, HiddenUnknown};
use crate::disk::{Baselines, DiskBudget};

/// The workspace and the runner behind the authorization requirement; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Confined {
    workspace: Arc<Workspace>,
    runner: Runner,
    /// What one run may add to the workspace, when budgeted.
    disk: Option<DiskBudget>,
    /// The budget's baseline, kept between runs while nothing changes the workspace.
    baselines: Arc<Baselines>,
    /// How long the recent walks before a run took (masks and disk baseline), and the
    /// recent hashing of the files commands name: short ones stay on the worker.
    walks: Arc<BlockingCost>,
    binds: Arc<BlockingCost>,
}

impl Confined {
    /// Confines `workspace` and `runner`, runs under `disk`'s budget.
    pub(crate) fn new(workspace: Arc<Workspace>, runner: Runner, disk: Option<DiskBudget>) -> Self {
        Confined {
            workspace,
            runner,
            disk,
            baselines: Arc::default(),
            walks: Arc::default(),
            binds: Arc::default(),
        }
    }

    /// The canonical workspace-relative form of `path`, for the policy (no effect). A path
    /// to be written is also checked against the protected globs, so a write the workspace
    /// refuses anyway never reaches an approver.
    pub(crate) async fn canonicalize(
        &self,
        path: WorkspacePath,
        write: bool,
    ) -> Result<Canonical, Error> {
        let ws = self.workspace.clone();
        blocking(move || {
            if write {
                ws.canonicalize_for_write(&path)
            } else {
                ws.canonicalize(&path)
            }
        })
        .await
    }

    /// The canonical form of a path whose final name is acted on itself, never followed (a
    /// deletion of a symlink is decided on the link), checked against the protected globs.
    pub(crate) async fn canonicalize_entry(&self, path: WorkspacePath) -> Result<Canonical, Error> {
        let ws = self.workspace.clone();
        blocking(move || ws.canonicalize_entry(&path)).await
    }

    /// An open, confined working directory for a run (no effect).
    ///
    /// The workspace root itself, the usual cwd, is opened inline: it is one `openat2` on a
    /// directory the executor already holds, and the hop to the blocking pool cost ~50 µs of a
    /// ~1.5 ms `Run(["/bin/true"])`. Deeper paths may cross slow mounts, so they still go there.
    pub(crate) async fn open_directory(&self, path: WorkspacePath) -> Result<OpenDirectory, Error> {
        if matches!(path.as_str(), "" | ".") {
            return self.workspace.open_directory(&path).map_err(Error::from);
        }
        let ws = self.workspace.clone();
        blocking(move || ws.open_directory(&path)).await
    }

    /// The limits a run would get, or why the runner would refuse it (no effect).
    pub(crate) fn effective(&self, spec: &RunSpec) -> Result<EffectiveLimits, Error> {
        self.runner.effective(spec).map_err(Error::from)
    }

    /// The sandbox profile a run asking for `name` (empty: the default) gets, or the
    /// `SANDBOX_UNAVAILABLE` refusal (before anything is authorized or parked).
    pub(crate) fn profile(&self, name: &str) -> Result<String, Error> {
        self.runner.profile(name).map_err(Error::from)
    }

    /// What a run under the profile `name` reserves of the run memory budget.
    pub(crate) fn reservation(&self, name: &str) -> Result<toolgate_process::Reservation, Error> {
        self.runner.reservation(name).map_err(Error::from)
    }

    /// The profile name the policy decides a run under `profile` with: the name itself when
    /// the kernel sandbox confines it here, else [`toolgate_process::UNCONFINED_NAME`], so that
    /// a shipped name running unconfined (the fallback of `require_sandbox = false`) is never
    /// decided with that name's guarantees.
    pub(crate) fn decided_profile(&self, profile: &str) -> String {
        if self.runner.confines(profile) {
            profile.to_owned()
        } else {
            toolgate_process::UNCONFINED_NAME.to_owned()
        }
    }

    /// The workspace files `words` name from the canonical directory `cwd`, with the
    /// digests of their content (no effect): what the run's approval binds. Bounded (at
    /// most 32 files, 1 MiB hashed of each); on a multi-thread runtime the worker says it
    /// blocks when recent calls took long, as for the mask walk.
    pub(crate) fn bound_files(&self, cwd: &str, words: &[String]) -> BTreeMap<String, String> {
        if words.is_empty() {
            return BTreeMap::new();
        }
        self.binds.run(|| {
            self.workspace
                .bound_files(cwd, words.iter().map(String::as_str))
        })
    }

    /// Whether runs under `profile` go out only through the egress gate (their spec needs a
    /// hook).
    pub(crate) fn networked(&self, profile: &str) -> bool {
        self.runner.networked(profile)
    }

    /// Whether runs under `profile` are confined by the kernel sandbox here (they join
    /// their session's sandbox).
    pub(crate) fn confines(&self, profile: &str) -> bool {
        self.runner.confines(profile)
    }

    /// A new session sandbox: the namespaces one session's confined runs share.
    pub(crate) fn session_namespaces(&self) -> Result<toolgate_process::SessionNamespaces, Error> {
        self.runner.session_namespaces().map_err(Error::from)
    }

    /// What the runner can do on this host.
    pub(crate) fn capabilities(&self) -> &Capabilities {
        self.runner.capabilities()
    }

    /// Bytes and entries one run may add to the workspace (0: no budget).
    pub(crate) fn disk_limits(&self) -> (u64, u64) {
        self.disk.map_or((0, 0), DiskBudget::limits)
    }

    /// Performs an authorized filesystem operation on the blocking pool.
    /// `writes`: the operation can change the workspace (the disk budget's kept baseline goes).
    pub(crate) async fn fs<T, F>(
        &self,
        _proof: &Authorized,
        span: tracing::Span,
        writes: bool,
        op: F,
    ) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Workspace) -> Result<T, toolgate_fs::Error> + Send + 'static,
    {
        if writes {
            self.baselines.invalidate();
        }
        let ws = self.workspace.clone();
        blocking(move || {
            let _entered = span.enter();
            let result = op(&ws);
            if let Err(e) = &result {
                tracing::info!(reason = %toolgate_core::ReasonedError::reason(e), error = %e, "refused");
            }
            result
        })
        .await
    }

    /// Starts an authorized run. Its view hides what the workspace's deny globs and the
    /// decision's hidden paths match, and binds protected paths read-only: the walk happens
    /// here, right before the spawn, so it sees the workspace as the run will.
    pub(crate) fn run(&self, proof: &Authorized, mut spec: RunSpec) -> Result<Run, Error> {
        let hidden = proof.hidden_globs()?;
        // The walk reads the whole workspace: once walks take long, the worker says it
        // blocks (on a multi-thread runtime), so its other tasks move elsewhere instead of
        // waiting behind a large tree; a small workspace's walk costs less than that move.
        // The disk budget's baseline is measured in the same blocking section: what the run
        // adds is counted from here.
        let walk = || {
            let masks = self.workspace.run_masks(hidden)?;
            let baseline = match self.disk {
                Some(_) => Some(self.baselines.begin(&self.workspace)?),
                None => None,
            };
            Ok::<_, toolgate_fs::Error>((masks, baseline))
        };
        let (masks, baseline) = self.walks.run(walk).map_err(Error::from)?;
        if let (Some(budget), Some((baseline, ticket))) = (self.disk, baseline) {
            spec.set_disk_watch(budget.watch(self.workspace.clone(), baseline, ticket));
        }
        // The profile the policy decided under is the one the run gets; the runner refuses it
        // with SANDBOX_UNAVAILABLE if this executor cannot enforce it.
        let answered = proof.sandbox_profile();
        if !answered.is_empty() && answered != toolgate_process::UNCONFINED_NAME {
            // A rule may move the run to a shipped profile the policy assumes is confined;
            // here it would run unconfined (the fallback): refuse rather than weaken.
            if toolgate_process::SHIPPED_PROFILES.contains(&answered)
                && !self.runner.confines(answered)
            {
                return Err(Error::Runner(
                    toolgate_process::runner::Error::SandboxUnavailable {
                        profile: answered.to_owned(),
                        missing: "the sandbox itself: the policy decided this run under a shipped profile, which this executor would run unconfined".to_owned(),
                    },
                ));
            }
            spec.set_profile(answered);
        }
        spec.set_tripwire(watches(self.workspace.real_root(), &masks));
        spec.set_masks(toolgate_process::Masks {
            hidden_files: masks.hidden_files,
            hidden_dirs: masks.hidden_dirs,
            protected: masks.protected,
            pinned: masks.pinned,
            redacted: masks.redacted,
        });
        // The second line behind the binds: what the run created in the protected set is
        // found and removed before its outcome is reported.
        let (workspace, before, hidden) = (self.workspace.clone(), masks.snapshot, hidden.clone());
        // A run no human approved may not rewrite or delete history or hide edits: the audit
        // puts those back (quarantine). An approved run's changes are reported, not undone.
        let quarantine = proof.approval_id().is_empty();
        spec.set_audit(Audit::new(move || {
            workspace
                .audit_run(&before, &hidden, quarantine)
                .map_err(|e| format!("the after-run audit of the protected set failed: {e}"))
        }));
        self.runner.try_run(spec).map_err(Error::from)
    }
}

/// The directories holding what a run's view masks, binds or pins, each with those names:
/// a replacement there from outside the run stops it (a mount cannot follow a name).
fn watches(root: &std::path::Path, masks: &toolgate_fs::RunMasks) -> Vec<Watch> {
    let mut by_dir: std::collections::BTreeMap<&std::path::Path, Vec<std::ffi::OsString>> =
        std::collections::BTreeMap::new();
    for path in masks
        .hidden_files
        .iter()
        .chain(&masks.hidden_dirs)
        .chain(&masks.protected)
        .chain(&masks.pinned)
        .chain(masks.redacted.iter().map(|(p, _)| p))
    {
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            by_dir.entry(parent).or_default().push(name.to_owned());
        }
    }
    by_dir
        .into_iter()
        .map(|(dir, names)| Watch {
            dir: root.join(dir),
            names,
        })
        .collect()
}

/// Why the workspace or the runner refused to resolve or perform something; mapped to a
/// status only by the adapters (`crate::wire::status`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The workspace refused or failed the path or operation.
    #[error(transparent)]
    Fs(#[from] toolgate_fs::Error),
    /// The runner refused the run (limits, profile, capacity) or could not start it.
    #[error(transparent)]
    Runner(#[from] toolgate_process::runner::Error),
    /// The proof does not say which paths the policy hides: nothing is revealed or run.
    #[error(transparent)]
    HiddenUnknown(#[from] HiddenUnknown),
    /// The blocking task of a filesystem operation panicked.
    #[error("filesystem operation panicked: {0}")]
    Panicked(String),
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        match self {
            Error::Fs(e) => e.reason(),
            Error::Runner(e) => e.reason(),
            Error::HiddenUnknown(e) => e.reason(),
            Error::Panicked(_) => Reason::Internal,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::Fs(e) => e.metadata(),
            Error::Runner(e) => e.metadata(),
            Error::HiddenUnknown(e) => e.metadata(),
            Error::Panicked(_) => Vec::new(),
        }
    }
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T, F>(f: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, toolgate_fs::Error> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::Fs(e)),
        Err(join) => Err(Error::Panicked(join.to_string())),
    }
}
