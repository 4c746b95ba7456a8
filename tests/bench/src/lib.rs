//! The benchmark harness every toolgate benchmark uses.
//!
//! A benchmark is a program that prints ratios, not a timed test. Each scenario runs
//! interleaved with its baseline in the same process and the same run (A, B, A, B, ...),
//! so machine noise lands on both sides, and the report gives medians, p99 and the ratio
//! against the goal stated in the brief.

use std::time::{Duration, Instant};

pub mod classify_mix;

/// Latency samples of one side of a comparison.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<Duration>,
}

impl Samples {
    /// Adds one observation.
    pub fn push(&mut self, d: Duration) {
        self.values.push(d);
    }

    /// Number of observations.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no observation was recorded.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The `q` quantile (0.0..=1.0), nearest-rank.
    pub fn quantile(&self, q: f64) -> Duration {
        assert!(!self.values.is_empty(), "quantile of no samples");
        let mut v = self.values.clone();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// Median.
    pub fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    /// 99th percentile.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
}

/// Runs `baseline` and `scenario` alternately `n` times each after `warmup` rounds,
/// timing every call, and returns both sample sets.
pub fn interleave(
    n: usize,
    warmup: usize,
    mut baseline: impl FnMut(),
    mut scenario: impl FnMut(),
) -> (Samples, Samples) {
    for _ in 0..warmup {
        baseline();
        scenario();
    }
    let (mut a, mut b) = (Samples::default(), Samples::default());
    for i in 0..n {
        // Alternate which side goes first so neither always follows the other.
        if i % 2 == 0 {
            a.push(time(&mut baseline));
            b.push(time(&mut scenario));
        } else {
            b.push(time(&mut scenario));
            a.push(time(&mut baseline));
        }
    }
    (a, b)
}

/// [`interleave`] for async sides: runs `baseline` and `scenario` alternately `n` times each
/// after `warmup` rounds, awaiting and timing every call.
///
/// Call it from a task spawned on a multi-thread runtime (not from `block_on` on the main
/// thread), so each sample pays for what a real async client pays and not for parking and
/// waking a thread outside the runtime.
pub async fn interleave_async<A, B, FA, FB>(
    n: usize,
    warmup: usize,
    mut baseline: A,
    mut scenario: B,
) -> (Samples, Samples)
where
    A: FnMut() -> FA,
    B: FnMut() -> FB,
    FA: std::future::Future<Output = ()>,
    FB: std::future::Future<Output = ()>,
{
    for _ in 0..warmup {
        baseline().await;
        scenario().await;
    }
    let (mut a, mut b) = (Samples::default(), Samples::default());
    for i in 0..n {
        if i % 2 == 0 {
            a.push(time_async(baseline()).await);
            b.push(time_async(scenario()).await);
        } else {
            b.push(time_async(scenario()).await);
            a.push(time_async(baseline()).await);
        }
    }
    (a, b)
}

async fn time_async(f: impl std::future::Future<Output = ()>) -> Duration {
    let t = Instant::now();
    f.await;
    t.elapsed()
}

fn time(f: &mut impl FnMut()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// Formats a duration with a unit that keeps three significant digits readable.
pub fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else if ns < 1_000_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else {
        format!("{:.2} s", ns / 1_000_000_000.0)
    }
}

/// Prints one side's medians and p99.
pub fn print_side(label: &str, s: &Samples) {
    println!(
        "  {label:<44} n={:<6} p50={:>10}  p99={:>10}",
        s.len(),
        fmt_duration(s.p50()),
        fmt_duration(s.p99())
    );
}

/// How a ratio is judged against its goal.
#[derive(Debug, Clone, Copy)]
pub enum Goal {
    /// The ratio must be at most this.
    AtMost(f64),
    /// The ratio must be at least this.
    AtLeast(f64),
}

/// Prints a ratio line, `ratio <name> = <value> (goal ...) MET|MISSED`, and returns whether it met.
pub fn report_ratio(name: &str, ratio: f64, goal: Goal) -> bool {
    let (met, goal_text) = match goal {
        Goal::AtMost(g) => (ratio <= g, format!("≤ {g:.2}")),
        Goal::AtLeast(g) => (ratio >= g, format!("≥ {g:.2}")),
    };
    println!(
        "  ratio {name} = {ratio:.3} (goal {goal_text}) {}",
        if met { "MET" } else { "MISSED" }
    );
    met
}

/// Prints the heading of a scenario.
pub fn heading(scenario: &str) {
    println!("\n== {scenario}");
}

/// A multi-thread tokio runtime whose threads are named `name` (servers and clients of a
/// benchmark each get their own).
pub fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(name)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The static bearer tokens of a benchmark's services: `(principal, role, token)` each.
pub fn tokens(
    entries: &[(&str, toolgate_runtime::auth::Role, &str)],
) -> toolgate_runtime::auth::AuthConfig {
    toolgate_runtime::auth::AuthConfig {
        tokens: entries
            .iter()
            .map(
                |(principal, role, token)| toolgate_runtime::auth::TokenEntry {
                    principal: (*principal).into(),
                    role: *role,
                    token: Some((*token).into()),
                    token_file: None,
                },
            )
            .collect(),
        tokens_file: None,
    }
}

/// Whether the command line selects `section`: no argument runs every section.
pub fn wanted(section: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.is_empty() || args.iter().any(|a| a == section)
}

/// CPU time this process and the children it has waited for have used so far, in clock
/// ticks (`utime + stime + cutime + cstime` of `/proc/self/stat`; the kernel's work in every
/// thread, exited or not, counts).
pub fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    stat_ticks(&stat).iter().sum()
}

/// `utime`, `stime`, `cutime` and `cstime` (fields 14 to 17) of a `/proc/<pid>/stat` or
/// `/proc/<pid>/task/<tid>/stat` line, in clock ticks ([`TICK`]).
pub fn stat_ticks(stat: &str) -> [u64; 4] {
    // Counted after the command name's closing parenthesis (field 2): field 3 is first.
    let after = &stat[stat.rfind(')').expect("a stat line") + 1..];
    let mut fields = after.split_whitespace().skip(11);
    std::array::from_fn(|_| {
        fields
            .next()
            .and_then(|f| f.parse().ok())
            .expect("a tick count")
    })
}

/// User and system seconds in a `/proc/.../stat` line.
pub fn stat_cpu(stat: &str) -> f64 {
    let [user, system, ..] = stat_ticks(stat);
    (user + system) as f64 * TICK.as_secs_f64()
}

/// User and system seconds of this process's live threads named `name` (a runtime's workers
/// live as long as it does; a blocking thread that ends between two readings takes its time
/// with it).
pub fn runtime_cpu(name: &str) -> f64 {
    let mut sum = 0.0;
    for task in std::fs::read_dir("/proc/self/task")
        .expect("list /proc/self/task")
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name
            && let Ok(stat) = std::fs::read_to_string(task.path().join("stat"))
        {
            sum += stat_cpu(&stat);
        }
    }
    sum
}

/// The length of a clock tick (`USER_HZ`, 100 on every Linux ABI).
pub const TICK: Duration = Duration::from_millis(10);

/// Reads a sample count from `TOOLGATE_BENCH_SAMPLES`, else `default`.
///
/// The environment is read, never written.
pub fn sample_count(default: usize) -> usize {
    std::env::var("TOOLGATE_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A policy core with the shipped policy over a SQLite ledger in `dir`: the in-process
/// benches' policy, with no Postgres to set up.
pub async fn sqlite_policy_core(dir: &std::path::Path) -> toolgate_policy::PolicyCore {
    let mut cfg = toolgate_policy::Config::default();
    cfg.ledger.url = Some(format!("sqlite:{}", dir.join("ledger.db").display()));
    toolgate_policy::PolicyCore::open(&cfg)
        .await
        .expect("policy core")
}

/// Serves `toolgate-policy` with `cfg` on a fresh loopback port, on the current runtime, and
/// returns its address. A service that stops with an error panics with it (a benchmark with a
/// dead service would otherwise only see refused connections).
pub async fn serve_policy(
    cfg: toolgate_policy::Config,
    shutdown: toolgate_runtime::shutdown::Shutdown,
) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port for the policy service");
    let addr = l.local_addr().expect("the policy service's address");
    tokio::spawn(async move {
        if let Err(e) = toolgate_policy::serve(cfg, l, shutdown).await {
            panic!("policy service: {e:#}");
        }
    });
    addr
}

/// [`serve_policy`] for `toolgate-executor`.
pub async fn serve_executor(
    cfg: toolgate_executor::Config,
    shutdown: toolgate_runtime::shutdown::Shutdown,
) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port for the executor");
    let addr = l.local_addr().expect("the executor's address");
    tokio::spawn(async move {
        if let Err(e) = toolgate_executor::serve(cfg, l, shutdown).await {
            panic!("executor: {e:#}");
        }
    });
    addr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_count_fields_after_the_command_name() {
        // A command name with a space and a parenthesis of its own.
        let stat = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 17 5 3 2 20 0 4 0 100";
        assert_eq!(stat_ticks(stat), [17, 5, 3, 2]);
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let mut s = Samples::default();
        for i in 1..=100 {
            s.push(Duration::from_micros(i));
        }
        assert_eq!(s.p50(), Duration::from_micros(50));
        assert_eq!(s.p99(), Duration::from_micros(99));
        assert_eq!(s.quantile(1.0), Duration::from_micros(100));
    }

    #[test]
    fn interleave_async_runs_both_sides_equally() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (a, b) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let (sa, sb) = rt.block_on(interleave_async(
            10,
            2,
            || async { a.set(a.get() + 1) },
            || async { b.set(b.get() + 1) },
        ));
        assert_eq!((sa.len(), sb.len(), a.get(), b.get()), (10, 10, 12, 12));
    }

    #[test]
    fn interleave_runs_both_sides_equally() {
        let (mut a, mut b) = (0, 0);
        let (sa, sb) = interleave(10, 2, || a += 1, || b += 1);
        assert_eq!((sa.len(), sb.len(), a, b), (10, 10, 12, 12));
    }
}
