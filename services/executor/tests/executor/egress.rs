//! Networked runs through the executor's egress gate: real runs under `network` in their
//! gated namespace, a DNS server and an HTTP server of the test's on loopback addresses the
//! executor's `[egress]` allows.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use support::{Executor, Policy, Sandbox};
use toolgate_contracts::common::v1 as common;

use crate::process::{Outcome, run, script};

/// The address the test's name `web.test` resolves to upstream.
const WEB: &str = "127.77.0.2";
/// Where the test's DNS server listens.
const DNS: &str = "127.77.0.53";
/// What the test's web server answers.
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n";

/// A DNS server answering `web.test` with [`WEB`] and `loop.test` with 127.0.0.1 (A), nothing
/// for AAAA, NXDOMAIN for the rest. Returns its address.
fn dns_server() -> SocketAddr {
    let sock = std::net::UdpSocket::bind((DNS, 0)).expect("bind the test DNS server");
    let addr = sock.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let q = &buf[..n];
            // The question: the name's labels from byte 12, then type and class.
            let mut at = 12;
            let mut labels = Vec::new();
            while at < n && q[at] != 0 {
                let len = usize::from(q[at]);
                labels.push(String::from_utf8_lossy(&q[at + 1..at + 1 + len]).to_lowercase());
                at += 1 + len;
            }
            let qtype = u16::from_be_bytes([q[at + 1], q[at + 2]]);
            let end = at + 5;
            let mut r = q[..end].to_vec();
            r[2] |= 0x80;
            r[3] = 0x80;
            r[10] = 0;
            r[11] = 0;
            let address = match labels.join(".").as_str() {
                "web.test" => WEB,
                "loop.test" => "127.0.0.1",
                _ => "",
            };
            if address.is_empty() {
                r[3] |= 3;
            } else if qtype == 1 {
                r[7] = 1;
                r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
                r.extend(address.split('.').map(|o| o.parse::<u8>().unwrap()));
            }
            let _ = sock.send_to(&r, from);
        }
    });
    addr
}

/// An HTTP server on [`WEB`] answering every request with `hello`; returns its port.
fn web_server() -> u16 {
    let l = TcpListener::bind((WEB, 0)).expect("bind the test web server");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s.write_all(RESPONSE);
                if head.starts_with(b"GET /hold ") {
                    // Stays open until the client closes (a connection held through the gate).
                    while matches!(s.read(&mut b), Ok(n) if n > 0) {}
                }
            });
        }
    });
    port
}

/// A client printing each URL's body, or the status and body of a refusal.
const GET: &str = "import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=20).read().decode(), end='')
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode())
";

/// A TXT query for `out.test`, printing the answer's response code.
const TXT: &str = "import socket
q = bytes.fromhex('abcd01000001000000000000' '036f75740474657374' '00' '0010' '0001')
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(q, ('10.0.0.1', 53))
print(s.recv(512)[3] & 15)
";

fn networked(s: &str) -> toolgate_contracts::executor::v1::RunRequest {
    let mut req = script(s);
    req.sandbox_profile = "network".into();
    req
}

fn destination<'a>(o: &'a Outcome, host: &str) -> &'a common::NetworkDestination {
    o.exited
        .network
        .iter()
        .find(|d| d.host == host)
        .unwrap_or_else(|| panic!("no destination {host} in {:?}", o.exited.network))
}

fn executor(sb: &Sandbox, dns: SocketAddr, policy: Option<&Policy>) -> Executor {
    executor_env(sb, dns, policy, &[])
}

fn executor_env(
    sb: &Sandbox,
    dns: SocketAddr,
    policy: Option<&Policy>,
    more: &[(&str, &str)],
) -> Executor {
    let resolvers = format!("[\"{dns}\"]");
    let mut env = vec![
        ("TOOLGATE_EGRESS__RESOLVERS", resolvers.as_str()),
        ("TOOLGATE_EGRESS__ALLOW_RANGES", "[\"127.77.0.0/16\"]"),
    ];
    env.extend_from_slice(more);
    match policy {
        Some(p) => Executor::start_with(p, &sb.ws, &[], &env),
        None => Executor::start(&sb.ws, &[], &env),
    }
}

/// Holds one connection open, then tries a second one. The first has had an answer through
/// the gate (so the gate counts it open) before the second is made: no timing involved.
const TWO: &str = "import socket, sys
port = int(sys.argv[1])
held = socket.create_connection(('web.test', port))
held.sendall(b'GET /hold HTTP/1.1\\r\\nHost: web.test\\r\\n\\r\\n')
got = b''
while not got.endswith(b'hello\\n'):
    chunk = held.recv(100)
    if not chunk:
        sys.exit('the held connection closed: ' + repr(got))
    got += chunk
second = socket.create_connection(('web.test', port))
try:
    # The gate may reset before the send: either call can see the reset.
    second.sendall(b'x')
    print('second:', second.recv(100))
except (ConnectionResetError, BrokenPipeError):
    print('second: reset')
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_runs_limit_are_reset() {
    let sb = Sandbox::new();
    let dns = dns_server();
    let port = web_server();
    let exe = executor_env(
        &sb,
        dns,
        None,
        &[("TOOLGATE_EGRESS__MAX_CONNECTIONS_PER_RUN", "1")],
    );
    std::fs::write(sb.ws.join("two.py"), TWO).unwrap();
    let o = run(&exe, networked(&format!("python3 two.py {port}")))
        .await
        .expect("the run starts");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "second: reset\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d = destination(&o, "web.test");
    assert_eq!((d.connections, d.refused), (2, 1));
    assert_eq!(d.refusal, "connection_limit");
}

/// A policy whose network rule decides connections to `web.test:port` with `decision`. The
/// rule names the port, so a deny is decided per connection (a 403), not at the lookup (a
/// deny on every port is answered NXDOMAIN by the gate's DNS).
fn net_policy(decision: &str, port: u16) -> String {
    format!(
        "default = \"auto\"\n\n[[network]]\nid = \"net-{decision}\"\ndecision = \"{decision}\"\nreason = \"connections are decided by hand in this test\"\nhosts = [\"web.test\"]\nports = [{port}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_destination_gets_a_403_naming_the_rule() {
    let sb = Sandbox::new();
    let dns = dns_server();
    let port = web_server();
    let policy = Policy::start(&net_policy("deny", port));
    let exe = executor(&sb, dns, Some(&policy));
    std::fs::write(sb.ws.join("get.py"), GET).unwrap();
    let o = run(
        &exe,
        networked(&format!(
            "python3 get.py http://web.test:{port}/ http://web.test:{port}/"
        )),
    )
    .await
    .expect("the run starts");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("403 "), "{out}");
    assert!(
        out.contains("reason: denied") && out.contains("rule: net-deny"),
        "{out}"
    );
    let d = destination(&o, "web.test");
    assert_eq!(
        (d.connections, d.refused),
        (2, 2),
        "one decision, both refused"
    );
    assert_eq!(
        (d.refusal.as_str(), d.rule_id.as_str()),
        ("denied", "net-deny")
    );
    assert_eq!(d.tier, common::Tier::Deny as i32);
    assert_eq!((d.address.as_str(), d.bytes_sent), ("", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asked_destination_holds_the_connection_until_a_human_approves() {
    use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
    use toolgate_contracts::executor::v1::run_response::Event;
    let sb = Sandbox::new();
    let dns = dns_server();
    let port = web_server();
    let policy = Policy::start(&net_policy("ask", port));
    let exe = executor(&sb, dns, Some(&policy));
    std::fs::write(sb.ws.join("get.py"), GET).unwrap();
    let _human = support::approve_everything(&policy).await;
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client
        .run(networked(&format!(
            "python3 get.py http://web.test:{port}/"
        )))
        .await
        .expect("the run starts")
        .into_inner();
    let (mut waits, mut stdout, mut exited) = (Vec::new(), Vec::new(), None);
    while let Some(msg) = stream.message().await.expect("the stream") {
        match msg.event.expect("event set") {
            Event::AwaitingApproval(a) => waits.push(a),
            Event::Output(o) => stdout.extend_from_slice(&o.data),
            Event::Exited(x) => exited = Some(x),
            Event::Started(_) => {}
        }
    }
    assert_eq!(String::from_utf8_lossy(&stdout), "hello\n");
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].destination, format!("web.test:{port}"));
    assert!(waits[0].wait_deadline.is_some());
    let exited = exited.expect("Exited");
    let d = exited
        .network
        .iter()
        .find(|d| d.host == "web.test")
        .expect("web.test");
    assert_eq!(d.approval_id, waits[0].approval_id);
    assert_eq!(
        (d.tier, d.connections, d.refused),
        (common::Tier::Ask as i32, 1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_networked_run_reaches_a_name_but_not_an_ip_literal_nor_the_executors_loopback() {
    let sb = Sandbox::new();
    let dns = dns_server();
    let port = web_server();
    let exe = executor(&sb, dns, None);
    std::fs::write(sb.ws.join("get.py"), GET).unwrap();

    // By name: the gate answers the lookup with a placeholder, the policy allows the
    // destination, the gate resolves web.test upstream and relays the bytes.
    let o = run(
        &exe,
        networked(&format!(
            "python3 get.py http://web.test:{port}/ http://web.test:{port}/again"
        )),
    )
    .await
    .expect("the run starts");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out,
        "hello\nhello\n",
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d = destination(&o, "web.test");
    assert_eq!(d.port, u32::from(port));
    assert_eq!(d.protocol, "tcp");
    assert_eq!(d.address, format!("{WEB}:{port}"), "the pinned address");
    assert_eq!((d.connections, d.refused), (2, 0));
    assert_eq!(d.refusal, "");
    assert_eq!(d.tier, common::Tier::Auto as i32);
    // Two requests out, two answers of 6 body bytes plus headers back.
    assert!(d.bytes_sent > 2 * 40, "{d:?}");
    assert_eq!(d.bytes_received, 2 * RESPONSE.len() as u64, "{d:?}");

    // An address the run never looked up: refused after recording, HTTP gets a 403.
    let o = run(&exe, networked("python3 get.py http://93.184.216.34/"))
        .await
        .expect("the run starts");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("ip_literal"), "{out}");
    let d = destination(&o, "93.184.216.34");
    assert_eq!((d.port, d.connections, d.refused), (80, 1, 1));
    assert_eq!(d.refusal, "ip_literal");
    assert_eq!(d.address, "", "nothing left the gate");

    // A name the policy allows that resolves to the executor's own loopback (DNS
    // rebinding): refused after resolution, nothing leaves the gate.
    let o = run(
        &exe,
        networked(&format!("python3 get.py http://loop.test:{port}/")),
    )
    .await
    .expect("the run starts");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("403 ") && out.contains("forbidden_address"),
        "{out}"
    );
    let d = destination(&o, "loop.test");
    assert_eq!(
        (d.refusal.as_str(), d.refused, d.address.as_str()),
        ("forbidden_address", 1, "")
    );

    // Other lookups than A and AAAA are refused and reported; the query goes to any
    // address on port 53 and reaches the gate's stub.
    std::fs::write(sb.ws.join("txt.py"), TXT).unwrap();
    let o = run(&exe, networked("python3 txt.py"))
        .await
        .expect("the run starts");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "5\n",
        "REFUSED; stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d = destination(&o, "out.test");
    assert_eq!((d.port, d.refusal.as_str()), (0, "query_type"));
}

/// Connects to `web.test` on the port given, sends a few bytes that are not HTTP and prints
/// what comes back: `reset` for a TCP reset, `closed` for an orderly end.
const RAW: &str = "import socket, sys
s = socket.create_connection(('web.test', int(sys.argv[1])))
try:
    s.sendall(b'ping')
    got = s.recv(100)
    print('closed' if not got else got)
except (ConnectionResetError, BrokenPipeError):
    print('reset')
";

/// A run's events, split: the approvals it waited on, its stdout, its `Exited`.
struct Streamed {
    waits: Vec<toolgate_contracts::executor::v1::AwaitingApproval>,
    stdout: String,
    exited: toolgate_contracts::executor::v1::Exited,
}

/// Reads `stream` to its end; `on_started` runs once the run's process has started.
async fn stream_run(
    mut stream: tonic::Streaming<toolgate_contracts::executor::v1::RunResponse>,
    on_started: impl AsyncFnOnce(),
) -> Streamed {
    use toolgate_contracts::executor::v1::run_response::Event;
    let (mut waits, mut stdout, mut exited) = (Vec::new(), Vec::new(), None);
    let mut on_started = Some(on_started);
    while let Some(msg) = stream.message().await.expect("the stream") {
        match msg.event.expect("event set") {
            Event::Started(_) => {
                if let Some(f) = on_started.take() {
                    f().await;
                }
            }
            Event::AwaitingApproval(a) => waits.push(a),
            Event::Output(o)
                if o.stream == toolgate_contracts::executor::v1::Stream::Stdout as i32 =>
            {
                stdout.extend_from_slice(&o.data);
            }
            Event::Output(_) => {}
            Event::Exited(x) => exited = Some(x),
        }
    }
    Streamed {
        waits,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        exited: exited.expect("Exited"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_while_the_policy_service_is_unreachable_is_refused_and_recorded() {
    use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
    let sb = Sandbox::new();
    let dns = dns_server();
    let port = web_server();
    // Runs are auto; a destination no rule lists asks (the network default).
    let policy = Policy::start("default = \"auto\"\n");
    let exe = executor(&sb, dns, Some(&policy));
    std::fs::write(sb.ws.join("get.py"), GET).unwrap();
    // The run waits on a FIFO until the test has taken the policy service away.
    let go = sb.ws.join("go");
    let made = std::process::Command::new("mkfifo")
        .arg(&go)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let stream = client
        .run(networked(&format!(
            "read line < go && python3 get.py http://web.test:{port}/"
        )))
        .await
        .expect("the run starts")
        .into_inner();
    let mut policy = Some(policy);
    let s = stream_run(stream, async || {
        // The run was authorized; now nobody can decide its connections.
        drop(policy.take());
        tokio::task::spawn_blocking(move || std::fs::write(go, "go\n"))
            .await
            .unwrap()
            .expect("release the run");
    })
    .await;
    assert!(policy.is_none(), "the run started");
    // Fail closed: the client gets a refusal naming the reason, nothing left the gate.
    assert!(
        s.stdout.starts_with("403 ") && s.stdout.contains("reason: policy_unavailable"),
        "{}",
        s.stdout
    );
    let d = s
        .exited
        .network
        .iter()
        .find(|d| d.host == "web.test")
        .unwrap_or_else(|| panic!("no web.test in {:?}", s.exited.network));
    assert_eq!(d.refusal, "policy_unavailable");
    assert!(d.message.contains("unavailable"), "{}", d.message);
    assert_eq!((d.connections, d.refused), (1, 1));
    assert_eq!((d.address.as_str(), d.bytes_sent), ("", 0));
    // Nobody decided: no tier, rule or approval.
    assert_eq!(d.tier, common::Tier::Unspecified as i32);
    assert_eq!((d.rule_id.as_str(), d.approval_id.as_str()), ("", ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_connection_is_reset_when_its_approval_expires() {
    use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
    use toolgate_contracts::policy::v1 as ppb;
    let sb = Sandbox::new();
    let dns = dns_server();
    let port = web_server();
    // Pending approvals expire after two seconds; the gate would hold for two minutes
    // (`egress.hold_ms`'s default): the approval's expiry is the bound.
    let policy = Policy::start_env(
        &net_policy("ask", port),
        std::sync::Arc::new(support::Credentials::new()),
        &[("TOOLGATE_LEDGER__PENDING_TTL_MS", "2000")],
    );
    let exe = executor(&sb, dns, Some(&policy));
    std::fs::write(sb.ws.join("raw.py"), RAW).unwrap();
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let stream = client
        .run(networked(&format!("python3 raw.py {port}")))
        .await
        .expect("the run starts")
        .into_inner();
    let s = stream_run(stream, async || {}).await;
    let ended = std::time::SystemTime::now();

    assert_eq!(s.stdout, "reset\n", "the held connection is reset");
    assert_eq!(s.waits.len(), 1, "{:?}", s.waits);
    let wait = &s.waits[0];
    assert_eq!(wait.destination, format!("web.test:{port}"));
    let approval = policy
        .approvals()
        .await
        .get_approval(ppb::GetApprovalRequest {
            approval_id: wait.approval_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    let at = |t: &prost_types::Timestamp| {
        std::time::UNIX_EPOCH + std::time::Duration::new(t.seconds as u64, t.nanos as u32)
    };
    let expires = at(approval.expires_at.as_ref().expect("expires_at"));
    let deadline = at(wait.wait_deadline.as_ref().expect("wait_deadline"));
    let apart = expires
        .duration_since(deadline)
        .unwrap_or_else(|e| e.duration());
    assert!(
        apart < std::time::Duration::from_millis(1),
        "the hold is bounded by the approval's expiry: {deadline:?} vs {expires:?}"
    );
    assert!(ended >= expires, "the connection was held until the expiry");
    assert_ne!(approval.state, ppb::ApprovalState::Approved as i32);

    let d = s
        .exited
        .network
        .iter()
        .find(|d| d.host == "web.test")
        .unwrap_or_else(|| panic!("no web.test in {:?}", s.exited.network));
    assert_eq!(d.refusal, "approval_expired");
    assert_eq!(d.approval_id, wait.approval_id);
    assert_eq!(d.tier, common::Tier::Ask as i32);
    assert_eq!((d.connections, d.refused), (1, 1));
    assert_eq!((d.address.as_str(), d.bytes_sent), ("", 0));
}
