//! Learned rules on Postgres and SQLite: stored with their approval in one transaction,
//! revoked never deleted, revisioned, audited, and announced to every replica.

use crate::common;

use std::time::Duration;

use common::*;
use toolgate_core::{Reason, ReasonedError};
use toolgate_ledger::*;

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::common::on_postgres(super::$name).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::common::on_sqlite(super::$name).await;
                }
            )*
        }
    };
}

both!(
    a_rule_is_stored_with_its_approval_revoked_and_audited,
    a_rule_is_never_learned_from_a_denial_or_a_decided_approval,
);

fn rule(scope: &str, value: &str, ttl: Option<Duration>) -> NewLearnedRule {
    NewLearnedRule {
        pattern: r#"{"v":1,"profile":"","env":[],"shapes":[{"words":["=npm","=publish"],"lifts":["default"]}]}"#.into(),
        display: "npm publish".into(),
        scope: scope.into(),
        scope_value: value.into(),
        ttl,
    }
}

async fn a_rule_is_stored_with_its_approval_revoked_and_audited(ctx: Ctx) {
    let l = ctx.ledger().await;
    let before = l.learned_rules().await.unwrap();
    assert_eq!(before, LearnedRules::default());
    let generation = l.learned_generation();

    let out = l.ask(ask("c1", "s1", "npm publish")).await.unwrap();
    let (a, r) = l
        .decide_and_learn(
            out.approval.id.clone(),
            approve("bob"),
            rule("session", "s1", Some(Duration::from_secs(3600))),
        )
        .await
        .unwrap();
    assert_eq!(a.state, ApprovalState::Approved);
    assert!(r.id.as_str().starts_with("rul_"));
    assert_eq!(r.created_by, approver("bob"));
    assert_eq!(r.source_approval, a.id);
    assert_eq!(r.scope, "session");
    assert_eq!(r.scope_value, "s1");
    assert_eq!(
        r.expires_at.unwrap().as_micros() - r.created_at.as_micros(),
        3_600_000_000
    );
    assert!(r.active(ctx.clock.now()));

    let listed = l.learned_rules().await.unwrap();
    assert_eq!(listed.revision, 1);
    assert_eq!(listed.rules, vec![r.clone()]);
    // The change is announced to this replica (SQLite: at commit; Postgres: by NOTIFY).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while l.learned_generation() == generation {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no rules notification"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ...and to another replica reading the same database.
    let other = ctx.ledger().await;
    assert_eq!(other.learned_rules().await.unwrap().rules, vec![r.clone()]);

    let revoked = l
        .revoke_rule(r.id.clone(), approver("carol"))
        .await
        .unwrap();
    assert_eq!(revoked.revoked_by, Some(approver("carol")));
    assert!(!revoked.active(ctx.clock.now()));
    let again = l.revoke_rule(r.id.clone(), approver("carol")).await;
    let e = again.unwrap_err();
    assert!(matches!(e, Error::RuleNotFound { .. }), "{e}");
    assert_eq!(e.reason(), Reason::RuleNotFound);
    let unknown = l
        .revoke_rule(
            LearnedRuleId::try_from("rul_nope").unwrap(),
            approver("carol"),
        )
        .await;
    assert!(matches!(unknown, Err(Error::RuleNotFound { .. })));

    let listed = l.learned_rules().await.unwrap();
    assert_eq!(listed.revision, 2);
    assert_eq!(listed.rules, vec![revoked.clone()]);

    // Rows and events agree, and tampering with a rule is caught.
    let report = l.verify().await.unwrap();
    assert!(report.broken.is_none(), "{report:?}");
    ctx.raw("UPDATE tg_learned_rules SET scope = 'all'").await;
    let report = l.verify().await.unwrap();
    let broken = report.broken.expect("tampering detected");
    assert!(broken.problem.contains("learned rule"), "{broken:?}");
}

async fn a_rule_is_never_learned_from_a_denial_or_a_decided_approval(ctx: Ctx) {
    let l = ctx.ledger().await;
    let out = l.ask(ask("c1", "s1", "npm publish")).await.unwrap();
    let e = l
        .decide_and_learn(
            out.approval.id.clone(),
            deny("bob", "no"),
            rule("all", "", None),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Invalid {
                field: "remember",
                ..
            }
        ),
        "{e}"
    );
    let e = l
        .decide_and_learn(
            out.approval.id.clone(),
            approve("bob"),
            rule("galaxy", "", None),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
    l.decide(out.approval.id.clone(), approve("bob"))
        .await
        .unwrap();
    // Decided already: no rule is stored without its approval.
    let e = l
        .decide_and_learn(
            out.approval.id.clone(),
            approve("bob"),
            rule("all", "", None),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotPending { .. }), "{e}");
    // The requester cannot approve (and so learn from) its own call.
    let out = l.ask(ask("c2", "s1", "cargo publish")).await.unwrap();
    let mut own = approve("x");
    own.approver = out.approval.principal.clone();
    let e = l
        .decide_and_learn(out.approval.id.clone(), own, rule("all", "", None))
        .await
        .unwrap_err();
    assert_eq!(e.reason(), Reason::RoleNotPermitted);
    let listed = l.learned_rules().await.unwrap();
    assert_eq!(listed, LearnedRules::default());
    // A secret the redactor knows is never stored in a rule.
    let mut secret = rule("all", "", None);
    secret.display = format!("npm publish --otp {CANARY}");
    let e = l
        .decide_and_learn(out.approval.id.clone(), approve("bob"), secret)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
    let mut secret = rule("all", "", None);
    secret.pattern = secret.pattern.replace("=publish", &format!("={CANARY}"));
    let e = l
        .decide_and_learn(out.approval.id.clone(), approve("bob"), secret)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
    assert!(!ctx.dump().await.contains(CANARY));
}
