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
//! Each mode prints what it did, so a run that silently did nothing is seen.

use std::hint::black_box;
use std::path::Path;

use tonic::Request;
use toolgate_bench::classify_mix::generated_policy;
use toolgate_contracts::common::v1::{CallContext as WireContext, ExecutorIdentity, ToolKind};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_server::PolicyService;
use toolgate_core::Tier;
use toolgate_policy_engine::{CallContext, Policy, ToolCall};
use toolgate_runtime::auth::{Principal, Role};

/// Authorize calls made before the measured ones, in both counted runs.
const WARMUP: usize = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: instructions <corpus> classify-500|classify-5000|authorize <n>";
    let (Some(corpus), Some(mode)) = (args.get(1), args.get(2)) else {
        panic!("{usage}");
    };
    let scripts = read_corpus(Path::new(corpus));
    assert!(!scripts.is_empty(), "{corpus} holds no scripts");
    match mode.as_str() {
        "classify-500" => classify(&scripts, 500),
        "classify-5000" => classify(&scripts, 5_000),
        "authorize" => {
            let n = args
                .get(3)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{usage}"));
            authorize(&scripts, n);
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
