//! Child process runs with bounded streaming output and a lifecycle that always ends.
//!
//! A [`Runner`] admits up to a configured number of concurrent runs (beyond it `try_run` fails at
//! once with `Busy`). Each [`RunSpec`] (argv, or a script for exactly `bash --noprofile --norc -c`)
//! is spawned with a cleared environment plus an allowlist, a private `HOME`, a new session (no
//! controlling terminal), `no_new_privs`, resource limits and only fds 0-2 open.
//!
//! Descendants die with the run. Where the kernel allows, the child is PID 1 of a new PID
//! namespace with a private `/proc` and a capped `pid_max`: when it exits or is killed, the kernel
//! kills every descendant, including ones that left the process group, and fork bombs hit the cap
//! even for root. Otherwise each run gets its own cgroup v2 (`cgroup.kill`), and as a last resort
//! only the process group is signalled. [`Capabilities::kill_mechanism`] says which is in force.
//!
//! Because the child is a namespace init, signals it has no handler for are not delivered to it
//! from inside its namespace, and SIGTERM from toolgate does not end it either unless it handles
//! TERM; the timeout path therefore relies on SIGKILL after the grace period for such programs.
//!
//! Runs of one agent session can share a set of namespaces that outlives each run (network,
//! IPC and `/tmp`; see [`session`]), and a run can hand back its final state on file
//! descriptor 3 ([`RunSpec::capture_state`]).
//!
//! Output arrives as [`Event`]s through a bounded channel: the head of each stream live under
//! backpressure, the rest drained into a fixed tail ring, and one final [`Exited`] with exact byte
//! counts, a typed [`Status`] and resource usage. The gRPC adapter maps these types onto
//! `toolgate.executor.v1`; nothing here knows about the wire.

pub mod blocking;
mod caps;
mod cgroup;
pub mod config;
mod egress;
mod event;
pub mod limits;
mod output;
pub mod runner;
pub mod sandbox;
pub mod session;
pub mod spec;
mod sys;
pub mod tripwire;

pub use sys::{exit_quietly_on_broken_pipe, keep_little_free_memory, release_free_memory};

pub use caps::{Capabilities, CgroupSupport, LimitsView, Namespaces, ProfileStatus};
pub use config::{Config, EnvAllow, EnvPattern, Rlimits};
pub use egress::{EgressHook, GATE_PORT, GateSockets, original_destination};
pub use event::{
    CancelCause, Event, Exited, Isolation, KillMechanism, Output, Started, Status, Stream,
    StreamSummary, Usage, signal_name,
};
pub use limits::{
    EnforcedLimits, LimitExceeded, LimitsEnforced, ProfileLimits, Reservation, ResourceLimits,
    human_bytes,
};
/// Whether this host delegates a cgroup for runs' resource limits under `config`: the
/// mechanism (`CgroupV2`/`CgroupV1`), or why not. Does the real writes and undoes them.
pub fn probe_limits(config: &Config) -> Result<LimitsEnforced, String> {
    cgroup::Hierarchy::probe(config)
}

pub use runner::{
    BaselineChild, CancelHandle, EffectiveLimits, EscapeCheck, Run, Runner, StopSignal,
};
pub use sandbox::{
    DEFAULT_PROFILE, Masks, Profile, SHIPPED_PROFILES, SandboxConfig, UNCONFINED_NAME,
};
pub use session::SessionNamespaces;
pub use spec::{Audit, Command, DiskWatch, RunRequest, RunSpec};
