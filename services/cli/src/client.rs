//! Talking to the services: endpoints, the bearer token, and errors people can read.
//!
//! Every call carries `authorization: Bearer <token>`. The token comes from, in order:
//! `--token-file FILE`, the `TOOLGATE_TOKEN` variable, the file named by `TOOLGATE_TOKEN_FILE`.
//! With none of them the call goes out without a credential and the server answers
//! UNAUTHENTICATED, which is printed with a hint.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use toolgate_core::display::escape;
use toolgate_runtime::auth::Bearer;
use toolgate_runtime::transport::{ClientTls, ClientTlsConfig, Dial};

/// Default policy service endpoint (`toolgate up` listens there).
pub(crate) const DEFAULT_POLICY: &str = "http://127.0.0.1:7071";
/// Default executor endpoint (`toolgate up` listens there).
pub(crate) const DEFAULT_EXECUTOR: &str = "http://127.0.0.1:7070";

/// The most the CLI reads from standard input (or a `--stdin-file`) to send in one request:
/// the executor's default `max_request_bytes`. More would be refused there anyway, after
/// the CLI had held it all in memory.
pub(crate) const INPUT_CAP: u64 = 64 << 20;

/// Reads `input` whole, or refuses when it holds more than [`INPUT_CAP`] bytes; `what`
/// names it in the error (`standard input`, a path).
pub(crate) fn read_capped(input: impl std::io::Read, what: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    // Bounded by `take`: at most one byte past the cap, enough to tell it was exceeded.
    #[allow(clippy::disallowed_methods)]
    input
        .take(INPUT_CAP + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read {what}"))?;
    if buf.len() as u64 > INPUT_CAP {
        anyhow::bail!(
            "{what} holds more than {} MiB, more than an executor accepts in one request \
             (executor max_request_bytes); send large content in smaller pieces",
            INPUT_CAP >> 20
        );
    }
    Ok(buf)
}

/// The credential flag shared by every client command group.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TokenArgs {
    /// A file holding the bearer token (default: `TOOLGATE_TOKEN`, then the file named by
    /// `TOOLGATE_TOKEN_FILE`).
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificates (PEM) that `https://` endpoints are verified against (default: the
    /// system's bundle).
    #[arg(long, global = true, value_name = "FILE", env = "TOOLGATE_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for servers that require mutual TLS.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "TOOLGATE_CLIENT_CERT",
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "TOOLGATE_CLIENT_KEY",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
}

impl TokenArgs {
    /// The token to send, if any, following the documented precedence.
    pub(crate) fn resolve(&self) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.token_file {
            return read_token(path).map(Some);
        }
        if let Some(t) = std::env::var_os("TOOLGATE_TOKEN") {
            let t = t
                .into_string()
                .map_err(|_| anyhow::anyhow!("TOOLGATE_TOKEN is not valid UTF-8"))?;
            if !t.trim().is_empty() {
                return Ok(Some(t.trim().to_owned()));
            }
        }
        match std::env::var_os("TOOLGATE_TOKEN_FILE") {
            Some(p) if !p.is_empty() => read_token(Path::new(&p)).map(Some),
            _ => Ok(None),
        }
    }
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.trim();
    anyhow::ensure!(
        !token.is_empty(),
        "the token file {} is empty",
        path.display()
    );
    Ok(token.to_owned())
}

/// A channel whose calls carry the bearer token.
pub(crate) type AuthChannel = InterceptedService<Channel, Bearer>;

/// `url` with `http://` in front when it names no scheme (`127.0.0.1:7070`, as `up` prints
/// addresses).
pub(crate) fn with_scheme(url: &str) -> String {
    if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    }
}

/// Connects to `url` (the `what` service, for messages) and attaches the token.
pub(crate) async fn connect(
    what: &str,
    url: &str,
    token: &TokenArgs,
) -> anyhow::Result<AuthChannel> {
    let url = &with_scheme(url);
    let bearer = match token.resolve()? {
        Some(t) => Bearer::new(&t).map_err(|e| anyhow::anyhow!("the token cannot be sent: {e}"))?,
        None => Bearer::none(),
    };
    let tls = if url.starts_with("https://") {
        Some(
            ClientTls::load(&ClientTlsConfig {
                ca_file: token.ca_file.clone(),
                cert_file: token.client_cert.clone(),
                key_file: token.client_key.clone(),
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    } else {
        None
    };
    let channel = Dial::new(url, None, tls.as_ref())
        .map_err(|e| anyhow::anyhow!("`{url}` is not a valid {what} endpoint URL: {}", e.0))?
        .connect()
        .await
        .with_context(|| format!("cannot reach the {what} at {url}"))?;
    Ok(InterceptedService::new(channel, bearer))
}

/// A failed call, printed as `CODE REASON: message` followed by the ErrorInfo metadata.
#[derive(Debug)]
pub(crate) struct CallError {
    /// The status the server answered.
    pub status: tonic::Status,
    /// The ErrorInfo reason, empty when the status carries none.
    pub reason: String,
    /// The ErrorInfo metadata, sorted by key.
    pub metadata: Vec<(String, String)>,
}

impl CallError {
    /// Unpacks the status's ErrorInfo.
    pub(crate) fn new(status: tonic::Status) -> Self {
        let (reason, md) = toolgate_contracts::status::error_info(&status).unwrap_or_default();
        let mut metadata: Vec<_> = md.into_iter().collect();
        metadata.sort();
        CallError {
            status,
            reason,
            metadata,
        }
    }

    /// One metadata value.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(toolgate_contracts::status::code_name(self.status.code()))?;
        if !self.reason.is_empty() {
            write!(f, " {}", self.reason)?;
        }
        // A message can quote the request (a path, a command): shown escaped, like approvals.
        write!(f, ": {}", escape(self.status.message()))?;
        for (k, v) in &self.metadata {
            // Said once: the status message already carries the policy's or approver's words.
            if k == "message" && self.status.message().contains(v.as_str()) {
                continue;
            }
            write!(f, "\n  {}: {}", escape(k), escape(v))?;
        }
        if self.status.code() == tonic::Code::Unauthenticated {
            write!(
                f,
                "\n  hint: set TOOLGATE_TOKEN, TOOLGATE_TOKEN_FILE or --token-file \
                 (`toolgate up` prints the tokens)"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for CallError {}

/// Turns a status into an error for `?`.
pub(crate) fn call_error(status: tonic::Status) -> anyhow::Error {
    CallError::new(status).into()
}

/// Exit with this code; whatever needed saying was already printed.
#[derive(Debug)]
pub(crate) struct Exit(pub u8);

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Exit {}
