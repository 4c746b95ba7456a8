//! Networked runs: a gated network namespace whose only way out is the executor's egress gate.
//! The test plays the gate: it takes the run's sockets from the egress hook and reads what
//! arrives on them.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::Duration;

use toolgate_core::{Reason, ReasonedError};
use toolgate_process::{Config, GATE_PORT, GateSockets, RunRequest, Runner, original_destination};

use crate::common::{Outcome, collect, config, runner, spec, workspace};

/// Runs `script` under `network` with a hook, returning the outcome and the run's sockets.
async fn gated(runner: &Runner, script: &str, cwd: std::os::fd::OwnedFd) -> (Outcome, GateSockets) {
    let (tx, rx) = mpsc::channel();
    let mut req = RunRequest::script(script, cwd);
    req.profile = "network".into();
    let run = runner
        .try_run(spec(req).with_egress(Box::new(move |s| {
            let _ = tx.send(s);
        })))
        .expect("a networked run with a hook starts");
    let sockets = rx
        .try_recv()
        .expect("the hook had the sockets before the run started");
    (collect(run).await, sockets)
}

/// The one connection queued on `listener` (the run has exited; its data is buffered).
fn accepted(listener: std::os::fd::OwnedFd) -> (std::net::TcpStream, SocketAddr) {
    let l = TcpListener::from(listener);
    let (s, _) = l
        .accept()
        .expect("a redirected connection is queued at the gate");
    let dst = original_destination(s.as_fd()).expect("SO_ORIGINAL_DST");
    (s, dst)
}

fn read_all(s: std::net::TcpStream) -> String {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = String::new();
    let _ = s.take(1024).read_to_string(&mut out);
    out
}

async fn tcp_arrives_at_the_gate(runner: &Runner) {
    let (_dir, cwd) = workspace();
    let (out, gate) = gated(
        runner,
        "exec 3<>/dev/tcp/93.184.216.34/80 && echo hi >&3 && echo connected",
        cwd,
    )
    .await;
    assert_eq!(
        out.stdout_str(),
        "connected\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let local = TcpListener::from(gate.tcp4.try_clone().unwrap())
        .local_addr()
        .unwrap();
    assert_eq!(local, SocketAddr::from(([127, 0, 0, 1], GATE_PORT)));
    let (s, dst) = accepted(gate.tcp4);
    assert_eq!(dst, SocketAddr::from(([93, 184, 216, 34], 80)));
    assert_eq!(read_all(s), "hi\n");
}

#[tokio::test]
async fn tcp_to_any_address_arrives_at_the_gate_with_its_original_destination() {
    tcp_arrives_at_the_gate(&runner()).await;
}

#[tokio::test]
async fn ipv6_tcp_arrives_at_the_gate_too() {
    let r = runner();
    let (_dir, cwd) = workspace();
    let (out, gate) = gated(
        &r,
        "exec 3<>/dev/tcp/2606:2800:220:1::1/443 && echo v6 >&3 && echo connected",
        cwd,
    )
    .await;
    // A kernel without IPv6 gives the namespace none: the connection then fails, never leaks.
    let Some(tcp6) = gate.tcp6 else {
        assert_eq!(out.stdout_str(), "");
        return;
    };
    assert_eq!(
        out.stdout_str(),
        "connected\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (s, dst) = accepted(tcp6);
    assert_eq!(
        dst,
        "[2606:2800:220:1::1]:443".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(read_all(s), "v6\n");
}

#[tokio::test]
async fn dns_to_any_resolver_reaches_the_stub_and_its_answer_comes_back() {
    let r = runner();
    let (_dir, cwd) = workspace();
    let (tx, rx) = mpsc::channel::<GateSockets>();
    let mut req = RunRequest::script(
        "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
         s.settimeout(10); s.sendto(b'query', ('8.8.8.8', 53)); print(s.recvfrom(64))\"",
        cwd,
    );
    req.profile = "network".into();
    // The stub answers from its own thread while the run waits for the answer.
    let stub = std::thread::spawn(move || {
        let gate = rx.recv().unwrap();
        let dns = UdpSocket::from(gate.dns4);
        dns.set_nonblocking(false).unwrap();
        dns.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        let (n, peer) = dns.recv_from(&mut buf).unwrap();
        dns.send_to(b"answer", peer).unwrap();
        (buf[..n].to_vec(), dns.local_addr().unwrap())
    });
    let run = r
        .try_run(spec(req).with_egress(Box::new(move |s| {
            let _ = tx.send(s);
        })))
        .unwrap();
    let out = collect(run).await;
    let (query, local) = stub.join().unwrap();
    assert_eq!(query, b"query");
    assert_eq!(local, SocketAddr::from(([127, 0, 0, 1], 53)));
    // The answer appears to come from the resolver the run asked.
    assert_eq!(
        out.stdout_str(),
        "(b'answer', ('8.8.8.8', 53))\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn udp_to_other_ports_and_ping_do_not_leave() {
    let r = runner();
    let (_dir, cwd) = workspace();
    let (out, gate) = gated(
        &r,
        "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b'x', ('8.8.8.8', 123)); print('sent')
except OSError as e:
    print('refused', e.errno)\"
ping -c1 -W1 8.8.8.8 >/dev/null 2>&1 && echo pinged; true",
        cwd,
    )
    .await;
    assert_eq!(
        out.stdout_str(),
        format!("refused {}\n", libc::EPERM),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dns = UdpSocket::from(gate.dns4);
    let mut buf = [0u8; 16];
    assert_eq!(
        dns.recv_from(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "nothing but port 53 reaches the stub"
    );
}

#[tokio::test]
async fn a_server_on_the_runs_own_loopback_is_not_redirected() {
    let r = runner();
    let (_dir, cwd) = workspace();
    let (out, gate) = gated(
        &r,
        "python3 -c \"import socket
l = socket.socket(); l.bind(('127.0.0.1', 8080)); l.listen()
c = socket.create_connection(('127.0.0.1', 8080), timeout=5); a, _ = l.accept()
c.sendall(b'local'); print(a.recv(16).decode())\"",
        cwd,
    )
    .await;
    assert_eq!(
        out.stdout_str(),
        "local\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gate = TcpListener::from(gate.tcp4);
    gate.set_nonblocking(true).unwrap();
    assert_eq!(
        gate.accept().unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "nothing reached the gate"
    );
}

#[tokio::test]
async fn mptcp_sockets_are_refused_so_programs_fall_back_to_tcp() {
    let r = runner();
    let (_dir, cwd) = workspace();
    let (out, _gate) = gated(
        &r,
        "python3 -c \"import socket
for family in (socket.AF_INET, socket.AF_INET6):
    try:
        socket.socket(family, socket.SOCK_STREAM, 262); print('mptcp')
    except OSError as e:
        print(e.errno)\"",
        cwd,
    )
    .await;
    let want = format!("{0}\n{0}\n", libc::EPROTONOSUPPORT);
    assert_eq!(
        out.stdout_str(),
        want,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_networked_run_without_an_egress_hook_is_refused() {
    let r = runner();
    assert!(r.networked("network"));
    assert!(!r.networked("workspace"));
    assert!(!r.networked("nosuch"));
    let (_dir, cwd) = workspace();
    let mut req = RunRequest::script("echo ran", cwd);
    req.profile = "network".into();
    let err = r.try_run(spec(req)).unwrap_err();
    assert_eq!(err.reason(), Reason::SandboxUnavailable);
    assert!(err.to_string().contains("egress gate"), "{err}");
}

/// The same redirect when the runner is not root: a thread with its own unprivileged ids
/// (set per thread, so the rest of the test process stays root) starts a runner, whose
/// helper threads and children inherit them.
#[test]
fn tcp_arrives_at_the_gate_for_an_unprivileged_runner() {
    let nobody = 65534;
    std::thread::spawn(move || {
        let gid = rustix::process::Gid::from_raw(nobody);
        rustix::thread::set_thread_groups(&[]).unwrap();
        rustix::thread::set_thread_res_gid(gid, gid, gid).unwrap();
        let uid = rustix::process::Uid::from_raw(nobody);
        rustix::thread::set_thread_res_uid(uid, uid, uid).unwrap();
        assert_eq!(rustix::process::geteuid().as_raw(), nobody);
        // A root process that changed ids is no longer dumpable, which makes its
        // /proc/self files root's; an executor started as the user is.
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // No cgroup is delegated to this user here: the kernel's fallback limits.
            let r = Runner::new(Config {
                require_limits: false,
                ..config()
            })
            .unwrap();
            assert!(r.networked("network"), "{:?}", r.capabilities());
            tcp_arrives_at_the_gate(&r).await;
        });
    })
    .join()
    .unwrap();
}
