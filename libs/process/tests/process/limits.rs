//! Resource limits of runs: a run that allocates, forks, spins or fills its tmpfs stops at its
//! own limits and says which one it hit; without a delegated cgroup, `require_limits` refuses.

use std::time::Duration;

use toolgate_core::{Reason, ReasonedError};
use toolgate_process::{
    Config, KillMechanism, LimitExceeded, LimitsEnforced, ResourceLimits, RunRequest, Runner,
    SandboxConfig,
};

use crate::common::{collect, config, spec, workspace};

const PY: &str = "/usr/bin/python3";

fn limited(limits: ResourceLimits) -> Config {
    Config { limits, ..config() }
}

fn small() -> ResourceLimits {
    ResourceLimits {
        memory_bytes: 256 << 20,
        pids: 32,
        cpu_millicores: 200,
    }
}

async fn python(runner: &Runner, code: &str) -> crate::common::Outcome {
    let (_ws, cwd) = workspace();
    collect(
        runner
            .try_run(spec(RunRequest::argv([PY, "-c", code], cwd)))
            .expect("admitted"),
    )
    .await
}

/// The limits are those of a cgroup on this host (root, delegated v1 or v2 hierarchies).
fn assert_cgroup(out: &crate::common::Outcome) {
    let limits = out.started.as_ref().expect("started").isolation.limits;
    assert!(
        limits.enforced.is_cgroup(),
        "a per-run cgroup enforces the limits: {limits:?}"
    );
}

#[tokio::test]
async fn a_run_allocating_2_gib_under_256_mib_is_oom_killed() {
    let runner = Runner::new(limited(small())).unwrap();
    let out = python(&runner, "s = b'x' * (2 << 30)\nprint('allocated', len(s))").await;
    assert_cgroup(&out);
    assert!(
        !out.stdout_str().contains("allocated"),
        "the allocation must not succeed: {}",
        out.stdout_str()
    );
    let e = &out.exited;
    assert!(e.usage.oom_killed, "oom_killed: {e:?}");
    assert_eq!(
        e.limit,
        Some(LimitExceeded::Memory {
            limit_bytes: 256 << 20
        })
    );
    assert!(
        e.usage.peak_memory_bytes <= 256 << 20 && e.usage.peak_memory_bytes > 64 << 20,
        "peak {}",
        e.usage.peak_memory_bytes
    );
    assert_eq!(
        e.limit.unwrap().message(),
        "the run exceeded its 256 MiB memory limit and was killed by the kernel"
    );
    // The next run may get the same cgroup back once it is emptied: the OOM kill and the
    // peak are not its own.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let next = python(&runner, "print('fine')").await;
    assert_eq!(next.stdout_str().trim(), "fine");
    let e = &next.exited;
    assert!(!e.usage.oom_killed, "{e:?}");
    assert_eq!(e.limit, None);
    assert!(e.usage.peak_memory_bytes < 64 << 20, "{e:?}");
    // What makes that safe: a sandboxed run cannot change its cgroup for the next one.
    let tamper = python(
        &runner,
        &format!("try:\n    {}\n    open(f, 'w').write('4321')\n    print('written')\nexcept Exception as e:\n    print('refused', type(e).__name__)", PIDS_MAX.replace('\n', "\n    ")),
    )
    .await;
    assert!(
        tamper.stdout_str().starts_with("refused"),
        "{}",
        tamper.stdout_str()
    );
}

#[tokio::test]
async fn an_unconfined_run_is_held_to_its_memory_limit_too() {
    let runner = Runner::new(Config {
        sandbox: SandboxConfig::unconfined(),
        ..limited(small())
    })
    .unwrap();
    let out = python(&runner, "s = b'x' * (1 << 30)\nprint('allocated')").await;
    assert_cgroup(&out);
    assert!(out.exited.usage.oom_killed, "{:?}", out.exited);

    // A run that leaves its cgroup as it was made hands it on: a later run (once the release,
    // which follows `Exited`, is done) is in the same cgroup.
    let mut seen = std::collections::HashSet::new();
    let mut shared = false;
    for _ in 0..20 {
        let out = python(&runner, &format!("{PIDS_MAX}\nprint(f)")).await;
        if !seen.insert(out.stdout_str().trim().to_owned()) {
            shared = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(shared, "every run had a cgroup of its own: {seen:?}");

    // An unconfined run runs as the executor's user, which owns its cgroup's files: what it
    // changes there must not reach a later run (a changed cgroup is never used again).
    let tampered = python(
        &runner,
        &format!("{PIDS_MAX}\nopen(f, 'w').write('4321')\nprint(open(f).read().strip())"),
    )
    .await;
    let raised = tampered.stdout_str().trim().to_owned();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let next = python(
        &runner,
        &format!("{PIDS_MAX}\nprint(open(f).read().strip())"),
    )
    .await;
    if raised == "4321" {
        assert_eq!(next.stdout_str().trim(), "32", "the next run's pids.max");
    } else {
        eprintln!(
            "this run could not write its own cgroup ({}); nothing more to test",
            String::from_utf8_lossy(&tampered.stderr)
        );
    }
}

/// Python setting `f` to the run's own `pids.max` (v1 `pids` hierarchy, else v2).
const PIDS_MAX: &str = "lines = [l.split(':', 2) for l in open('/proc/self/cgroup').read().splitlines()]\n\
v1 = [p for _, c, p in lines if c == 'pids']\n\
f = '/sys/fs/cgroup/pids' + v1[0] + '/pids.max' if v1 else '/sys/fs/cgroup' + [p for i, _, p in lines if i == '0'][0] + '/pids.max'";

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit() {
    let runner = Runner::new(limited(small())).unwrap();
    let out = python(
        &runner,
        "import os, time\n\
         n = 0\n\
         for _ in range(200):\n\
         \x20   try:\n\
         \x20       pid = os.fork()\n\
         \x20   except OSError:\n\
         \x20       break\n\
         \x20   if pid == 0:\n\
         \x20       time.sleep(30)\n\
         \x20       os._exit(0)\n\
         \x20   n += 1\n\
         print(n)",
    )
    .await;
    assert_cgroup(&out);
    let forked: u32 = out.stdout_str().trim().parse().expect("a count");
    assert!(forked < 32, "{forked} processes beside the run's own");
    assert_eq!(out.exited.limit, Some(LimitExceeded::Pids { limit: 32 }));
    assert!(
        out.elapsed < Duration::from_secs(10),
        "the run's processes died with it"
    );
}

#[tokio::test]
async fn a_cpu_spinner_is_throttled_to_its_share() {
    let runner = Runner::new(limited(small())).unwrap();
    // Spins until it has had 0.4 s of CPU, then says how long that took. At 0.2 of a core
    // (20 ms per 100 ms period) that needs at least 19 periods after the first burst: about
    // 2 s of wall time, on a quiet machine as on a loaded one (load only makes it longer);
    // without the limit it takes 0.4 s on a quiet machine.
    let out = python(
        &runner,
        "import time\nt = time.monotonic()\nwhile time.process_time() < 0.4: pass\nprint(time.monotonic() - t)",
    )
    .await;
    assert_cgroup(&out);
    let wall: f64 = out
        .stdout_str()
        .trim()
        .parse()
        .expect("the spinner's wall time");
    eprintln!(
        "0.4 s of CPU took {wall:.2} s of wall time, throttled {:?}",
        out.exited.usage.cpu_throttled
    );
    assert!(
        wall >= 1.5,
        "0.4 s of CPU in {wall:.2} s: the 0.2 core limit did not hold"
    );
    assert_eq!(out.exited.limit, None);
}

/// The cgroup path of `controller` ("" for the v2 line) in a `/proc/<pid>/cgroup` text.
fn cgroup_of<'a>(text: &'a str, controller: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_id, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() {
            list.is_empty()
        } else {
            list.split(',').any(|c| c == controller)
        };
        hit.then_some(path)
    })
}

#[tokio::test]
async fn every_process_of_a_run_is_in_its_cgroups() {
    let runner = Runner::new(limited(small())).unwrap();
    let (_ws, cwd) = workspace();
    // `cat` is the shell's child: a descendant, forked after the join.
    let out = collect(
        runner
            .try_run(spec(RunRequest::script("cat /proc/self/cgroup", cwd)))
            .expect("admitted"),
    )
    .await;
    assert_cgroup(&out);
    let text = out.stdout_str();
    let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let enforced = out.started.unwrap().isolation.limits.enforced;
    let controllers: &[&str] = if enforced == LimitsEnforced::CgroupV1 {
        &["memory", "pids"]
    } else {
        &[""]
    };
    for c in controllers {
        let run = cgroup_of(&text, c).unwrap_or_else(|| panic!("no {c:?} line in {text}"));
        let name = run.rsplit('/').next().unwrap_or_default();
        assert!(
            name.starts_with("toolgate-run-"),
            "{c:?}: the run is in {run}, not in a run cgroup"
        );
        assert_ne!(
            cgroup_of(&ours, c),
            Some(run),
            "the executor itself never joins a run's cgroup"
        );
    }
}

#[tokio::test]
async fn a_run_holds_no_descriptor_of_its_cgroups() {
    // Sandboxed (the limits cgroup), and unconfined without a PID namespace, where the run also
    // gets the v2 cgroup `cgroup.kill` ends: it is born in that one (`CLONE_INTO_CGROUP`).
    let sandboxed = Runner::new(limited(small())).unwrap();
    let unconfined = Runner::new(Config {
        use_pid_namespace: false,
        sandbox: SandboxConfig::unconfined(),
        ..limited(small())
    })
    .unwrap();
    let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for runner in [&sandboxed, &unconfined] {
        let (_ws, cwd) = workspace();
        let out = collect(
            runner
                .try_run(spec(RunRequest::script(
                    "ls -l /proc/$$/fd; cat /proc/self/cgroup",
                    cwd,
                )))
                .expect("admitted"),
        )
        .await;
        assert_cgroup(&out);
        let text = out.stdout_str();
        assert!(text.contains(" 0 -> "), "{text}");
        assert!(
            !text.contains("cgroup.procs") && !text.contains("/tasks") && !text.contains("cgroup/"),
            "a run holds a cgroup descriptor:\n{text}"
        );
        let started = out.started.unwrap();
        if started.isolation.kill_mechanism == KillMechanism::Cgroup {
            let run = cgroup_of(&text, "").expect("a v2 line");
            assert!(
                run.rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .starts_with("toolgate-run-"),
                "the run is in {run}, not in its kill cgroup"
            );
            assert_ne!(cgroup_of(&ours, ""), Some(run), "the executor joined it");
        }
    }
}

#[tokio::test]
async fn a_million_files_in_tmp_stop_at_the_inode_limit() {
    let runner = Runner::new(Config {
        sandbox: SandboxConfig {
            tmpfs_inodes: 2000,
            ..SandboxConfig::default()
        },
        ..config()
    })
    .unwrap();
    let out = python(
        &runner,
        "import os\n\
         n = 0\n\
         try:\n\
         \x20   for i in range(1000000):\n\
         \x20       open(f'/tmp/f{i}', 'w').close()\n\
         \x20       n += 1\n\
         except OSError as e:\n\
         \x20   print(n, e.errno)",
    )
    .await;
    let text = out.stdout_str();
    let (n, errno) = text.trim().split_once(' ').expect("stopped by an error");
    assert!(n.parse::<u32>().unwrap() < 2000, "{text}");
    assert_eq!(errno, libc::ENOSPC.to_string());
    let limits = out.started.unwrap().isolation.limits;
    assert_eq!(limits.tmpfs_inodes, Some(2000));
}

#[tokio::test]
async fn without_a_cgroup_required_limits_refuse_the_run() {
    let runner = Runner::new(Config {
        use_cgroup: false,
        ..config()
    })
    .unwrap();
    let (_ws, cwd) = workspace();
    let err = runner
        .try_run(spec(RunRequest::argv(["true"], cwd)))
        .expect_err("refused");
    assert_eq!(err.reason(), Reason::SandboxUnavailable);
    assert!(
        err.to_string()
            .contains("resource limits cannot be enforced"),
        "{err}"
    );
}

#[tokio::test]
async fn without_a_cgroup_the_fallbacks_are_reported() {
    let runner = Runner::new(Config {
        use_cgroup: false,
        require_limits: false,
        ..config()
    })
    .unwrap();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.timeout = Some(Duration::from_secs(10));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    let limits = out.started.unwrap().isolation.limits;
    assert_eq!(limits.enforced, LimitsEnforced::Rlimit);
    assert_eq!(limits.memory_bytes, None);
    // RLIMIT_CPU worth the timeout at the run's CPU share (one core by default).
    assert_eq!(limits.cpu_seconds, Some(10));
    assert!(limits.tmpfs_inodes.is_some());
}

#[tokio::test]
async fn a_profile_carries_its_own_limits_and_timeout_ceiling() {
    let mut sandbox = SandboxConfig::default();
    let mut build = toolgate_process::Profile::workspace();
    build.limits = toolgate_process::ProfileLimits {
        memory_bytes: Some(512 << 20),
        max_timeout: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    sandbox.profiles.insert("build".to_owned(), build);
    let runner = Runner::new(Config {
        sandbox,
        ..limited(small())
    })
    .unwrap();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.profile = "build".to_owned();
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    let limits = out.started.unwrap().isolation.limits;
    assert_eq!(limits.memory_bytes, Some(512 << 20));
    assert_eq!(
        limits.pids,
        Some(32),
        "what the profile leaves stays configured"
    );

    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.profile = "build".to_owned();
    req.timeout = Some(Duration::from_secs(60));
    let err = runner.try_run(spec(req)).expect_err("above the ceiling");
    assert_eq!(err.reason(), Reason::InvalidRequest);
    assert!(err.to_string().contains("timeout"), "{err}");
}
