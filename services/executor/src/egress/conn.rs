//! One connection through the gate: where it was going, whether it may, where it really
//! goes, and the bytes both ways.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate_core::{Reason, ToolCall, ToolKind};

use crate::authz::{Call, Checked};
use crate::egress::addr;
use crate::egress::relay;
use crate::egress::resolve;
use crate::egress::run::{Decision, Dest, Inner, Refusal, call_id, set_address};
use crate::egress::sniff::{self, MAX_SNIFF, Sniffed};
use crate::wire::CallContext;

/// How long the gate waits for a client's first bytes on a port where the client need not
/// speak first (it may be waiting for the server's greeting).
const SHORT_SNIFF: Duration = Duration::from_millis(200);
/// Longest description sent to the approver.
const MAX_COMMAND: usize = 1024;

/// Serves one accepted connection to its end.
pub(super) async fn handle(run: Arc<Inner>, mut client: TcpStream) {
    let original = match toolgate_process::original_destination(client.as_fd()) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "a gate connection without its original destination");
            run.metrics.egress_connection("no_destination");
            reset(client);
            return;
        }
    };
    let ip = canonical(original.ip());
    let (host, literal) = match run.name_of(ip) {
        Some(name) => (name, false),
        None => (ip.to_string(), true),
    };
    let Some(dest) = run.destination(host, original.port(), literal) else {
        run.metrics.egress_connection("destination_limit");
        reset(client);
        return;
    };
    let n = dest.connections.fetch_add(1, Ordering::Relaxed) + 1;
    let open = Open::new(&run.open);
    if open.0 > run.settings.max_connections {
        let r = Refusal::gate(
            "connection_limit",
            format!(
                "the run has more than {} connections open through the egress gate; close some first",
                run.settings.max_connections
            ),
        );
        return refuse(&run, &dest, client, &Sniffed::Other, &r).await;
    }
    tracing::debug!(host = %dest.host, port = dest.port, n, "egress connection");
    if dest.literal {
        // Read what it sent first, so an HTTP client gets a 403 it can show.
        let mut first = Vec::new();
        let sniffed = read_first(&mut client, &mut first, dest.port, SHORT_SNIFF).await;
        let r = Refusal::gate(
            "ip_literal",
            format!(
                "connection to {}:{} refused: the run connected to an address it did not look up; the egress gate only forwards connections to host names (resolve the name through DNS)",
                dest.host, dest.port
            ),
        );
        return refuse(&run, &dest, client, &sniffed, &r).await;
    }
    let mut first = Vec::new();
    let (sniffed, decision) = tokio::join!(
        read_first(
            &mut client,
            &mut first,
            dest.port,
            run.settings.connect_timeout
        ),
        decide(&run, &dest)
    );
    let proof = match decision {
        Ok(Decision::Allowed(proof)) => proof,
        Ok(Decision::Refused(r)) => return refuse(&run, &dest, client, &sniffed, r).await,
        Err(r) => return refuse(&run, &dest, client, &sniffed, &r).await,
    };
    if let Some(r) = mismatch(&dest, &sniffed) {
        return refuse(&run, &dest, client, &sniffed, &r).await;
    }
    let upstream = match connect(&run, &dest).await {
        Ok(s) => s,
        Err(r) => return refuse(&run, &dest, client, &sniffed, &r).await,
    };
    tracing::debug!(decision_id = proof.decision_id(), host = %dest.host, "egress connection allowed");
    run.metrics.egress_connection("allowed");
    carry(&run, &dest, client, upstream, first).await;
}

/// Counts a connection as open until dropped (also when the run's end cancels it).
struct Open<'a>(u32, &'a AtomicU32);

impl<'a> Open<'a> {
    fn new(open: &'a AtomicU32) -> Self {
        Open(open.fetch_add(1, Ordering::Relaxed) + 1, open)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.1.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A v4-mapped v6 address as the v4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Reads the client's first bytes into `buf` until they say what they are, the client
/// stops, or the deadline: long on 80 and 443 (the client speaks first), short elsewhere.
async fn read_first(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    port: u16,
    long: Duration,
) -> Sniffed {
    let wait = if matches!(port, 80 | 443) {
        long
    } else {
        SHORT_SNIFF
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut chunk = [0u8; 4096];
    loop {
        let s = sniff::sniff(buf);
        if s != Sniffed::Incomplete || buf.len() >= MAX_SNIFF {
            return s;
        }
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n.min(MAX_SNIFF - buf.len())]),
            _ => return s,
        }
    }
}

/// The destination's decision: the cached one, else one Authorize (and a human's wait)
/// shared by every connection to it. An error is a refusal that is not cached (the policy
/// could not be asked).
async fn decide<'a>(run: &Arc<Inner>, dest: &'a Dest) -> Result<&'a Decision, Refusal> {
    dest.decision.get_or_try_init(|| ask(run, dest)).await
}

async fn ask(run: &Arc<Inner>, dest: &Dest) -> Result<Decision, Refusal> {
    let info = &run.info;
    let target = format!("{}:{}", dest.host, dest.port);
    let mut command = info.command.clone();
    if command.len() > MAX_COMMAND {
        let mut cut = MAX_COMMAND;
        while !command.is_char_boundary(cut) {
            cut -= 1;
        }
        command.truncate(cut);
        command.push('…');
    }
    let call = Call {
        principal: info.principal.clone(),
        ctx: CallContext {
            call_id: call_id(&info.call_id, &dest.host, dest.port),
            session_id: info.session_id.clone(),
            approval_wait: run.settings.hold,
            description: format!("connection to {target} from the run: {command}"),
        },
        call: ToolCall {
            host: Some(dest.host.clone()),
            port: Some(u32::from(dest.port)),
            protocol: Some("tcp".to_owned()),
            sandbox_profile: Some(info.sandbox_profile.clone()),
            ..ToolCall::new(ToolKind::NetConnect)
        },
        trace_parent: None,
        span: tracing::Span::none(),
    };
    let answer = match run.gate.check(&call).await {
        Ok(Checked::Allowed(proof)) => Ok(proof),
        Ok(Checked::Parked(parked)) => {
            let parked = parked.until_expiry();
            let mut event = parked.event();
            event.destination = target.clone();
            let _ = run.events.try_send(event);
            let _held = run.metrics.egress_held();
            run.gate.wait(&call, parked).await
        }
        Err(s) => Err(s),
    };
    match answer {
        Ok(proof) => Ok(Decision::Allowed(proof)),
        Err(r) => {
            let (why, tier, cached) = match r.reason() {
                Reason::PolicyDenied => ("denied", "deny", true),
                Reason::ApprovalDenied => ("approval_denied", "ask", true),
                Reason::ApprovalExpired | Reason::ApprovalRequired | Reason::ApprovalNotPending => {
                    ("approval_expired", "ask", true)
                }
                _ => ("policy_unavailable", "", false),
            };
            let refusal = Refusal {
                reason: why,
                message: format!("connection to {target} refused ({why}): {}", r.message()),
                tier,
                rule_id: r.fact("rule_id").unwrap_or_default().to_owned(),
                approval_id: r.fact("approval_id").unwrap_or_default().to_owned(),
            };
            if cached {
                Ok(Decision::Refused(refusal))
            } else {
                Err(refusal)
            }
        }
    }
}

/// A refusal when what the client sent names another host than the destination's.
fn mismatch(dest: &Dest, sniffed: &Sniffed) -> Option<Refusal> {
    let target = format!("{}:{}", dest.host, dest.port);
    match sniffed {
        Sniffed::Tls(Some(n)) if *n == dest.host => None,
        Sniffed::Tls(sni) => Some(Refusal::gate(
            "sni_mismatch",
            format!(
                "connection to {target} refused: its TLS server name is {} instead of {}",
                sni.as_deref().unwrap_or("missing"),
                dest.host
            ),
        )),
        _ if dest.port == 443 => Some(Refusal::gate(
            "sni_mismatch",
            format!(
                "connection to {target} refused: port 443 takes TLS with the server name {}",
                dest.host
            ),
        )),
        Sniffed::Http(Some(h)) if *h == dest.host => None,
        Sniffed::Http(h) => Some(Refusal::gate(
            "host_mismatch",
            format!(
                "connection to {target} refused: its HTTP Host is {} instead of {}",
                h.as_deref().unwrap_or("missing"),
                dest.host
            ),
        )),
        Sniffed::Incomplete | Sniffed::Other => None,
    }
}

/// Resolves the destination (once per run: the address is pinned) and connects to the
/// first address the run may reach.
async fn connect(run: &Arc<Inner>, dest: &Dest) -> Result<TcpStream, Refusal> {
    let target = format!("{}:{}", dest.host, dest.port);
    let settings = &run.settings;
    let addresses = dest
        .addresses
        .get_or_try_init(|| async {
            let all = resolve::resolve(&settings.resolvers, &dest.host, settings.connect_timeout)
                .await
                .map_err(|e| {
                    Refusal::gate("resolve_failed", format!("connection to {target} refused: {e}"))
                })?;
            let reachable: Vec<IpAddr> = all
                .iter()
                .copied()
                .filter(|ip| addr::forbidden(*ip, &settings.allow).is_none())
                .collect();
            if reachable.is_empty() {
                let why = all
                    .first()
                    .and_then(|ip| addr::forbidden(*ip, &settings.allow).map(|c| format!("{ip} is {c}")))
                    .unwrap_or_default();
                return Err(Refusal::gate(
                    "forbidden_address",
                    format!("connection to {target} refused: {} resolves only to addresses the gate never reaches ({why})", dest.host),
                ));
            }
            Ok(reachable)
        })
        .await?;
    let mut last = String::new();
    for ip in addresses {
        let to = SocketAddr::new(*ip, dest.port);
        match tokio::time::timeout(settings.connect_timeout, TcpStream::connect(to)).await {
            Ok(Ok(s)) => {
                set_address(dest, to);
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = format!("{to}: {e}"),
            Err(_) => {
                last = format!(
                    "{to}: no answer within {} ms",
                    settings.connect_timeout.as_millis()
                );
            }
        }
    }
    Err(Refusal::gate(
        "connect_failed",
        format!("connection to {target} failed: {last}"),
    ))
}

/// Refuses `client`: an HTTP request gets a 403 naming the destination, the reason and
/// the rule or approval; anything else a reset.
async fn refuse(run: &Inner, dest: &Dest, mut client: TcpStream, sniffed: &Sniffed, r: &Refusal) {
    dest.refused.fetch_add(1, Ordering::Relaxed);
    {
        let mut last = dest.last.lock().unwrap_or_else(|p| p.into_inner());
        last.refusal = r.reason;
        last.message = r.message.clone();
    }
    run.metrics.egress_connection(r.reason);
    tracing::info!(host = %dest.host, port = dest.port, refusal = r.reason, "egress connection refused");
    if matches!(sniffed, Sniffed::Http(_)) {
        let mut body = format!("{}\nreason: {}", r.message, r.reason);
        for (k, v) in [("rule", &r.rule_id), ("approval", &r.approval_id)] {
            if !v.is_empty() {
                body.push_str(&format!("\n{k}: {v}"));
            }
        }
        body.push('\n');
        let response = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Toolgate-Refusal: {}\r\n\r\n{body}",
            body.len(),
            r.reason
        );
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            client.write_all(response.as_bytes()).await?;
            client.shutdown().await
        })
        .await;
        return;
    }
    reset(client);
}

/// Closes with a TCP reset.
fn reset(client: TcpStream) {
    let _ = client.set_zero_linger();
    drop(client);
}

/// Copies both ways until both sides are done, counting the bytes as they cross.
async fn carry(
    run: &Inner,
    dest: &Dest,
    client: TcpStream,
    mut upstream: TcpStream,
    first: Vec<u8>,
) {
    if !first.is_empty() {
        if upstream.write_all(&first).await.is_err() {
            return;
        }
        dest.sent.fetch_add(first.len() as u64, Ordering::Relaxed);
        run.metrics.egress_bytes("sent", first.len() as u64);
    }
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    // The end of the run waits for what the run sent to be read (its side is closed by
    // then, so that is prompt), not for the destination to close.
    let reading = run.live_guard();
    let count = |bytes, direction| relay::Count {
        bytes,
        metrics: &run.metrics,
        direction,
    };
    let sent = async move {
        let r = relay::pump(cr, uw, count(&dest.sent, "sent")).await;
        drop(reading);
        r
    };
    let _ = tokio::try_join!(sent, relay::pump(ur, cw, count(&dest.received, "received")));
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, AtomicU64};

    use tokio::sync::OnceCell;

    use super::*;
    use crate::egress::run::Last;

    fn dest(host: &str, port: u16) -> Dest {
        Dest {
            host: host.into(),
            port,
            literal: false,
            decision: OnceCell::new(),
            addresses: OnceCell::new(),
            connections: AtomicU32::new(0),
            refused: AtomicU32::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            first_seen: std::time::SystemTime::now(),
            last: Mutex::new(Last::default()),
        }
    }

    fn why(d: &Dest, s: &Sniffed) -> Option<&'static str> {
        mismatch(d, s).map(|r| r.reason)
    }

    #[test]
    fn the_server_name_or_host_must_be_the_decided_name() {
        let tls = dest("pypi.org", 443);
        assert_eq!(why(&tls, &Sniffed::Tls(Some("pypi.org".into()))), None);
        // Domain fronting: decided for one name, TLS for another.
        assert_eq!(
            why(&tls, &Sniffed::Tls(Some("evil.example".into()))),
            Some("sni_mismatch")
        );
        assert_eq!(why(&tls, &Sniffed::Tls(None)), Some("sni_mismatch"));
        // Port 443 is TLS with the name, nothing else.
        assert_eq!(
            why(&tls, &Sniffed::Http(Some("pypi.org".into()))),
            Some("sni_mismatch")
        );
        assert_eq!(why(&tls, &Sniffed::Other), Some("sni_mismatch"));
        assert_eq!(why(&tls, &Sniffed::Incomplete), Some("sni_mismatch"));

        let web = dest("files.example", 8080);
        assert_eq!(
            why(&web, &Sniffed::Http(Some("files.example".into()))),
            None
        );
        assert_eq!(
            why(
                &web,
                &Sniffed::Http(Some("metadata.google.internal".into()))
            ),
            Some("host_mismatch")
        );
        assert_eq!(why(&web, &Sniffed::Http(None)), Some("host_mismatch"));
        // TLS on another port is checked too; other protocols pass.
        assert_eq!(
            why(&web, &Sniffed::Tls(Some("other.example".into()))),
            Some("sni_mismatch")
        );
        assert_eq!(why(&dest("git.example", 22), &Sniffed::Other), None);
        assert_eq!(why(&dest("git.example", 22), &Sniffed::Incomplete), None);
    }
}
