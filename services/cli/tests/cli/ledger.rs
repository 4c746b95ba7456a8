//! `toolgate ledger migrate` and `verify` against real SQLite and Postgres ledgers.

use crate::support;

use sha2::{Digest, Sha256};
use support::{raw, text, toolgate};
use toolgate_core::{Tier, ToolKind};
use toolgate_ledger::testing::FreshPg;
use toolgate_ledger::{
    CallId, Ledger, LedgerConfig, NewDecision, PolicyVersion, Principal, RequestDigest, RuleId,
    SessionId, SqlLedger,
};

/// Records a few auto decisions the way the policy service does.
async fn populate(url: &str) {
    let ledger = SqlLedger::connect(LedgerConfig::new(url))
        .await
        .expect("ledger opens");
    for call in ["c1", "c2", "c3"] {
        ledger
            .record_decision(NewDecision {
                call_id: CallId::try_from(call).unwrap(),
                session_id: SessionId::try_from("s").unwrap(),
                principal: Principal::try_from("agent").unwrap(),
                tool: ToolKind::ProcessRun,
                digest: RequestDigest::from_bytes(Sha256::digest(call.as_bytes()).into()),
                request_json: format!(r#"{{"argv":["echo","{call}"]}}"#),
                tier: Tier::Auto,
                rule_ids: vec![RuleId::try_from("r.echo").unwrap()],
                policy_version: PolicyVersion::try_from("v1").unwrap(),
                trace_id: None,
                executor: Some(Principal::try_from("executor").unwrap()),
                executor_reported: None,
                lease: None,
            })
            .await
            .expect("decision recorded");
    }
    ledger.close().await;
}

/// Migrate, verify clean, hand-edit a row, verify broken.
async fn migrate_verify_and_detect_an_edit(url: &str) {
    let m = toolgate(&["ledger", "migrate", "--database-url", url], &[]);
    assert!(m.status.success(), "{}", text(&m));
    assert!(
        String::from_utf8_lossy(&m.stdout).contains("schema version"),
        "{}",
        text(&m)
    );
    populate(url).await;

    // DATABASE_URL is the fallback for the flag.
    let ok = toolgate(&["ledger", "verify"], &[("DATABASE_URL", url)]);
    assert!(ok.status.success(), "{}", text(&ok));
    let json = toolgate(&["ledger", "verify", "--json"], &[("DATABASE_URL", url)]);
    assert!(json.status.success(), "{}", text(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["head"].as_str().map(str::len), Some(64), "{v}");
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(out.contains("chain   ok"), "{out}");
    let events: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("events  "))
        .and_then(|n| n.trim().parse().ok())
        .expect("events line");
    assert!(events >= 3, "{out}");
    assert!(
        out.lines()
            .any(|l| l.strip_prefix("head    ").is_some_and(|h| h.len() == 64)),
        "{out}"
    );

    raw(
        url,
        r#"UPDATE tg_decisions SET request_json = '{"argv":["echo","forged"]}' WHERE call_id = 'c2'"#,
    )
    .await;
    let broken = toolgate(&["ledger", "verify", "--database-url", url], &[]);
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    let out = String::from_utf8_lossy(&broken.stdout);
    assert!(out.contains("chain   BROKEN"), "{out}");
    // The same verdict for programs: one JSON object, the same exit status.
    let json = toolgate(&["ledger", "verify", "--json", "--database-url", url], &[]);
    assert_eq!(json.status.code(), Some(1), "{}", text(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(v["events"].as_u64().unwrap() >= 3);
    assert!(v["problem"].as_str().is_some_and(|p| !p.is_empty()), "{v}");
}

#[tokio::test]
async fn sqlite_ledger_verifies_and_a_hand_edited_row_breaks_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("ledger.db").display());
    migrate_verify_and_detect_an_edit(&url).await;
}

#[tokio::test]
async fn postgres_ledger_verifies_and_a_hand_edited_row_breaks_it() {
    let db = FreshPg::create("toolgate_test");
    migrate_verify_and_detect_an_edit(db.url()).await;
}

#[test]
fn verifying_a_missing_sqlite_file_fails_without_creating_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.db");
    let url = format!("sqlite:{}", path.display());
    let o = toolgate(&["ledger", "verify", "--database-url", &url], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no ledger database"),
        "{}",
        text(&o)
    );
    assert!(!path.exists());
}

#[test]
fn no_database_url_is_a_usage_error() {
    let o = toolgate(&["ledger", "verify"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--database-url"));
}
