//! End-to-end: the real `toolgate-policy` binary answering Classify and GetPolicy over gRPC.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tonic::transport::Channel;
use toolgate_contracts::common::v1::{Tier, ToolKind};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;

struct Policy {
    child: Child,
    addr: String,
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(policy_file: &Path) -> Policy {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate-policy"))
        .args(["--listen", "127.0.0.1:0", "--policy"])
        .arg(policy_file)
        .env("TOOLGATE_RELOAD_INTERVAL_MS", "50")
        .env("TOOLGATE_LOG__FILTER", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn toolgate-policy");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).expect("listening line");
    Policy {
        child,
        addr: v["listening"].as_str().unwrap().to_owned(),
    }
}

async fn client(p: &Policy) -> PolicyServiceClient<Channel> {
    PolicyServiceClient::connect(format!("http://{}", p.addr))
        .await
        .unwrap()
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
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, POLICY).unwrap();
    let p = start(&file);
    let mut c = client(&p).await;

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
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, POLICY).unwrap();
    let p = start(&file);
    let mut c = client(&p).await;
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
    std::fs::write(&file, "[[rule]]\nid = 1\n").unwrap();
    std::fs::write(
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
    std::fs::write(
        &file,
        POLICY.replace("default = \"ask\"", "default = \"deny\""),
    )
    .unwrap();
    let v2 = wait_for_version(&mut c, |v| v != v1.version, Duration::from_secs(10)).await;
    assert_ne!(v2, v1.version, "a valid new policy is picked up");
}

/// Polls GetPolicy until `done` holds or `limit` passes, returning the last version seen.
async fn wait_for_version(
    c: &mut PolicyServiceClient<Channel>,
    done: impl Fn(&str) -> bool,
    limit: Duration,
) -> String {
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
async fn authorize_is_refused_until_the_ledger_is_wired() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, POLICY).unwrap();
    let p = start(&file);
    let err = client(&p)
        .await
        .authorize(pb::AuthorizeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
    let (reason, _) = toolgate_contracts::status::error_info(&err).unwrap();
    assert_eq!(reason, "UNSUPPORTED");
}
