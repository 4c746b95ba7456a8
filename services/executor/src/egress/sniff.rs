//! What a connection's first bytes say about where it means to go: the server name of a TLS
//! ClientHello, or the `Host` of an HTTP/1.x request. The gate reads them before it connects
//! anywhere and compares them with the name the destination was resolved for.

/// The most a sniff reads before it gives up looking.
pub(crate) const MAX_SNIFF: usize = 16 * 1024;

/// What the bytes read so far are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sniffed {
    /// Not enough bytes yet to tell.
    Incomplete,
    /// A TLS ClientHello, with its server name (lowercase, no trailing dot) if it sent one.
    Tls(Option<String>),
    /// An HTTP/1.x request, with its `Host` (lowercase, without port or trailing dot) if it
    /// sent one.
    Http(Option<String>),
    /// Something else (or a malformed TLS or HTTP start).
    Other,
}

/// Reads `buf`, the first bytes a client sent.
pub(crate) fn sniff(buf: &[u8]) -> Sniffed {
    match buf.first() {
        None => Sniffed::Incomplete,
        Some(22) => tls(buf),
        Some(b) if b.is_ascii_uppercase() => http(buf),
        Some(_) => Sniffed::Other,
    }
}

/// A byte cursor that fails instead of panicking.
struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }
    /// A vector with a length prefix of `len_bytes` bytes.
    fn vec(&mut self, len_bytes: usize) -> Option<&'a [u8]> {
        let n = match len_bytes {
            1 => self.u8()?,
            2 => self.u16()?,
            _ => self.u24()?,
        };
        self.take(n)
    }
}

/// The handshake bytes of the TLS records at the start of `buf` (a ClientHello may span
/// several records), or `Other` when a record is not a handshake record.
fn tls(buf: &[u8]) -> Sniffed {
    let mut handshake = Vec::new();
    let mut c = Cursor { buf };
    loop {
        let Some(header) = c.take(5) else {
            return Sniffed::Incomplete;
        };
        // Handshake records, TLS 1.0 to 1.3 record versions (3.1–3.3; 3.0 is SSL).
        if header[0] != 22 || header[1] != 3 {
            return Sniffed::Other;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > 16384 {
            return Sniffed::Other;
        }
        let Some(fragment) = c.take(len) else {
            return Sniffed::Incomplete;
        };
        handshake.extend_from_slice(fragment);
        if handshake.len() >= 4 {
            if handshake[0] != 1 {
                return Sniffed::Other;
            }
            let need = 4
                + ((usize::from(handshake[1]) << 16)
                    | (usize::from(handshake[2]) << 8)
                    | usize::from(handshake[3]));
            if need > MAX_SNIFF {
                return Sniffed::Other;
            }
            if handshake.len() >= need {
                return client_hello(&handshake[4..need]).map_or(Sniffed::Other, Sniffed::Tls);
            }
        }
    }
}

/// The server name of a ClientHello body; `None` inside for a hello without one, `None`
/// outside for a malformed hello.
fn client_hello(body: &[u8]) -> Option<Option<String>> {
    let mut c = Cursor { buf: body };
    c.take(2 + 32)?; // version, random
    c.vec(1)?; // session id
    c.vec(2)?; // cipher suites
    c.vec(1)?; // compression methods
    if c.buf.is_empty() {
        return Some(None);
    }
    let mut ext = Cursor { buf: c.vec(2)? };
    let mut name = None;
    while !ext.buf.is_empty() {
        let kind = ext.u16()?;
        let data = ext.vec(2)?;
        if kind != 0 {
            continue;
        }
        // Two server_name extensions are a malformed hello.
        if name.is_some() {
            return None;
        }
        let mut list = Cursor { buf: data };
        let mut names = Cursor { buf: list.vec(2)? };
        while !names.buf.is_empty() {
            let kind = names.u8()?;
            let n = names.vec(2)?;
            if kind == 0 {
                // One host name per hello (RFC 6066); a second is a malformed hello.
                if name.is_some() {
                    return None;
                }
                name = Some(normalize(std::str::from_utf8(n).ok()?)?);
            }
        }
    }
    Some(name)
}

/// `name` lowercased without a trailing dot; `None` when it is not a plausible host name.
pub(crate) fn normalize(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then(|| name.to_ascii_lowercase())
}

/// An HTTP/1.x request head: its `Host` once the head is complete.
fn http(buf: &[u8]) -> Sniffed {
    let Some(line_end) = find(buf, b"\r\n") else {
        return if buf.len() >= MAX_SNIFF || !plausible_method(buf) {
            Sniffed::Other
        } else {
            Sniffed::Incomplete
        };
    };
    let line = &buf[..line_end];
    let mut parts = line.split(|b| *b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Sniffed::Other;
    };
    if !plausible_method(method)
        || target.is_empty()
        || !(version == b"HTTP/1.1" || version == b"HTTP/1.0")
    {
        return Sniffed::Other;
    }
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() >= MAX_SNIFF {
            Sniffed::Other
        } else {
            Sniffed::Incomplete
        };
    };
    let mut host = None;
    // No header at all when the head ends with the request line.
    let headers = buf.get(line_end + 2..head_end).unwrap_or_default();
    for line in headers.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            return Sniffed::Other;
        };
        if !line[..colon].eq_ignore_ascii_case(b"host") {
            continue;
        }
        // Two Host headers are a request smuggling attempt, not a destination.
        if host.is_some() {
            return Sniffed::Http(None);
        }
        let Ok(value) = std::str::from_utf8(&line[colon + 1..]) else {
            return Sniffed::Http(None);
        };
        host = Some(strip_port(value.trim()).and_then(normalize));
    }
    Sniffed::Http(host.flatten())
}

/// `host[:port]` → `host`; `None` for an IPv6 literal or an unparsable port.
fn strip_port(v: &str) -> Option<&str> {
    match v.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => p.parse::<u16>().ok().map(|_| h),
        Some(_) => None,
        None => Some(v),
    }
}

/// A request method: 1–16 uppercase letters (or the start of one).
fn plausible_method(m: &[u8]) -> bool {
    let word = m.split(|b| *b == b' ').next().unwrap_or(m);
    !word.is_empty() && word.len() <= 16 && word.iter().all(u8::is_ascii_uppercase)
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello as a client would send it, with `sni` as its server name.
    pub(crate) fn client_hello_bytes(sni: Option<&str>) -> Vec<u8> {
        let mut ext = Vec::new();
        // An unrelated extension first (supported_versions).
        ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
        if let Some(name) = sni {
            let n = name.as_bytes();
            let entry_len = 3 + n.len();
            ext.extend_from_slice(&[0x00, 0x00]);
            ext.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
            ext.extend_from_slice(&(entry_len as u16).to_be_bytes());
            ext.push(0);
            ext.extend_from_slice(&(n.len() as u16).to_be_bytes());
            ext.extend_from_slice(n);
        }
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]);
        body.extend_from_slice(&[0x01, 0x00]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn a_client_hello_names_its_server_at_any_split() {
        let hello = client_hello_bytes(Some("Example.COM."));
        for cut in 0..hello.len() {
            assert_eq!(sniff(&hello[..cut]), Sniffed::Incomplete, "cut at {cut}");
        }
        assert_eq!(sniff(&hello), Sniffed::Tls(Some("example.com".into())));
        assert_eq!(
            sniff(&client_hello_bytes(None)),
            Sniffed::Tls(None),
            "a hello without a name"
        );
    }

    #[test]
    fn a_client_hello_split_over_two_records_is_read_whole() {
        let hello = client_hello_bytes(Some("pypi.org"));
        let hs = &hello[5..];
        let (a, b) = hs.split_at(10);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[22, 3, 3]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(sniff(&two), Sniffed::Tls(Some("pypi.org".into())));
    }

    #[test]
    fn hostile_tls_never_panics_and_is_never_a_name() {
        let hello = client_hello_bytes(Some("a.example"));
        // Every byte flipped, every truncation of every length field.
        for i in 0..hello.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut h = hello.clone();
                h[i] = v;
                let _ = sniff(&h);
            }
        }
        // A name that is not a host name.
        assert_eq!(
            sniff(&client_hello_bytes(Some("a b.example"))),
            Sniffed::Other
        );
        // Not a handshake record, or SSL 3.0.
        assert_eq!(sniff(&[23, 3, 3, 0, 1, 0]), Sniffed::Other);
        assert_eq!(sniff(&[22, 2, 0, 0, 1, 1]), Sniffed::Other);
        // A handshake that claims more than the sniff reads.
        assert_eq!(
            sniff(&[22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff]),
            Sniffed::Other
        );
    }

    #[test]
    fn an_http_request_names_its_host_without_port() {
        let req = b"GET /simple/ HTTP/1.1\r\nUser-Agent: x\r\nhOsT: Files.Example:8080\r\n\r\n";
        for cut in 0..req.len() {
            assert_eq!(sniff(&req[..cut]), Sniffed::Incomplete, "cut at {cut}");
        }
        assert_eq!(sniff(req), Sniffed::Http(Some("files.example".into())));
        assert_eq!(
            sniff(b"GET / HTTP/1.0\r\n\r\n"),
            Sniffed::Http(None),
            "no Host"
        );
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"),
            Sniffed::Http(None),
            "two Hosts"
        );
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"),
            Sniffed::Http(None)
        );
        assert_eq!(sniff(b"SSH-2.0-OpenSSH_9.6\r\n"), Sniffed::Other);
        assert_eq!(sniff(b"\x00\x01binary"), Sniffed::Other);
        assert_eq!(sniff(b"GET / HTTP/2.0\r\n\r\n"), Sniffed::Other);
        assert_eq!(sniff(&vec![b'G'; MAX_SNIFF]), Sniffed::Other);
        // Every prefix and every byte flipped of a request: no panic.
        for i in 0..req.len() {
            for v in [b'\r', b'\n', b':', b' ', 0] {
                let mut r = req.to_vec();
                r[i] = v;
                for cut in 0..r.len() {
                    let _ = sniff(&r[..cut]);
                }
            }
        }
    }
}
