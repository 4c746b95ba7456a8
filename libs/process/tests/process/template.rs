//! The runner's template view: confined runs copy a mount namespace whose root already holds
//! the fixed part of the view, and add only their own mounts. What they share must not carry
//! anything from one run to another, and the template must follow the host's mount table.

use std::time::Duration;

use toolgate_process::{Config, RunRequest, Runner, SandboxConfig, Status};

use crate::common::{collect, config, cwd_of, run_script, spec, workspace};

/// A confined runner; an unprivileged one has no delegated cgroup here, so it runs with the
/// kernel's fallbacks, as its operator would choose.
fn runner_with(config: Config) -> Runner {
    let unprivileged = rustix::process::geteuid().as_raw() != 0;
    Runner::new(Config {
        require_limits: !unprivileged,
        ..config
    })
    .expect("runner starts")
}

/// Runs copy the template instead of building their view: what they share (its root,
/// `/dev`, the mount points) is sealed, so nothing one run writes there reaches another, and
/// the `proc` the template keeps so that runs may mount their own is covered and empty.
#[tokio::test]
async fn template_runs_share_only_a_sealed_view() {
    println!("euid={}", rustix::process::geteuid().as_raw());
    let runner = runner_with(config());
    let script = r#"
        grep -c ' /.toolgate/proc ' /proc/self/mountinfo
        ls -A /.toolgate/proc | wc -l
        for p in /x /dev/x /.toolgate/x /.toolgate/run/x /home/x /tmp/x; do
            (: > "$p") 2>/dev/null && echo "WROTE $p"
            mkdir "$p.d" 2>/dev/null && echo "MADE $p"
        done
        ls /proc/1/exe >/dev/null && echo OWN-PROC
        ls -A /tmp | grep -vx "$(basename "$PWD")"
        echo mine > file
    "#;
    for _ in 0..2 {
        let (ws, cwd) = workspace();
        let out = run_script(&runner, script, cwd).await;
        assert_eq!(out.exited.status, Status::Exited(0), "{out:?}");
        let text = out.stdout_str();
        let lines: Vec<&str> = text.lines().collect();
        // The template's covered proc and the empty directory over it.
        assert_eq!(lines[..2], ["2", "0"], "{text}");
        // Only the run's own /tmp takes writes, and the second run's has only its own (and
        // its workspace's mount point).
        assert_eq!(
            lines[2..],
            ["WROTE /tmp/x", "MADE /tmp/x", "OWN-PROC", "x", "x.d"],
            "{text}"
        );
        let written = std::fs::read_to_string(ws.path().join("file")).unwrap();
        assert_eq!(written, "mine\n");
    }
}

/// Redacted copies are written in a tmpfs of the run's own, not in the shared root.
#[tokio::test]
async fn template_runs_get_their_redacted_copies() {
    let runner = runner_with(config());
    for secret in ["first", "second"] {
        let (ws, cwd) = workspace();
        std::fs::write(ws.path().join(".env"), format!("KEY={secret}\n")).unwrap();
        let mut s = spec(RunRequest::script(
            "cat .env; ls /.toolgate/run; : > /.toolgate/run/x 2>/dev/null && echo WROTE",
            cwd,
        ));
        let data: std::sync::Arc<[u8]> = format!("KEY=<{secret}>\n").into_bytes().into();
        s.set_masks(toolgate_process::Masks {
            redacted: vec![(".env".into(), data)],
            ..Default::default()
        });
        let out = collect(runner.try_run(s).unwrap()).await;
        assert_eq!(
            out.stdout_str(),
            format!("KEY=<{secret}>\nredacted-0\n"),
            "{out:?}"
        );
    }
}

/// A workspace the template has no mount point for (outside `/tmp`, not the configured one)
/// gets its view built whole, confined the same way.
#[tokio::test]
async fn a_workspace_outside_the_template_gets_the_whole_view() {
    let runner = runner_with(config());
    let ws = outside_tmp();
    std::fs::write(ws.path().join("mine"), "x").unwrap();
    let script = "grep -c ' /.toolgate/proc ' /proc/self/mountinfo; ls; \
                  : > /x 2>/dev/null && echo WROTE; echo made > new";
    let out = run_script(&runner, script, cwd_of(&ws)).await;
    assert_eq!(out.stdout_str(), "0\nmine\n", "{out:?}");
    let made = std::fs::read_to_string(ws.path().join("new")).unwrap();
    assert_eq!(made, "made\n");
}

/// Unmounts what the test mounted, whatever the test's outcome.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The template copies the host's mounts once; a mount the host makes later is in the next
/// run's view all the same, because a changed mount table rebuilds the template. Needs root
/// to mount on the host.
#[tokio::test]
async fn the_template_follows_the_hosts_mount_table() {
    if rustix::process::geteuid().as_raw() != 0 {
        println!("not root: the host's mount table cannot be changed here");
        return;
    }
    let tools = outside_tmp();
    let sub = tools.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let runner = runner_with(Config {
        sandbox: SandboxConfig {
            read_only_paths: vec![tools.path().to_owned()],
            ..SandboxConfig::default()
        },
        ..config()
    });
    let script = format!(
        "ls {}; grep -c ' /.toolgate/proc ' /proc/self/mountinfo",
        sub.display()
    );
    let (_ws, cwd) = workspace();
    let before = run_script(&runner, &script, cwd).await;
    assert_eq!(before.stdout_str(), "2\n", "{before:?}");
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&sub)
        .status()
        .unwrap();
    assert!(st.success());
    let _mounted = Mounted(sub.clone());
    std::fs::write(sub.join("late"), "x").unwrap();
    let (_ws, cwd) = workspace();
    let after = tokio::time::timeout(Duration::from_secs(30), run_script(&runner, &script, cwd))
        .await
        .unwrap();
    assert_eq!(after.stdout_str(), "late\n2\n", "{after:?}");
}

/// The tests above as an unprivileged user (`setpriv`), as production executors run: the
/// template needs no privilege but user namespaces.
#[tokio::test]
async fn an_unprivileged_runner_gets_the_same_template() {
    let exe = std::env::current_exe().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args([
                "template::template_runs_",
                "--nocapture",
                "--test-threads=2",
            ])
            .current_dir("/")
            .env("TMPDIR", "/tmp")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the unprivileged tests end")
    .expect("setpriv runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 2 passed"), "{stdout}");
    assert_eq!(stdout.matches("euid=65534").count(), 1, "{stdout}");
}

/// A fresh directory outside `/tmp` and HOME, wherever the checkout (and so
/// `CARGO_TARGET_TMPDIR`) is: a clean clone under `/tmp` would otherwise put it where the
/// template does fit, and these tests would test the other path.
fn outside_tmp() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/var/tmp").expect("a directory under /var/tmp");
    assert!(!dir.path().starts_with("/tmp"));
    dir
}
