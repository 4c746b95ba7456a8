//! `[[network]]` rules: which destinations a run's connections may reach.
//!
//! A run under a networked profile reaches the network only through the executor's egress
//! gate, which asks the policy about every destination as a `net.connect` call (host, port,
//! protocol, the run's profile). These rules decide those calls. Hosts are matched as
//! lowercase DNS names without a trailing dot (`example.com` exactly, `*.example.com` any
//! name below it at any depth but not itself, `*` anything) or, for IP-literal hosts, as
//! addresses and CIDR blocks (`10.0.0.0/8`). Rules are indexed by exact name and by suffix,
//! so a call looks at the rules that can match its host, never at every rule.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use serde::Deserialize;
use toml::Spanned;
use toolgate_core::Tier;

use crate::CallContext;
use crate::error::Error;
use crate::rule_fields::{List, Selectors, nonempty, rule_head};

/// `[[network]]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    id: Spanned<String>,
    decision: Spanned<String>,
    reason: Spanned<String>,
    hosts: List,
    ports: Option<Spanned<Vec<Spanned<RawPort>>>>,
    protocol: Option<Spanned<String>>,
    sessions: List,
    principals: List,
    labels: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    /// The sandbox profiles of the runs whose connections the rule is about.
    profiles: List,
}

/// A port (`443`) or an inclusive range (`"8000-8099"`).
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum RawPort {
    One(i64),
    Range(String),
}

/// The transport a rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP connections (the default).
    Tcp,
    /// UDP datagrams.
    Udp,
    /// Either.
    Any,
}

impl Protocol {
    fn parse(s: &str) -> Result<Protocol, String> {
        match s {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "any" => Ok(Protocol::Any),
            other => Err(format!(
                "`protocol` must be `tcp`, `udp` or `any`, not `{other}`"
            )),
        }
    }

    fn accepts(self, call: &str) -> bool {
        match self {
            Protocol::Any => true,
            Protocol::Tcp => call == "tcp",
            Protocol::Udp => call == "udp",
        }
    }
}

/// One entry of `hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    /// `example.com`: that name only.
    Exact(String),
    /// `*.example.com`: any name ending in `.example.com` (stored with the leading dot).
    Below(String),
    /// `*`: every host, names and addresses.
    Any,
    /// `10.0.0.0/8`, `2001:db8::/32`, `192.0.2.7`: IP-literal hosts in the block.
    Net(IpAddr, u8),
}

impl HostPattern {
    /// Parses one host glob; the message says what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<HostPattern, String> {
        let bad = |why: &str| Err(format!("host `{text}`: {why}"));
        if text == "*" {
            return Ok(HostPattern::Any);
        }
        if let Some((addr, len)) = text.split_once('/') {
            let Ok(addr) = addr.parse::<IpAddr>() else {
                return bad("a CIDR block is an IP address, `/` and a prefix length");
            };
            let max = if addr.is_ipv4() { 32 } else { 128 };
            return match len.parse::<u8>() {
                Ok(l) if l <= max => Ok(HostPattern::Net(canonical(addr), l)),
                _ => bad(&format!("the prefix length must be 0 to {max}")),
            };
        }
        let unbracketed = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(addr) = unbracketed.parse::<IpAddr>() {
            let len = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(HostPattern::Net(canonical(addr), len));
        }
        if text.ends_with('.') {
            return bad("write names without the trailing dot");
        }
        if !text.is_ascii() {
            return bad("write internationalised names in their punycode (`xn--`) form");
        }
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            return bad("write names in lowercase; hosts are matched lowercase");
        }
        let (below, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if name.len() > 253 {
            return bad("a DNS name is at most 253 characters");
        }
        for label in name.split('.') {
            if label.is_empty() {
                return bad("a name has no empty labels (`..`, or a leading dot)");
            }
            if label.contains('*') {
                return bad("`*` may only be the whole host or the first label (`*.example.com`)");
            }
            if label.len() > 63
                || !label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return bad("a label is 1 to 63 letters, digits, `-` or `_`");
            }
        }
        Ok(if below {
            HostPattern::Below(format!(".{name}"))
        } else {
            HostPattern::Exact(name.to_owned())
        })
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it stands for.
fn canonical(a: IpAddr) -> IpAddr {
    a.to_canonical()
}

/// Whether `a` is in the block `net/len`.
fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// A compiled `[[network]]` rule.
#[derive(Debug)]
pub(crate) struct NetworkRule {
    pub id: String,
    pub tier: Tier,
    pub reason: String,
    pub line: usize,
    /// `hosts` as written.
    pub host_texts: Vec<String>,
    pub hosts: Vec<HostPattern>,
    /// Inclusive port ranges; `None`: every port.
    pub ports: Option<Vec<(u16, u16)>>,
    pub protocol: Protocol,
    pub selectors: Selectors,
    /// `None`: runs under any profile (or none).
    pub profiles: Option<HashSet<String>>,
}

impl NetworkRule {
    /// Whether everything but the host accepts the call.
    fn accepts(&self, port: u16, protocol: &str, profile: Option<&str>, ctx: &CallContext) -> bool {
        self.protocol.accepts(protocol)
            && self
                .ports
                .as_ref()
                .is_none_or(|r| r.iter().any(|(lo, hi)| (*lo..=*hi).contains(&port)))
            && self
                .profiles
                .as_ref()
                .is_none_or(|p| profile.is_some_and(|n| p.contains(n)))
            && self.selectors.matches(ctx)
    }

    /// Whether the rule refuses its hosts on every port and for TCP, in `ctx` under
    /// `profile`: what a run's DNS stub may answer as nonexistent.
    fn denies_everywhere(&self, profile: Option<&str>, ctx: &CallContext) -> bool {
        self.tier == Tier::Deny
            && self.ports.is_none()
            && self.protocol != Protocol::Udp
            && self
                .profiles
                .as_ref()
                .is_none_or(|p| profile.is_some_and(|n| p.contains(n)))
            && self.selectors.matches(ctx)
    }
}

/// Parses the `[[network]]` rules; `seen` holds the ids already taken by `[[rule]]`s.
pub(crate) fn parse(
    raw: Vec<Spanned<RawNetwork>>,
    seen: &mut HashSet<String>,
    line: &dyn Fn(std::ops::Range<usize>) -> usize,
) -> Result<Vec<NetworkRule>, Error> {
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let rule_line = line(r.span());
        let r = r.into_inner();
        let id = r.id.get_ref().trim().to_owned();
        let err = |span: std::ops::Range<usize>, message: String| Error::Rule {
            line: line(span),
            rule: id.clone(),
            message,
        };
        let tier = rule_head(&r.id, &r.decision, &r.reason, seen, &err)?;
        let Some(host_list) = nonempty(&r.hosts, "hosts", &err)? else {
            return Err(Error::Rule {
                line: rule_line,
                rule: id.clone(),
                message: "a network rule needs `hosts` (`*` for every host)".to_owned(),
            });
        };
        let mut hosts = Vec::with_capacity(host_list.len());
        let mut host_texts = Vec::with_capacity(host_list.len());
        for h in &host_list {
            hosts.push(
                HostPattern::parse(h.get_ref())
                    .map_err(|m| err(h.span(), format!("hosts: {m}")))?,
            );
            host_texts.push(h.get_ref().clone());
        }
        let ports = match &r.ports {
            None => None,
            Some(list) if list.get_ref().is_empty() => {
                return Err(err(
                    list.span(),
                    "`ports` is empty, so the rule could never match; remove it for every port"
                        .to_owned(),
                ));
            }
            Some(list) => Some(
                list.get_ref()
                    .iter()
                    .map(|p| {
                        port_range(p.get_ref()).map_err(|m| err(p.span(), format!("ports: {m}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let protocol = match &r.protocol {
            None => Protocol::Tcp,
            Some(p) => Protocol::parse(p.get_ref()).map_err(|m| err(p.span(), m))?,
        };
        let selectors = Selectors::parse(&r.sessions, &r.principals, r.labels, &err)?;
        let profiles = nonempty(&r.profiles, "profiles", &err)?
            .map(|v| v.into_iter().map(Spanned::into_inner).collect());
        out.push(NetworkRule {
            id,
            tier,
            reason: r.reason.into_inner().trim().to_owned(),
            line: rule_line,
            host_texts,
            hosts,
            ports,
            protocol,
            selectors,
            profiles,
        });
    }
    Ok(out)
}

fn port_range(p: &RawPort) -> Result<(u16, u16), String> {
    let one = |v: i64| {
        u16::try_from(v)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| format!("`{v}` is not a port (1 to 65535)"))
    };
    match p {
        RawPort::One(v) => one(*v).map(|v| (v, v)),
        RawPort::Range(s) => {
            let parse = |t: &str| {
                t.trim()
                    .parse::<i64>()
                    .map_err(|_| format!("`{s}` is not a port range like \"8000-8099\""))
                    .and_then(one)
            };
            let (lo, hi) = match s.split_once('-') {
                Some((lo, hi)) => (parse(lo)?, parse(hi)?),
                None => {
                    let v = parse(s)?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(format!("`{s}`: the range's start is above its end"));
            }
            Ok((lo, hi))
        }
    }
}

/// A destination host as the rules see it: a lowercase name without the trailing dot, or an
/// address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A DNS name.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Normalises what a `net.connect` call names: an IP literal (bracketed or not, an
    /// IPv4-mapped IPv6 address as IPv4) or a name, lowercased, one trailing dot removed.
    pub fn parse(host: &str) -> Host {
        let unbracketed = host
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(a) = unbracketed.parse::<IpAddr>() {
            return Host::Ip(canonical(a));
        }
        let name = host.strip_suffix('.').unwrap_or(host);
        Host::Name(name.to_ascii_lowercase())
    }
}

/// The network rules indexed by what their hosts can match.
#[derive(Debug, Default)]
pub(crate) struct NetworkIndex {
    exact: HashMap<String, Vec<u32>>,
    /// By suffix with its leading dot (`.example.com`).
    below: HashMap<String, Vec<u32>>,
    any: Vec<u32>,
    nets: Vec<(IpAddr, u8, u32)>,
}

impl NetworkIndex {
    pub(crate) fn build(rules: &[NetworkRule]) -> Result<NetworkIndex, String> {
        let mut index = NetworkIndex::default();
        for (i, r) in rules.iter().enumerate() {
            let i = u32::try_from(i).map_err(|_| "too many network rules".to_owned())?;
            for h in &r.hosts {
                match h {
                    HostPattern::Exact(n) => index.exact.entry(n.clone()).or_default().push(i),
                    HostPattern::Below(s) => index.below.entry(s.clone()).or_default().push(i),
                    HostPattern::Any => index.any.push(i),
                    HostPattern::Net(a, l) => index.nets.push((*a, *l, i)),
                }
            }
        }
        Ok(index)
    }

    /// The rules whose hosts match `host`, in rule order, without duplicates.
    fn candidates(&self, host: &Host) -> Vec<u32> {
        let mut out: Vec<u32> = self.any.clone();
        match host {
            Host::Name(name) => {
                if let Some(v) = self.exact.get(name) {
                    out.extend_from_slice(v);
                }
                if !self.below.is_empty() {
                    // Every proper suffix starting at a dot: `a.b.c` → `.b.c`, `.c`.
                    for (pos, _) in name.match_indices('.') {
                        if let Some(v) = self.below.get(&name[pos..]) {
                            out.extend_from_slice(v);
                        }
                    }
                }
            }
            Host::Ip(a) => out.extend(
                self.nets
                    .iter()
                    .filter(|(n, l, _)| in_net(*a, *n, *l))
                    .map(|(_, _, i)| *i),
            ),
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The rules that decide a connection to `host:port` over `protocol` from a run under
    /// `profile` in `ctx`.
    pub(crate) fn matching(
        &self,
        rules: &[NetworkRule],
        host: &Host,
        port: u16,
        protocol: &str,
        profile: Option<&str>,
        ctx: &CallContext,
    ) -> Vec<u32> {
        let mut out = self.candidates(host);
        out.retain(|i| rules[*i as usize].accepts(port, protocol, profile, ctx));
        out
    }
}

/// The host globs (names only, as written) that `rules` deny on every port for TCP in `ctx`
/// under `profile`.
pub(crate) fn denied_names(
    rules: &[NetworkRule],
    profile: Option<&str>,
    ctx: &CallContext,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rules.iter().filter(|r| r.denies_everywhere(profile, ctx)) {
        for (text, pattern) in r.host_texts.iter().zip(&r.hosts) {
            if !matches!(pattern, HostPattern::Net(..)) && !out.contains(text) {
                out.push(text.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, host: &str) -> bool {
        let p = HostPattern::parse(pattern).unwrap();
        let h = Host::parse(host);
        match (&p, &h) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(n), Host::Name(m)) => n == m,
            (HostPattern::Below(s), Host::Name(m)) => m.ends_with(s.as_str()),
            (HostPattern::Net(n, l), Host::Ip(a)) => in_net(*a, *n, *l),
            _ => false,
        }
    }

    #[test]
    fn host_globs_match_names_as_documented() {
        assert!(matches("example.com", "example.com"));
        assert!(!matches("example.com", "www.example.com"));
        assert!(matches("*.example.com", "www.example.com"));
        assert!(matches("*.example.com", "a.b.c.example.com"));
        assert!(!matches("*.example.com", "example.com"));
        assert!(!matches("*.example.com", "badexample.com"));
        assert!(!matches("*.example.com", "example.com.evil.org"));
        assert!(matches("*", "anything.at.all"));
        assert!(matches("*", "10.1.2.3"));
        // A call's spelling is normalised: case, one trailing dot, brackets.
        assert!(matches("example.com", "EXAMPLE.com."));
        assert!(matches("*.example.com", "WWW.Example.COM"));
        assert!(!matches("example.com", "example.com.."));
        // `*.com` is every name below `com`, not `com` itself.
        assert!(matches("*.com", "evil.com") && !matches("*.com", "com"));
        // A unicode name never equals a punycode pattern; write the `xn--` form.
        assert!(matches("xn--bcher-kva.example", "xn--bcher-kva.example"));
        assert!(!matches("xn--bcher-kva.example", "bücher.example"));
    }

    #[test]
    fn ip_patterns_match_ip_literals_only() {
        assert!(matches("10.0.0.0/8", "10.200.3.4"));
        assert!(!matches("10.0.0.0/8", "11.0.0.1"));
        assert!(matches("10.0.0.0/8", "::ffff:10.0.0.1"));
        assert!(matches("0.0.0.0/0", "93.184.216.34"));
        assert!(matches("::/0", "[2001:db8::1]"));
        assert!(!matches("::/0", "93.184.216.34"));
        assert!(matches("192.0.2.7", "192.0.2.7") && !matches("192.0.2.7", "192.0.2.8"));
        assert!(matches("fd00::/8", "FD12::1"));
        // A name made of digits is a name, not an address.
        assert!(!matches("10.0.0.0/8", "10.0.0.1.nip.io"));
    }

    #[test]
    fn bad_globs_are_rejected_with_what_is_wrong() {
        for (g, why) in [
            ("example.com.", "trailing dot"),
            ("Example.com", "lowercase"),
            ("bücher.example", "punycode"),
            ("*example.com", "first label"),
            ("www.*.com", "first label"),
            ("a..b", "empty labels"),
            (".example.com", "empty labels"),
            ("", "empty labels"),
            ("exa mple.com", "label is"),
            ("10.0.0.0/33", "prefix length"),
            ("not-an-ip/8", "CIDR"),
        ] {
            let e = HostPattern::parse(g).unwrap_err();
            assert!(e.contains(why), "{g}: {e}");
        }
    }

    #[test]
    fn ports_are_numbers_or_ranges() {
        assert_eq!(port_range(&RawPort::One(443)).unwrap(), (443, 443));
        assert_eq!(
            port_range(&RawPort::Range("8000-8099".into())).unwrap(),
            (8000, 8099)
        );
        assert_eq!(port_range(&RawPort::Range("22".into())).unwrap(), (22, 22));
        for bad in [RawPort::One(0), RawPort::One(65_536), RawPort::One(-1)] {
            assert!(port_range(&bad).is_err());
        }
        for bad in ["9-1", "a-b", "1-", "80-70000", ""] {
            assert!(port_range(&RawPort::Range(bad.into())).is_err(), "{bad}");
        }
    }
}
