//! TLS material from files, reloaded when the files change, and dialing over TLS.
//!
//! Certificates and keys are PEM files, as cert-manager and every CA tool write them. A
//! server or client checks its files' identity (inode, size, modification time) at most
//! every `reload_interval_ms`, at the next connection; when they changed it builds a new
//! configuration, which every later connection uses. Connections already open keep theirs.
//! A new set that does not load (a half-written rotation) is logged and the previous one
//! stays in force.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

use super::TransportError;
use crate::auth::role::Role;

/// The `[transport.tls]` section of a server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerTlsConfig {
    /// The certificate chain (PEM, leaf first). TLS is on when it is set.
    pub cert_file: Option<PathBuf>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA certificates (PEM) client certificates are verified against; set: mutual TLS.
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: also accept clients without a certificate (those that
    /// present one are still verified). `client_cert_roles` then says who must have one.
    pub client_cert_optional: bool,
    /// Roles whose calls must arrive over a connection with a verified client
    /// certificate (for example `["executor"]` on the policy service).
    pub client_cert_roles: Vec<Role>,
    /// How often the files are checked for a rotation, in milliseconds.
    pub reload_interval_ms: u64,
}

impl Default for ServerTlsConfig {
    fn default() -> Self {
        ServerTlsConfig {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            client_cert_optional: false,
            client_cert_roles: Vec::new(),
            reload_interval_ms: 5_000,
        }
    }
}

impl ServerTlsConfig {
    /// Whether TLS is configured.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    pub(super) fn validate(&self) -> Result<(), TransportError> {
        let err = |m: &str| Err(TransportError(format!("transport.tls.{m}")));
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => return err("key_file: required with cert_file"),
            (None, Some(_)) => return err("cert_file: required with key_file"),
            (None, None) if self.client_ca_file.is_some() => {
                return err("client_ca_file: mutual TLS needs TLS (set cert_file and key_file)");
            }
            _ => {}
        }
        if !self.client_cert_roles.is_empty() && self.client_ca_file.is_none() {
            return err(
                "client_cert_roles: needs client_ca_file (the CA client certificates are verified against)",
            );
        }
        if self.reload_interval_ms == 0 {
            return err("reload_interval_ms: must be positive");
        }
        Ok(())
    }
}

/// The `tls` section of a client (the executor's `[policy.tls]`; the CLI's flags).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTlsConfig {
    /// CA certificates (PEM) the server's certificate is verified against; unset: the
    /// system's bundle (`SSL_CERT_FILE`, else the distribution's file).
    pub ca_file: Option<PathBuf>,
    /// This client's certificate chain (PEM), for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// This client's private key (PEM).
    pub key_file: Option<PathBuf>,
}

impl ClientTlsConfig {
    fn validate(&self) -> Result<(), TransportError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(TransportError(
                "tls.cert_file and tls.key_file: give both (a client certificate needs its key) or neither"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// How often a client checks its files for a rotation.
const CLIENT_RELOAD: Duration = Duration::from_secs(5);

/// What identifies one version of a file on disk.
type Stamp = Option<(u64, u64, u64, Option<SystemTime>)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()))
}

/// A configuration built from files, rebuilt when they change.
struct Reloading<T> {
    what: &'static str,
    files: Vec<PathBuf>,
    every: Duration,
    build: Box<dyn Fn() -> Result<T, String> + Send + Sync>,
    state: Mutex<(Instant, Vec<Stamp>, Arc<T>)>,
}

impl<T> Reloading<T> {
    fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        every: Duration,
        build: Box<dyn Fn() -> Result<T, String> + Send + Sync>,
    ) -> Result<Self, TransportError> {
        let stamps = files.iter().map(|f| stamp(f)).collect();
        let first = build().map_err(TransportError)?;
        Ok(Reloading {
            what,
            files,
            every,
            build,
            state: Mutex::new((Instant::now(), stamps, Arc::new(first))),
        })
    }

    fn current(&self) -> Arc<T> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0.elapsed() >= self.every {
            state.0 = Instant::now();
            let stamps: Vec<Stamp> = self.files.iter().map(|f| stamp(f)).collect();
            if stamps != state.1 {
                state.1 = stamps;
                match (self.build)() {
                    Ok(c) => {
                        tracing::info!(
                            what = self.what,
                            "TLS files changed; new connections use them"
                        );
                        state.2 = Arc::new(c);
                    }
                    Err(e) => {
                        tracing::error!(what = self.what, error = %e, "TLS files changed but do not load; the previous ones stay in force");
                    }
                }
            }
        }
        state.2.clone()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(path: &Path, field: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("{field} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{field} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path, field: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{field} {}: {e}", path.display()))
}

fn roots(path: &Path, field: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path, field)? {
        roots
            .add(cert)
            .map_err(|e| format!("{field} {}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// A server's TLS configuration (see the module documentation).
pub(super) struct ServerTls(Reloading<ServerConfig>);

impl ServerTls {
    pub(super) fn load(c: &ServerTlsConfig) -> Result<Self, TransportError> {
        let (Some(cert), Some(key)) = (c.cert_file.clone(), c.key_file.clone()) else {
            return Err(TransportError(
                "transport.tls: cert_file and key_file are required".into(),
            ));
        };
        let ca = c.client_ca_file.clone();
        let optional = c.client_cert_optional;
        let mut files = vec![cert.clone(), key.clone()];
        files.extend(ca.clone());
        let build = move || -> Result<ServerConfig, String> {
            let chain = read_certs(&cert, "transport.tls.cert_file")?;
            let key = read_key(&key, "transport.tls.key_file")?;
            let builder = ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?;
            let builder = match &ca {
                Some(ca) => {
                    let verifier = WebPkiClientVerifier::builder_with_provider(
                        Arc::new(roots(ca, "transport.tls.client_ca_file")?),
                        provider(),
                    );
                    let verifier = if optional {
                        verifier.allow_unauthenticated()
                    } else {
                        verifier
                    };
                    builder.with_client_cert_verifier(
                        verifier
                            .build()
                            .map_err(|e| format!("transport.tls.client_ca_file: {e}"))?,
                    )
                }
                None => builder.with_no_client_auth(),
            };
            let mut config = builder
                .with_single_cert(chain, key)
                .map_err(|e| format!("transport.tls: the certificate and key do not fit: {e}"))?;
            config.alpn_protocols = vec![b"h2".to_vec()];
            Ok(config)
        };
        Ok(ServerTls(Reloading::new(
            "server",
            files,
            Duration::from_millis(c.reload_interval_ms),
            Box::new(build),
        )?))
    }

    pub(super) fn current(&self) -> Arc<ServerConfig> {
        self.0.current()
    }
}

/// The system's CA bundle: `SSL_CERT_FILE`, else the first distribution path that exists.
fn system_bundle() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SSL_CERT_FILE").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// A client's TLS configuration, shared by all its connections.
pub struct ClientTls(Reloading<ClientConfig>);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &self.0.files)
            .finish()
    }
}

impl ClientTls {
    /// The configuration new connections use now (ALPN `h2`; clone it to change that).
    pub fn config(&self) -> Arc<ClientConfig> {
        self.0.current()
    }

    /// Loads `c`; errors name the field and file.
    pub fn load(c: &ClientTlsConfig) -> Result<Arc<ClientTls>, TransportError> {
        c.validate()?;
        let ca = match &c.ca_file {
            Some(p) => p.clone(),
            None => system_bundle().ok_or_else(|| {
                TransportError(
                    "https needs a CA to verify the server: set tls.ca_file (--ca-file) or SSL_CERT_FILE"
                        .into(),
                )
            })?,
        };
        let identity = c.cert_file.clone().zip(c.key_file.clone());
        let mut files = vec![ca.clone()];
        if let Some((cert, key)) = &identity {
            files.push(cert.clone());
            files.push(key.clone());
        }
        let build = move || -> Result<ClientConfig, String> {
            let builder = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots(&ca, "tls.ca_file")?);
            let mut config = match &identity {
                Some((cert, key)) => builder
                    .with_client_auth_cert(
                        read_certs(cert, "tls.cert_file")?,
                        read_key(key, "tls.key_file")?,
                    )
                    .map_err(|e| format!("tls: the client certificate and key do not fit: {e}"))?,
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![b"h2".to_vec()];
            Ok(config)
        };
        Ok(Arc::new(ClientTls(Reloading::new(
            "client",
            files,
            CLIENT_RELOAD,
            Box::new(build),
        )?)))
    }
}

/// Connects TCP to the address in the endpoint's URI, then TLS verifying `server_name`.
#[derive(Clone)]
pub struct TlsConnector {
    tls: Arc<ClientTls>,
    server_name: ServerName<'static>,
}

impl tower::Service<http::Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let config = self.tls.0.current();
        let name = self.server_name.clone();
        Box::pin(async move {
            let tcp = tcp_connect(&uri, 443).await?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(TokioIo::new(tls))
        })
    }
}

/// A TCP connection (with `TCP_NODELAY`) to the host and port of `uri`, `default_port`
/// when it names none.
pub(crate) async fn tcp_connect(uri: &http::Uri, default_port: u16) -> io::Result<TcpStream> {
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let tcp = TcpStream::connect((host, uri.port_u16().unwrap_or(default_port))).await?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// How to reach one server: an endpoint and, for `https`, the TLS connector.
#[derive(Clone)]
pub struct Dial {
    endpoint: Endpoint,
    tls: Option<TlsConnector>,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dial")
            .field("uri", self.endpoint.uri())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Dial {
    /// `url` (`http://` or `https://`), optionally connecting to `address` instead of the
    /// URL's host (a resolved replica) while requests and the certificate check still name
    /// the URL's host. `tls` is required for `https`.
    pub fn new(
        url: &str,
        address: Option<SocketAddr>,
        tls: Option<&Arc<ClientTls>>,
    ) -> Result<Dial, TransportError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| TransportError(format!("`{url}` is not a URL ({e})")))?;
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| TransportError(format!("`{url}` has no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(TransportError(format!(
                    "`{url}` is not an http:// or https:// URL"
                )));
            }
        };
        let target = match address {
            Some(a) => format!("{}://{a}", uri.scheme_str().unwrap_or("http")),
            None => url.to_owned(),
        };
        let mut endpoint =
            crate::grpc::endpoint(target).map_err(|e| TransportError(format!("`{url}`: {e}")))?;
        if address.is_some() {
            endpoint = endpoint.origin(uri);
        }
        let tls = if https {
            let tls = tls.ok_or_else(|| {
                TransportError(format!("`{url}` is https: a TLS configuration is required"))
            })?;
            let server_name = ServerName::try_from(host.clone()).map_err(|e| {
                TransportError(format!("`{url}`: `{host}` is not a server name ({e})"))
            })?;
            Some(TlsConnector {
                tls: tls.clone(),
                server_name,
            })
        } else {
            None
        };
        Ok(Dial { endpoint, tls })
    }

    /// Adjusts the endpoint (timeouts, keepalive).
    #[must_use]
    pub fn map(mut self, f: impl FnOnce(Endpoint) -> Endpoint) -> Self {
        self.endpoint = f(self.endpoint);
        self
    }

    /// Connects now.
    pub async fn connect(self) -> Result<Channel, tonic::transport::Error> {
        match self.tls {
            Some(c) => self.endpoint.connect_with_connector(c).await,
            None => self.endpoint.connect().await,
        }
    }

    /// A channel that connects at its first call, and again after a failure.
    pub fn connect_lazy(self) -> Channel {
        match self.tls {
            Some(c) => self.endpoint.connect_with_connector_lazy(c),
            None => self.endpoint.connect_lazy(),
        }
    }
}
