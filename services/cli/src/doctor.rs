//! `toolgate doctor`: what this machine can enforce, and the escape self-test.

use std::path::PathBuf;

use anyhow::Context;

use crate::client::Exit;
use crate::up::SandboxArgs;

/// Arguments of `toolgate doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The workspace runs would be confined to (only its path is used).
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
    /// An executor configuration file to check instead of `up`'s defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Probes the kernel, starts a runner (which runs the escape self-test under every confined
/// profile in a throwaway workspace) and reports. Exits 1 if the default profile cannot be
/// enforced or any escape succeeded.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut cfg: toolgate_executor::Config = match &args.config {
        Some(file) => toolgate_runtime::config::load(&toolgate_runtime::config::Sources {
            file: Some(file),
            section: None,
            env: std::env::vars().collect(),
            overrides: Vec::new(),
        })?,
        None => crate::up::executor_config(None, std::env::vars().collect())?,
    };
    cfg.workspace.root = std::fs::canonicalize(&args.workspace)
        .with_context(|| format!("workspace {}", args.workspace.display()))?;
    if args.config.is_none() {
        args.sandbox.apply(&mut cfg);
    }
    let process = cfg.process_config().map_err(|e| anyhow::anyhow!("{e}"))?;
    let runner = toolgate_process::Runner::new(process).context("cannot start a runner")?;
    let caps = runner.capabilities();
    let budget = toolgate_executor::admission_settings(&cfg, &runner);
    let disk = &cfg.process.disk;
    let escapes: Vec<_> = runner
        .escape_checks()
        .iter()
        .filter(|c| c.escaped.is_some())
        .collect();
    let default_ok = caps
        .profiles
        .iter()
        .any(|p| p.name == caps.default_profile && p.available.is_ok());
    if args.json {
        let profiles: Vec<_> = caps
            .profiles
            .iter()
            .map(|p| {
                serde_json::json!({
                    "name": p.name,
                    "available": p.available.is_ok(),
                    "missing": p.available.as_ref().err(),
                    "network": p.network,
                    "unconfined": p.unconfined,
                })
            })
            .collect();
        let checks: Vec<_> = runner
            .escape_checks()
            .iter()
            .map(|c| serde_json::json!({"profile": c.profile, "check": c.name, "escaped": c.escaped}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "namespaces": {
                    "user": caps.namespaces.user, "pid": caps.namespaces.pid,
                    "net": caps.namespaces.net, "mount": caps.namespaces.mount,
                },
                "landlock_abi": caps.landlock_abi,
                "seccomp": caps.seccomp,
                "cgroup_writable": caps.cgroup.writable,
                "default_profile": caps.default_profile,
                "require_sandbox": caps.require_sandbox,
                "limits_enforced": caps.limits_enforced.as_ref().map_or("none", |l| l.as_str()),
                "limits_missing": caps.limits_enforced.as_ref().err(),
                "require_limits": caps.require_limits,
                "admission": {
                    "slots": budget.slots,
                    "runs_memory_bytes": budget.budget_bytes,
                    "default_run_reservation_bytes": budget.default_reservation,
                    "queue_length": budget.queue_length,
                    "queue_wait_ms": budget.queue_wait.as_millis(),
                    "session_share": budget.session_share,
                    "principal_share": budget.principal_share,
                    "reserve_share": budget.reserve_share,
                },
                "disk": {
                    "max_written_bytes": disk.max_written_bytes,
                    "max_created_files": disk.max_created_files,
                    "sample_interval_ms": disk.sample_interval_ms,
                },
                "profiles": profiles,
                "escape_checks": checks,
                "ok": default_ok && escapes.is_empty(),
            })
        );
    } else {
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!("kernel");
        println!(
            "  namespaces   user {}, pid {}, net {}, mount {}",
            yes(caps.namespaces.user),
            yes(caps.namespaces.pid),
            yes(caps.namespaces.net),
            yes(caps.namespaces.mount)
        );
        println!("  landlock     ABI {}", caps.landlock_abi);
        println!("  seccomp      {}", yes(caps.seccomp));
        println!("  cgroup v2    writable {}", yes(caps.cgroup.writable));
        match &caps.limits_enforced {
            Ok(l) => println!("  run limits   {} (memory, pids, cpu per run)", l.as_str()),
            Err(why) => println!(
                "  run limits   NO CGROUP, {}: {why}",
                if caps.require_limits {
                    "runs are refused"
                } else {
                    "runs get pid_max, RLIMIT_CPU and tmpfs sizes only"
                }
            ),
        }
        print_budget(&budget, disk);
        println!(
            "\nprofiles (default `{}`, sandbox {})",
            caps.default_profile,
            if caps.require_sandbox {
                "required"
            } else {
                "NOT required"
            }
        );
        for p in &caps.profiles {
            match &p.available {
                Ok(_) if p.unconfined => {
                    println!("  {:<12} UNCONFINED (operator's choice)", p.name);
                }
                Ok(abi) => println!(
                    "  {:<12} enforced (landlock ABI {abi}, network {})",
                    p.name,
                    yes(p.network)
                ),
                Err(missing) => println!("  {:<12} UNAVAILABLE: needs {missing}", p.name),
            }
        }
        let tried = runner.escape_checks().len();
        println!("\nescape self-test: {tried} attempts");
        for c in runner.escape_checks() {
            let verdict = match &c.escaped {
                None => "blocked".to_owned(),
                Some(what) => format!("ESCAPED: {what}"),
            };
            println!("  [{}] {:<28} {verdict}", c.profile, c.name);
        }
        println!(
            "\n{}",
            if default_ok && escapes.is_empty() {
                "ok: every run is confined by the kernel"
            } else {
                "FAILED: runs would not be confined as configured"
            }
        );
    }
    if default_ok && escapes.is_empty() {
        Ok(())
    } else {
        Err(Exit(1).into())
    }
}

/// The `run budget` part of the report: how runs share this executor's memory and slots, and
/// what one run may add to the workspace.
fn print_budget(
    b: &toolgate_executor::AdmissionSettings,
    disk: &toolgate_executor::config::DiskSection,
) {
    use toolgate_process::human_bytes;
    let fit = b
        .budget_bytes
        .checked_div(b.default_reservation)
        .map_or_else(
            || "any number".to_owned(),
            |n| n.min(b.slots as u64).to_string(),
        );
    println!("\nrun budget");
    println!(
        "  memory       {} for all runs; a default run reserves {}: {fit} at once (of {} slots)",
        human_bytes(b.budget_bytes),
        human_bytes(b.default_reservation),
        b.slots
    );
    println!(
        "  queue        {} waiting at most, {} ms each; while others wait a session holds at most {:.0} %, a principal {:.0} %",
        b.queue_length,
        b.queue_wait.as_millis(),
        b.session_share * 100.0,
        b.principal_share * 100.0
    );
    let per_run = |n: u64, what: &str| {
        if n == 0 {
            format!("no {what} budget")
        } else {
            format!("{n} {what}")
        }
    };
    println!(
        "  disk         {}, {} added per run (sampled every {} ms)",
        if disk.max_written_bytes == 0 {
            "no byte budget".to_owned()
        } else {
            format!("{} written", human_bytes(disk.max_written_bytes))
        },
        per_run(disk.max_created_files, "entries"),
        disk.sample_interval_ms
    );
}
