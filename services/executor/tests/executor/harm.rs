//! End to end: every command of the shipped adversarial corpus
//! (`libs/policy-engine/corpus/adversarial.txt`) goes through the real executor and the real
//! policy service with the shipped default policy, under the default `workspace` profile.
//! Whatever the policy now runs without a human runs for real, and harms nothing: no byte of
//! the sentinel outside the workspace or of the workspace's hidden secret comes back or lands
//! in the workspace, nothing is written outside the workspace or into the protected set, no
//! connection reaches a listener on the host's loopback, and committed work survives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use futures::StreamExt;

use crate::process::{run, script};
use crate::support::{self, Executor, SENTINEL, Sandbox, reason};

const DEFAULT_POLICY: &str = include_str!("../../../../libs/policy-engine/default-policy.toml");
const CORPUS: &str = include_str!("../../../../libs/policy-engine/corpus/adversarial.txt");
/// The hidden secret: `.env` in the workspace, which the shipped policy denies.
const SECRET: &str = "SECRET=hidden-7331";
const SECRET_MARK: &str = "hidden-7331";
/// Host paths the corpus writes to (outside the workspace): no run may create or change them.
const HOST_PATHS: &[&str] = &[
    "/tmp/tg-temp",
    "/tmp/tg-x",
    "/tmp/tg-dir",
    "/tmp/outside-tmp",
    "/tmp/x.py",
    "/tmp/x",
    "/tmp/hook",
    "/tmp/empty",
];

fn git(ws: &Path, args: &[&str]) -> (bool, String) {
    let o = std::process::Command::new("git")
        .args(args)
        .current_dir(ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "human")
        .env("GIT_AUTHOR_EMAIL", "human@example.com")
        .env("GIT_COMMITTER_NAME", "human")
        .env("GIT_COMMITTER_EMAIL", "human@example.com")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

/// The workspace: a repository with committed work, an ignored secret.
fn fixture(ws: &Path) {
    let files = [
        ("README.md", "# project\n"),
        ("Cargo.toml", "[package]\nname = \"p\"\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("src/lib.rs", "pub fn f() {}\n"),
        ("docs/guide.md", "guide\n"),
        (".gitignore", ".env\n"),
    ];
    for (p, c) in files {
        let p = ws.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    }
    assert!(git(ws, &["init", "-q", "."]).0);
    assert!(git(ws, &["add", "-A"]).0);
    assert!(git(ws, &["commit", "-qm", "work"]).0);
    std::fs::write(ws.join(".env"), SECRET).unwrap();
}

/// What must not change: refs, the repository's configuration, its hooks.
fn repository_state(ws: &Path) -> (String, Vec<u8>, Vec<String>) {
    let refs = git(ws, &["for-each-ref", "--format=%(refname) %(objectname)"]).1
        + &git(ws, &["rev-parse", "HEAD"]).1;
    let config = std::fs::read(ws.join(".git/config")).unwrap();
    let mut hooks: Vec<String> = std::fs::read_dir(ws.join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    hooks.sort();
    (refs, config, hooks)
}

fn host_paths() -> BTreeMap<&'static str, Option<SystemTime>> {
    HOST_PATHS
        .iter()
        .map(|p| {
            (
                *p,
                std::fs::symlink_metadata(p)
                    .ok()
                    .and_then(|m| m.modified().ok()),
            )
        })
        .collect()
}

/// Every regular file under `dir` but `.git` and the secret itself.
fn workspace_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() && e.file_name() != ".git" {
            workspace_files(&p, out);
        } else if m.is_file() && e.file_name() != ".env" {
            out.push(p);
        }
    }
}

enum Answer {
    Ran(Vec<u8>),
    Ask,
    Deny,
    Refused(String),
}

async fn submit(exe: &Executor, line: &str) -> Answer {
    let mut req = script(line);
    req.timeout = Some(prost_types::Duration {
        seconds: 5,
        nanos: 0,
    });
    match run(exe, req).await {
        Ok(o) => {
            let mut bytes = o.stdout;
            bytes.extend_from_slice(&o.stderr);
            Answer::Ran(bytes)
        }
        Err(e) if reason(&e) == "APPROVAL_REQUIRED" => Answer::Ask,
        Err(e) if reason(&e) == "POLICY_DENIED" => Answer::Deny,
        Err(e) => Answer::Refused(format!("{}: {}", reason(&e), e.message())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_adversarial_commands_harm_nothing() {
    let sb = Sandbox::new();
    let ws = sb.ws.clone();
    fixture(&ws);
    let policy = support::Policy::start(DEFAULT_POLICY);
    // Eight runs of one session at a time: each reserves a smaller memory limit than the
    // default so the session's fair share holds them all, and a run that still finds no room
    // waits for one (runs end within their 5 s timeout) instead of being refused BUSY.
    let exe = Executor::start_with(
        &policy,
        &ws,
        &[],
        &[
            ("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "536870912"),
            ("TOOLGATE_PROCESS__ADMISSION__QUEUE_WAIT_MS", "30000"),
        ],
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();

    let outside = sb.outside_snapshot();
    let repo = repository_state(&ws);
    let host = host_paths();
    let lines: Vec<String> = CORPUS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.replace("4444", &port))
        .collect();
    assert!(lines.len() >= 300, "{} lines", lines.len());

    let (mut auto, mut ask, mut deny) = (0usize, 0usize, 0usize);
    let mut harms: Vec<String> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut touched_tracked = 0usize;
    for batch in lines.chunks(24) {
        let answers: Vec<(String, Answer)> = futures::stream::iter(batch.iter())
            .map(|l| {
                let exe = &exe;
                async move { (l.clone(), submit(exe, l).await) }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let mut ran: Vec<&str> = Vec::new();
        for (line, a) in &answers {
            match a {
                Answer::Ran(out) => {
                    auto += 1;
                    ran.push(line);
                    let text = String::from_utf8_lossy(out);
                    if text.contains(SENTINEL) || text.contains(SECRET_MARK) {
                        harms.push(format!("output carries the sentinel or the secret: {line}"));
                    }
                }
                Answer::Ask => ask += 1,
                Answer::Deny => deny += 1,
                Answer::Refused(why) => refused.push(format!("{line}: {why}")),
            }
        }
        // The batch's effects, checked before the workspace is put back.
        let blame = || ran.join("\n      ");
        if sb.outside_snapshot() != outside {
            harms.push(format!(
                "wrote outside the workspace; one of:\n      {}",
                blame()
            ));
        }
        if host_paths() != host {
            harms.push(format!("wrote the host's /tmp; one of:\n      {}", blame()));
        }
        if listener.accept().is_ok() {
            harms.push(format!(
                "reached the host's loopback; one of:\n      {}",
                blame()
            ));
        }
        if repository_state(&ws) != repo {
            harms.push(format!(
                "changed refs, .git/config or hooks; one of:\n      {}",
                blame()
            ));
        }
        let (fsck_ok, fsck) = git(&ws, &["fsck", "--full", "--no-dangling"]);
        if !fsck_ok {
            harms.push(format!(
                "committed work is damaged: {fsck}; one of:\n      {}",
                blame()
            ));
        }
        if std::fs::read_to_string(ws.join(".env")).ok().as_deref() != Some(SECRET) {
            harms.push(format!(
                "the secret file changed; one of:\n      {}",
                blame()
            ));
        }
        let mut files = Vec::new();
        workspace_files(&ws, &mut files);
        for f in files {
            let bytes = std::fs::read(&f).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            if text.contains(SENTINEL) || text.contains(SECRET_MARK) {
                harms.push(format!(
                    "{} carries the sentinel or the secret; one of:\n      {}",
                    f.display(),
                    blame()
                ));
            }
        }
        // Tracked files a run rewrote or removed are recoverable from the commit (checked by
        // fsck above); count them, then put the workspace back for the next batch.
        let status = git(&ws, &["status", "--porcelain", "--untracked-files=no"]).1;
        touched_tracked += status.lines().count();
        assert!(git(&ws, &["checkout", "-qf", "HEAD", "--", "."]).0);
        assert!(git(&ws, &["clean", "-qfdx", "-e", ".env"]).0);
    }
    println!(
        "adversarial corpus through the executor (shipped policy, workspace profile): {} scripts; {auto} ran (auto), {ask} ask, {deny} deny, {} refused otherwise; {touched_tracked} tracked files rewritten or removed (restored from the commit)",
        lines.len(),
        refused.len()
    );
    for r in &refused {
        println!("  refused: {r}");
    }
    assert!(harms.is_empty(), "harm:\n  {}", harms.join("\n  "));
    assert!(auto > 0 && ask > 0 && deny > 0, "{auto} {ask} {deny}");
    assert!(
        refused.is_empty(),
        "refused for other reasons:\n  {}",
        refused.join("\n  ")
    );
}
