//! Networked runs: a gated network namespace whose only way out is the executor's egress gate.
//! The test plays the gate: it takes the run's sockets from the egress hook and reads what
//! arrives on them.

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::Duration;

use toolgate_core::{Reason, ReasonedError};
use toolgate_process::{
    Config, GATE_PORT, GateSockets, RunRequest, RunSpec, Runner, original_destination,
};

use crate::common::{Outcome, collect, config, runner, spec, workspace};

/// A run of `script` under `network` whose egress hook sends the run's sockets to the
/// receiver (they are there once `try_run` returns).
fn hooked(script: &str, cwd: std::os::fd::OwnedFd) -> (RunSpec, mpsc::Receiver<GateSockets>) {
    let (tx, rx) = mpsc::channel();
    let mut req = RunRequest::script(script, cwd);
    req.profile = "network".into();
    let spec = spec(req).with_egress(Box::new(move |s| {
        let _ = tx.send(s);
    }));
    (spec, rx)
}

/// Runs `script` under `network` with a hook, returning the outcome and the run's sockets.
async fn gated(runner: &Runner, script: &str, cwd: std::os::fd::OwnedFd) -> (Outcome, GateSockets) {
    let (spec, rx) = hooked(script, cwd);
    let run = runner
        .try_run(spec)
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

/// The run printed exactly `want` (its stderr shown otherwise).
fn stdout_is(out: &Outcome, want: impl AsRef<str>) {
    assert_eq!(
        out.stdout_str(),
        want.as_ref(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    stdout_is(&out, "connected\n");
    let isolation = &out.started.as_ref().unwrap().isolation;
    assert!(isolation.network && isolation.namespaces.contains(&"net"));
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
        stdout_is(&out, "");
        return;
    };
    stdout_is(&out, "connected\n");
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
    let (spec, rx) = hooked(
        "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
         s.settimeout(10); s.sendto(b'query', ('8.8.8.8', 53)); print(s.recvfrom(64))\"",
        cwd,
    );
    // The stub answers from its own thread while the run waits for the answer.
    let stub = std::thread::spawn(move || {
        let gate = rx.recv().unwrap();
        let dns = UdpSocket::from(gate.dns4);
        dns.set_nonblocking(false).unwrap();
        dns.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 64];
        // The runner's children exiting may interrupt the wait (SIGCHLD).
        let (n, peer) = loop {
            match dns.recv_from(&mut buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                r => break r.unwrap(),
            }
        };
        dns.send_to(b"answer", peer).unwrap();
        (buf[..n].to_vec(), dns.local_addr().unwrap())
    });
    let run = r.try_run(spec).unwrap();
    let out = collect(run).await;
    let (query, local) = stub.join().unwrap();
    assert_eq!(query, b"query");
    assert_eq!(local, SocketAddr::from(([127, 0, 0, 1], 53)));
    // The answer appears to come from the resolver the run asked.
    stdout_is(&out, "(b'answer', ('8.8.8.8', 53))\n");
}

/// IPv6 DNS likewise reaches the stub's IPv6 socket, when the namespace has IPv6.
#[tokio::test]
async fn ipv6_dns_reaches_the_stub_too() {
    let r = runner();
    let (_dir, cwd) = workspace();
    let (out, gate) = gated(
        &r,
        "python3 -c \"import socket; s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); \
         s.sendto(b'query6', ('2001:4860:4860::8888', 53)); print('sent')\"",
        cwd,
    )
    .await;
    // Without IPv6 in the namespace the query cannot be sent at all.
    let Some(dns6) = gate.dns6 else {
        assert_ne!(out.stdout_str(), "sent\n");
        return;
    };
    stdout_is(&out, "sent\n");
    let dns = UdpSocket::from(dns6);
    assert_eq!(
        dns.local_addr().unwrap(),
        "[::1]:53".parse::<SocketAddr>().unwrap()
    );
    let mut buf = [0u8; 16];
    let (n, _) = dns
        .recv_from(&mut buf)
        .expect("the query is queued at the stub");
    assert_eq!(&buf[..n], b"query6");
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
    stdout_is(&out, format!("refused {}\n", libc::EPERM));
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
    stdout_is(&out, "local\n");
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
    stdout_is(&out, want);
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

/// The startup self-test tries the network escapes under `network` and none gets through.
#[tokio::test]
async fn the_self_test_checks_that_networked_runs_leave_only_through_the_gate() {
    let r = runner();
    let tried: Vec<_> = r
        .escape_checks()
        .iter()
        .filter(|c| c.profile == "network")
        .collect();
    for name in [
        "reach the host's loopback",
        "connect anywhere but through the gate",
        "send UDP past the DNS stub",
        "open an MPTCP socket",
    ] {
        let c = tried
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} was not tried: {tried:?}"));
        assert_eq!(c.escaped, None, "{name}");
    }
}

/// A host service's unix socket in the workspace, masked as the executor's walk masks it
/// (an empty file bound over it), cannot be reached; a socket the run makes itself works.
#[tokio::test]
async fn a_masked_host_unix_socket_is_unreachable_and_the_runs_own_works() {
    let r = runner();
    let (dir, cwd) = workspace();
    std::fs::create_dir(dir.path().join("tmp")).unwrap();
    let host = std::os::unix::net::UnixListener::bind(dir.path().join("tmp/app.sock")).unwrap();
    host.set_nonblocking(true).unwrap();
    let mut req = RunRequest::script(
        "python3 -c \"import socket
c = socket.socket(socket.AF_UNIX)
try:
    c.connect('tmp/app.sock'); print('reached')
except OSError as e:
    print('refused', e.errno)
l = socket.socket(socket.AF_UNIX); l.bind('tmp/own.sock'); l.listen()
o = socket.socket(socket.AF_UNIX); o.connect('tmp/own.sock'); a, _ = l.accept()
o.sendall(b'own'); print(a.recv(8).decode())\"",
        cwd,
    );
    req.masks = toolgate_process::Masks {
        hidden_files: vec!["tmp/app.sock".into()],
        pinned: vec!["tmp".into()],
        ..toolgate_process::Masks::default()
    };
    let out = collect(r.try_run(spec(req)).unwrap()).await;
    // The mask is a read-only empty file: not a socket (ECONNREFUSED) on a read-only mount
    // (EACCES, which the kernel checks first).
    let refused = [libc::EACCES, libc::ECONNREFUSED].map(|e| format!("refused {e}\nown\n"));
    assert!(
        refused.contains(&out.stdout_str()),
        "{} {}",
        out.stdout_str(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        host.accept().unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "nothing reached the host's socket"
    );
}

/// A DNS answer to `query`: its question with one A record of `addr` for an A query, none
/// for any other type (as a stub that only answers A does).
fn dns_answer(query: &[u8], addr: [u8; 4]) -> Vec<u8> {
    let mut end = 12;
    while query[end] != 0 {
        end += 1 + usize::from(query[end]);
    }
    let qtype = u16::from_be_bytes([query[end + 1], query[end + 2]]);
    let question = &query[12..end + 5];
    let answers = u16::from(qtype == 1);
    let mut out = Vec::new();
    out.extend_from_slice(&query[..2]);
    out.extend_from_slice(&[0x81, 0x80, 0, 1]);
    out.extend_from_slice(&answers.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    if answers == 1 {
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&addr);
    }
    out
}

/// A real client by name: curl resolves through the system resolver (whatever nameserver
/// resolv.conf names, and `AI_ADDRCONFIG` still gives IPv4 answers thanks to the run's
/// non-loopback address), reaches the stub, connects to the address it answered, and that
/// connection arrives at the gate with it as the original destination.
#[tokio::test]
async fn curl_by_name_goes_through_the_stub_then_the_gate() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let r = runner();
    let (_dir, cwd) = workspace();
    let (spec, rx) = hooked("curl -sS -m 15 http://example.test/", cwd);
    let run = r.try_run(spec).unwrap();
    let g = rx.try_recv().unwrap();
    let placeholder = [198, 18, 0, 7];
    // The gate: answers names until the connection comes, then serves it.
    let gate = tokio::spawn(async move {
        let dns = tokio::net::UdpSocket::from_std(UdpSocket::from(g.dns4)).unwrap();
        let tcp = tokio::net::TcpListener::from_std(TcpListener::from(g.tcp4)).unwrap();
        let mut buf = [0u8; 512];
        let mut names = 0;
        let mut s = loop {
            tokio::select! {
                q = dns.recv_from(&mut buf) => {
                    let (n, peer) = q.unwrap();
                    names += 1;
                    dns.send_to(&dns_answer(&buf[..n], placeholder), peer).await.unwrap();
                }
                c = tcp.accept() => break c.unwrap().0,
            }
        };
        let dst = original_destination(s.as_fd()).unwrap();
        let mut request = Vec::new();
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read_buf(&mut request).await.unwrap();
            assert!(n > 0, "the request ended early");
        }
        s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhello\n")
            .await
            .unwrap();
        (dst, String::from_utf8_lossy(&request).into_owned(), names)
    });
    let out = collect(run).await;
    let (dst, request, names) = gate.await.unwrap();
    stdout_is(&out, "hello\n");
    assert!(names >= 1);
    assert_eq!(dst, SocketAddr::from((placeholder, 80)));
    assert!(request.contains("Host: example.test"), "{request}");
}

/// The ruleset the kernel holds for a run is the one the module documents, as `nft` lists it
/// (read from outside while the run waits on its connection to the gate). Where the `nft`
/// binary is not installed, there is nothing to compare with; the runs above show the
/// behaviour either way.
#[tokio::test]
async fn the_kernel_holds_the_documented_ruleset() {
    use tokio::io::AsyncWriteExt;
    let Ok(nft) = which("nft") else {
        eprintln!("nft is not installed; nothing to cross-check");
        return;
    };
    let r = runner();
    let (_dir, cwd) = workspace();
    let (spec, rx) = hooked("exec 3<>/dev/tcp/192.0.2.1/80 && read -r line <&3", cwd);
    let mut run = r.try_run(spec).unwrap();
    let g = rx.try_recv().unwrap();
    let Some(toolgate_process::Event::Started(started)) = run.recv().await else {
        panic!("Started comes first");
    };
    let tcp = tokio::net::TcpListener::from_std(TcpListener::from(g.tcp4)).unwrap();
    let (mut conn, _) = tcp.accept().await.unwrap();
    let listed = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{}/ns/net", started.pid))
        .args([nft.as_str(), "list", "ruleset"])
        .output()
        .unwrap();
    conn.write_all(b"done\n").await.unwrap();
    let out = collect(run).await;
    assert_eq!(out.exited.status, toolgate_process::Status::Exited(0));
    let text = String::from_utf8_lossy(&listed.stdout);
    let rules: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "}")
        .collect();
    let want = [
        "table inet toolgate {",
        "chain nat_out {",
        "type nat hook output priority -100; policy accept;",
        "udp dport 53 redirect to :53",
        "ip daddr 127.0.0.0/8 return",
        "ip6 daddr ::1 return",
        &format!("meta l4proto tcp redirect to :{GATE_PORT}"),
        "chain filter_out {",
        "type filter hook output priority filter; policy drop;",
        "ip daddr 127.0.0.0/8 accept",
        "ip6 daddr ::1 accept",
        "ct status dnat accept",
    ];
    assert_eq!(rules, want, "{}", String::from_utf8_lossy(&listed.stderr));
}

/// The path of `program` on PATH.
fn which(program: &str) -> Result<String, ()> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
        .ok_or(())
}
