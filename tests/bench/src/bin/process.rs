//! Process runs (`toolgate-process`), each against a baseline measured in the same run:
//!
//! 1. `/bin/true` round trip: a raw spawn+wait with the *same* isolation (new PID namespace,
//!    private /proc, rlimits, cleared environment, no sandbox profile) vs a full
//!    `Runner::try_run` drained to its `Exited` event. Goal: p50 ratio ≤ 1.1 (the brief's library goal).
//!
//!    The same run under the default sandbox profile (user, PID, mount, IPC, UTS and network
//!    namespaces, the view, Landlock, seccomp, no capabilities) vs a bare `/bin/true`
//!    spawn+wait and vs bubblewrap with a comparable profile. Goals: p50 ≤ 0.35 × bwrap's p50,
//!    and ≤ 2 × the bare spawn's p50.
//!
//!    1c. The sandboxed run with its per-run cgroup (memory, pids and cpu limits) vs the same
//!    runner without one, interleaved. Goal: ≤ 150 µs added at p50. Also the CPU time a run
//!    costs with and without (blocks of runs per side), which a loaded machine moves less.
//! 2. Throughput of `head -c 1G /dev/zero`: a raw 64 KiB pipe reader vs the event stream with a
//!    cap above 1 GiB (every byte delivered live). Goal: ≥ 0.8.
//! 3. Peak RSS (VmHWM) of a fresh copy of this program draining a 10 MiB flood vs a 10 GiB flood
//!    under the default caps. Goal: ≤ 1.1.
//!
//! `cargo run --release -p toolgate-bench --bin process [run] [sandbox] [cgroup] [stream] [rss]`
//! (no argument: every section); `TOOLGATE_BENCH_SAMPLES` sets the number of runs per side.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use toolgate_bench::{
    Goal, Samples, TICK, cpu_ticks, heading, interleave, print_side, report_ratio, sample_count,
    wanted,
};
use toolgate_process::{Config, Event, RunRequest, RunSpec, Runner, Status};

const RSS_CHILD: &str = "--rss-child";

fn cwd() -> OwnedFd {
    std::fs::File::open(std::env::temp_dir())
        .expect("open the temp dir")
        .into()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Runs `req` to completion and returns (live bytes, final status).
async fn drain(runner: &Runner, req: RunRequest) -> (u64, Status) {
    let mut run = runner
        .try_run(RunSpec::try_from(req).expect("valid request"))
        .expect("admitted");
    let mut bytes = 0;
    let mut status = None;
    while let Some(ev) = run.recv().await {
        match ev {
            Event::Output(o) => bytes += o.data.len() as u64,
            Event::Exited(e) => status = Some(e.status),
            Event::Started(_) => {}
        }
    }
    (bytes, status.expect("exited"))
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM present")
}

/// Child mode: drain one flood of `size` bytes through a default-capped run, print VmHWM.
fn rss_child(size: &str) {
    let rt = runtime();
    let runner = Runner::new(Config::default()).expect("runner");
    let (_, status) = rt.block_on(drain(
        &runner,
        RunRequest::argv(["head", "-c", size, "/dev/zero"], cwd()),
    ));
    assert_eq!(status, Status::Exited(0), "flood run failed");
    println!("{}", vm_hwm_kib());
}

fn rss_of(size: &str) -> u64 {
    let exe = std::env::current_exe().expect("own path");
    let out = std::process::Command::new(exe)
        .args([RSS_CHILD, size])
        .output()
        .expect("spawn the rss child");
    assert!(out.status.success(), "rss child failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("rss child prints VmHWM")
}

/// Scenario 1b: three sides, interleaved in rotating order.
fn sandbox_vs_bwrap(runner: &Runner, rt: &tokio::runtime::Runtime, n: usize) {
    heading("Run([\"/bin/true\"]) under the default sandbox profile vs bare spawn vs bubblewrap");
    let ws = tempfile::tempdir().expect("workspace");
    let ws_path = std::fs::canonicalize(ws.path()).expect("canonical workspace");
    let ws_s = ws_path.to_str().expect("utf-8 temp path").to_owned();
    let Some(bwrap) = ["/usr/bin/bwrap", "/bin/bwrap"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        println!("  bubblewrap is not installed (apt-get install bubblewrap); skipping 1b");
        return;
    };
    let mut bwrap_args: Vec<String> = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
    ]
    .map(str::to_owned)
    .to_vec();
    for link in ["bin", "sbin", "lib", "lib64"] {
        let host = std::path::Path::new("/").join(link);
        if let Ok(target) = std::fs::read_link(&host) {
            bwrap_args.extend([
                "--symlink".to_owned(),
                target.display().to_string(),
                host.display().to_string(),
            ]);
        }
    }
    bwrap_args.extend(
        [
            "--tmpfs",
            "/tmp",
            "--bind",
            &ws_s,
            &ws_s,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--chdir",
            &ws_s,
            "/bin/true",
        ]
        .map(str::to_owned),
    );
    let bare = || {
        let st = std::process::Command::new("/bin/true")
            .status()
            .expect("spawn /bin/true");
        assert!(st.success());
    };
    let bw = || {
        let st = std::process::Command::new(bwrap)
            .args(&bwrap_args)
            .status()
            .expect("spawn bwrap");
        assert!(st.success(), "bwrap failed: {bwrap_args:?}");
    };
    let ours = || {
        let r = runner.clone();
        let cwd: OwnedFd = std::fs::File::open(&ws_path).expect("open ws").into();
        let (_, status) = rt
            .block_on(
                rt.spawn(async move { drain(&r, RunRequest::argv(["/bin/true"], cwd)).await }),
            )
            .expect("run task");
        assert_eq!(status, Status::Exited(0));
    };
    let sides: [&dyn Fn(); 3] = [&bare, &bw, &ours];
    for _ in 0..50 {
        for side in sides {
            side();
        }
    }
    let mut samples = [Samples::default(), Samples::default(), Samples::default()];
    for i in 0..n {
        for k in 0..3 {
            let j = (i + k) % 3;
            let t = Instant::now();
            sides[j]();
            samples[j].push(t.elapsed());
        }
    }
    let [bare_s, bwrap_s, ours_s] = samples;
    print_side("bare spawn+wait of /bin/true", &bare_s);
    print_side("bwrap --unshare-all, comparable view", &bwrap_s);
    print_side("Runner::try_run, default profile", &ours_s);
    report_ratio(
        "sandboxed_vs_bwrap_p50",
        ours_s.p50().as_secs_f64() / bwrap_s.p50().as_secs_f64(),
        Goal::AtMost(0.35),
    );
    let added = ours_s.p50().saturating_sub(bare_s.p50());
    println!(
        "  sandbox adds {} over a bare spawn at p50",
        toolgate_bench::fmt_duration(added)
    );
    report_ratio(
        "sandboxed_vs_bare_p50",
        ours_s.p50().as_secs_f64() / bare_s.p50().as_secs_f64(),
        Goal::AtMost(2.0),
    );
}

/// Scenario 1c: sandboxed `/bin/true` with and without the per-run limits cgroup.
fn cgroup_cost(rt: &tokio::runtime::Runtime, n: usize) {
    heading("sandboxed Run([\"/bin/true\"]) with its per-run cgroup vs without");
    let with = Runner::new(Config::default()).expect("runner with cgroups");
    let without = Runner::new(Config {
        use_cgroup: false,
        require_limits: false,
        ..Config::default()
    })
    .expect("runner without cgroups");
    let enforced = rt.block_on(async {
        let mut run = with
            .try_run(RunSpec::try_from(RunRequest::argv(["/bin/true"], cwd())).expect("valid"))
            .expect("admitted");
        let mut enforced = None;
        while let Some(ev) = run.recv().await {
            if let Event::Started(s) = ev {
                enforced = Some(s.isolation.limits.enforced);
            }
        }
        enforced.expect("started")
    });
    if !enforced.is_cgroup() {
        println!(
            "  no delegated cgroup here (limits: {}); skipping 1c",
            enforced.as_str()
        );
        return;
    }
    println!("  limits enforced by {}", enforced.as_str());
    let one = |runner: &Runner| {
        let r = runner.clone();
        let (_, status) = rt
            .block_on(
                rt.spawn(async move { drain(&r, RunRequest::argv(["/bin/true"], cwd())).await }),
            )
            .expect("run task");
        assert_eq!(status, Status::Exited(0));
    };
    let (bare, limited) = interleave(n, 50, || one(&without), || one(&with));
    print_side("sandboxed, no cgroup", &bare);
    print_side("sandboxed, per-run cgroup", &limited);
    let added = limited.p50().as_secs_f64() - bare.p50().as_secs_f64();
    println!(
        "  the cgroup adds {:.0} µs at p50 (goal ≤ 150 µs); with/without p50 = {:.3}",
        added * 1e6,
        limited.p50().as_secs_f64() / bare.p50().as_secs_f64()
    );
    // What the cgroup costs in CPU, whatever the machine's load does to the latencies above:
    // blocks of runs on each side (work a run leaves behind, its cgroup's release or the next
    // spare, would land in the other side's samples if interleaved), alternated twice.
    let (mut ticks_without, mut ticks_with) = (0, 0);
    for _ in 0..2 {
        for (runner, ticks) in [(&without, &mut ticks_without), (&with, &mut ticks_with)] {
            let start = cpu_ticks();
            for _ in 0..n {
                one(runner);
            }
            // The last run's release, on the runtime's threads.
            std::thread::sleep(Duration::from_millis(100));
            *ticks += cpu_ticks() - start;
        }
    }
    let per_run = |ticks: u64| TICK * u32::try_from(ticks).unwrap_or(u32::MAX) / (2 * n as u32);
    println!(
        "  CPU per run (this process and its runs, 2 blocks of {n} each): no cgroup {:.0} µs, per-run cgroup {:.0} µs; the cgroup costs {:.0} µs of CPU",
        per_run(ticks_without).as_secs_f64() * 1e6,
        per_run(ticks_with).as_secs_f64() * 1e6,
        (per_run(ticks_with).as_secs_f64() - per_run(ticks_without).as_secs_f64()) * 1e6
    );
    report_ratio(
        "cgroup_added_p50 (÷ 150 µs)",
        added / 150e-6,
        Goal::AtMost(1.0),
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(RSS_CHILD) {
        rss_child(&args[2]);
        return;
    }

    let rt = runtime();
    // Scenario 1 compares like with like: no sandbox profile on either side.
    // The raw baseline joins no cgroup, so neither does this side; 1c measures the cgroup.
    let config = Config {
        max_cap_bytes: 2 << 30,
        sandbox: toolgate_process::SandboxConfig::unconfined(),
        use_cgroup: false,
        require_limits: false,
        ..Config::default()
    };
    let runner = Runner::new(config).expect("runner");
    let sandboxed = Runner::new(Config {
        max_cap_bytes: 2 << 30,
        ..Config::default()
    })
    .expect("sandboxed runner");
    let caps = runner.capabilities();
    println!(
        "kill mechanism: {} (pid_max cap {:?}), namespaces: pid={} mount={}",
        caps.kill_mechanism.as_str(),
        caps.pid_limit,
        caps.namespaces.pid,
        caps.namespaces.mount
    );

    // 1. /bin/true round trip, on both runtime flavours: the current-thread one shows the
    // library's own cost; the multi-thread one adds the cross-thread wake-ups of handing the run
    // to a worker and the result back to this (blocking) thread, as a server would.
    let n = sample_count(2000);
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let flavours = [("current-thread", &current), ("multi-thread(2)", &rt)];
    for (flavour, rt) in flavours.into_iter().filter(|_| wanted("run")) {
        heading(&format!(
            "Run([\"/bin/true\"]) vs raw spawn+wait with the same isolation, {flavour} runtime"
        ));
        let (raw, full) = interleave(
            n,
            50,
            || {
                let mut child = runner
                    .spawn_baseline(&["/bin/true"], cwd(), false)
                    .expect("raw spawn");
                assert_eq!(child.wait().expect("wait"), Some(0));
            },
            || {
                // Like a gRPC handler, the caller is a task on the runtime.
                let r = runner.clone();
                let (_, status) = rt
                    .block_on(rt.spawn(async move {
                        drain(&r, RunRequest::argv(["/bin/true"], cwd())).await
                    }))
                    .expect("run task");
                assert_eq!(status, Status::Exited(0));
            },
        );
        print_side("raw spawn+wait (pidns, /proc, rlimits, env)", &raw);
        print_side("Runner::try_run drained to Exited", &full);
        report_ratio(
            &format!("true_p50[{flavour}]"),
            full.p50().as_secs_f64() / raw.p50().as_secs_f64(),
            Goal::AtMost(1.1),
        );
    }

    // 1b. The default sandbox profile against a bare spawn and against bubblewrap.
    if wanted("sandbox") {
        sandbox_vs_bwrap(&sandboxed, &rt, n);
    }

    // 1c. What the per-run cgroup adds to a sandboxed run.
    if wanted("cgroup") {
        cgroup_cost(&rt, n);
    }

    if wanted("stream") {
        stream(&runner, &rt);
    }
    if wanted("rss") {
        flood_rss();
    }
}

/// Scenario 2: streaming throughput.
fn stream(runner: &Runner, rt: &tokio::runtime::Runtime) {
    heading("head -c 1G /dev/zero: raw pipe read vs event stream");
    let size: u64 = 1 << 30;
    let rounds = sample_count(2000).clamp(3, 7);
    let mut raw_t = Samples::default();
    let mut ours_t = Samples::default();
    for i in 0..rounds * 2 {
        if (i % 2 == 0) == (i / 2 % 2 == 0) {
            let t = Instant::now();
            let mut child = runner
                .spawn_baseline(&["head", "-c", "1G", "/dev/zero"], cwd(), true)
                .expect("raw spawn");
            let mut out = child.stdout.take().expect("stdout pipe");
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0u64;
            loop {
                let n = out.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            child.wait().expect("wait");
            assert_eq!(total, size);
            raw_t.push(t.elapsed());
        } else {
            let t = Instant::now();
            let mut req = RunRequest::argv(["head", "-c", "1G", "/dev/zero"], cwd());
            req.stdout_cap = Some(size + 1);
            // The consumer is a task on the runtime, as a gRPC response stream would be.
            let r = runner.clone();
            let (bytes, status) = rt
                .block_on(rt.spawn(async move { drain(&r, req).await }))
                .expect("drain task");
            assert_eq!((bytes, status), (size, Status::Exited(0)));
            ours_t.push(t.elapsed());
        }
    }
    let gib_s = |d: Duration| size as f64 / d.as_secs_f64() / (1u64 << 30) as f64;
    print_side("raw pipe reader (64 KiB reads)", &raw_t);
    print_side("event stream (Output events)", &ours_t);
    println!(
        "  throughput: raw {:.2} GiB/s, stream {:.2} GiB/s",
        gib_s(raw_t.p50()),
        gib_s(ours_t.p50())
    );
    report_ratio(
        "stream_throughput",
        raw_t.p50().as_secs_f64() / ours_t.p50().as_secs_f64(),
        Goal::AtLeast(0.8),
    );
}

/// Scenario 3: peak RSS under a flood, each measured in a fresh process.
fn flood_rss() {
    heading("peak RSS draining 10 MiB vs 10 GiB (default caps), fresh process each");
    let pairs = 3;
    let (mut small, mut big) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        if i % 2 == 0 {
            small.push(rss_of("10M") as f64);
            big.push(rss_of("10G") as f64);
        } else {
            big.push(rss_of("10G") as f64);
            small.push(rss_of("10M") as f64);
        }
    }
    println!("  VmHWM 10 MiB flood: {small:?} KiB");
    println!("  VmHWM 10 GiB flood: {big:?} KiB");
    report_ratio("flood_rss", median(big) / median(small), Goal::AtMost(1.1));
}
