//! End-to-end: `FilesystemService.DeletePath` on the real executor behind the real policy
//! service. Deletion runs under the shipped default policy: a single deletion is auto like a
//! write, a tree asks, secrets are denied, protected paths refused, escapes and the root
//! refused.

use crate::support;

use support::{Executor, Policy, SENTINEL, Sandbox, ctx, reason};
use tonic::Code;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::policy::v1 as ppb;

/// The policy toolgate ships.
const DEFAULT_POLICY: &str = include_str!("../../../../libs/policy-engine/default-policy.toml");

fn del(path: &str, recursive: bool) -> pb::DeletePathRequest {
    pb::DeletePathRequest {
        context: ctx(),
        path: path.into(),
        recursive,
        ..Default::default()
    }
}

fn meta(s: &tonic::Status) -> std::collections::HashMap<String, String> {
    toolgate_contracts::status::error_info(s).unwrap().1
}

#[tokio::test]
async fn delete_path_under_the_default_policy() {
    let sb = Sandbox::new();
    let policy = Policy::start(DEFAULT_POLICY);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    for (p, c) in [
        ("src/old.rs", "fn old() {}\n"),
        ("build/a/b.o", "0123456789"),
        ("build/c.o", "01234"),
        ("ops/credentials.json", "{\"token\": \"t\"}"),
        ("cache/tmp.bin", "x"),
        ("cache/deep/credentials.json", "{}"),
        (".git/config", "[core]\n"),
    ] {
        std::fs::create_dir_all(sb.ws.join(p).parent().unwrap()).unwrap();
        std::fs::write(sb.ws.join(p), c).unwrap();
    }
    std::os::unix::fs::symlink(sb.out.join("secret"), sb.ws.join("out-link")).unwrap();
    let before = sb.outside_snapshot();

    // One file: auto, like a write, with the receipt in the headers.
    let r = fs.delete_path(del("src/old.rs", false)).await.unwrap();
    assert_eq!(
        r.metadata()
            .get("toolgate-decision")
            .unwrap()
            .to_str()
            .unwrap(),
        "auto"
    );
    let r = r.into_inner();
    assert!(r.deleted);
    assert_eq!(r.r#type, pb::EntryType::File as i32);
    assert_eq!((r.files_removed, r.bytes_removed), (1, 12));
    assert!(!sb.ws.join("src/old.rs").exists());

    // A symlink to the outside: the link goes, the sentinel stays.
    let r = fs
        .delete_path(del("out-link", false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.r#type, pb::EntryType::Symlink as i32);
    assert_eq!(
        std::fs::read_to_string(sb.out.join("secret")).unwrap(),
        SENTINEL
    );

    // A non-empty directory without recursive: decided, then refused by the workspace.
    let e = fs.delete_path(del("build", false)).await.unwrap_err();
    assert_eq!(
        (e.code(), reason(&e).as_str()),
        (Code::FailedPrecondition, "DIRECTORY_NOT_EMPTY")
    );
    assert!(e.message().contains("recursive"), "{}", e.message());

    // A secret is denied by the policy, never approvable.
    let e = fs
        .delete_path(del("ops/credentials.json", false))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), reason(&e).as_str()),
        (Code::PermissionDenied, "POLICY_DENIED")
    );
    assert_eq!(meta(&e)["rule_id"], "secrets");
    // The protected set is refused before anyone is asked.
    for p in [".git/config", ".git"] {
        let e = fs.delete_path(del(p, true)).await.unwrap_err();
        assert_eq!(reason(&e), "PATH_PROTECTED", "{p}");
    }
    // Escapes and the root.
    for (p, want) in [
        ("../out/secret", "PATH_OUTSIDE_WORKSPACE"),
        ("src/../../out/secret", "PATH_OUTSIDE_WORKSPACE"),
        (".", "INVALID_PATH"),
        ("src/..", "INVALID_PATH"),
    ] {
        let e = fs.delete_path(del(p, true)).await.unwrap_err();
        assert_eq!(reason(&e), want, "{p}");
    }

    // A tree asks a human, and nothing is removed until one approves.
    let tree = del("build", true);
    let e = fs.delete_path(tree.clone()).await.unwrap_err();
    assert_eq!(
        (e.code(), reason(&e).as_str()),
        (Code::FailedPrecondition, "APPROVAL_REQUIRED")
    );
    let approval_id = meta(&e)["approval_id"].clone();
    assert!(sb.ws.join("build/a/b.o").exists());
    let mut approvals = policy.approvals().await;
    let a = approvals
        .get_approval(ppb::GetApprovalRequest {
            approval_id: approval_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    let rules: Vec<_> = a
        .explanation
        .iter()
        .flat_map(|x| x.matches.iter().map(|m| m.rule_id.clone()))
        .collect();
    assert!(
        rules.contains(&"baseline.rm-recursive-or-forced".to_owned()),
        "{rules:?}"
    );
    approvals
        .decide_approval(ppb::DecideApprovalRequest {
            approval_id,
            verdict: ppb::Verdict::Approve as i32,
            reason: "clean build".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // The orchestrator repeats the same call (same call_id), which consumes the approval.
    let r = fs.delete_path(tree).await.unwrap();
    assert_eq!(
        r.metadata()
            .get("toolgate-decision")
            .unwrap()
            .to_str()
            .unwrap(),
        "ask"
    );
    let r = r.into_inner();
    assert_eq!(
        (r.files_removed, r.directories_removed, r.bytes_removed),
        (2, 2, 15)
    );
    assert!(!sb.ws.join("build").exists());

    // An approved tree that holds a path the policy hides is still refused whole, without
    // naming it.
    let _approver = support::approve_everything(&policy).await;
    let mut req = del("cache", true);
    req.context = support::ctx_waiting(30);
    let e = fs.delete_path(req).await.unwrap_err();
    assert_eq!(reason(&e), "PATH_DENIED");
    assert!(!e.message().contains("credentials.json"), "{}", e.message());
    assert!(sb.ws.join("cache/tmp.bin").exists());
    assert_eq!(sb.outside_snapshot(), before);
}
