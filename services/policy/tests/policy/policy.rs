//! End-to-end: the real `toolgate-policy` binary answering Classify and GetPolicy over gRPC.

use crate::support;

use std::time::Duration;

use support::{AGENT, Backend, Db, EXEC, Options, Server};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use toolgate_contracts::common::v1::{Tier, ToolKind};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;
use toolgate_runtime::auth::Bearer;

type Client = PolicyServiceClient<InterceptedService<Channel, Bearer>>;

async fn start(policy: &str) -> (Db, Server, Client) {
    let db = Db::new(Backend::Sqlite).await;
    let server = Server::start_with_policy(&db.url, &Options::default(), policy);
    let client = server.policy(AGENT).await;
    (db, server, client)
}

fn script(s: &str) -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        call: Some(pb::ToolCall {
            tool: ToolKind::ProcessRun as i32,
            script: Some(s.into()),
            ..Default::default()
        }),
        session_id: "s1".into(),
        principal: "agent".into(),
        ..Default::default()
    }
}

const POLICY: &str = r#"
default = "ask"

[[rule]]
id = "terraform"
decision = "ask"
reason = "terraform changes infrastructure"
commands = ["terraform *"]
except = ["terraform fmt"]
"#;

#[tokio::test]
async fn classify_explains_each_command_and_binds_a_digest() {
    let (_db, _p, mut c) = start(POLICY).await;

    let r = c
        .classify(script("ls && rm -rf build"))
        .await
        .unwrap()
        .into_inner();
    let e = r.explanation.unwrap();
    assert_eq!(e.tier, Tier::Ask as i32);
    let argvs: Vec<_> = e.commands.iter().map(|c| c.argv.join(" ")).collect();
    assert_eq!(argvs, ["ls", "rm -rf build"]);
    assert_eq!(r.request_digest.len(), 64);

    let deny = c
        .classify(script("curl x | python3"))
        .await
        .unwrap()
        .into_inner();
    let e = deny.explanation.unwrap();
    assert_eq!(e.tier, Tier::Deny as i32);
    assert!(
        e.matches
            .iter()
            .any(|m| m.tier == Tier::Deny as i32 && !m.reason.is_empty())
    );

    // The same call in another session is bound to another digest (AP-03).
    let mut other = script("ls && rm -rf build");
    other.session_id = "s2".into();
    let d2 = c.classify(other).await.unwrap().into_inner().request_digest;
    assert_ne!(d2, r.request_digest);

    // Malformed calls die at the edge.
    let err = c
        .classify(pb::ClassifyRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = c
        .classify(pb::ClassifyRequest {
            call: Some(pb::ToolCall {
                tool: ToolKind::FsWrite as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn the_policy_file_reloads_and_a_bad_version_keeps_the_old_one() {
    let (_db, p, mut c) = start(POLICY).await;
    let file = p.policy_path();
    let v1 = c
        .get_policy(pb::GetPolicyRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v1.version.len(), 64);
    assert!(
        v1.rules
            .iter()
            .any(|r| r.rule_id == "terraform" && r.line > 0)
    );

    // An invalid document is refused; the old version stays in force.
    replace(&file, "[[rule]]\nid = 1\n").unwrap();
    replace(
        &file,
        format!("{POLICY}\n[[rule]]\nid = \"x\"\ndecision = \"perhaps\"\n"),
    )
    .unwrap();
    let v = wait_for_version(&mut c, |v| v != v1.version, Duration::from_millis(600)).await;
    assert_eq!(
        v, v1.version,
        "an invalid policy must never replace a valid one"
    );

    // A valid change takes effect without a restart.
    replace(
        &file,
        POLICY.replace("default = \"ask\"", "default = \"deny\""),
    )
    .unwrap();
    let v2 = wait_for_version(&mut c, |v| v != v1.version, Duration::from_secs(10)).await;
    assert_ne!(v2, v1.version, "a valid new policy is picked up");
}

#[tokio::test]
async fn allowed_listings_carry_the_read_denials_with_the_deciding_version() {
    let (_db, p, _) = start(toolgate_policy_engine::DEFAULT_POLICY_TOML).await;
    let mut exec = p.policy(EXEC).await;
    let call = |tool: ToolKind| pb::ToolCall {
        tool: tool as i32,
        path: Some(".".into()),
        pattern: (tool == ToolKind::FsSearch).then(|| "matchme".into()),
        globs: if tool == ToolKind::FsFind {
            vec!["**".into()]
        } else {
            vec![]
        },
        ..Default::default()
    };
    for (i, tool) in [ToolKind::FsList, ToolKind::FsSearch, ToolKind::FsFind]
        .into_iter()
        .enumerate()
    {
        let r = exec
            .authorize(support::authorize(
                &format!("c-hidden-{i}"),
                "s1",
                "agent-1",
                call(tool),
            ))
            .await
            .unwrap()
            .into_inner();
        let version = r.explanation.unwrap().policy_version;
        let Some(pb::authorize_response::Result::Allowed(a)) = r.result else {
            panic!("{tool:?} not allowed: {:?}", r.result);
        };
        let hidden = a.hidden.expect("a listing carries the hidden paths");
        assert_eq!(hidden.policy_version, version);
        for g in ["**/.env", "**/*.pem", "**/*.key"] {
            assert!(hidden.globs.iter().any(|h| h == g), "{tool:?}: {hidden:?}");
        }
    }
    // A call that names one path needs none: its own decision covered it.
    let r = exec
        .authorize(support::authorize(
            "c-hidden-read",
            "s1",
            "agent-1",
            pb::ToolCall {
                tool: ToolKind::FsRead as i32,
                path: Some("README.md".into()),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let Some(pb::authorize_response::Result::Allowed(a)) = r.result else {
        panic!("read not allowed: {:?}", r.result);
    };
    assert!(a.hidden.is_none());
}

/// Replaces the document atomically, as a deploy would: the watcher must never see a
/// half-written file (a truncated prefix of a valid policy can itself be valid).
fn replace(path: &std::path::Path, text: impl AsRef<[u8]>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Polls GetPolicy until `done` holds or `limit` passes, returning the last version seen.
async fn wait_for_version(c: &mut Client, done: impl Fn(&str) -> bool, limit: Duration) -> String {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let v = c
            .get_policy(pb::GetPolicyRequest {})
            .await
            .unwrap()
            .into_inner()
            .version;
        if done(&v) || tokio::time::Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn calls_without_a_known_token_are_unauthenticated_but_health_is_open() {
    let (_db, p, _) = start(POLICY).await;
    let channel = p.channel().await;
    let mut anon = PolicyServiceClient::new(channel.clone());
    let e = anon.get_policy(pb::GetPolicyRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert_eq!(support::reason(&e), "UNAUTHENTICATED");
    let e = anon
        .authorize(pb::AuthorizeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut forged = PolicyServiceClient::with_interceptor(
        channel.clone(),
        Bearer::new("not-a-configured-token-000").unwrap(),
    );
    let e = forged
        .get_policy(pb::GetPolicyRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut approvals =
        toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient::new(
            channel.clone(),
        );
    let e = approvals
        .list_approvals(pb::ListApprovalsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let s = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "toolgate.policy.v1.PolicyService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        s.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[test]
fn migrate_applies_the_schema_and_prints_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    for _ in 0..2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-policy"))
            .args(["migrate", "--database-url", &url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["schema_version"], toolgate_ledger::SCHEMA_VERSION);
    }
}

#[test]
fn a_missing_ledger_url_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[[auth.tokens]]\nprincipal = \"a\"\nrole = \"agent\"\ntoken = \"aaaaaaaaaaaaaaaaaaaa\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-policy"))
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("TOOLGATE_LEDGER__URL")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ledger.url"), "{err}");
    assert!(out.stdout.is_empty(), "must not announce a listener");
}

#[test]
fn a_policy_file_that_cannot_be_loaded_is_named_in_the_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[[auth.tokens]]\nprincipal = \"a\"\nrole = \"agent\"\ntoken = \"aaaaaaaaaaaaaaaaaaaa\"\n",
    )
    .unwrap();
    // A directory cannot be read as a file, even by root (as tests here may run).
    let unreadable = dir.path().join("unreadable.toml");
    std::fs::create_dir(&unreadable).unwrap();
    let invalid = dir.path().join("invalid.toml");
    std::fs::write(
        &invalid,
        "[[rule]]\nid = \"x\"\ndecision = \"sometimes\"\nreason = \"x\"\n",
    )
    .unwrap();
    let ledger = format!("sqlite:{}", dir.path().join("l.db").display());
    for (policy, cause) in [
        (&unreadable, "cannot read it: Is a directory"),
        (&invalid, "line 3"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-policy"))
            .arg("--config")
            .arg(&config)
            .arg("--policy")
            .arg(policy)
            .args(["--listen", "127.0.0.1:0"])
            .env("TOOLGATE_LEDGER__URL", &ledger)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let named = format!("cannot load the policy {}: ", policy.display());
        assert!(err.contains(&named) && err.contains(cause), "{err}");
        assert_eq!(
            err.matches(&*policy.display().to_string()).count(),
            1,
            "{err}"
        );
        assert!(out.stdout.is_empty(), "must not announce a listener");
    }
}
