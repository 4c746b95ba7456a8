//! End-to-end: `FilesystemService.DeletePath` and the disk budget of runs, on the real executor
//! behind the real policy service. Deletion runs under the shipped default policy: a single
//! deletion is auto like a write, a tree asks, secrets are denied, protected paths refused,
//! escapes and the root refused. A run past its disk budget is stopped and recorded, and the
//! agent cleans up after it with a deletion.

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
    support::approve(&mut approvals, approval_id).await.unwrap();
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

/// An executor whose runs may add 1 MiB and 1 000 entries to the workspace, sampled every
/// 100 ms, behind a permissive policy (a recursive deletion still asks: the baseline).
fn budgeted(sb: &Sandbox) -> Executor {
    Executor::start(
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_PROCESS__DISK__MAX_WRITTEN_BYTES", "1048576"),
            ("TOOLGATE_PROCESS__DISK__MAX_CREATED_FILES", "1000"),
            ("TOOLGATE_PROCESS__DISK__SAMPLE_INTERVAL_MS", "100"),
        ],
    )
}

/// A run of `s`; scripts with computed paths ask, so the tests keep a human approving.
fn run_script(s: &str) -> pb::RunRequest {
    let mut r = crate::process::script(s);
    r.context = support::ctx_waiting(30);
    r.timeout = Some(prost_types::Duration {
        seconds: 60,
        nanos: 0,
    });
    r
}

fn cancelled_cause(o: &crate::process::Outcome) -> String {
    use toolgate_contracts::common::v1::exit_status::Status as S;
    match crate::process::status(o) {
        S::Cancelled(c) => c.cause,
        other => panic!("expected a cancelled run, got {other:?}"),
    }
}

#[tokio::test]
async fn a_run_writing_past_its_byte_budget_is_stopped() {
    let sb = Sandbox::new();
    let exe = budgeted(&sb);
    let _human = support::approve_everything(exe.policy()).await;
    // 100 files of 100 kB, none past the per-file limit: only the sampled total catches it.
    let started = std::time::Instant::now();
    let out = crate::process::run(
        &exe,
        run_script(
            "for i in $(seq 1 100); do head -c 100000 /dev/zero > f$i; sleep 0.05; done; echo done",
        ),
    )
    .await
    .unwrap();
    assert_eq!(cancelled_cause(&out), "disk_limit");
    let hit = out
        .exited
        .limit_exceeded
        .clone()
        .expect("the budget it hit");
    assert_eq!((hit.resource.as_str(), hit.limit), ("disk_bytes", 1 << 20));
    assert!(hit.message.contains("1 MiB disk budget"), "{}", hit.message);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("done"));
    let written = std::fs::read_dir(&sb.ws).unwrap().count();
    assert!((10..100).contains(&written), "{written} files were written");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// A write past `RLIMIT_FSIZE` (the byte budget lowers it to 1 MiB) kills the writer with
/// SIGXFSZ, and the outcome says the file-size limit ended the run, in words for the model.
/// (The run's first process is its PID namespace's init, which the kernel spares that signal:
/// its own write fails with EFBIG instead, so the writer here is a command of its shell.)
#[tokio::test]
async fn a_write_past_the_file_size_limit_is_reported_as_that_limit() {
    use toolgate_contracts::common::v1::exit_status::Status as S;
    let sb = Sandbox::new();
    let exe = budgeted(&sb);
    let _human = support::approve_everything(exe.policy()).await;
    let head = run_script("head -c 3000000 /dev/zero > big1 && echo never");
    let dd = run_script("dd if=/dev/zero of=big2 bs=1M count=3 && echo never");
    for (req, file) in [(head, "big1"), (dd, "big2")] {
        let out = crate::process::run(&exe, req).await.unwrap();
        match crate::process::status(&out) {
            S::Signaled(s) => assert_eq!(s.name, "SIGXFSZ", "{file}"),
            // 128 + SIGXFSZ (25): how a shell reports a command that signal killed.
            S::Exited(code) => assert_eq!(code, 153, "{file}"),
            other => panic!("{file}: {other:?}"),
        }
        let hit = out.exited.limit_exceeded.clone().expect("the limit it hit");
        assert_eq!((hit.resource.as_str(), hit.limit), ("file_size", 1 << 20));
        assert!(
            hit.message
                .starts_with("the run exceeded its 1 MiB file-size limit"),
            "{}",
            hit.message
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
        assert_eq!(std::fs::metadata(sb.ws.join(file)).unwrap().len(), 1 << 20);
    }
}

#[tokio::test]
async fn a_run_under_its_budget_is_unaffected() {
    let sb = Sandbox::new();
    // A workspace that already holds more than one run's budget: only what a run adds counts
    // (50 small files take a 4 KiB block each: about 700 KiB allocated in all).
    for i in 0..1_500 {
        std::fs::write(sb.ws.join(format!("old{i}")), "x".repeat(1000)).unwrap();
    }
    let exe = budgeted(&sb);
    let _human = support::approve_everything(exe.policy()).await;
    let out = crate::process::run(
        &exe,
        run_script("mkdir out && for i in $(seq 1 50); do echo $i > out/$i; done; head -c 500000 /dev/zero > out/blob; sleep 0.5; echo ok"),
    )
    .await
    .unwrap();
    use toolgate_contracts::common::v1::exit_status::Status as S;
    assert!(
        matches!(crate::process::status(&out), S::Exited(0)),
        "{:?} {}",
        crate::process::status(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"ok\n");
    assert!(
        out.exited.limit_exceeded.is_none(),
        "{:?}",
        out.exited.limit_exceeded
    );
}

/// The story at a smaller scale: one run creates files without end; it is stopped at
/// its budget and the ledger records why; the agent deletes what it made (a recursive deletion,
/// which a human approves) and its next run works. Before, only a human could recover.
#[tokio::test]
async fn a_run_creating_too_many_files_is_stopped_and_the_agent_cleans_up() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("keep.txt"), "keep").unwrap();
    let exe = budgeted(&sb);
    let _human = support::approve_everything(exe.policy()).await;
    let flood = run_script("mkdir -p gen && i=0; while true; do i=$((i+1)); : > gen/f$i; done");
    let out = crate::process::run(&exe, flood.clone()).await.unwrap();
    assert_eq!(cancelled_cause(&out), "disk_limit");
    let hit = out
        .exited
        .limit_exceeded
        .clone()
        .expect("the budget it hit");
    assert_eq!((hit.resource.as_str(), hit.limit), ("disk_files", 1000));
    assert!(hit.message.contains("DeletePath"), "{}", hit.message);
    let made = std::fs::read_dir(sb.ws.join("gen")).unwrap().count();
    assert!(made > 1000, "{made}");

    // The ledger has it: replaying the call says how it ended instead of running it again.
    let e = crate::process::run(&exe, flood)
        .await
        .err()
        .expect("not run again");
    assert_eq!(reason(&e), "ALREADY_EXECUTED");
    assert!(
        e.message().contains("cancelled:disk_limit"),
        "{}",
        e.message()
    );

    // The agent cleans up: a tree asks, a human approves, the deletion runs.
    let mut fs = exe.fs().await;
    let mut req = del("gen", true);
    req.context = support::ctx_waiting(30);
    let r = fs.delete_path(req).await.unwrap().into_inner();
    assert_eq!(r.files_removed, made as u64);
    assert!(!sb.ws.join("gen").exists());
    assert_eq!(
        std::fs::read_to_string(sb.ws.join("keep.txt")).unwrap(),
        "keep"
    );

    let out = crate::process::run(&exe, run_script("ls")).await.unwrap();
    assert_eq!(out.stdout, b"keep.txt\n");
    assert!(out.exited.limit_exceeded.is_none());
}
