//! The gate's own resolver client: a name a connection was allowed to is resolved through
//! the configured upstream servers (UDP, TCP when the answer was truncated), never through
//! the run's DNS.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::egress::dns::{self, Data, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A, TYPE_AAAA};

/// Largest answer read over UDP or TCP.
const MAX_ANSWER: usize = 64 * 1024;
/// Datagrams with another id read before a server counts as unresponsive.
const STRAY_LIMIT: usize = 16;

/// Why a name could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// No resolver is configured.
    #[error("no upstream resolver is configured")]
    NoResolvers,
    /// The name does not exist, or has no address.
    #[error("{0} has no address")]
    NoAddress(String),
    /// Every server failed or timed out.
    #[error("no upstream resolver answered for {name}: {last}")]
    Unanswered {
        /// The name.
        name: String,
        /// The last failure.
        last: String,
    },
}

/// Resolves `name` (a validated host name) to its v4 and v6 addresses through `servers`,
/// tried in order, each within `timeout`.
pub(crate) async fn resolve(
    servers: &[SocketAddr],
    name: &str,
    timeout: Duration,
) -> Result<Vec<IpAddr>, Error> {
    if servers.is_empty() {
        return Err(Error::NoResolvers);
    }
    let mut last = String::new();
    for server in servers {
        let (a, aaaa) = tokio::join!(
            ask(*server, name, TYPE_A, timeout),
            ask(*server, name, TYPE_AAAA, timeout)
        );
        match (a, aaaa) {
            (Ok(mut v4), Ok(v6)) => {
                v4.extend(v6);
                if v4.is_empty() {
                    return Err(Error::NoAddress(name.to_owned()));
                }
                return Ok(v4);
            }
            // One family answered: enough to connect.
            (Ok(v), Err(e)) | (Err(e), Ok(v)) if !v.is_empty() => {
                tracing::debug!(%server, name, error = %e, "one address family failed");
                return Ok(v);
            }
            (Err(e), _) | (_, Err(e)) => last = format!("{server}: {e}"),
        }
    }
    Err(Error::Unanswered {
        name: name.to_owned(),
        last,
    })
}

/// One query to one server: the addresses of the answer (empty for NXDOMAIN / no data).
async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Vec<IpAddr>, String> {
    let id = fastrand::u16(..);
    let q = dns::query(id, name, qtype);
    let answer = tokio::time::timeout(timeout, async {
        let answer = udp(server, id, &q).await?;
        if dns::parse(&answer)
            .map_err(|e| e.to_string())?
            .header
            .truncated()
        {
            return tcp(server, id, &q).await;
        }
        Ok(answer)
    })
    .await
    .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))??;
    let m = dns::parse(&answer).map_err(|e| format!("unreadable answer: {e}"))?;
    let asked = dns::parse(&q).map_err(|e| e.to_string())?.questions;
    if m.questions != asked {
        return Err("the answer is for another question".into());
    }
    match m.header.rcode() {
        RCODE_NOERROR => Ok(m
            .answers
            .into_iter()
            .filter_map(|d| match (d, qtype) {
                (Data::A(a), TYPE_A) => Some(IpAddr::V4(a)),
                (Data::Aaaa(a), TYPE_AAAA) => Some(IpAddr::V6(a)),
                _ => None,
            })
            .collect()),
        RCODE_NXDOMAIN => Ok(Vec::new()),
        rcode => Err(format!("the server answered with rcode {rcode}")),
    }
}

async fn udp(server: SocketAddr, id: u16, q: &[u8]) -> Result<Vec<u8>, String> {
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let sock = UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
    sock.connect(server).await.map_err(|e| e.to_string())?;
    sock.send(q).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; MAX_ANSWER];
    for _ in 0..STRAY_LIMIT {
        let n = sock.recv(&mut buf).await.map_err(|e| e.to_string())?;
        if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
            buf.truncate(n);
            return Ok(buf);
        }
    }
    Err("only answers with another id came back".into())
}

async fn tcp(server: SocketAddr, id: u16, q: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(server)
        .await
        .map_err(|e| e.to_string())?;
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(q);
    s.write_all(&framed).await.map_err(|e| e.to_string())?;
    let len = usize::from(s.read_u16().await.map_err(|e| e.to_string())?);
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    if len < 2 || u16::from_be_bytes([buf[0], buf[1]]) != id {
        return Err("the TCP answer has another id".into());
    }
    Ok(buf)
}

/// The `nameserver` lines of a resolv.conf, as `ip:53`.
pub(crate) fn nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        // A scoped v6 address (`fe80::1%eth0`) is not reachable without its interface.
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameserver_lines_are_read_and_the_rest_ignored() {
        let conf = "# comment\nsearch example\nnameserver 10.0.0.2\nnameserver ::1\nnameserver fe80::1%eth0\noptions ndots:5\nnameserver\n";
        assert_eq!(
            nameservers(conf),
            vec![
                "10.0.0.2:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
    }

    /// A server on loopback answering `a.example` with one address per family, the
    /// A answer truncated over UDP so the client must fall back to TCP.
    async fn server() -> SocketAddr {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = tokio::net::TcpListener::bind(addr).await.unwrap();
        fn reply(q: &[u8], truncate: bool) -> Vec<u8> {
            let m = dns::parse(q).unwrap();
            let mut r = q.to_vec();
            r[2] |= 0x80;
            if truncate {
                r[2] |= 0x02;
                return r;
            }
            let (t, data): (u16, Vec<u8>) = match m.questions[0].qtype {
                TYPE_A => (TYPE_A, vec![93, 184, 216, 34]),
                _ => (
                    TYPE_AAAA,
                    "2001:db8::7"
                        .parse::<std::net::Ipv6Addr>()
                        .unwrap()
                        .octets()
                        .to_vec(),
                ),
            };
            if m.questions[0].name != "a.example" {
                r[3] |= 3;
                return r;
            }
            r[7] = 1;
            r.extend_from_slice(&[0xc0, 12]);
            r.extend_from_slice(&t.to_be_bytes());
            r.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
            r.extend_from_slice(&(data.len() as u16).to_be_bytes());
            r.extend_from_slice(&data);
            r
        }
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let (n, from) = udp.recv_from(&mut buf).await.unwrap();
                let q = &buf[..n];
                let is_a = dns::parse(q).unwrap().questions[0].qtype == TYPE_A;
                udp.send_to(&reply(q, is_a), from).await.unwrap();
            }
        });
        tokio::spawn(async move {
            loop {
                let (mut s, _) = tcp.accept().await.unwrap();
                let len = usize::from(s.read_u16().await.unwrap());
                let mut q = vec![0; len];
                s.read_exact(&mut q).await.unwrap();
                let r = reply(&q, false);
                s.write_all(&(r.len() as u16).to_be_bytes()).await.unwrap();
                s.write_all(&r).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn names_resolve_over_udp_with_tcp_fallback_and_failures_say_why() {
        let addr = server().await;
        let t = Duration::from_secs(5);
        let mut got = resolve(&[addr], "a.example", t).await.unwrap();
        got.sort();
        assert_eq!(
            got,
            vec![
                "93.184.216.34".parse::<IpAddr>().unwrap(),
                "2001:db8::7".parse().unwrap()
            ]
        );
        assert_eq!(
            resolve(&[addr], "b.example", t).await,
            Err(Error::NoAddress("b.example".into()))
        );
        assert_eq!(resolve(&[], "a.example", t).await, Err(Error::NoResolvers));
        // A server that never answers: the next one is asked.
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dead = silent.local_addr().unwrap();
        let short = Duration::from_millis(200);
        assert!(matches!(
            resolve(&[dead], "a.example", short).await,
            Err(Error::Unanswered { .. })
        ));
        assert!(resolve(&[dead, addr], "a.example", short).await.is_ok());
    }
}
