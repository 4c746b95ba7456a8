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
