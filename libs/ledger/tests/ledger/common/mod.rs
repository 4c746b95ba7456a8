//! Test harness: a fresh Postgres database or SQLite file per test, dropped afterwards.

use std::future::Future;

use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Connection};
use toolgate_core::{Tier, ToolKind};
use toolgate_ledger::testing::FreshPg;
use toolgate_ledger::*;

pub(crate) const CANARY: &str = "CANARY-7f3a9c1e-secret";

/// One test's database.
pub(crate) struct Ctx {
    pub url: String,
    pub clock: Clock,
    pub time: ManualClock,
    pub pg: bool,
}

impl Ctx {
    pub(crate) fn config(&self) -> LedgerConfig {
        let mut c = LedgerConfig::new(self.url.clone());
        c.clock = self.clock.clone();
        c.redaction.secrets = vec![CANARY.to_owned()];
        c.max_connections = 8;
        c
    }

    pub(crate) async fn ledger(&self) -> SqlLedger {
        SqlLedger::connect(self.config())
            .await
            .expect("ledger opens")
    }

    /// Runs raw SQL as an attacker with database access would.
    pub(crate) async fn raw(&self, sql: &str) {
        if self.pg {
            let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
            sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
                .execute(&mut c)
                .await
                .unwrap();
        } else {
            let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
            sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
                .execute(&mut c)
                .await
                .unwrap();
        }
    }

    /// Every stored byte, as text, for leak checks.
    pub(crate) async fn dump(&self) -> String {
        if self.pg {
            let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
            let mut out = String::new();
            for q in [
                "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_decisions t",
                "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_approvals t",
                "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_outcomes t",
                "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_learned_rules t",
                "SELECT coalesce(string_agg(kind || subject || encode(payload, 'escape'), ''), '') FROM tg_audit",
            ] {
                let s: String = sqlx::query_scalar(q).fetch_one(&mut c).await.unwrap();
                out.push_str(&s);
            }
            out
        } else {
            let path = self.url.trim_start_matches("sqlite://");
            let mut bytes = std::fs::read(path).unwrap();
            if let Ok(wal) = std::fs::read(format!("{path}-wal")) {
                bytes.extend(wal);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

/// Runs `body` against a fresh Postgres database, dropping it afterwards even on failure.
pub(crate) async fn on_postgres<F, Fut>(body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    let db = FreshPg::create("tg_ledger_test");
    let (clock, time) = Clock::manual(Timestamp::from_micros(1_700_000_000_000_000));
    let ctx = Ctx {
        url: db.url().to_owned(),
        clock,
        time,
        pg: true,
    };
    body(ctx).await;
}

/// Runs `body` against a fresh SQLite file in a temporary directory.
pub(crate) async fn on_sqlite<F, Fut>(body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let (clock, time) = Clock::manual(Timestamp::from_micros(1_700_000_000_000_000));
    let ctx = Ctx {
        url: format!("sqlite://{}", dir.path().join("ledger.db").display()),
        clock,
        time,
        pg: false,
    };
    body(ctx).await;
}

pub(crate) fn digest(s: &str) -> RequestDigest {
    RequestDigest::from_bytes(Sha256::digest(s.as_bytes()).into())
}

pub(crate) fn new_decision(call: &str, session: &str, request: &str, tier: Tier) -> NewDecision {
    NewDecision {
        call_id: CallId::try_from(call).unwrap(),
        session_id: SessionId::try_from(session).unwrap(),
        principal: Principal::try_from("agent:a").unwrap(),
        tool: ToolKind::ProcessRun,
        digest: digest(request),
        request_json: format!(r#"{{"argv":{request:?}}}"#),
        tier,
        rule_ids: vec![RuleId::try_from("r.shell").unwrap()],
        policy_version: PolicyVersion::try_from("v1").unwrap(),
        trace_id: Some(TraceId::try_from("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()),
        executor: Some(Principal::try_from("executor-0").unwrap()),
        executor_reported: Some(r#"{"pod":"executor-0-pod"}"#.to_owned()),
        lease: None,
    }
}

pub(crate) fn ask(call: &str, session: &str, request: &str) -> AskRequest {
    AskRequest {
        decision: new_decision(call, session, request, Tier::Ask),
        explanation_json: format!(r#"{{"commands":[{request:?}]}}"#),
        pending_ttl: None,
    }
}

pub(crate) fn approver(name: &str) -> Principal {
    Principal::try_from(format!("approver:{name}")).unwrap()
}

pub(crate) fn approve(name: &str) -> Decide {
    Decide {
        approver: approver(name),
        verdict: Verdict::Approve {
            widen_to_session: false,
        },
        reason: Some("looks fine".into()),
        message: None,
        ttl: None,
    }
}

pub(crate) fn deny(name: &str, message: &str) -> Decide {
    Decide {
        approver: approver(name),
        verdict: Verdict::Deny,
        reason: None,
        message: Some(message.to_owned()),
        ttl: None,
    }
}

pub(crate) fn outcome(d: &DecisionRecord, lease: Option<LeaseToken>) -> NewOutcome {
    NewOutcome {
        isolation: None,
        integrity: None,
        decision_id: d.id.clone(),
        lease_token: lease,
        lease_held: false,
        executor_principal: Some(Principal::try_from("executor-0").unwrap()),
        executor: ExecutorRecord {
            pod: "executor-0".into(),
            node: "node-a".into(),
            namespace: "toolgate".into(),
            image: "toolgate/executor:dev".into(),
        },
        started_at: Timestamp::from_micros(1),
        finished_at: Timestamp::from_micros(2),
        exit: ExitStatus::Exited(0),
        stdout_bytes: 10,
        stderr_bytes: 0,
        stdout_truncated: false,
        stderr_truncated: false,
        error: None,
    }
}
