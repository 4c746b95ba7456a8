//! End-to-end: `net.connect` calls (a run's connections, as the executor's egress gate asks
//! about them) decided by the shipped `[[network]]` rules over gRPC with a real Postgres
//! ledger; `Allowed.denied_hosts` for networked runs; the destinations a run reached kept
//! with its outcome.

use crate::support;

use support::*;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::common::v1::{Tier, ToolKind};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::authorize_response::Result as R;

fn connect(host: &str, port: u32) -> pb::ToolCall {
    pb::ToolCall {
        tool: ToolKind::NetConnect as i32,
        host: Some(host.into()),
        port: Some(port),
        protocol: Some("tcp".into()),
        sandbox_profile: Some("network".into()),
        ..Default::default()
    }
}

/// The Authorize of a connection to `host:port` in `session`, described by its run's command.
fn ask(call_id: &str, session: &str, host: &str, port: u32) -> pb::AuthorizeRequest {
    let mut r = authorize(call_id, session, "agent-1", connect(host, port));
    if let Some(c) = r.context.as_mut() {
        c.description = "npm install \u{1b}[2Kleft-pad".into();
    }
    r
}

async fn start() -> (Db, Server) {
    let db = Db::new(Backend::Postgres).await;
    let server = Server::start_with_policy(
        &db.url,
        &Options::default(),
        toolgate_policy_engine::DEFAULT_POLICY_TOML,
    );
    (db, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_auto_ask_or_deny_by_the_shipped_network_rules() {
    let (_db, server) = start().await;
    let mut exec = server.policy(EXEC).await;

    let r = exec
        .authorize(ask(
            "run-1/registry.npmjs.org:443",
            "s1",
            "registry.npmjs.org",
            443,
        ))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(_) = result(&r) else {
        panic!("{r:?}")
    };
    let e = r.explanation.unwrap();
    assert_eq!(e.tier, Tier::Auto as i32);
    let ids: Vec<&str> = e.matches.iter().map(|m| m.rule_id.as_str()).collect();
    assert_eq!(ids, ["package-registries"]);

    for (host, rule) in [
        ("metadata.google.internal", "cloud-metadata"),
        ("169.254.169.254", "ip-literals"),
    ] {
        let r = exec
            .authorize(ask(&format!("run-1/{host}:80"), "s1", host, 80))
            .await
            .unwrap()
            .into_inner();
        let R::Denied(d) = result(&r) else {
            panic!("{host}: {r:?}")
        };
        assert_eq!(d.rule_id, rule);
        assert!(
            d.message.contains(&format!("connection to {host}:80")),
            "{}",
            d.message
        );
    }

    // Anything else asks, with a display the approver can trust.
    let r = exec
        .authorize(ask("run-1/example.com:443", "s1", "example.com", 443))
        .await
        .unwrap()
        .into_inner();
    let id = pending_id(&r);
    assert_eq!(r.explanation.unwrap().matches[0].rule_id, "default");
    let mut alice = server.approvals(ALICE).await;
    let a = alice
        .get_approval(pb::GetApprovalRequest {
            approval_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    for row in [
        "tool        net.connect\n",
        "host        example.com\n",
        "port        443\n",
        "protocol    tcp\n",
        "sandbox     network\n",
        "description npm install \\x1b[2Kleft-pad\n",
    ] {
        assert!(a.display.contains(row), "{row:?} in {}", a.display);
    }
    let call = a.call.unwrap();
    assert_eq!(
        (call.host.as_deref(), call.port),
        (Some("example.com"), Some(443))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_of_a_session_to_one_destination_share_one_approval() {
    let (_db, server) = start().await;
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;

    // Two connections (two call ids) to the same destination while nobody has decided.
    let first = pending_id(
        &exec
            .authorize(ask("run-1/a", "s1", "example.com", 443))
            .await
            .unwrap()
            .into_inner(),
    );
    let second = pending_id(
        &exec
            .authorize(ask("run-1/b", "s1", "example.com", 443))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(first, second);
    // Another port, another session: other questions.
    for (call, session, port) in [("run-1/c", "s1", 8443), ("run-2/a", "s2", 443)] {
        let other = pending_id(
            &exec
                .authorize(ask(call, session, "example.com", port))
                .await
                .unwrap()
                .into_inner(),
        );
        assert_ne!(other, first, "{call}");
    }
    // Approved for the session, later connections there go through.
    alice
        .decide_approval(pb::DecideApprovalRequest {
            scope: pb::ApprovalScope::Session as i32,
            ..approve(&first)
        })
        .await
        .unwrap();
    for call in ["run-1/d", "run-3/a"] {
        let r = exec
            .authorize(ask(call, "s1", "example.com", 443))
            .await
            .unwrap()
            .into_inner();
        let R::Allowed(ok) = result(&r) else {
            panic!("{call}: {r:?}")
        };
        assert_eq!(ok.approval_id, first);
        // A connection is not a run: it carries no hosts for a DNS stub.
        assert!(ok.denied_hosts.is_empty());
    }
}

fn deciding_rule(r: &pb::AuthorizeResponse) -> String {
    let e = r.explanation.as_ref().expect("an explanation");
    e.matches
        .iter()
        .find(|m| m.tier == e.tier)
        .map(|m| m.rule_id.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_approved_as_a_rule_is_auto_for_later_runs_until_revoked() {
    let (_db, server) = start().await;
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;

    let first = pending_id(
        &exec
            .authorize(ask("run-1/a", "s1", "example.com", 443))
            .await
            .unwrap()
            .into_inner(),
    );
    // The approver sees exactly what the rule will allow before deciding.
    let proposal = alice
        .propose_rule(pb::ProposeRuleRequest {
            approval_id: first.clone(),
            scope: pb::LearnedRuleScope::All as i32,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        proposal
            .pattern
            .starts_with("connect to example.com:443 (tcp)\n"),
        "{}",
        proposal.pattern
    );
    let decided = alice
        .decide_approval(pb::DecideApprovalRequest {
            remember: Some(pb::Remember {
                scope: pb::LearnedRuleScope::All as i32,
                ttl: None,
            }),
            ..approve(&first)
        })
        .await
        .unwrap()
        .into_inner();
    let rule = decided.rule.expect("a rule was learned");
    assert_eq!(rule.pattern, proposal.pattern);
    assert_eq!(rule.source_approval_id, first);

    // The held connection takes its approval; later runs, in any session, need none.
    let r = exec
        .authorize(ask("run-1/a", "s1", "example.com", 443))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(ok) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(ok.approval_id, first);
    for (call, session) in [("run-2/a", "s2"), ("run-3/a", "s3")] {
        let r = exec
            .authorize(ask(call, session, "example.com", 443))
            .await
            .unwrap()
            .into_inner();
        let R::Allowed(ok) = result(&r) else {
            panic!("{call}: {r:?}")
        };
        assert!(ok.approval_id.is_empty(), "{ok:?}");
        assert_eq!(deciding_rule(&r), format!("learned.{}", rule.rule_id));
        assert_eq!(r.explanation.unwrap().tier, Tier::Auto as i32);
    }
    // Only that destination: another port, a name below it, the same host under another
    // profile still ask.
    let mut other_profile = ask("run-4/c", "s2", "example.com", 443);
    if let Some(c) = other_profile.call.as_mut() {
        c.sandbox_profile = Some("workspace".into());
    }
    for req in [
        ask("run-4/a", "s2", "example.com", 8443),
        ask("run-4/b", "s2", "www.example.com", 443),
        other_profile,
    ] {
        let r = exec.authorize(req).await.unwrap().into_inner();
        pending_id(&r);
    }
    let listed = alice
        .list_rules(pb::ListRulesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.rules.len(), 1);
    assert_eq!(listed.rules[0].rule_id, rule.rule_id);

    // Revoked, the destination asks again.
    alice
        .revoke_rule(pb::RevokeRuleRequest {
            rule_id: format!("learned.{}", rule.rule_id),
        })
        .await
        .unwrap();
    let r = exec
        .authorize(ask("run-5/a", "s5", "example.com", 443))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pending_id(&r), first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn networked_runs_carry_denied_hosts_and_their_destinations_are_kept() {
    let (_db, server) = start().await;
    let mut exec = server.policy(EXEC).await;

    // `npm ci` is moved to the network profile, where it is auto.
    let r = exec
        .authorize(authorize("run-npm", "s1", "agent-1", run(&["npm", "ci"])))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(allowed) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(allowed.sandbox_profile, "network");
    for h in ["metadata.google.internal", "metadata", "instance-data"] {
        assert!(
            allowed.denied_hosts.iter().any(|d| d == h),
            "{h}: {:?}",
            allowed.denied_hosts
        );
    }
    // Address blocks are not names: the gate decides those connections itself.
    assert!(!allowed.denied_hosts.iter().any(|h| h.contains('/')));

    // A run without network needs none.
    let mut ws = run(&["cargo", "test"]);
    ws.sandbox_profile = Some("workspace".into());
    let r = exec
        .authorize(authorize("run-ws", "s1", "agent-1", ws))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(a) = result(&r) else {
        panic!("{r:?}")
    };
    assert!(a.denied_hosts.is_empty(), "{:?}", a.denied_hosts);

    // The destinations the run's gate saw are recorded and come back with the outcome.
    let network = vec![
        common::NetworkDestination {
            host: "registry.npmjs.org".into(),
            port: 443,
            protocol: "tcp".into(),
            address: "104.16.0.35:443".into(),
            tier: Tier::Auto as i32,
            rule_id: "package-registries".into(),
            connections: 4,
            bytes_sent: 2_048,
            bytes_received: 7_340_032,
            ..Default::default()
        },
        common::NetworkDestination {
            host: "metadata.google.internal".into(),
            port: 80,
            protocol: "tcp".into(),
            tier: Tier::Deny as i32,
            rule_id: "cloud-metadata".into(),
            connections: 1,
            refused: 1,
            refusal: "denied".into(),
            message: "cloud metadata services hand out the host's credentials".into(),
            ..Default::default()
        },
    ];
    let mut outcome = exited(0);
    outcome.isolation = Some(pb::RunIsolation {
        sandbox_profile: "network".into(),
        sandboxed: true,
        network: true,
        ..Default::default()
    });
    outcome.network = network.clone();
    exec.record_outcome(pb::RecordOutcomeRequest {
        decision_id: allowed.decision_id.clone(),
        outcome: Some(outcome),
    })
    .await
    .unwrap();
    let r = exec
        .authorize(authorize("run-npm", "s1", "agent-1", run(&["npm", "ci"])))
        .await
        .unwrap()
        .into_inner();
    let R::AlreadyExecuted(done) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(done.outcome.as_ref().unwrap().network, network);
}
