//! Content search: `Workspace::search` against the ripgrep binary on the same tree.
//!
//! Generates about 20 000 source-like files (a few percent contain the needle), then
//! interleaves `rg` and our search with identical settings: no ignore files, hidden
//! files skipped, line numbers, caps that never truncate. Prints medians, p99 and the
//! throughput ratio (ours / rg); the goal (brief) is at least 1.4.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use toolgate_bench::{Goal, heading, interleave, print_side, report_ratio, sample_count};
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1::SearchFilesRequest;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_fs::{SearchRequest, Workspace, WorkspaceConfig, WorkspacePath};
use toolgate_runtime::auth::{Bearer, Role};

const AGENT_TOKEN: &str = "bench-agent-token-0123456789abcdef";
const EXECUTOR_TOKEN: &str = "bench-executor-token-0123456789abcdef";

const DIRS: usize = 200;
const FILES_PER_DIR: usize = 100;
const PATTERN: &str = r"fn needle_[a-z]+\(";

const WORDS: &[&str] = &[
    "let",
    "mut",
    "self",
    "value",
    "config",
    "result",
    "Option",
    "Some",
    "None",
    "match",
    "return",
    "impl",
    "struct",
    "pub",
    "fn",
    "use",
    "crate",
    "error",
    "buffer",
    "len",
    "iter",
    "map",
    "collect",
    "String",
    "Vec",
    "u64",
    "usize",
    "into",
    "from",
    "request",
    "response",
    "handle",
    "path",
    "workspace",
    "limit",
    "count",
    "index",
    "state",
    "=>",
    "&",
];

/// A small deterministic generator so every run searches the same tree.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Writes the tree and returns how many lines should match.
fn generate(root: &Path) -> usize {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut expected = 0;
    for d in 0..DIRS {
        let dir = root.join(format!("module_{d:03}/src"));
        std::fs::create_dir_all(&dir).expect("create bench directory");
        for f in 0..FILES_PER_DIR {
            let mut text = String::new();
            let lines = 40 + rng.below(120);
            let needle_at = (rng.below(100) < 3).then(|| rng.below(lines));
            for i in 0..lines {
                if Some(i) == needle_at {
                    text.push_str("pub fn needle_found(input: &str) -> usize {\n");
                    expected += 1;
                    continue;
                }
                let indent = rng.below(3) * 4;
                text.extend(std::iter::repeat_n(' ', indent));
                for w in 0..(3 + rng.below(9)) {
                    if w > 0 {
                        text.push(' ');
                    }
                    text.push_str(WORDS[rng.below(WORDS.len())]);
                }
                text.push_str(";\n");
            }
            std::fs::write(dir.join(format!("file_{f:03}.rs")), text).expect("write bench file");
        }
    }
    expected
}

fn main() {
    heading("content search: toolgate-fs vs ripgrep, same tree, same run");
    let rg_version = Command::new("rg").arg("--version").output().ok();
    let Some(version) = rg_version.filter(|o| o.status.success()) else {
        println!(
            "  rg (ripgrep) is not on PATH; install it (apt-get install -y ripgrep) to run this benchmark"
        );
        return;
    };
    println!(
        "  baseline: {}",
        String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or("rg")
    );

    let root: PathBuf =
        std::env::temp_dir().join(format!("toolgate-bench-search-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("create bench root");
    let expected = generate(&root);
    let bytes: u64 = walk_size(&root);
    println!(
        "  tree: {} files, {:.1} MiB, {expected} matching lines",
        DIRS * FILES_PER_DIR,
        bytes as f64 / (1 << 20) as f64
    );

    let mut config = WorkspaceConfig::new(&root);
    config.limits.max_search_results = 100_000;
    config.limits.max_search_bytes = 64 << 20;
    let ws = Workspace::open(config).expect("open bench workspace");
    let mut req = SearchRequest::new(WorkspacePath::try_from(".").expect("path"), PATTERN);
    req.max_results = Some(100_000);
    req.max_bytes = Some(64 << 20);

    let run_rg = || {
        let out = Command::new("rg")
            .args([
                "--no-config",
                "--no-ignore",
                "--line-number",
                "--no-heading",
                "--color=never",
                "-e",
                PATTERN,
                ".",
            ])
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .expect("run rg");
        out.stdout.iter().filter(|&&b| b == b'\n').count()
    };
    let run_ours = || {
        let o = ws.search(&req).expect("search");
        assert!(o.truncated.is_none(), "bench caps must not truncate");
        o.match_count
    };
    // Both sides must find the same lines before timing means anything.
    assert_eq!(run_rg(), expected, "rg found a different number of matches");
    assert_eq!(
        run_ours(),
        expected,
        "toolgate-fs found a different number of matches"
    );

    let n = sample_count(20);
    let (rg, ours) = interleave(
        n,
        3,
        || {
            run_rg();
        },
        || {
            run_ours();
        },
    );
    print_side("rg (ripgrep binary, incl. spawn)", &rg);
    print_side("toolgate-fs Workspace::search", &ours);
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "  throughput p50: rg {:.0} MiB/s, toolgate-fs {:.0} MiB/s",
        mib / rg.p50().as_secs_f64(),
        mib / ours.p50().as_secs_f64()
    );
    let ratio = rg.p50().as_secs_f64() / ours.p50().as_secs_f64();
    report_ratio("search throughput (ours / rg)", ratio, Goal::AtLeast(1.4));

    // The same search as an orchestrator sees it: SearchFiles over loopback gRPC against
    // the real executor service, interleaved with rg again.
    heading("SearchFiles over gRPC (executor, loopback) vs ripgrep, same tree, same run");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (_trigger, shutdown) = toolgate_runtime::shutdown::channel();
    // Every SearchFiles call is authorized: a policy service with a SQLite ledger beside it.
    let state = tempfile::tempdir().expect("temp dir for the ledger");
    let mut client = rt.block_on(async {
        let mut policy = toolgate_policy::Config::default();
        policy.log.filter = "warn".into();
        policy.auth = toolgate_bench::tokens(&[("bench-executor", Role::Executor, EXECUTOR_TOKEN)]);
        policy.ledger.url = Some(format!(
            "sqlite:{}",
            state.path().join("ledger.db").display()
        ));
        let policy_addr = toolgate_bench::serve_policy(policy, shutdown.clone()).await;
        let mut cfg = toolgate_executor::Config::default();
        cfg.workspace.root.clone_from(&root);
        cfg.log.filter = "warn".into();
        cfg.policy.endpoint = format!("http://{policy_addr}");
        cfg.policy.token = Some(EXECUTOR_TOKEN.into());
        cfg.auth = toolgate_bench::tokens(&[("bench-agent", Role::Agent, AGENT_TOKEN)]);
        let addr = toolgate_bench::serve_executor(cfg, shutdown).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("the executor's URL")
            .connect()
            .await
            .expect("connect");
        FilesystemServiceClient::with_interceptor(
            channel,
            Bearer::new(AGENT_TOKEN).expect("a valid token"),
        )
    });
    let grpc_req = SearchFilesRequest {
        context: Some(CallContext {
            call_id: "bench".into(),
            session_id: "bench".into(),
            ..Default::default()
        }),
        pattern: PATTERN.into(),
        max_results: 10_000,
        ..Default::default()
    };
    // Each call is a new call id: the executor runs a call id once.
    let mut calls = 0u64;
    let mut run_grpc = || {
        calls += 1;
        let mut req = grpc_req.clone();
        if let Some(c) = req.context.as_mut() {
            c.call_id = format!("bench-{calls}");
        }
        let r = rt
            .block_on(client.search_files(req))
            .expect("SearchFiles")
            .into_inner();
        assert!(!r.truncated, "bench caps must not truncate");
        r.matches.len()
    };
    assert_eq!(
        run_grpc(),
        expected,
        "SearchFiles found a different number of matches"
    );
    let (rg2, grpc) = interleave(
        n,
        3,
        || {
            run_rg();
        },
        || {
            run_grpc();
        },
    );
    print_side("rg (ripgrep binary, incl. spawn)", &rg2);
    print_side("SearchFiles over gRPC", &grpc);
    let ratio = rg2.p50().as_secs_f64() / grpc.p50().as_secs_f64();
    report_ratio(
        "SearchFiles throughput (grpc / rg)",
        ratio,
        Goal::AtLeast(1.4),
    );
    let _ = std::io::stdout().flush();
    let _ = std::fs::remove_dir_all(&root);
}

fn walk_size(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("read bench dir").flatten() {
        let md = e.metadata().expect("stat bench entry");
        total += if md.is_dir() {
            walk_size(&e.path())
        } else {
            md.len()
        };
    }
    total
}
