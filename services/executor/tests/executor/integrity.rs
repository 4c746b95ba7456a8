//! End-to-end: nothing an allowed run writes may run on the human's host.
//!
//! Every run here is `auto` (the escape policy allows everything but the secrets rule), so the
//! kernel binds and the after-run audit are all that stand in the way. After the attacks, the
//! human's own tools (`git status`, `commit`, `diff`, a virtualenv's `python`) run on the host
//! and must execute nothing a run wrote. Root and unprivileged executors alike.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toolgate_contracts::common::v1 as common;

use crate::process::{Escape, SECRET, run, script, sh};
use crate::support;

/// Runs the host's git in `dir` as the human would (no system or global config, so only what
/// the repository itself says applies), ignoring its exit status.
fn host_git(dir: &Path, args: &[&str]) {
    let _ = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "human")
        .env("GIT_AUTHOR_EMAIL", "human@example.com")
        .env("GIT_COMMITTER_NAME", "human")
        .env("GIT_COMMITTER_EMAIL", "human@example.com")
        .output();
}

fn chown(ws: &Path, uid: Option<u32>) {
    if let Some(uid) = uid {
        let ok = std::process::Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}")])
            .arg(ws)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

/// Runs `attack` the way an agent gets it past the classifier: written to a script in the
/// workspace (as `fs.write` would), then run by a command a human approves without seeing the
/// script's effects. Only the kernel and the after-run audit see what it does.
async fn hidden(e: &Escape, uid: Option<u32>, attack: &str) -> crate::process::Outcome {
    let name = format!("ci-{}.sh", std::process::id() as u128 * 1_000_000 + nanos());
    let path = e.sb.ws.join(&name);
    std::fs::write(&path, attack).unwrap();
    if let Some(uid) = uid {
        std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    }
    // `sh FILE` asks (unreviewed contents); the suite's approver approves everything, and
    // an approved run is confined exactly like an automatic one.
    let mut req = script(&format!("sh {name}"));
    req.context = support::ctx_waiting(30);
    let o = run(&e.exe, req)
        .await
        .unwrap_or_else(|err| panic!("the run was refused: {err}\n{attack}"));
    std::fs::remove_file(&path).unwrap();
    o
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000
}

/// The site-packages directory of the virtualenv at `venv`.
fn site_packages(venv: &Path) -> PathBuf {
    let lib = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python"))
        .expect("a pythonX.Y directory")
        .path();
    lib.join("site-packages")
}

async fn the_human_runs_nothing_a_run_wrote(uid: Option<u32>) {
    let e = Escape::start(uid).await;
    let ws = &e.sb.ws;
    let mark = e.sb.out.join("pwned");
    let payload = format!("touch {}", mark.display());
    // What the human has: a repository without `.git/hooks` (many do), husky's hooks path
    // configured but not installed yet, a package with its own attributes and editor
    // settings, and a virtualenv.
    let _ = std::fs::remove_dir_all(ws.join(".git/hooks"));
    host_git(ws, &["config", "core.hooksPath", ".husky/_"]);
    std::fs::create_dir_all(ws.join("pkg/.vscode")).unwrap();
    std::fs::write(ws.join("pkg/.gitattributes"), "*.txt text\n").unwrap();
    std::fs::write(ws.join("pkg/.vscode/settings.json"), "{}\n").unwrap();
    std::fs::write(ws.join("pkg/lib.txt"), "lib\n").unwrap();
    let venv = std::process::Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(ws)
        .status()
        .unwrap();
    assert!(venv.success());
    let site = site_packages(&ws.join(".venv"));
    let site_rel = site.strip_prefix(ws).unwrap().display().to_string();
    host_git(ws, &["add", "-A"]);
    host_git(ws, &["commit", "-qm", "human's work"]);
    chown(ws, uid);
    let config_before = std::fs::read(ws.join(".git/config")).unwrap();

    let fsmonitor = format!("printf '[core]\\n\\tfsmonitor = \"{payload}\"\\n'");
    let hook = format!("printf '#!/bin/sh\\n{payload}\\n'");
    let attacks = [
        // The reported case: a commondir pointing at a copy of the config.
        format!(
            "mkdir -p .git/x && cp .git/config .git/x/config && {fsmonitor} >> .git/x/config && echo x > .git/commondir"
        ),
        "ln -s x .git/commondir".to_owned(),
        // Renaming .git away and rebuilding it, so the binds move with the old one.
        format!(
            "mv .git .git-old && mkdir .git && cp -a .git-old/. .git/ 2>/dev/null; {fsmonitor} >> .git/config"
        ),
        format!("mv .git/hooks .git/hooks-old; {fsmonitor} > .git/config.worktree"),
        // A hook where the repository has none yet, and husky's hooks path.
        format!(
            "mkdir -p .git/hooks && {hook} > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"
        ),
        format!("mkdir -p .husky/_ && {hook} > .husky/_/pre-commit && chmod +x .husky/_/pre-commit"),
        // Protected files of a package, rebuilt under a renamed parent.
        "mv pkg pkg-orig && mkdir pkg && cp -a pkg-orig/. pkg/; echo '* filter=evil' > pkg/.gitattributes".to_owned(),
        "mv pkg/.vscode pkg/vs; mkdir -p pkg/.vscode; echo '{\"tasks\":1}' > pkg/.vscode/tasks.json"
            .to_owned(),
        // A repository of the run's own, nested, and a gitdir file pointing into .git.
        format!("mkdir -p nested && cd nested && git init -q && git config core.fsmonitor '{payload}'"),
        "mkdir -p sub2 && echo 'gitdir: ../.git/x' > sub2/.git".to_owned(),
        // Interpreter startup files and toolchain pins.
        format!("echo 'import os; os.system(\"{payload}\")' > {site_rel}/evil.pth"),
        format!("echo 'import os; os.system(\"{payload}\")' > {site_rel}/sitecustomize.py"),
        "printf '[toolchain]\\npath = \"/tmp/evil-toolchain\"\\n' > rust-toolchain.toml".to_owned(),
        format!("echo '{payload}' > .envrc"),
        "mkdir -p .claude && echo '{}' > .claude/settings.json".to_owned(),
        "ln -s pkg-orig .idea".to_owned(),
    ];
    // The reported case exactly: `npm test` (auto) runs a script the agent wrote.
    std::fs::write(
        ws.join("package.json"),
        r#"{"name":"demo","version":"1.0.0","scripts":{"test":"sh tools/ci.sh"}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("tools")).unwrap();
    std::fs::write(
        ws.join("tools/ci.sh"),
        format!(
            "mkdir -p .git/y && cp .git/config .git/y/config && {fsmonitor} >> .git/y/config && echo y > .git/commondir\n"
        ),
    )
    .unwrap();
    chown(ws, uid);
    let o = run(&e.exe, crate::process::argv(&["npm", "test", "--silent"]))
        .await
        .expect("npm test is auto");
    let audit = o.exited.audit.expect("an audit");
    assert!(
        audit
            .violations
            .iter()
            .any(|v| v.path == ".git/commondir" && v.reverted),
        "{audit:?} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for attack in &attacks {
        hidden(&e, uid, attack).await;
    }

    // The human's next commands on the host.
    std::fs::write(ws.join("pkg/lib.txt"), "lib changed\n").unwrap();
    host_git(ws, &["status"]);
    host_git(ws, &["diff"]);
    host_git(ws, &["add", "pkg/lib.txt"]);
    host_git(ws, &["commit", "-qm", "human again"]);
    host_git(&ws.join("nested"), &["status"]);
    host_git(&ws.join("sub2"), &["status"]);
    let _ = std::process::Command::new(ws.join(".venv/bin/python"))
        .args(["-c", "pass"])
        .current_dir(ws)
        .output();
    assert!(
        !mark.exists(),
        "a run's payload ran on the host as the human"
    );
    for gone in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/hooks/pre-commit",
        ".husky",
        "nested/.git/config",
        "sub2/.git",
        &format!("{site_rel}/evil.pth"),
        &format!("{site_rel}/sitecustomize.py"),
        "rust-toolchain.toml",
        ".envrc",
        ".claude",
        ".idea",
    ] {
        assert!(
            std::fs::symlink_metadata(ws.join(gone)).is_err(),
            "{gone} survived the audit"
        );
    }
    assert!(ws.join(".git/HEAD").exists(), ".git was not moved away");
    assert!(!ws.join(".git-old").exists(), ".git was renamed");
    assert_eq!(
        std::fs::read(ws.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("pkg/.gitattributes")).unwrap(),
        "*.txt text\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("pkg/.vscode/settings.json")).unwrap(),
        "{}\n"
    );
    assert!(!ws.join("pkg/.vscode/tasks.json").exists());
}

#[tokio::test]
async fn the_human_runs_nothing_a_run_wrote_as_root() {
    the_human_runs_nothing_a_run_wrote(None).await;
}

#[tokio::test]
async fn the_human_runs_nothing_a_run_wrote_unprivileged() {
    the_human_runs_nothing_a_run_wrote(Some(65534)).await;
}

/// The audit's findings travel in the run's final event: what was created, and that it was
/// undone before the event was sent.
#[tokio::test]
async fn the_audit_reports_what_it_reverted_in_the_final_event() {
    let e = Escape::start(None).await;
    let o = hidden(
        &e,
        None,
        "echo x > .git/commondir; mkdir -p .vscode && echo '{}' > .vscode/tasks.json; echo ok",
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n");
    let audit = o.exited.audit.expect("an audit");
    assert!(audit.completed, "{}", audit.error);
    let found: Vec<(String, i32, bool)> = audit
        .violations
        .iter()
        .map(|v| (v.path.clone(), v.change, v.reverted))
        .collect();
    let created = common::IntegrityChange::Created as i32;
    assert_eq!(
        found,
        vec![
            (".git/commondir".to_owned(), created, true),
            (".vscode".to_owned(), created, true),
        ]
    );
    assert!(!e.sb.ws.join(".git/commondir").exists());
    assert!(!e.sb.ws.join(".vscode").exists());

    // A run that leaves the protected set alone reports a clean, completed audit.
    let o = run(&e.exe, script("echo fine > notes.txt")).await.unwrap();
    let audit = o.exited.audit.expect("an audit");
    assert!(audit.completed && audit.violations.is_empty(), "{audit:?}");
}

/// Git keeps working inside runs: add, commit, branch, stash, status.
#[tokio::test]
async fn git_bookkeeping_still_works_inside_runs() {
    let e = Escape::start(None).await;
    let (stdout, stderr, st) = sh(
        &e.exe,
        "git add f.txt && git commit -qm first && git branch feature && git switch -q feature \
         && echo more >> f.txt && git stash -q && git stash pop -q && git status --short && git branch --list | wc -l",
    )
    .await;
    assert!(
        matches!(st, common::exit_status::Status::Exited(0)),
        "{stdout} {stderr}"
    );
    assert!(stdout.contains("M f.txt"), "{stdout} {stderr}");
    assert!(stdout.trim_end().ends_with('2'), "{stdout} {stderr}");
}

/// A directory a run made unreadable is hidden whole in the next run, never skipped: the
/// secret inside it and the repository's config stay out of reach.
async fn an_unreadable_directory_does_not_blind_the_next_run(uid: Option<u32>) {
    let e = Escape::start(uid).await;
    let ws = &e.sb.ws;
    std::fs::create_dir_all(ws.join("dir")).unwrap();
    std::fs::write(ws.join("dir/.env"), SECRET).unwrap();
    chown(ws, uid);
    let config_before = std::fs::read(ws.join(".git/config")).unwrap();
    hidden(&e, uid, "chmod 000 dir; chmod 000 .git; true").await;
    let o = hidden(
        &e,
        uid,
        "chmod 755 dir .git; cat dir/.env; echo '[core] fsmonitor = x' >> .git/config; cat .git/config",
    )
    .await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(!stdout.contains(SECRET), "{stdout} {stderr}");
    // Put the modes back as the human would, then look at the host's files.
    let _ = std::process::Command::new("chmod")
        .args(["755", "dir", ".git"])
        .current_dir(ws)
        .status();
    assert_eq!(
        std::fs::read(ws.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("dir/.env")).unwrap(),
        SECRET
    );
}

#[tokio::test]
async fn an_unreadable_directory_does_not_blind_the_next_run_unprivileged() {
    an_unreadable_directory_does_not_blind_the_next_run(Some(65534)).await;
}

#[tokio::test]
async fn an_unreadable_directory_does_not_blind_the_next_run_as_root() {
    an_unreadable_directory_does_not_blind_the_next_run(None).await;
}

/// A run renaming a directory in a loop cannot make another run's walk miss the secret in it:
/// the directory is pinned in every run's view, so the renames fail.
#[tokio::test]
async fn a_rename_loop_in_a_concurrent_run_leaks_nothing() {
    let e = Escape::start(None).await;
    let ws = &e.sb.ws;
    std::fs::create_dir_all(ws.join("d/inner")).unwrap();
    std::fs::write(ws.join("d/inner/.env"), SECRET).unwrap();
    let looper = async {
        let o = hidden(
            &e,
            None,
            "n=0; for i in $(seq 1 400); do mv d d2 2>/dev/null && n=$((n+1)); mv d2 d 2>/dev/null; \
             mv d/inner d/inner2 2>/dev/null && n=$((n+1)); mv d/inner2 d/inner 2>/dev/null; done; echo renamed=$n",
        )
        .await;
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let readers = async {
        let mut leaked = Vec::new();
        for _ in 0..15 {
            let o = hidden(
                &e,
                None,
                "cat d/inner/.env d2/inner/.env d/inner2/.env d2/inner2/.env 2>/dev/null; true",
            )
            .await;
            let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
            if stdout.contains(SECRET) {
                leaked.push(stdout);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        leaked
    };
    let (renamed, leaked) = tokio::join!(looper, readers);
    assert!(leaked.is_empty(), "leaked: {leaked:?}");
    assert_eq!(
        renamed.trim(),
        "renamed=0",
        "a pinned directory was renamed"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("d/inner/.env")).unwrap(),
        SECRET
    );
    let _ = support::SENTINEL;
}

/// The human's editor saves `.env` (and `git config` rewrites `.git/config`) by renaming a new
/// file over the old one while a run is reading: the kernel detaches the run's mask with the
/// old file, so the run is stopped the moment the name is replaced, and the next run masks
/// the new file.
async fn a_host_replace_stops_the_run(uid: Option<u32>) {
    use toolgate_contracts::executor::v1 as pb;
    use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
    use toolgate_contracts::executor::v1::run_response::Event;

    let e = Escape::start(uid).await;
    let ws = &e.sb.ws;
    const NEW: &str = "SECRET=rotated-0815";
    for (target, attack) in [
        (".env", "while :; do cat .env; sleep 0.2; done"),
        (
            ".git/config",
            "while :; do echo '[core] fsmonitor = x' >> .git/config 2>/dev/null; cat .git/config; sleep 0.2; done",
        ),
    ] {
        let name = format!("loop-{}.sh", nanos());
        std::fs::write(ws.join(&name), attack).unwrap();
        chown(ws, uid);
        let mut req = script(&format!("sh {name}"));
        req.context = support::ctx_waiting(30);
        let mut client = ProcessServiceClient::new(e.exe.channel().await);
        let mut stream = client.run(req).await.unwrap().into_inner();
        let mut stdout = Vec::new();
        loop {
            let msg = stream.message().await.unwrap().expect("the run started");
            match msg.event {
                Some(Event::Started(_)) => break,
                Some(Event::AwaitingApproval(_)) => {}
                other => panic!("{other:?}"),
            }
        }
        // Let the loop run a little, then replace the name from the host.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fresh = ws.join(format!("{target}.new"));
        std::fs::write(&fresh, format!("{NEW}\n")).unwrap();
        std::fs::rename(&fresh, ws.join(target)).unwrap();
        let exited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stream
                    .message()
                    .await
                    .unwrap()
                    .expect("an exited event")
                    .event
                {
                    Some(Event::Output(o)) if o.stream == pb::Stream::Stdout as i32 => {
                        stdout.extend_from_slice(&o.data);
                    }
                    Some(Event::Exited(x)) => break x,
                    _ => {}
                }
            }
        })
        .await
        .expect("the run was stopped when its mask came off");
        let stdout = String::from_utf8_lossy(&stdout);
        assert!(
            !stdout.contains(NEW),
            "{target}: the run read the new file: {stdout}"
        );
        match exited.status.and_then(|s| s.status) {
            Some(common::exit_status::Status::Cancelled(c)) => {
                assert_eq!(c.cause, "masked_path_replaced", "{target}");
            }
            other => panic!("{target}: {other:?}"),
        }
        assert_eq!(
            std::fs::read_to_string(ws.join(target)).unwrap(),
            format!("{NEW}\n"),
            "{target}: the run wrote the new file"
        );
    }
    // The next run walks again and masks what the host put there.
    let o = hidden(&e, uid, "cat .env; true").await;
    assert!(!String::from_utf8_lossy(&o.stdout).contains(NEW));
}

#[tokio::test]
async fn a_host_replace_stops_the_run_as_root() {
    a_host_replace_stops_the_run(None).await;
}

#[tokio::test]
async fn a_host_replace_stops_the_run_unprivileged() {
    a_host_replace_stops_the_run(Some(65534)).await;
}

/// A token in a remote URL of `.git/config` stays out of a run: git inside the run reads the
/// config with the URL's credentials redacted, and the host's file is untouched.
#[tokio::test]
async fn a_token_in_a_remote_url_never_reaches_a_run() {
    let e = Escape::start(None).await;
    let ws = &e.sb.ws;
    host_git(
        ws,
        &[
            "remote",
            "add",
            "origin",
            "https://someone:ghp_remote4711@github.com/o/r.git",
        ],
    );
    let before = std::fs::read(ws.join(".git/config")).unwrap();
    let o = hidden(
        &e,
        None,
        "git remote -v; cat .git/config; git config --get remote.origin.url",
    )
    .await;
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("ghp_remote4711"), "{stdout}");
    assert!(
        stdout.contains("github.com/o/r.git"),
        "git still reads its config: {stdout}"
    );
    // Still read-only, like any protected path.
    hidden(&e, None, "echo '[core] fsmonitor = x' >> .git/config; true").await;
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), before);
}

/// What a run moves in git is visible: a commit on a branch is reported; a branch moved to a
/// commit it does not contain, a deleted branch and an assume-unchanged bit that hides an
/// edit from `git status` are put back when no human approved the run (quarantine), and only
/// reported when one did.
#[tokio::test]
async fn git_history_a_run_moves_is_reported_and_rewrites_are_quarantined() {
    let e = Escape::start(None).await;
    let ws = &e.sb.ws;
    let human = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(["-c", "user.name=human", "-c", "user.email=h@example.com"])
            .args(args)
            .current_dir(ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    std::fs::write(ws.join("README.md"), "readme\n").unwrap();
    human(&["add", "README.md", "f.txt"]);
    human(&["commit", "-qm", "first"]);
    human(&["branch", "feature"]);
    human(&["branch", "other"]);
    let first = human(&["rev-parse", "HEAD"]);
    let main = human(&["symbolic-ref", "--short", "HEAD"]);

    let attack = "git -c user.name=human -c user.email=h@example.com commit -q --allow-empty -m more\n\
         forged=$(git -c user.name=human -c user.email=h@example.com commit-tree -m forged $(git write-tree))\n\
         git update-ref refs/heads/feature $forged\n\
         git branch -q -D other\n\
         echo hidden-edit >> README.md && git update-index --assume-unchanged README.md\n";
    std::fs::write(
        ws.join("package.json"),
        r#"{"name":"demo","version":"1.0.0","scripts":{"test":"sh tools/git.sh"}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("tools")).unwrap();
    std::fs::write(ws.join("tools/git.sh"), attack).unwrap();
    let o = run(&e.exe, crate::process::argv(&["npm", "test", "--silent"]))
        .await
        .expect("npm test is auto");
    let audit = o.exited.audit.expect("an audit");
    let git: Vec<(String, i32, bool)> = audit
        .git
        .iter()
        .map(|g| (g.name.clone(), g.kind, g.reverted))
        .collect();
    use common::GitChangeKind as K;
    let main_ref = format!("refs/heads/{main}");
    for expected in [
        ("README.md".to_owned(), K::AssumeUnchangedSet as i32, true),
        (
            "refs/heads/feature".to_owned(),
            K::RefRewritten as i32,
            true,
        ),
        ("refs/heads/other".to_owned(), K::RefDeleted as i32, true),
        (main_ref.clone(), K::RefFastForward as i32, false),
    ] {
        assert!(git.contains(&expected), "{expected:?} in {git:?}");
    }
    // On the host: the rewrite and the deletion are undone, the edit shows again.
    assert_eq!(human(&["rev-parse", "refs/heads/feature"]), first);
    assert_eq!(human(&["rev-parse", "refs/heads/other"]), first);
    assert_ne!(human(&["rev-parse", &main_ref]), first, "the commit stays");
    assert!(
        human(&["status", "--short"]).contains("README.md"),
        "the edit shows"
    );

    // Approved by a human: reported, not undone.
    let o = hidden(
        &e,
        None,
        "forged=$(git -c user.name=x -c user.email=x@example.com commit-tree -m again $(git write-tree)); git update-ref refs/heads/feature $forged",
    )
    .await;
    let audit = o.exited.audit.expect("an audit");
    assert!(
        audit.git.iter().any(|g| g.name == "refs/heads/feature"
            && g.kind == K::RefRewritten as i32
            && !g.reverted),
        "{audit:?}"
    );
    assert_ne!(human(&["rev-parse", "refs/heads/feature"]), first);
}
