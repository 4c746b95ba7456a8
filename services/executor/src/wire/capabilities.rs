//! `GetCapabilities` on the wire: what this executor can do and the bounds it enforces.

use toolgate_contracts::executor::v1 as pb;
use toolgate_core::ToolKind;
use toolgate_process::Capabilities;

use super::run::{duration, kill_mechanism};
use toolgate_core::ExecutorIdentity;

/// What `GetCapabilities` reports, gathered from the executor's parts.
pub(crate) struct Offered<'a> {
    /// This executor.
    pub identity: &'a ExecutorIdentity,
    /// What the runner can do on this host.
    pub capabilities: &'a Capabilities,
    /// The run memory budget and its shares.
    pub admission: &'a crate::admission::Settings,
    /// Bytes and files one run may add to the workspace (0: no budget).
    pub disk: (u64, u64),
    /// The sessions' bounds.
    pub sessions: crate::session::Settings,
    /// The background runs' bounds.
    pub runs: crate::runs::Settings,
    /// What the workspace looks like to a caller.
    pub workspace: &'a pb::WorkspaceView,
}

/// The `GetCapabilities` answer for `o`.
pub(crate) fn response(o: &Offered<'_>) -> pb::GetCapabilitiesResponse {
    let c = o.capabilities;
    let l = &c.limits;
    let a = o.admission;
    let (disk_bytes, disk_files) = o.disk;
    pb::GetCapabilitiesResponse {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        identity: Some(toolgate_contracts::convert::identity_to_wire(
            o.identity.clone(),
        )),
        namespaces: Some(pb::Namespaces {
            user: c.namespaces.user,
            pid: c.namespaces.pid,
            net: c.namespaces.net,
            mount: c.namespaces.mount,
        }),
        landlock_abi: c.landlock_abi,
        seccomp: c.seccomp,
        cgroup: Some(pb::CgroupSupport {
            available: c.cgroup.available,
            writable: c.cgroup.writable,
            mount_point: c
                .cgroup
                .mount_point
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        }),
        kill_mechanism: kill_mechanism(c.kill_mechanism) as i32,
        limits: Some(pb::RunLimitsView {
            default_timeout: Some(duration(l.default_timeout)),
            max_timeout: Some(duration(l.max_timeout)),
            kill_grace: Some(duration(l.kill_grace)),
            default_cap_bytes: l.default_cap_bytes,
            max_cap_bytes: l.max_cap_bytes,
            default_tail_bytes: l.default_tail_bytes,
            max_concurrent_runs: l.max_concurrent_runs,
            rlimits: l
                .rlimits
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            allowed_env: l.allowed_env.clone(),
            runs_memory_bytes: a.budget_bytes,
            default_run_reservation_bytes: a.default_reservation,
            queue_length: u32::try_from(a.queue_length).unwrap_or(u32::MAX),
            queue_wait: Some(duration(a.queue_wait)),
            session_share: a.session_share,
            principal_share: a.principal_share,
            reserve_share: a.reserve_share,
            disk_max_written_bytes: disk_bytes,
            disk_max_created_files: disk_files,
            session_idle_timeout: Some(duration(o.sessions.idle_timeout)),
            max_background_per_session: o.runs.per_session,
            max_background_per_principal: o.runs.per_principal,
            finished_retention: Some(duration(o.runs.retention)),
        }),
        workspace: Some(o.workspace.clone()),
        // `net.connect` included: this executor's egress gate decides networked runs'
        // connections through the policy.
        tools: ToolKind::ALL
            .iter()
            .map(|k| toolgate_contracts::convert::tool_to_wire(*k) as i32)
            .collect(),
        sandbox_profiles: c
            .profiles
            .iter()
            .map(|p| pb::SandboxProfile {
                name: p.name.clone(),
                available: p.available.is_ok(),
                missing: p.available.clone().err().unwrap_or_default(),
                network: p.network,
                unconfined: p.unconfined,
                landlock_abi: p.available.clone().unwrap_or(0),
            })
            .collect(),
        default_sandbox_profile: c.default_profile.clone(),
        require_sandbox: c.require_sandbox,
    }
}
