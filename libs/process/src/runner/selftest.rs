//! The escape self-test: a handful of real escapes tried under each confined profile in a
//! throwaway workspace when the runner starts. A profile under which any of them succeeds is
//! marked unavailable, so no run ever starts under a sandbox that does not hold on this host.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::{Inner, Io};
use crate::egress::GateSockets;
use crate::sandbox::{Built, Masks};
use crate::sys;

/// One escape and whether it got anywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscapeCheck {
    /// What was tried.
    pub name: &'static str,
    /// The profile it was tried under.
    pub profile: String,
    /// `None` when it failed as it must; otherwise what got through.
    pub escaped: Option<String>,
}

const CANARY: &str = "toolgate-selftest-canary";
const SECRET: &str = "toolgate-selftest-secret";

impl Inner {
    /// Tries every escape under `built` and reports each.
    pub(super) fn escape_checks(&self, built: &Built) -> Result<Vec<EscapeCheck>, String> {
        let dir = tempfile::Builder::new()
            .prefix("toolgate-selftest-")
            .tempdir()
            .map_err(|e| format!("create a throwaway workspace: {e}"))?;
        let ws = dir.path().join("ws");
        let out = dir.path().join("out");
        let setup = || -> std::io::Result<()> {
            std::fs::create_dir_all(ws.join(".git/hooks"))?;
            std::fs::create_dir_all(&out)?;
            std::fs::write(out.join("canary"), CANARY)?;
            std::fs::write(ws.join(".env"), SECRET)?;
            Ok(())
        };
        setup().map_err(|e| format!("prepare the throwaway workspace: {e}"))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("listen on the host's loopback: {e}"))?;
        let port = listener.local_addr().map_or(0, |a| a.port());
        let host_tmp =
            std::env::temp_dir().join(format!("toolgate-selftest-{}-{}", std::process::id(), port));
        let me = std::process::id();
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let masks = Masks {
            hidden_files: vec![".env".into()],
            hidden_dirs: Vec::new(),
            protected: vec![".git/hooks".into()],
            pinned: vec![".git".into()],
            redacted: Vec::new(),
        };
        let out_s = out.display().to_string();
        let tmp_s = host_tmp.display().to_string();
        let mut checks: Vec<(&'static str, String)> = vec![
            ("read outside the workspace", format!("cat {out_s}/canary")),
            ("write outside the workspace", format!("echo x > {out_s}/w")),
            ("write the host's /tmp", format!("echo x > {tmp_s}")),
            ("read /etc/shadow", "cat /etc/shadow".to_owned()),
            // By what the pid runs, not the pid alone: inside a container the executor may be
            // pid 1, which is also the number of the run's own init.
            (
                "see the executor",
                format!("[ \"$(readlink /proc/{me}/exe)\" = \"{exe}\" ] && echo SEEN"),
            ),
            (
                "signal the executor",
                format!(
                    "[ \"$(readlink /proc/{me}/exe)\" = \"{exe}\" ] && kill -0 {me} && echo ESCAPED"
                ),
            ),
            (
                "create a user namespace",
                "unshare -U true && echo ESCAPED".to_owned(),
            ),
            (
                "mount",
                "mount -t tmpfs none /tmp && echo ESCAPED".to_owned(),
            ),
            (
                "set a set-uid bit",
                "touch s && chmod u+s s && echo ESCAPED".to_owned(),
            ),
            ("read a hidden path", "cat .env".to_owned()),
            (
                "write a protected path",
                "echo x > .git/hooks/pre-commit".to_owned(),
            ),
            (
                "rename a pinned directory",
                "mv .git .git-away && echo ESCAPED".to_owned(),
            ),
        ];
        // Every confined run has a loopback of its own, networked ones included.
        checks.push((
            "reach the host's loopback",
            format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo ESCAPED"),
        ));
        if built.profile.network {
            checks.extend([
                (
                    GATE_ONLY,
                    format!("exec 3<>/dev/tcp/{TEST_NET}/{port} && echo CONNECTED"),
                ),
                (
                    "send UDP past the DNS stub",
                    format!("echo x > /dev/udp/{TEST_NET}/{port} && echo ESCAPED"),
                ),
                (
                    "open an MPTCP socket",
                    "python3 -c 'import socket; socket.socket(socket.AF_INET, \
                     socket.SOCK_STREAM, 262)' 2>/dev/null && echo ESCAPED"
                        .to_owned(),
                ),
            ]);
        }
        let mut report = Vec::new();
        for (name, script) in checks {
            let (_, stdout, gate) = self.probe_script(built, &ws, &script, &masks)?;
            let escaped = if name == GATE_ONLY {
                gate_only(&stdout, gate, port)
            } else if stdout.contains(CANARY)
                || stdout.contains(SECRET)
                || stdout.contains("ESCAPED")
                || stdout.contains("SEEN")
                || stdout.contains("root:")
            {
                Some(format!("`{script}` printed {:?}", truncate(&stdout)))
            } else if out.join("w").exists() || host_tmp.exists() {
                Some(format!("`{script}` wrote outside the workspace"))
            } else if ws.join(".git/hooks/pre-commit").exists() {
                Some(format!("`{script}` wrote a protected path"))
            } else if std::fs::metadata(ws.join("s")).is_ok_and(|m| {
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o6000 != 0
            }) {
                Some(format!("`{script}` left a set-id file"))
            } else if listener.accept().is_ok() {
                Some(format!("`{script}` reached the host's loopback"))
            } else {
                None
            };
            let _ = std::fs::remove_file(&host_tmp);
            report.push(EscapeCheck {
                name,
                profile: built.name.clone(),
                escaped,
            });
        }
        Ok(report)
    }

    /// Runs `script` under `built` in `ws` (its workspace) and returns its exit code and the
    /// start of its stdout.
    pub(super) fn probe_script(
        &self,
        built: &Built,
        ws: &Path,
        script: &str,
        masks: &Masks,
    ) -> Result<(Option<i32>, String, Option<GateSockets>), String> {
        let cwd: OwnedFd = File::open(ws).map_err(|e| e.to_string())?.into();
        let (setup, gate) = self
            .sandbox_setup(built, &cwd, masks, Some(ws), None)
            .map_err(|e| e.to_string())?;
        let bash = self.bash.to_string_lossy().into_owned();
        let home = self.sandboxes.config.home.clone();
        let prepared = self
            .prepare(
                &bash,
                &["--noprofile", "--norc", "-c", script],
                &[],
                &home,
                cwd,
                None,
                None,
                Some(setup),
            )
            .map_err(|e| e.to_string())?;
        let child = self
            .spawn(prepared, [Io::Null, Io::Pipe, Io::Null])
            .map_err(|e| e.to_string())?;
        let mut stdout = String::new();
        if let Some(fd) = child.stdout {
            // Bounded: the self-test's own scripts print a few bytes at most.
            let _ = File::from(fd).take(64 << 10).read_to_string(&mut stdout);
        }
        let reaped = sys::wait4(child.pid, true).map_err(|e| e.to_string())?;
        Ok((reaped.and_then(|r| r.exit_code()), stdout, gate))
    }
}

/// The check whose connection must land on the gate.
const GATE_ONLY: &str = "connect anywhere but through the gate";
/// An address of TEST-NET-1 (RFC 5737), never anyone's.
const TEST_NET: &str = "192.0.2.1";

/// What got through when a networked run connected to `TEST_NET:port`: nothing when the
/// connection failed or is the one queued at the gate with that original destination.
fn gate_only(stdout: &str, gate: Option<GateSockets>, port: u16) -> Option<String> {
    if !stdout.contains("CONNECTED") {
        return None;
    }
    let want = std::net::SocketAddr::from(([192, 0, 2, 1], port));
    let arrived = gate.and_then(|g| std::net::TcpListener::from(g.tcp4).accept().ok());
    match arrived.map(|(s, _)| crate::sys::original_destination(std::os::fd::AsFd::as_fd(&s))) {
        Some(Ok(dst)) if dst == want => None,
        Some(other) => Some(format!(
            "a connection to {want} reached the gate as {other:?}"
        )),
        None => Some(format!("a connection to {want} succeeded without the gate")),
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}
