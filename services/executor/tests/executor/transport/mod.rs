//! TLS, mutual TLS, certificate rotation and the plaintext guard, with certificates made in
//! the test (rcgen) and the real binaries on loopback.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_contracts::policy::v1 as ppb;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;
use toolgate_runtime::transport::{ClientTls, ClientTlsConfig, Dial};

use crate::support::{Bearer, Credentials, Executor, PERMISSIVE, Policy, Sandbox, ctx};

/// A certificate authority in a directory, issuing leaf certificates as PEM files.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), issuer.pem()).unwrap();
        Ca {
            issuer,
            dir: dir.to_owned(),
            name: name.to_owned(),
        }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A leaf for `names` (DNS names or IP addresses), written as `<file>.pem` and
    /// `<file>.key`; returns both paths.
    fn leaf(&self, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        // Written next to the target and renamed, as a rotation does.
        std::fs::write(c.with_extension("tmp"), cert.pem()).unwrap();
        std::fs::rename(c.with_extension("tmp"), &c).unwrap();
        std::fs::write(k.with_extension("tmp"), key.serialize_pem()).unwrap();
        std::fs::rename(k.with_extension("tmp"), &k).unwrap();
        (c, k)
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A TLS channel to `addr` named `localhost`, trusting `ca`, with an optional client pair.
async fn tls_channel(
    addr: &str,
    ca: &Path,
    client: Option<&(PathBuf, PathBuf)>,
    token: &str,
) -> Result<InterceptedService<tonic::transport::Channel, Bearer>, String> {
    let tls = ClientTls::load(&ClientTlsConfig {
        ca_file: Some(ca.to_owned()),
        cert_file: client.map(|c| c.0.clone()),
        key_file: client.map(|c| c.1.clone()),
    })
    .map_err(|e| e.to_string())?;
    let port = addr.rsplit(':').next().unwrap();
    let channel = Dial::new(
        &format!("https://localhost:{port}"),
        Some(addr.parse().unwrap()),
        Some(&tls),
    )
    .map_err(|e| e.to_string())?
    .map(|e| e.connect_timeout(Duration::from_secs(5)))
    .connect()
    .await
    .map_err(|e| format!("{e:?}"))?;
    Ok(InterceptedService::new(
        channel,
        Bearer::new(token).unwrap(),
    ))
}

async fn read(
    ch: InterceptedService<tonic::transport::Channel, Bearer>,
) -> Result<pb::ReadFileResponse, tonic::Status> {
    FilesystemServiceClient::new(ch)
        .read_file(pb::ReadFileRequest {
            context: ctx(),
            path: "notes.txt".into(),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The production setting end to end: agent → executor over TLS, executor → policy over
/// mutual TLS, and the policy service requiring a client certificate for the executor role.
#[tokio::test]
async fn tls_everywhere_and_the_executor_role_needs_its_client_certificate() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "prod");
    let policy_cert = ca.leaf("policy", &["localhost"]);
    let exec_cert = ca.leaf("executor", &["localhost", "127.0.0.1"]);
    let exec_client = ca.leaf("executor-client", &["exec-1"]);
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("notes.txt"), "over tls\n").unwrap();
    let creds = Arc::new(Credentials::new());
    let policy = Policy::start_env(
        PERMISSIVE,
        creds.clone(),
        &[
            ("TOOLGATE_TRANSPORT__TLS__CERT_FILE", &path(&policy_cert.0)),
            ("TOOLGATE_TRANSPORT__TLS__KEY_FILE", &path(&policy_cert.1)),
            (
                "TOOLGATE_TRANSPORT__TLS__CLIENT_CA_FILE",
                &path(&ca.ca_file()),
            ),
            // Approvers and agents may connect without one; executors may not.
            ("TOOLGATE_TRANSPORT__TLS__CLIENT_CERT_OPTIONAL", "true"),
            (
                "TOOLGATE_TRANSPORT__TLS__CLIENT_CERT_ROLES",
                "[\"executor\"]",
            ),
        ],
    );
    let port = policy.addr.rsplit(':').next().unwrap().to_owned();
    let policy_url = format!("https://localhost:{port}");
    let server_tls = [
        ("TOOLGATE_TRANSPORT__TLS__CERT_FILE", path(&exec_cert.0)),
        ("TOOLGATE_TRANSPORT__TLS__KEY_FILE", path(&exec_cert.1)),
        ("TOOLGATE_POLICY__TLS__CA_FILE", path(&ca.ca_file())),
    ];
    let env = |client: bool| {
        let mut e: Vec<(&str, String)> = server_tls.to_vec();
        if client {
            e.push(("TOOLGATE_POLICY__TLS__CERT_FILE", path(&exec_client.0)));
            e.push(("TOOLGATE_POLICY__TLS__KEY_FILE", path(&exec_client.1)));
        }
        e
    };
    let start = |client: bool| {
        let e = env(client);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Executor::start_at(&policy_url, &creds, &sb.ws, &[], &e)
    };

    let exe = start(true);
    let ch = tls_channel(&exe.addr, &ca.ca_file(), None, &creds.agent)
        .await
        .expect("TLS connect");
    let r = read(ch).await.expect("read over TLS, authorized over mTLS");
    assert_eq!(r.content, b"over tls\n");

    // Plaintext to a TLS port gets nowhere.
    let plain = tonic::transport::Endpoint::from_shared(format!("http://{}", exe.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await;
    if let Ok(plain) = plain {
        let e = read(InterceptedService::new(
            plain,
            Bearer::new(&creds.agent).unwrap(),
        ))
        .await
        .unwrap_err();
        assert_ne!(e.code(), Code::Ok);
    }
    // A client that does not trust the executor's CA refuses it.
    let other = Ca::new(pki.path(), "other");
    assert!(
        tls_channel(&exe.addr, &other.ca_file(), None, &creds.agent)
            .await
            .is_err()
    );

    // The same executor credential without the client certificate: the policy service
    // refuses it, so the executor fails closed.
    let bare = start(false);
    let ch = tls_channel(&bare.addr, &ca.ca_file(), None, &creds.agent)
        .await
        .unwrap();
    let e = read(ch).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert_eq!(crate::support::reason(&e), "POLICY_UNAVAILABLE");
    assert!(e.message().contains("mutual TLS"), "{}", e.message());

    // A stolen executor token used directly, without the certificate: UNAUTHENTICATED.
    let ch = tls_channel(&policy.addr, &ca.ca_file(), None, &creds.executor)
        .await
        .unwrap();
    let e = PolicyServiceClient::new(ch)
        .authorize(ppb::AuthorizeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert_eq!(crate::support::reason(&e), "UNAUTHENTICATED");
}

/// `client_ca_file` without `client_cert_optional`: the handshake itself needs a
/// certificate the CA signed.
#[tokio::test]
async fn required_mutual_tls_refuses_a_client_without_a_certificate() {
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "m");
    let server = ca.leaf("server", &["localhost"]);
    let client = ca.leaf("client", &["agent-1"]);
    let rogue = Ca::new(pki.path(), "rogue").leaf("rogue", &["agent-1"]);
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("notes.txt"), "m\n").unwrap();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_TRANSPORT__TLS__CERT_FILE", &path(&server.0)),
            ("TOOLGATE_TRANSPORT__TLS__KEY_FILE", &path(&server.1)),
            (
                "TOOLGATE_TRANSPORT__TLS__CLIENT_CA_FILE",
                &path(&ca.ca_file()),
            ),
        ],
    );
    let token = exe.agent_token.clone();
    let with = tls_channel(&exe.addr, &ca.ca_file(), Some(&client), &token)
        .await
        .unwrap();
    assert_eq!(read(with).await.unwrap().content, b"m\n");
    // The CLI, as people use it: --ca-file and the client pair.
    let port = exe.addr.rsplit(':').next().unwrap();
    let cli = |extra: &[String]| {
        std::process::Command::new(crate::support::sibling_binary("toolgate"))
            .args(["fs", "read", "notes.txt", "--executor"])
            .arg(format!("https://localhost:{port}"))
            .arg("--ca-file")
            .arg(ca.ca_file())
            .args(extra)
            .env("TOOLGATE_TOKEN", &token)
            .output()
            .unwrap()
    };
    let out = cli(&[
        "--client-cert".into(),
        path(&client.0),
        "--client-key".into(),
        path(&client.1),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"m\n");
    assert!(
        !cli(&[]).status.success(),
        "the CLI got in without a certificate"
    );

    for cert in [None, Some(&rogue)] {
        // TLS 1.3 reports a refused client certificate after the handshake, on first use.
        let refused = match tls_channel(&exe.addr, &ca.ca_file(), cert, &token).await {
            Err(_) => true,
            Ok(ch) => read(ch).await.is_err(),
        };
        assert!(refused, "a client with {cert:?} got in");
    }
}

/// cert-manager rotates the files in place; new connections use the new certificate, with
/// no restart.
#[tokio::test]
async fn a_certificate_rotated_on_disk_is_served_without_a_restart() {
    let pki = tempfile::tempdir().unwrap();
    let old_ca = Ca::new(pki.path(), "old");
    let new_ca = Ca::new(pki.path(), "new");
    let (cert, key) = old_ca.leaf("server", &["localhost"]);
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("notes.txt"), "r\n").unwrap();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_TRANSPORT__TLS__CERT_FILE", &path(&cert)),
            ("TOOLGATE_TRANSPORT__TLS__KEY_FILE", &path(&key)),
            ("TOOLGATE_TRANSPORT__TLS__RELOAD_INTERVAL_MS", "100"),
        ],
    );
    let token = exe.agent_token.clone();
    let kept = tls_channel(&exe.addr, &old_ca.ca_file(), None, &token)
        .await
        .unwrap();
    assert!(read(kept.clone()).await.is_ok());
    assert!(
        tls_channel(&exe.addr, &new_ca.ca_file(), None, &token)
            .await
            .is_err()
    );

    new_ca.leaf("server", &["localhost"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // The check runs at the next connection once the interval has passed.
        if let Ok(ch) = tls_channel(&exe.addr, &new_ca.ca_file(), None, &token).await {
            assert!(read(ch).await.is_ok());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rotation not picked up"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(
        tls_channel(&exe.addr, &old_ca.ca_file(), None, &token)
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    // The connection opened before the rotation keeps working.
    assert!(read(kept).await.is_ok());

    // A half-written rotation keeps the certificate in force.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ch = tls_channel(&exe.addr, &new_ca.ca_file(), None, &token)
        .await
        .expect("still served");
    assert!(read(ch).await.is_ok());
}

/// Bearer tokens never cross a network in the clear by accident.
#[test]
fn a_non_loopback_address_without_tls_refuses_to_start_unless_told() {
    let sb = Sandbox::new();
    let creds = Credentials::new();
    for bin in ["toolgate-executor", "toolgate-policy"] {
        let exe = crate::support::sibling_binary(bin);
        let run = |extra: &[&str]| {
            let mut c = std::process::Command::new(&exe);
            c.args(["--listen", "0.0.0.0:0"])
                .args(extra)
                .env("TOOLGATE_WORKSPACE__ROOT", &sb.ws)
                .env("TOOLGATE_POLICY__ENDPOINT", "http://127.0.0.1:9")
                .env("TOOLGATE_POLICY__TOKEN_FILE", creds.executor_token_file())
                .env("TOOLGATE_AUTH__TOKENS_FILE", creds.tokens_file())
                .env("TOOLGATE_LEDGER__URL", "sqlite::memory:")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        };
        let out = run(&[]).wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin} started in plaintext");
        assert!(err.contains("--insecure-plaintext"), "{bin}: {err}");

        let mut told = run(&["--insecure-plaintext"]);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(told.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let _ = told.kill();
        let _ = told.wait();
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{bin} with --insecure-plaintext: {e}: {line:?}"));
        assert_eq!(v["scheme"], "http");
    }
}

/// Resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A health check on a fresh connection, which must answer promptly (a lockout never does).
async fn healthy_promptly(addr: &str) {
    let check = async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("connect");
        tonic_health::pb::health_client::HealthClient::new(ch)
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .expect("health")
    };
    // A lockout shows as a refused or unanswered connection for tens of seconds; 5 s keeps
    // that apart from a slow answer on a loaded CI machine.
    tokio::time::timeout(Duration::from_secs(5), check)
        .await
        .expect("health answered within 5 s");
}

/// HTTP/2 frames written by hand, so the client can break the rules a real client keeps.
mod raw {
    pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// An empty SETTINGS frame.
    pub(super) fn settings() -> Vec<u8> {
        frame(0x4, 0, 0, &[])
    }

    /// HEADERS for a health check, END_HEADERS but no END_STREAM: the stream stays open.
    pub(super) fn open_health_stream(stream: u32) -> Vec<u8> {
        let lit = |out: &mut Vec<u8>, s: &str| {
            out.push(u8::try_from(s.len()).unwrap());
            out.extend_from_slice(s.as_bytes());
        };
        let mut h = vec![0x83, 0x86]; // :method POST, :scheme http
        h.push(0x04); // :path, literal value
        lit(&mut h, "/grpc.health.v1.Health/Check");
        h.push(0x01); // :authority
        lit(&mut h, "localhost");
        h.extend_from_slice(&[0x0f, 0x10]); // content-type (static index 31)
        lit(&mut h, "application/grpc");
        h.push(0x00); // te: trailers, new name
        lit(&mut h, "te");
        lit(&mut h, "trailers");
        frame(0x1, 0x4, stream, &h)
    }
}

/// Opens `streams` streams on one raw connection as fast as the socket takes them, reading
/// (and discarding) whatever the server answers, until the server closes or `stop` fires.
async fn flood(addr: String, streams: u32, stop: tokio::sync::watch::Receiver<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(sock) = tokio::net::TcpStream::connect(&addr).await else {
        return;
    };
    let (mut rd, mut wr) = sock.into_split();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
    });
    let mut out = [raw::PREFACE, &raw::settings()].concat();
    for i in 0..streams {
        out.extend(raw::open_health_stream(2 * i + 1));
        if out.len() > 64 << 10 {
            if wr.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
    }
    let _ = wr.write_all(&out).await;
    let mut stop = stop;
    let _ = stop.wait_for(|s| *s).await;
    reader.abort();
}

/// 5 connections × 20 000 streams that never end, then 2 000 idle connections: each service
/// stays within 64 MiB of its idle memory, answers health within a second throughout, and
/// comes back within 16 MiB of idle once they close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_connections_cost_bounded_memory_and_health_keeps_answering() {
    const MIB: u64 = 1 << 20;
    // 2 000 connections need more descriptors than the usual soft limit, here and in the
    // services (which inherit it).
    raise_nofile();
    let sb = Sandbox::new();
    let policy = Policy::start(PERMISSIVE);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let pid = |addr: &str| {
        if addr == exe.addr {
            exe.pid()
        } else {
            policy.pid()
        }
    };
    for addr in [exe.addr.clone(), policy.addr.clone()] {
        let pid = pid(&addr);
        healthy_promptly(&addr).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = rss(pid);

        let (stop, stopped) = tokio::sync::watch::channel(false);
        let floods: Vec<_> = (0..5)
            .map(|_| tokio::spawn(flood(addr.clone(), 20_000, stopped.clone())))
            .collect();
        let mut peak = idle;
        for _ in 0..10 {
            healthy_promptly(&addr).await;
            peak = peak.max(rss(pid));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut idle_conns = Vec::new();
        for i in 0..2_000_u32 {
            use tokio::io::AsyncWriteExt;
            // Four peers of 500 each, under the per-peer limit (512).
            let mut s = connect_from([127, 0, 0, 2 + u8::try_from(i / 500).unwrap()], &addr)
                .await
                .unwrap();
            s.write_all(&[raw::PREFACE, &raw::settings()].concat())
                .await
                .unwrap();
            idle_conns.push(s);
            if idle_conns.len() % 500 == 0 {
                healthy_promptly(&addr).await;
                peak = peak.max(rss(pid));
            }
        }
        for _ in 0..5 {
            healthy_promptly(&addr).await;
            peak = peak.max(rss(pid));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            peak < idle + 64 * MIB,
            "{addr}: idle {} MiB, peak {} MiB",
            idle / MIB,
            peak / MIB
        );

        stop.send(true).unwrap();
        for f in floods {
            f.await.unwrap();
        }
        drop(idle_conns);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let after = loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = rss(pid);
            if now < idle + 16 * MIB || std::time::Instant::now() > deadline {
                break now;
            }
        };
        eprintln!(
            "{addr}: idle {} MiB, peak {} MiB, after {} MiB",
            idle / MIB,
            peak / MIB,
            after / MIB
        );
        assert!(
            after < idle + 16 * MIB,
            "{addr}: idle {} MiB, after close {} MiB",
            idle / MIB,
            after / MIB
        );
        healthy_promptly(&addr).await;
    }
}

/// A TCP connection to `addr` from the loopback address `from` (all of 127/8 is local).
async fn connect_from(from: [u8; 4], addr: &str) -> std::io::Result<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind((std::net::Ipv4Addr::from(from), 0).into())?;
    sock.connect(addr.parse().unwrap()).await
}

/// Lets this process (and the services it starts, which inherit it) open as many
/// descriptors as the hard limit allows, up to 65 536.
fn raise_nofile() {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: lim.maximum.map(|m| m.min(65_536)),
            maximum: lim.maximum,
        },
    )
    .unwrap();
}

/// One peer opening 4 300 silent connections (the HTTP/2 preface and nothing more) filled
/// the 4 096-connection table and locked every other client out. Now a peer holds at most
/// `max_connections_per_peer` (512), health answers other peers throughout, and a connection
/// that has not begun a request is closed after `first_request_timeout_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_with_4300_silent_connections_does_not_lock_out_the_others() {
    use tokio::io::AsyncWriteExt;
    raise_nofile();
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_TRANSPORT__FIRST_REQUEST_TIMEOUT_MS", "2000")],
    );
    let hello = [raw::PREFACE, &raw::settings()].concat();
    let mut silent = Vec::new();
    for _ in 0..4_300 {
        let Ok(mut s) = connect_from([127, 0, 0, 2], &exe.addr).await else {
            continue;
        };
        // A connection refused at accept may already be closed.
        let _ = s.write_all(&hello).await;
        silent.push(s);
    }
    let opened = std::time::Instant::now();
    healthy_promptly(&exe.addr).await;
    // The first of them was admitted; it began no request, so it is closed after 2 s
    // (the idle timeout is 300 s).
    assert!(
        closed_within(&mut silent[0], Duration::from_secs(10)).await,
        "a silent connection kept open"
    );
    let held = opened.elapsed();
    assert!(held < Duration::from_secs(8), "closed after {held:?}");
    healthy_promptly(&exe.addr).await;
}

/// Reads until the peer closes or `within` passes; true when it closed.
async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 16 << 10];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A connection with no open stream is closed after `idle_timeout_ms`; one whose stream is
/// still open (a call in progress) is not. Beyond `max_connections`, new connections are
/// closed at accept, and accepted again once a slot is free.
#[tokio::test]
async fn idle_connections_close_and_the_connection_count_is_capped() {
    use tokio::io::AsyncWriteExt;
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_TRANSPORT__IDLE_TIMEOUT_MS", "400"),
            ("TOOLGATE_TRANSPORT__MAX_CONNECTIONS", "3"),
        ],
    );
    let hello = [raw::PREFACE, &raw::settings()].concat();
    let mut idle = tokio::net::TcpStream::connect(&exe.addr).await.unwrap();
    idle.write_all(&hello).await.unwrap();
    let mut busy = tokio::net::TcpStream::connect(&exe.addr).await.unwrap();
    busy.write_all(&[hello.clone(), raw::open_health_stream(1)].concat())
        .await
        .unwrap();
    let mut third = tokio::net::TcpStream::connect(&exe.addr).await.unwrap();
    third.write_all(&hello).await.unwrap();
    // The table is full: a fourth is closed at once.
    let mut fourth = tokio::net::TcpStream::connect(&exe.addr).await.unwrap();
    assert!(closed_within(&mut fourth, Duration::from_millis(300)).await);

    assert!(
        closed_within(&mut idle, Duration::from_secs(3)).await,
        "idle kept open"
    );
    assert!(
        closed_within(&mut third, Duration::from_secs(3)).await,
        "idle kept open"
    );
    // The connection whose call has not finished stays.
    assert!(
        !closed_within(&mut busy, Duration::from_millis(800)).await,
        "busy closed"
    );
    // Slots freed by the idle ones are usable again.
    healthy_promptly(&exe.addr).await;
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT=https://…` exports over TLS, verified against
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`; `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf` exports to
/// an OTLP/HTTP collector; a protocol toolgate does not speak stops the service with a
/// message instead of dropping every span in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_export_over_https_and_http_protobuf_and_an_unsupported_protocol_is_refused() {
    use toolgate_runtime::telemetry::testing::OtlpReceiver;
    let pki = tempfile::tempdir().unwrap();
    let ca = Ca::new(pki.path(), "otel");
    let (cert, key) = ca.leaf("collector", &["localhost"]);
    let receiver = OtlpReceiver::start_tls(&cert, &key).await.unwrap();
    let endpoint = receiver.endpoint();
    assert!(endpoint.starts_with("https://"));
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("notes.txt"), "t\n").unwrap();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &path(&ca.ca_file())),
            ("OTEL_SERVICE_NAME", "executor-over-tls"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    read(exe.channel().await).await.unwrap();
    receiver
        .wait_for(
            |spans| spans.iter().any(|s| s.service_name == "executor-over-tls"),
            Duration::from_secs(10),
        )
        .await
        .expect("spans arrived over TLS");

    let http = OtlpReceiver::start_http().await.unwrap();
    let over_http = Executor::start(
        &sb.ws,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &http.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "executor-over-http"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    read(over_http.channel().await).await.unwrap();
    http.wait_for(
        |spans| spans.iter().any(|s| s.service_name == "executor-over-http"),
        Duration::from_secs(10),
    )
    .await
    .expect("spans arrived over OTLP/HTTP");

    let creds = Credentials::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .args(["--listen", "127.0.0.1:0"])
        .env("TOOLGATE_WORKSPACE__ROOT", &sb.ws)
        .env("TOOLGATE_POLICY__ENDPOINT", "http://127.0.0.1:9")
        .env("TOOLGATE_POLICY__TOKEN_FILE", creds.executor_token_file())
        .env("TOOLGATE_AUTH__TOKENS_FILE", creds.tokens_file())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("http/json"), "{err}");
}
