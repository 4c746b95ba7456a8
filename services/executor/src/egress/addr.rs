//! Which addresses a run may reach after the gate resolved a name: never the executor's own
//! neighbourhood (loopback, private networks, link-local and the cloud metadata services,
//! CGNAT, multicast, the gate's own placeholder range), unless an operator allowed a range.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address range, `address/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x::y/n` (a bare address is a single-address range).
    pub(crate) fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not an address range (a.b.c.d/n or x::y/n)"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?,
        };
        Ok(Cidr { net, prefix })
    }

    const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
        Cidr {
            net: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
            prefix,
        }
    }

    const fn v6(segments: [u16; 8], prefix: u8) -> Cidr {
        let [a, b, c, d, e, f, g, h] = segments;
        Cidr {
            net: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
            prefix,
        }
    }

    /// Whether `ip` is in this range (v4 ranges never hold v6 addresses and the reverse).
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.prefix),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.prefix),
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    if a[..full] != b[..full] {
        return false;
    }
    let rest = prefix % 8;
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[full] & mask == b[full] & mask
    }
}

/// Ranges a run never reaches after resolution, with the class the refusal names.
const FORBIDDEN: &[(Cidr, &str)] = &[
    (Cidr::v4(0, 0, 0, 0, 8), "this-network"),
    (Cidr::v4(10, 0, 0, 0, 8), "private"),
    (Cidr::v4(100, 64, 0, 0, 10), "carrier-grade NAT"),
    (Cidr::v4(127, 0, 0, 0, 8), "loopback"),
    (Cidr::v4(169, 254, 0, 0, 16), "link-local or metadata"),
    (Cidr::v4(172, 16, 0, 0, 12), "private"),
    (Cidr::v4(192, 0, 0, 0, 24), "IETF protocol assignments"),
    (Cidr::v4(192, 168, 0, 0, 16), "private"),
    (
        Cidr::v4(198, 18, 0, 0, 15),
        "benchmarking (the gate's placeholders)",
    ),
    (Cidr::v4(224, 0, 0, 0, 4), "multicast"),
    (Cidr::v4(240, 0, 0, 0, 4), "reserved or broadcast"),
    (Cidr::v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    (Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    (
        Cidr::v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128),
        "metadata",
    ),
    (
        Cidr::v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        "local NAT64",
    ),
    (Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "unique local"),
    (Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    (Cidr::v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "site-local"),
    (Cidr::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
];

/// The v4 address a v6 one stands for (v4-mapped `::ffff:a.b.c.d`, v4-compatible `::a.b.c.d`,
/// NAT64 `64:ff9b::a.b.c.d`), which is what the kernel or a translator would reach.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compat = s[..6] == [0; 6] && u32::from(tail) > 1;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (compat || nat64).then_some(tail)
}

/// Why `ip` may not be reached (its class), or `None` when it may: `allowed` are the
/// operator's exceptions, checked on the address as given and on the v4 address it embeds.
pub(crate) fn forbidden(ip: IpAddr, allowed: &[Cidr]) -> Option<&'static str> {
    let mut forms = vec![ip];
    if let IpAddr::V6(v6) = ip
        && let Some(v4) = embedded_v4(v6)
    {
        forms.push(IpAddr::V4(v4));
    }
    if forms.iter().any(|f| allowed.iter().any(|c| c.contains(*f))) {
        return None;
    }
    forms.iter().find_map(|f| {
        FORBIDDEN
            .iter()
            .find(|(c, _)| c.contains(*f))
            .map(|(_, why)| *why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> Option<&'static str> {
        forbidden(s.parse().unwrap(), &[])
    }

    #[test]
    fn the_executors_neighbourhood_is_refused_in_every_spelling() {
        for a in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "169.254.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "198.18.0.1",
            "198.19.255.254",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(refused(a).is_some(), "{a} must be refused");
        }
    }

    #[test]
    fn public_addresses_pass_and_range_edges_hold() {
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "2606:2800:220:1:248:1893:25c8:1946",
            "::ffff:93.184.216.34",
            "64:ff9b::5db8:d822",
        ] {
            assert_eq!(refused(a), None, "{a} must pass");
        }
        assert_eq!(refused("169.254.169.254"), Some("link-local or metadata"));
    }

    #[test]
    fn an_operators_range_lets_a_private_address_through_and_nothing_else() {
        let allowed = [Cidr::parse("10.20.0.0/16").unwrap()];
        assert_eq!(forbidden("10.20.3.4".parse().unwrap(), &allowed), None);
        assert_eq!(
            forbidden("::ffff:10.20.3.4".parse().unwrap(), &allowed),
            None
        );
        assert!(forbidden("10.21.0.1".parse().unwrap(), &allowed).is_some());
        assert!(forbidden("127.0.0.1".parse().unwrap(), &allowed).is_some());
    }

    #[test]
    fn ranges_parse_strictly() {
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("fc00::/129").is_err());
        assert!(Cidr::parse("10.0.0/8").is_err());
        assert!(Cidr::parse("example.com/8").is_err());
        let single = Cidr::parse("192.0.2.7").unwrap();
        assert!(single.contains("192.0.2.7".parse().unwrap()));
        assert!(!single.contains("192.0.2.8".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        assert!(!all.contains("::1".parse().unwrap()));
    }
}
