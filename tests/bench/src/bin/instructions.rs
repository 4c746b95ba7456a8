//! The workload `.ci/instructions.sh` counts instructions of under callgrind: not a timed
//! benchmark, but one that cannot be fooled by a busy machine.
//!
//! `instructions <corpus> classify-500|classify-5000` classifies every script of the corpus
//! (one bash script per line) once, without the analysis memo, under the `classify`
//! benchmark's generated policy of 500 or 5 000 rules. The work is all inside
//! [`classify_corpus`], which the script counts alone (`--toggle-collect`), so building the
//! policy is not counted.
//!
//! `instructions <corpus> authorize <n>` sends `n` `Authorize` calls (`process.run` of the
//! corpus's scripts, a new `call_id` each) to the policy service's own handler in process,
//! with the default policy and an SQLite ledger in a temporary directory, after a few
//! unmeasured calls that warm the connection and its statements. Postgres is not needed. The
//! handler's work spreads over the runtime's and SQLite's threads, so the script counts the
//! whole program twice, with `n` and with 0 calls, and takes the difference.
//!
//! `instructions <corpus> classify-handler <n>` sends `n` `Classify` calls to the policy
//! service's own handler in process (wire request in, wire answer out, as `--bin
//! classify_handler` times it), each with a script the policy has not seen before (the
//! corpus's scripts, each with a new trailing comment, so the analysis memo misses), then `n`
//! with one repeated script (a memo hit). The work is all inside [`classify_first_seen`] and
//! [`classify_repeated`], which the script counts alone, on a current-thread runtime (Classify never waits for the
//! ledger once the learned rules are cached, which an unmeasured call does first).
//!
//! `instructions <corpus> grpc <n> [logged]` serves the policy service as `toolgate-policy`
//! does (`toolgate_policy::serve`: the same layers, authentication and SQLite ledger) on
//! loopback, and sends it `n` health `Check` calls (the gRPC echo of `--bin grpc`), then `n`
//! `Classify` calls with one repeated script, then `n` with a script never seen before, from
//! a client built as `--bin grpc` builds it. Server and client share one current-thread
//! runtime, so each part's work, both sides of the connection, is all inside
//! [`grpc_echo`], [`grpc_classify_repeated`] and [`grpc_classify_first_seen`]; counting them
//! apart says what a Classify adds over an echo through the real server stack. `logged`
//! installs the service binary's logging (the `info` filter) first.
//!
//! Each mode prints what it did, so a run that silently did nothing is seen.

use std::hint::black_box;
use std::path::Path;

use tonic::Request;
use toolgate_bench::classify_mix::generated_policy;
use toolgate_contracts::common::v1::{
    CallContext as WireContext, ExecutorIdentity, Tier as WireTier, ToolKind,
};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_server::PolicyService;
use toolgate_core::Tier;
use toolgate_policy_engine::{CallContext, Policy, ToolCall};
use toolgate_runtime::auth::{Principal, Role};

/// Authorize calls made before the measured ones, in both counted runs.
const WARMUP: usize = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: instructions <corpus> classify-500|classify-5000|classify-handler <n>|authorize <n>|grpc <n> [logged]";
    let (Some(corpus), Some(mode)) = (args.get(1), args.get(2)) else {
        panic!("{usage}");
    };
    let scripts = read_corpus(Path::new(corpus));
    assert!(!scripts.is_empty(), "{corpus} holds no scripts");
    // The call count of the modes that take one.
    let n = || -> usize {
        args.get(3)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{usage}"))
    };
    match mode.as_str() {
        "classify-500" => classify(&scripts, 500),
        "classify-5000" => classify(&scripts, 5_000),
        "classify-handler" => {
            classify_handler(&scripts, n());
        }
        "grpc" => {
            grpc(n(), args.get(4).is_some_and(|a| a == "logged"));
        }
        "authorize" => {
            authorize(&scripts, n());
        }
        other => panic!("unknown mode {other:?}; {usage}"),
    }
}

/// The non-comment, non-blank lines of the corpus.
fn read_corpus(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

fn classify(scripts: &[String], rules: usize) {
    let policy = generated_policy(rules).without_analysis_memo();
    let calls: Vec<ToolCall> = scripts.iter().map(ToolCall::script).collect();
    let ctx = CallContext {
        session_id: "s".to_owned(),
        principal: "agent".to_owned(),
        ..Default::default()
    };
    let tiers = classify_corpus(&policy, &calls, &ctx);
    println!(
        "classified {} scripts under {rules} rules: {} auto, {} ask, {} deny",
        calls.len(),
        tiers[0],
        tiers[1],
        tiers[2]
    );
}

/// Everything the classify modes count: one classification of each call.
#[inline(never)]
fn classify_corpus(policy: &Policy, calls: &[ToolCall], ctx: &CallContext) -> [usize; 3] {
    let mut tiers = [0usize; 3];
    for call in calls {
        let d = black_box(policy.classify(black_box(call), ctx));
        tiers[match d.tier {
            Tier::Auto => 0,
            Tier::Ask => 1,
            Tier::Deny => 2,
        }] += 1;
    }
    tiers
}

fn classify_handler(scripts: &[String], n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let adapter = rt.block_on(async {
        let core = toolgate_bench::sqlite_policy_core(dir.path()).await;
        let adapter = toolgate_policy::PolicyAdapter::new(core);
        // Unmeasured: fills the learned-rules cache (one ledger read), as a running service has.
        classify_once(&adapter, "cargo test -p warmup".to_owned()).await;
        adapter
    });
    let fresh: Vec<String> = (0..n)
        .map(|i| format!("{} # {i}", scripts[i % scripts.len()]))
        .collect();
    let mut tiers = [0usize; 3];
    classify_first_seen(&rt, &adapter, fresh, &mut tiers);
    classify_repeated(&rt, &adapter, &scripts[0], n, &mut tiers);
    println!(
        "classified {n} first-seen and {n} repeated scripts through the Classify handler: {}",
        tier_counts(tiers)
    );
}

/// What the classify-handler mode counts for first-seen scripts: one call per script.
#[inline(never)]
fn classify_first_seen(
    rt: &tokio::runtime::Runtime,
    adapter: &toolgate_policy::PolicyAdapter,
    scripts: Vec<String>,
    tiers: &mut [usize; 3],
) {
    rt.block_on(async {
        for script in scripts {
            count(tiers, classify_once(adapter, script).await);
        }
    });
}

/// What the classify-handler mode counts for a repeated script: `n` calls with `script`.
#[inline(never)]
fn classify_repeated(
    rt: &tokio::runtime::Runtime,
    adapter: &toolgate_policy::PolicyAdapter,
    script: &str,
    n: usize,
    tiers: &mut [usize; 3],
) {
    rt.block_on(async {
        for _ in 0..n {
            count(tiers, classify_once(adapter, script.to_owned()).await);
        }
    });
}

/// Counts an answer's tier in `tiers` (auto, ask, deny or anything else).
/// `tiers` as printed: "A auto, B ask, C deny".
fn tier_counts([auto, ask, deny]: [usize; 3]) -> String {
    format!("{auto} auto, {ask} ask, {deny} deny")
}

fn count(tiers: &mut [usize; 3], tier: WireTier) {
    tiers[match tier {
        WireTier::Auto => 0,
        WireTier::Ask => 1,
        _ => 2,
    }] += 1;
}

/// The Classify request of both modes that send one: `script` as a `process.run` call.
fn classify_request(script: String) -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        call: Some(pb::ToolCall {
            tool: ToolKind::ProcessRun as i32,
            script: Some(script),
            ..Default::default()
        }),
        session_id: "instructions".into(),
        ..Default::default()
    }
}

/// One Classify through the handler, as an agent; the answer's tier.
async fn classify_once(adapter: &toolgate_policy::PolicyAdapter, script: String) -> WireTier {
    let mut request = Request::new(classify_request(script));
    request.extensions_mut().insert(Principal {
        name: "agent".into(),
        role: Role::Agent,
    });
    let answer = black_box(
        adapter
            .classify(request)
            .await
            .expect("classify")
            .into_inner(),
    );
    answer
        .explanation
        .map_or(WireTier::Unspecified, |e| e.tier())
}

fn authorize(scripts: &[String], n: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    rt.block_on(async {
        let core = toolgate_bench::sqlite_policy_core(dir.path()).await;
        let adapter = toolgate_policy::PolicyAdapter::new(core);
        // Allowed, pending, denied, anything else.
        let mut outcomes = [0usize; 4];
        for i in 0..WARMUP + n {
            let script = &scripts[i % scripts.len()];
            let mut request = Request::new(pb::AuthorizeRequest {
                context: Some(WireContext {
                    call_id: format!("call-{i}"),
                    session_id: "instructions".into(),
                    ..Default::default()
                }),
                call: Some(pb::ToolCall {
                    tool: ToolKind::ProcessRun as i32,
                    script: Some(script.clone()),
                    ..Default::default()
                }),
                principal: "agent".into(),
                executor: Some(ExecutorIdentity {
                    executor_id: "exec-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            });
            request.extensions_mut().insert(Principal {
                name: "executor".into(),
                role: Role::Executor,
            });
            let answer = adapter
                .authorize(request)
                .await
                .expect("authorize")
                .into_inner();
            if i >= WARMUP {
                use pb::authorize_response::Result as R;
                outcomes[match answer.result {
                    Some(R::Allowed(_)) => 0,
                    Some(R::Pending(_)) => 1,
                    Some(R::Denied(_)) => 2,
                    _ => 3,
                }] += 1;
            }
        }
        let [allowed, pending, denied, other] = outcomes;
        println!(
            "authorized {n} calls after {WARMUP} unmeasured ones: {allowed} allowed, {pending} pending, {denied} denied, {other} other"
        );
    });
}

/// The script of `--bin grpc`'s Classify calls; first-seen calls change its package name.
const GRPC_SCRIPT: &str = "git status && cargo test -p foo 2>&1 | tail -n 20";

/// The bearer token of the `grpc` mode's agent.
const GRPC_TOKEN: &str = "instructions-agent-token-0123456789";

type Authed = tonic::service::interceptor::InterceptedService<
    tonic::transport::Channel,
    toolgate_runtime::auth::Bearer,
>;

fn grpc(n: usize, logged: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let (_trigger, shutdown) = toolgate_runtime::shutdown::channel();
    let _telemetry = logged.then(|| {
        let _entered = rt.enter();
        toolgate_runtime::telemetry::init(
            "toolgate-policy",
            toolgate_runtime::logging::Format::Text,
            "info",
        )
        .expect("telemetry")
    });
    let (health, policy) = rt.block_on(async {
        let mut cfg = toolgate_policy::Config::default();
        cfg.ledger.url = Some(format!("sqlite:{}", dir.path().join("ledger.db").display()));
        // No timer fires during the counted calls.
        cfg.ledger.sweep_interval_ms = 3_600_000;
        cfg.ledger.health_interval_ms = 3_600_000;
        cfg.auth = toolgate_bench::tokens(&[("agent", Role::Agent, GRPC_TOKEN)]);
        let addr = toolgate_bench::serve_policy(cfg, shutdown).await;
        let channel = toolgate_runtime::grpc::endpoint(format!("http://{addr}"))
            .expect("valid uri")
            .connect()
            .await
            .expect("connect");
        let bearer = toolgate_runtime::auth::Bearer::new(GRPC_TOKEN).expect("ascii token");
        let mut health = tonic_health::pb::health_client::HealthClient::with_interceptor(
            channel.clone(),
            bearer.clone(),
        );
        let mut policy =
            pb::policy_service_client::PolicyServiceClient::with_interceptor(channel, bearer);
        // Unmeasured: the connection's first calls, and the learned-rules cache.
        for i in 0..WARMUP {
            echo_once(&mut health).await;
            classify_remote(&mut policy, GRPC_SCRIPT.to_owned()).await;
            classify_remote(&mut policy, format!("git status # warm-up {i}")).await;
        }
        (health, policy)
    });
    grpc_echo(&rt, health, n);
    let mut tiers = [0usize; 3];
    grpc_classify_repeated(&rt, policy.clone(), n, &mut tiers);
    grpc_classify_first_seen(&rt, policy, n, &mut tiers);
    println!(
        "grpc: {n} echo calls, {n} repeated and {n} first-seen Classify calls: {}",
        tier_counts(tiers)
    );
}

/// What the grpc mode counts for the echo: `n` health `Check` calls.
#[inline(never)]
fn grpc_echo(
    rt: &tokio::runtime::Runtime,
    mut health: tonic_health::pb::health_client::HealthClient<Authed>,
    n: usize,
) {
    rt.block_on(async {
        for _ in 0..n {
            echo_once(&mut health).await;
        }
    });
}

/// What the grpc mode counts for a repeated script: `n` Classify calls of [`GRPC_SCRIPT`].
#[inline(never)]
fn grpc_classify_repeated(
    rt: &tokio::runtime::Runtime,
    mut policy: pb::policy_service_client::PolicyServiceClient<Authed>,
    n: usize,
    tiers: &mut [usize; 3],
) {
    rt.block_on(async {
        for _ in 0..n {
            count(
                tiers,
                classify_remote(&mut policy, GRPC_SCRIPT.to_owned()).await,
            );
        }
    });
}

/// What the grpc mode counts for first-seen scripts: `n` Classify calls, each of a script
/// the service has not seen (as `--bin grpc` varies them).
#[inline(never)]
fn grpc_classify_first_seen(
    rt: &tokio::runtime::Runtime,
    mut policy: pb::policy_service_client::PolicyServiceClient<Authed>,
    n: usize,
    tiers: &mut [usize; 3],
) {
    let scripts: Vec<String> = (0..n)
        .map(|i| GRPC_SCRIPT.replace("-p foo", &format!("-p foo{i}")))
        .collect();
    rt.block_on(async {
        for script in scripts {
            count(tiers, classify_remote(&mut policy, script).await);
        }
    });
}

async fn echo_once(health: &mut tonic_health::pb::health_client::HealthClient<Authed>) {
    let answer = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner();
    black_box(answer);
}

/// One Classify over gRPC, as `--bin grpc` sends it; the answer's tier.
async fn classify_remote(
    policy: &mut pb::policy_service_client::PolicyServiceClient<Authed>,
    script: String,
) -> WireTier {
    let answer = policy
        .classify(classify_request(script))
        .await
        .expect("classify")
        .into_inner();
    black_box(answer)
        .explanation
        .map_or(WireTier::Unspecified, |e| e.tier())
}
