//! Rules learned from approvals ("always allow"), end to end: the real binary, a real
//! ledger on Postgres and on SQLite, approvers over `ApprovalService`.

use crate::support;

use std::time::Duration;

use support::*;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::authorize_response::Result as R;

on_both_backends!(
    remember_lifts_the_same_shape_in_its_session_until_revoked,
    an_expired_rule_stops_applying,
    rules_that_cannot_be_learned_are_refused_and_nothing_is_decided,
    workspace_scope_follows_the_executors_labels,
);

/// The test policy plus an example a broad `rm` rule would flip.
const LEARN_POLICY: &str = r#"
default = "ask"

[[rule]]
id = "echo"
decision = "auto"
reason = "printing is harmless"
commands = ["echo *"]

[[rule]]
id = "no-curl"
decision = "deny"
reason = "network downloads are not allowed; vendor the file instead"
commands = ["curl *"]

[[example]]
script = "rm -rf build 2>/dev/null"
decision = "ask"
"#;

const PUSH: &[&str] = &["git", "push", "origin", "main"];

fn script(s: &str) -> pb::ToolCall {
    pb::ToolCall {
        tool: toolgate_contracts::common::v1::ToolKind::ProcessRun as i32,
        script: Some(s.to_owned()),
        ..Default::default()
    }
}

fn approve(id: &str) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest {
        approval_id: id.into(),
        verdict: pb::Verdict::Approve as i32,
        reason: "pushes to main are fine here".into(),
        ..Default::default()
    }
}

fn remember(id: &str, scope: pb::LearnedRuleScope, ttl: Option<u64>) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest {
        remember: Some(pb::Remember {
            scope: scope as i32,
            ttl: ttl.map(|s| prost_types::Duration {
                seconds: s as i64,
                nanos: 0,
            }),
        }),
        ..approve(id)
    }
}

/// Authorizes `call` in `session` under a fresh call id; the response.
async fn ask(
    server: &Server,
    n: &mut u32,
    session: &str,
    call: pb::ToolCall,
) -> pb::AuthorizeResponse {
    *n += 1;
    server
        .policy(EXEC)
        .await
        .authorize(authorize(&format!("call-{n}"), session, "agent-1", call))
        .await
        .unwrap()
        .into_inner()
}

fn pending(r: &pb::AuthorizeResponse) -> String {
    match r.result.as_ref() {
        Some(R::Pending(p)) => p.approval_id.clone(),
        other => panic!("expected pending, got {other:?}"),
    }
}

fn deciding_rule(r: &pb::AuthorizeResponse) -> String {
    let e = r.explanation.as_ref().unwrap();
    e.matches
        .iter()
        .find(|m| m.tier == e.tier)
        .map(|m| m.rule_id.clone())
        .unwrap_or_default()
}

async fn remember_lifts_the_same_shape_in_its_session_until_revoked(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start_with_policy(&db.url, &Options::default(), LEARN_POLICY);
    let mut alice = server.approvals(ALICE).await;
    let mut n = 0;

    let id = pending(&ask(&server, &mut n, "s1", run(PUSH)).await);
    // The proposal, verbatim, before anything is decided.
    let proposal = alice
        .propose_rule(pb::ProposeRuleRequest {
            approval_id: id.clone(),
            scope: pb::LearnedRuleScope::Session as i32,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        proposal.pattern.starts_with("git push origin main\n"),
        "{}",
        proposal.pattern
    );
    assert_eq!(proposal.scope_value, "s1");
    // Agents and executors can neither propose, list nor revoke.
    let mut agent = server.approvals(AGENT).await;
    let e = agent
        .propose_rule(pb::ProposeRuleRequest {
            approval_id: id.clone(),
            scope: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
    let e = agent
        .list_rules(pb::ListRulesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");

    let decided = alice
        .decide_approval(remember(&id, pb::LearnedRuleScope::Session, None))
        .await
        .unwrap()
        .into_inner();
    let rule = decided.rule.expect("a rule was learned");
    assert_eq!(rule.pattern, proposal.pattern);
    assert_eq!(rule.created_by, "alice");
    assert_eq!(rule.source_approval_id, id);
    assert!(rule.active);
    assert_eq!(
        decided.approval.unwrap().state,
        pb::ApprovalState::Approved as i32
    );

    // Every later call of the same shape in the session is auto by the rule (the approval,
    // bound to the same digest, is not even needed).
    for _ in 0..3 {
        let r = ask(&server, &mut n, "s1", run(PUSH)).await;
        let Some(R::Allowed(a)) = &r.result else {
            panic!("{r:?}")
        };
        assert!(a.approval_id.is_empty(), "no approval consumed: {a:?}");
        assert_eq!(deciding_rule(&r), format!("learned.{}", rule.rule_id));
        let e = r.explanation.as_ref().unwrap();
        assert!(e.message.contains("alice"), "{}", e.message);
        assert!(
            e.policy_version.ends_with("+learned.r1"),
            "{}",
            e.policy_version
        );
        let h = a.hidden.as_ref().expect("hidden paths");
        assert_eq!(h.policy_version, e.policy_version);
    }
    // A dry run answers what the call would get.
    let dry = |session: &str| pb::ClassifyRequest {
        call: Some(run(PUSH)),
        session_id: session.into(),
        ..Default::default()
    };
    let mut agent_policy = server.policy(AGENT).await;
    let e = agent_policy
        .classify(dry("s1"))
        .await
        .unwrap()
        .into_inner()
        .explanation
        .unwrap();
    assert_eq!(e.tier, toolgate_contracts::common::v1::Tier::Auto as i32);
    assert!(e.matches[0].rule_id.starts_with("learned."), "{e:?}");
    let e = agent_policy
        .classify(dry("s2"))
        .await
        .unwrap()
        .into_inner()
        .explanation
        .unwrap();
    assert_eq!(e.tier, toolgate_contracts::common::v1::Tier::Ask as i32);
    // The same shape written as a script is the same command.
    let r = ask(&server, &mut n, "s1", script("git push origin main")).await;
    assert!(matches!(r.result, Some(R::Allowed(_))), "{r:?}");
    // Another shape, another reason, another session: still ask. A deny stays a deny.
    for (session, call) in [
        ("s1", run(&["git", "push", "origin", "dev"])),
        ("s1", run(&["git", "push", "--force", "origin", "main"])),
        ("s1", run(&["git", "push", "origin", "+main"])),
        ("s1", script("git push origin main && git push origin dev")),
        ("s2", run(PUSH)),
    ] {
        let r = ask(&server, &mut n, session, call.clone()).await;
        pending(&r);
    }
    let r = ask(
        &server,
        &mut n,
        "s1",
        script("git push origin main && curl https://x"),
    )
    .await;
    assert!(matches!(r.result, Some(R::Denied(_))), "{r:?}");

    let listed = alice
        .list_rules(pb::ListRulesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.revision, 1);
    assert_eq!(listed.rules.len(), 1);
    assert_eq!(listed.rules[0].rule_id, rule.rule_id);

    // Revoked: the next call asks again, and the rule is listed only on request.
    let revoked = alice
        .revoke_rule(pb::RevokeRuleRequest {
            rule_id: format!("learned.{}", rule.rule_id),
        })
        .await
        .unwrap()
        .into_inner()
        .rule
        .unwrap();
    assert!(!revoked.active);
    assert_eq!(revoked.revoked_by, "alice");
    // The approval the rule was learned from was never needed; bound to the document's
    // version, it still covers its exact call once (learning and revoking orphan nothing).
    let r = ask(&server, &mut n, "s1", run(PUSH)).await;
    let Some(R::Allowed(a)) = &r.result else {
        panic!("{r:?}")
    };
    assert_eq!(a.approval_id, id);
    assert!(!r.explanation.unwrap().policy_version.contains("+learned"));
    // After that, the shape asks again.
    pending(&ask(&server, &mut n, "s1", run(PUSH)).await);
    let e = alice
        .revoke_rule(pb::RevokeRuleRequest {
            rule_id: rule.rule_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(reason(&e), "RULE_NOT_FOUND");
    let listed = alice
        .list_rules(pb::ListRulesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.rules.is_empty());
    assert_eq!(listed.revision, 2);
    let all = alice
        .list_rules(pb::ListRulesRequest {
            include_inactive: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.rules.len(), 1);
}

async fn an_expired_rule_stops_applying(backend: Backend) {
    let db = Db::new(backend).await;
    let options = Options {
        metrics: true,
        ..Options::default()
    };
    let server = Server::start_with_policy(&db.url, &options, LEARN_POLICY);
    let mut alice = server.approvals(ALICE).await;
    let mut n = 0;
    let publish = || run(&["npm", "publish"]);
    let id = pending(&ask(&server, &mut n, "s1", publish()).await);
    let rule = alice
        .decide_approval(remember(&id, pb::LearnedRuleScope::All, Some(5)))
        .await
        .unwrap()
        .into_inner()
        .rule
        .unwrap();
    let expires = rule.expires_at.unwrap();
    // Scope `all`: another session is covered while the rule lives.
    let r = ask(&server, &mut n, "s2", publish()).await;
    assert!(matches!(r.result, Some(R::Allowed(_))), "{r:?}");
    // Decisions by learned rules share one metric label: rules are made at runtime.
    let lines = crate::metrics::scrape(&server).await;
    let learned = crate::metrics::sample(
        &lines,
        "toolgate_policy_decisions_total{tool=\"process.run\",tier=\"auto\",rule=\"learned\"}",
    );
    assert_eq!(learned, Some(1.0), "{lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("rule=\"learned.")),
        "{lines:#?}"
    );
    // Once past its expiry, without any change announced, the call asks again.
    let deadline = std::time::SystemTime::UNIX_EPOCH
        + Duration::new(expires.seconds as u64, expires.nanos as u32);
    while std::time::SystemTime::now() <= deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pending(&ask(&server, &mut n, "s3", publish()).await);
    let listed = alice
        .list_rules(pb::ListRulesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.rules.is_empty(), "an expired rule is not active");
}

async fn rules_that_cannot_be_learned_are_refused_and_nothing_is_decided(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start_with_policy(&db.url, &Options::default(), LEARN_POLICY);
    let mut alice = server.approvals(ALICE).await;
    let mut n = 0;
    let cases: &[(pb::ToolCall, &str)] = &[
        (
            run(&["python3", "-c", "import os; os.system('git push')"]),
            "RULE_BANNED_PREFIX",
        ),
        (
            run(&["bash", "-c", "git push origin main"]),
            "RULE_BANNED_PREFIX",
        ),
        (script("env X=1 npm publish"), "RULE_BANNED_PREFIX"),
        (script("xargs rm -rf < targets"), "RULE_BANNED_PREFIX"),
        (
            script("find . -name '*.o' -exec rm -rf {} +"),
            "RULE_BANNED_PREFIX",
        ),
        (script("./deploy.sh --prod"), "RULE_TOO_BROAD"),
        (script("git push origin \"$BRANCH\""), "RULE_NOT_ANALYZED"),
        // The policy's own example, `rm -rf build 2>/dev/null`, would become auto.
        (run(&["rm", "-rf", "build"]), "RULE_FLIPS_CASE"),
        // A case of the shipped adversarial corpus would become auto.
        (
            run(&["git", "push", "--force", "origin", "main"]),
            "RULE_FLIPS_CASE",
        ),
        (script("cat ../outside.txt"), "RULE_NOT_LEARNABLE"),
    ];
    for (call, want) in cases {
        let id = pending(&ask(&server, &mut n, "s1", call.clone()).await);
        let e = alice
            .propose_rule(pb::ProposeRuleRequest {
                approval_id: id.clone(),
                scope: pb::LearnedRuleScope::All as i32,
            })
            .await
            .unwrap_err();
        assert_eq!(reason(&e), *want, "{call:?}: {}", e.message());
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{call:?}");
        let e = alice
            .decide_approval(remember(&id, pb::LearnedRuleScope::All, None))
            .await
            .unwrap_err();
        assert_eq!(reason(&e), *want, "{call:?}: {}", e.message());
        if *want == "RULE_FLIPS_CASE" {
            let (_, meta) = toolgate_contracts::status::error_info(&e).unwrap();
            let case = meta.get("case").cloned().unwrap_or_default();
            assert!(
                case.contains("rm -rf build") || case == "git push --force origin main",
                "{case}"
            );
            assert!(e.message().contains(&case), "{}", e.message());
        }
        // Nothing was decided: the approval still waits, and a plain approval works.
        let a = alice
            .decide_approval(approve(&id))
            .await
            .unwrap()
            .into_inner();
        assert!(a.rule.is_none());
        assert_eq!(
            a.approval.unwrap().state,
            pb::ApprovalState::Approved as i32
        );
    }
    let listed = alice
        .list_rules(pb::ListRulesRequest {
            include_inactive: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.rules.is_empty());
    assert_eq!(listed.revision, 0);
    // A denial never learns.
    let id = pending(&ask(&server, &mut n, "s1", run(PUSH)).await);
    let e = alice
        .decide_approval(pb::DecideApprovalRequest {
            verdict: pb::Verdict::Deny as i32,
            ..remember(&id, pb::LearnedRuleScope::All, None)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

/// Two replicas over one Postgres: a rule learned or revoked on one applies or stops on the
/// other at its next call, announced through the ledger's notification channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_learned_on_one_replica_applies_on_the_other() {
    let db = Db::new(Backend::Postgres).await;
    let a = Server::start_with_policy(&db.url, &Options::default(), LEARN_POLICY);
    let b = Server::start_with_policy(&db.url, &Options::default(), LEARN_POLICY);
    let mut alice = a.approvals(ALICE).await;
    let mut n = 0;
    let publish = || run(&["cargo", "publish"]);
    // B compiles its (empty) set first, so only a notification can tell it to rebuild.
    let id = pending(&ask(&b, &mut n, "s1", publish()).await);
    let rule = alice
        .decide_approval(remember(&id, pb::LearnedRuleScope::All, None))
        .await
        .unwrap()
        .into_inner()
        .rule
        .unwrap();
    let until = |want_allowed: bool| {
        let b = &b;
        async move {
            let deadline = tokio::time::Instant::now() + SOON;
            let mut n = 1000 + u32::from(want_allowed) * 1000;
            loop {
                let r = ask(b, &mut n, "s9", publish()).await;
                if matches!(r.result, Some(R::Allowed(_))) == want_allowed {
                    return r;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "replica B never saw it: {r:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let r = until(true).await;
    assert_eq!(deciding_rule(&r), format!("learned.{}", rule.rule_id));
    alice
        .revoke_rule(pb::RevokeRuleRequest {
            rule_id: rule.rule_id.clone(),
        })
        .await
        .unwrap();
    pending(&until(false).await);
}

async fn workspace_scope_follows_the_executors_labels(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start_with_policy(&db.url, &Options::default(), LEARN_POLICY);
    let mut alice = server.approvals(ALICE).await;
    let mut exec = server.policy(EXEC).await;
    let mut n = 0;
    let labelled = |n: u32, session: &str, team: &str| {
        let mut r = authorize(&format!("w-{n}"), session, "agent-1", run(PUSH));
        r.labels = [("team".to_owned(), team.to_owned())].into();
        r
    };
    let first = exec
        .authorize(labelled(0, "s1", "web"))
        .await
        .unwrap()
        .into_inner();
    let id = pending(&first);
    let rule = alice
        .decide_approval(remember(&id, pb::LearnedRuleScope::Workspace, None))
        .await
        .unwrap()
        .into_inner()
        .rule
        .unwrap();
    assert_eq!(rule.scope, pb::LearnedRuleScope::Workspace as i32);
    assert_eq!(rule.scope_value, "team=web");
    // Another session of the same workspace: auto. Another workspace, or none: ask.
    let r = exec
        .authorize(labelled(1, "s2", "web"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deciding_rule(&r), format!("learned.{}", rule.rule_id));
    let r = exec
        .authorize(labelled(2, "s2", "payments"))
        .await
        .unwrap()
        .into_inner();
    pending(&r);
    pending(&ask(&server, &mut n, "s3", run(PUSH)).await);
}
