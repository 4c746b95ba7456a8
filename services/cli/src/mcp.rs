//! `toolgate mcp`: toolgate as an MCP server, over stdio (the default, for agents that start
//! a local command) or streamable HTTP (`--listen`, for a sidecar or a Kubernetes Service).
//! Every tool call is one call to the executor with the agent's token.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use toolgate_contracts::executor::v1::GetCapabilitiesRequest;
use toolgate_contracts::executor::v1::executor_service_client::ExecutorServiceClient;
use toolgate_mcp::{McpConfig, McpServer};
use toolgate_runtime::transport::{ClientTls, ClientTlsConfig, Dial, Transport, TransportConfig};
use toolgate_runtime::{logging, shutdown};

use crate::client::TokenArgs;

/// Arguments of `toolgate mcp`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The executor every tool call goes to.
    #[arg(
        long,
        alias = "endpoint",
        env = "TOOLGATE_EXECUTOR",
        default_value = crate::client::DEFAULT_EXECUTOR
    )]
    executor: String,
    #[command(flatten)]
    token: TokenArgs,
    /// Serve streamable HTTP at `http://ADDR/mcp` instead of stdio; each request brings its
    /// own `Authorization: Bearer` token.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// With --listen: the server certificate (PEM) to serve HTTPS with.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// With --listen: the certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With --listen: allow an address other than loopback without TLS (behind a mesh that
    /// encrypts).
    #[arg(long)]
    insecure_plaintext: bool,
    /// How long a call the policy asks about waits for a human before it returns the
    /// pending approval to the model (`30s`, `5m`; the executor clamps it). Default: no wait.
    #[arg(long, value_parser = crate::duration::parse, default_value = "0s")]
    approval_wait: Duration,
    /// The session approvals are bound to, for calls that name none in `_meta`
    /// (`dev.toolgate/session_id`). Default over stdio: one derived from the executor's
    /// workspace, the token and the MCP client's declared name, so a restarted agent keeps
    /// its approvals; over HTTP, the transport's session, else one per credential.
    #[arg(long, env = "TOOLGATE_SESSION", value_name = "ID")]
    session_id: Option<String>,
    /// Where MCP task records live (a call a human must approve, for clients that declare the
    /// tasks extension); `off` turns tasks off. Default: `$XDG_STATE_HOME/toolgate/mcp-tasks`
    /// (`~/.local/state/...`). Share it between replicas of an HTTP server.
    #[arg(long, value_name = "DIR")]
    task_dir: Option<PathBuf>,
    /// Serve Prometheus metrics (`/metrics`) on this address.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// Log filter for stderr (`RUST_LOG` syntax); stdout belongs to the protocol.
    #[arg(long, env = "TOOLGATE_LOG", default_value = "warn")]
    log: String,
}

/// Runs the server until stdin closes (stdio) or a signal arrives (HTTP).
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let telemetry =
        toolgate_runtime::telemetry::init("toolgate-mcp", logging::Format::Text, &args.log)
            .context("cannot set up logging and tracing")?;
    let channel = channel(&args.executor, &args.token)?;
    let token = args.token.resolve()?;
    let executor = crate::client::with_scheme(&args.executor);
    if let Some(m) = &args.metrics_listen {
        // Served for as long as the process runs, over stdio or HTTP alike.
        let l = TcpListener::bind(m)
            .await
            .with_context(|| format!("--metrics-listen: cannot listen on {m}"))?;
        tokio::spawn(toolgate_runtime::metrics::serve(
            l,
            Arc::new(toolgate_runtime::metrics::registry()),
            shutdown::Shutdown::never(),
        ));
    }
    let config = McpConfig {
        approval_wait: args.approval_wait,
        network: true,
        tasks: task_store(args.task_dir.clone())?,
        executor,
    };
    let result = match &args.listen {
        None => serve_stdio(&args, channel, config, token).await,
        Some(listen) => serve_http(&args, listen, channel, config, token.as_deref()).await,
    };
    if let Err(err) = telemetry.shutdown().await {
        tracing::warn!(error = %err, "spans lost at exit");
    }
    result
}

async fn serve_stdio(
    args: &Args,
    channel: tonic::transport::Channel,
    mut config: McpConfig,
    token: Option<String>,
) -> anyhow::Result<()> {
    // Fail at start, where the user sees it (an MCP client shows a server that exits as
    // failed), rather than at the agent's first call.
    let probe = probe(&channel, &config.executor, token.as_deref(), true).await?;
    config.network = probe.network;
    toolgate_mcp::serve_stdio(
        McpServer::stdio(channel, config, token)
            .with_workspace(&probe.workspace)
            .with_session(args.session_id.clone()),
    )
    .await
    .context("the MCP stdio session failed")
}

async fn serve_http(
    args: &Args,
    listen: &str,
    channel: tonic::transport::Channel,
    mut config: McpConfig,
    token: Option<&str>,
) -> anyhow::Result<()> {
    let signals = shutdown::on_signals()?;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("--listen: cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    anyhow::ensure!(
        addr.ip().is_loopback() || args.tls_cert.is_some() || args.insecure_plaintext,
        "--listen {addr} is not a loopback address and TLS is off: agents' bearer tokens would \
         cross the network in the clear. Pass --tls-cert and --tls-key, or --insecure-plaintext \
         when something else (a service mesh) encrypts the traffic"
    );
    let mut transport = TransportConfig {
        insecure_plaintext: args.insecure_plaintext,
        ..Default::default()
    };
    transport.tls.cert_file.clone_from(&args.tls_cert);
    transport.tls.key_file.clone_from(&args.tls_key);
    let transport =
        Transport::new(&transport, addr).map_err(|e| anyhow::anyhow!("--listen: {e}"))?;
    config.network = probe(&channel, &config.executor, token, false)
        .await?
        .network;
    let scheme = transport.scheme();
    println!(
        "{}",
        serde_json::json!({
            "service": "toolgate-mcp",
            "mcp": format!("{scheme}://{addr}{}", toolgate_mcp::http::PATH),
            "executor": args.executor,
        })
    );
    let server = McpServer::http(channel, config).with_session(args.session_id.clone());
    let router = toolgate_mcp::http::router(server, !addr.ip().is_loopback());
    toolgate_mcp::http::serve(
        listener,
        transport,
        router,
        async move { signals.wait().await },
    )
    .await;
    Ok(())
}

/// The task store in `dir` (default under `$XDG_STATE_HOME`); `None` for `off`, or when
/// there is no home to put it in.
pub(crate) fn task_store(
    dir: Option<PathBuf>,
) -> anyhow::Result<Option<Arc<toolgate_mcp::TaskStore>>> {
    let dir = match dir {
        Some(d) if d.as_os_str() == "off" => return Ok(None),
        Some(d) => d,
        None => {
            let state = std::env::var_os("XDG_STATE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .filter(|v| !v.is_empty())
                        .map(|h| PathBuf::from(h).join(".local/state"))
                });
            let Some(state) = state else {
                tracing::warn!(
                    "neither XDG_STATE_HOME nor HOME is set: MCP tasks are off (pass --task-dir)"
                );
                return Ok(None);
            };
            state.join("toolgate/mcp-tasks")
        }
    };
    let store = toolgate_mcp::TaskStore::open(&dir)
        .with_context(|| format!("--task-dir: cannot use {}", dir.display()))?;
    Ok(Some(Arc::new(store)))
}

/// A lazily connected channel to the executor (TLS for `https://`).
pub(crate) fn channel(url: &str, token: &TokenArgs) -> anyhow::Result<tonic::transport::Channel> {
    let url = &crate::client::with_scheme(url);
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
    Ok(Dial::new(url, None, tls.as_ref())
        .map_err(|e| anyhow::anyhow!("`{url}` is not a valid executor endpoint URL: {}", e.0))?
        .connect_lazy())
}

/// What `toolgate mcp` learns from the executor at start.
#[derive(Debug)]
pub(crate) struct Probe {
    /// Whether runs reach the network under the executor's default sandbox profile, which
    /// makes `run_command` open-world (unknown counts as yes: the hint errs towards caution).
    pub(crate) network: bool,
    /// The executor's workspace root (empty when unknown).
    pub(crate) workspace: String,
}

/// Asks the executor for its capabilities with the agent's token. Over stdio (`stdio`) the
/// server has one credential for every call: a missing or refused token, or an executor out
/// of reach, is an error naming what to fix. Over HTTP each request brings its token, so
/// only an executor out of reach is.
pub(crate) async fn probe(
    channel: &tonic::transport::Channel,
    executor: &str,
    token: Option<&str>,
    stdio: bool,
) -> anyhow::Result<Probe> {
    const HOW: &str = "set TOOLGATE_TOKEN (or TOOLGATE_TOKEN_FILE) in the MCP server's \
                       environment, or pass --token-file; `toolgate up` prints the agent token";
    if stdio && token.is_none() {
        anyhow::bail!("no agent token for the executor at {executor}: {HOW}");
    }
    let mut request = tonic::Request::new(GetCapabilitiesRequest {});
    if let Some(v) = token.and_then(|t| toolgate_runtime::auth::bearer(t).ok()) {
        request.metadata_mut().insert("authorization", v);
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        ExecutorServiceClient::new(channel.clone()).get_capabilities(request),
    )
    .await;
    let unknown = Probe {
        network: true,
        workspace: String::new(),
    };
    match answer {
        Ok(Ok(caps)) => {
            let caps = caps.into_inner();
            Ok(Probe {
                network: caps
                    .sandbox_profiles
                    .iter()
                    .find(|p| p.name == caps.default_sandbox_profile)
                    .is_none_or(|p| p.network),
                workspace: caps.workspace.map(|w| w.root).unwrap_or_default(),
            })
        }
        Ok(Err(s)) if s.code() == tonic::Code::Unauthenticated => {
            if stdio {
                anyhow::bail!(
                    "the executor at {executor} refused the agent token ({}): {HOW}",
                    s.message()
                )
            }
            // Reachable; HTTP clients bring their own tokens.
            Ok(unknown)
        }
        Ok(Err(s)) if s.code() == tonic::Code::Unavailable => anyhow::bail!(
            "cannot reach the executor at {executor} ({}): start it (`toolgate up`) or pass \
             --executor / TOOLGATE_EXECUTOR",
            s.message()
        ),
        // Reachable but not telling (an older executor, a role without the method).
        Ok(Err(_)) => Ok(unknown),
        Err(_) => anyhow::bail!(
            "the executor at {executor} did not answer within 10 s: check --executor / \
             TOOLGATE_EXECUTOR"
        ),
    }
}

/// The address part of `toolgate up --mcp-listen`, validated like the other listeners.
pub(crate) fn up_transport(
    addr: SocketAddr,
    insecure_plaintext: bool,
) -> anyhow::Result<Transport> {
    let config = TransportConfig {
        insecure_plaintext,
        ..Default::default()
    };
    Transport::new(&config, addr).map_err(|e| anyhow::anyhow!("--mcp-listen: {e}"))
}
