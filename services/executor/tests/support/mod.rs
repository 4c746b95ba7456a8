//! Starts the real `toolgate-executor` binary on port 0 and talks gRPC to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::transport::Channel;
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;

/// A running executor process, killed on drop.
pub struct Executor {
    child: Child,
    /// `ip:port` it listens on.
    pub addr: String,
}

impl Executor {
    /// Starts the executor on `root` with extra arguments and environment.
    pub fn start(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Executor {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate-executor"));
        cmd.arg("--workspace")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("TOOLGATE_LOG__FILTER", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn toolgate-executor");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read listening line");
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("executor did not print its address ({e}): {line:?}"));
        let addr = v["listening"].as_str().expect("listening field").to_owned();
        Executor { child, addr }
    }

    /// A channel to the executor.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connect to executor")
    }

    /// A filesystem client.
    pub async fn fs(&self) -> FilesystemServiceClient<Channel> {
        FilesystemServiceClient::new(self.channel().await)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
        self.child.wait().expect("wait")
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh call context with a unique call id.
pub fn ctx() -> Option<CallContext> {
    static N: AtomicU64 = AtomicU64::new(0);
    Some(CallContext {
        call_id: format!(
            "call-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ),
        session_id: "session-test".into(),
        approval_wait: None,
        description: String::new(),
    })
}

/// The `ErrorInfo.reason` of a status.
pub fn reason(s: &tonic::Status) -> String {
    match toolgate_contracts::status::error_info(s) {
        Some((r, _)) => r,
        None => panic!("status without ErrorInfo: {s:?}"),
    }
}

/// A workspace directory plus a sibling `OUTSIDE` directory holding sentinels.
pub struct Sandbox {
    _dir: tempfile::TempDir,
    /// The workspace root.
    pub ws: PathBuf,
    /// A sibling directory outside the root.
    pub out: PathBuf,
}

/// The sentinel text that must never reach a client.
pub const SENTINEL: &str = "OUTSIDE-SENTINEL";

impl Sandbox {
    /// Creates `ws/` and `out/secret` (content: the sentinel).
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let out = dir.path().join("out");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("secret"), SENTINEL).unwrap();
        Sandbox { _dir: dir, ws, out }
    }

    /// The outside tree's contents, for before/after comparison.
    pub fn outside_snapshot(&self) -> Vec<(String, Vec<u8>, u32)> {
        use std::os::unix::fs::PermissionsExt;
        let mut v: Vec<_> = std::fs::read_dir(&self.out)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = std::fs::symlink_metadata(e.path()).unwrap();
                let content = if m.is_file() {
                    std::fs::read(e.path()).unwrap()
                } else {
                    Vec::new()
                };
                (
                    e.file_name().to_string_lossy().into_owned(),
                    content,
                    m.permissions().mode(),
                )
            })
            .collect();
        v.sort();
        v
    }
}
