//! The netlink messages that turn a fresh network namespace into a gated one, encoded here in
//! safe Rust before the helper child that sends them is cloned (it shares our memory and may
//! not allocate): the address and routes (`NETLINK_ROUTE`) and the nftables ruleset
//! (`NETLINK_NETFILTER`, one transaction).
//!
//! The ruleset, in `nft` syntax (table `inet toolgate`):
//!
//! ```text
//! chain nat_out { type nat hook output priority -100; policy accept;
//!     udp dport 53 redirect to :53
//!     ip daddr 127.0.0.0/8 return
//!     ip6 daddr ::1 return
//!     meta l4proto tcp redirect to :GATE_PORT }
//! chain filter_out { type filter hook output priority 0; policy drop;
//!     ip daddr 127.0.0.0/8 accept
//!     ip6 daddr ::1 accept
//!     ct status dnat accept }
//! ```
//!
//! The filter sees packets after the nat chain rewrote them, so a redirected connection's
//! packets to the gate have loopback destinations; its replies still carry the run's own
//! address until the reverse translation, hence `ct status dnat` (only redirected
//! connections have it). Everything else leaving for another address is dropped.

use std::net::Ipv4Addr;

/// An address on the namespace's loopback that is not itself loopback: with it, `getaddrinfo`
/// with `AI_ADDRCONFIG` (curl, Node) still returns IPv4 answers, and connections to other
/// addresses get it as their source. From the benchmarking range (RFC 2544), never routed.
pub(crate) const RUN_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);

/// What a gated namespace's helper child sends, prepared before it is cloned.
#[derive(Debug, Clone)]
pub(crate) struct GatedPlan {
    /// The IPv4 address and route (required).
    pub routes_v4: Batch,
    /// The IPv6 route (the namespace has no IPv6 when the kernel refuses it).
    pub routes_v6: Batch,
    /// The nftables transaction.
    pub nft: Batch,
    /// The port the gate's TCP listener binds on loopback.
    pub gate_port: u16,
}

impl GatedPlan {
    pub(crate) fn new(gate_port: u16) -> GatedPlan {
        GatedPlan {
            routes_v4: routes_v4(),
            routes_v6: routes_v6(),
            nft: ruleset(gate_port),
            gate_port,
        }
    }
}

/// Messages for one netlink socket and how many acknowledgements they ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    pub bytes: Vec<u8>,
    pub acks: usize,
}

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;
const NF_INET_LOCAL_OUT: u32 = 3;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NFT_RETURN: u32 = (-5i32) as u32;
const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;
const NFT_CT_STATUS: u32 = 2;
const IPS_DST_NAT: u32 = 0x20;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;

const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_OIF: u16 = 4;
const RT_TABLE_MAIN: u8 = 254;
const RT_TABLE_LOCAL: u8 = 255;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_HOST: u8 = 254;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
/// The loopback's index in every network namespace (`LOOPBACK_IFINDEX`).
const LOOPBACK_IFINDEX: u32 = 1;

/// Appends netlink messages and attributes to one buffer.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
    seq: u32,
    acks: usize,
    /// Offsets of the open message and attribute headers, whose lengths are patched on close.
    open: Vec<usize>,
}

impl Writer {
    /// Opens a message: `nlmsghdr` then the family header `fixed`.
    fn begin(&mut self, kind: u16, flags: u16, fixed: &[u8]) {
        self.seq += 1;
        if flags & NLM_F_ACK != 0 {
            self.acks += 1;
        }
        self.open.push(self.buf.len());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(fixed);
        self.pad();
    }

    /// Closes the open message or nested attribute, writing its length.
    fn end(&mut self) {
        let start = self.open.pop().expect("an open message or nest");
        let len = self.buf.len() - start;
        // Messages are never nested: whatever is still open around this one is its message.
        if !self.open.is_empty() {
            let len = u16::try_from(len).expect("attributes stay small");
            self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        } else {
            let len = u32::try_from(len).expect("messages stay small");
            self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
        }
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn attr(&mut self, kind: u16, data: &[u8]) {
        let len = u16::try_from(4 + data.len()).expect("attributes stay small");
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn str(&mut self, kind: u16, s: &str) {
        let mut data = s.as_bytes().to_vec();
        data.push(0);
        self.attr(kind, &data);
    }

    /// A big-endian u32, as nftables takes its numbers.
    fn be32(&mut self, kind: u16, v: u32) {
        self.attr(kind, &v.to_be_bytes());
    }

    fn nest(&mut self, kind: u16) {
        self.open.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    }

    fn finish(self) -> Batch {
        debug_assert!(self.open.is_empty());
        Batch {
            bytes: self.buf,
            acks: self.acks,
        }
    }
}

/// The `nfgenmsg` header: family, version 0, resource id (big-endian).
fn nfgen(family: u8, res_id: u16) -> [u8; 4] {
    let id = res_id.to_be_bytes();
    [family, 0, id[0], id[1]]
}

/// One nftables expression of a rule.
#[derive(Clone, Copy)]
enum Expr<'a> {
    /// `meta load KEY => reg 1`.
    Meta(u32),
    /// `payload load LEN @ BASE + OFFSET => reg 1`.
    Payload { base: u32, offset: u32, len: u32 },
    /// `cmp OP reg 1 DATA`.
    Cmp(u32, &'a [u8]),
    /// `ct load KEY => reg 1`.
    Ct(u32),
    /// `bitwise reg 1 = (reg 1 & MASK) ^ 0`.
    And(&'a [u8]),
    /// `immediate reg 1 DATA`.
    Value(&'a [u8]),
    /// `immediate reg 0 VERDICT`.
    Verdict(u32),
    /// `redir proto_min reg 1 proto_max reg 1`.
    Redirect,
}

/// The packet is of `family` and its destination address starts with `prefix` (the address
/// is at `offset` in the network header).
fn daddr_is<'a>(family: &'a [u8; 1], offset: u32, prefix: &'a [u8]) -> [Expr<'a>; 4] {
    [
        Expr::Meta(NFT_META_NFPROTO),
        Expr::Cmp(NFT_CMP_EQ, family),
        Expr::Payload {
            base: NFT_PAYLOAD_NETWORK_HEADER,
            offset,
            len: u32::try_from(prefix.len()).expect("an address"),
        },
        Expr::Cmp(NFT_CMP_EQ, prefix),
    ]
}

impl Writer {
    fn data(&mut self, kind: u16, value: &[u8]) {
        self.nest(kind);
        self.attr(1, value); // NFTA_DATA_VALUE
        self.end();
    }

    fn expr(&mut self, e: &Expr<'_>) {
        let name = match e {
            Expr::Meta(_) => "meta",
            Expr::Payload { .. } => "payload",
            Expr::Cmp(..) => "cmp",
            Expr::Ct(_) => "ct",
            Expr::And(_) => "bitwise",
            Expr::Value(_) | Expr::Verdict(_) => "immediate",
            Expr::Redirect => "redir",
        };
        self.nest(1); // NFTA_LIST_ELEM
        self.str(1, name); // NFTA_EXPR_NAME
        self.nest(2); // NFTA_EXPR_DATA
        match *e {
            Expr::Meta(key) | Expr::Ct(key) => {
                self.be32(2, key); // NFTA_META_KEY / NFTA_CT_KEY
                self.be32(1, NFT_REG_1); // DREG
            }
            Expr::Payload { base, offset, len } => {
                self.be32(1, NFT_REG_1); // NFTA_PAYLOAD_DREG
                self.be32(2, base);
                self.be32(3, offset);
                self.be32(4, len);
            }
            Expr::Cmp(op, value) => {
                self.be32(1, NFT_REG_1); // NFTA_CMP_SREG
                self.be32(2, op);
                self.data(3, value);
            }
            Expr::And(mask) => {
                self.be32(1, NFT_REG_1); // NFTA_BITWISE_SREG
                self.be32(2, NFT_REG_1); // NFTA_BITWISE_DREG
                self.be32(3, u32::try_from(mask.len()).expect("a register's width"));
                self.data(4, mask);
                self.data(5, &vec![0; mask.len()]);
            }
            Expr::Value(value) => {
                self.be32(1, NFT_REG_1); // NFTA_IMMEDIATE_DREG
                self.data(2, value);
            }
            Expr::Verdict(code) => {
                self.be32(1, NFT_REG_VERDICT);
                self.nest(2); // NFTA_IMMEDIATE_DATA
                self.nest(2); // NFTA_DATA_VERDICT
                self.be32(1, code); // NFTA_VERDICT_CODE
                self.end();
                self.end();
            }
            Expr::Redirect => {
                self.be32(1, NFT_REG_1); // NFTA_REDIR_REG_PROTO_MIN
                self.be32(2, NFT_REG_1); // NFTA_REDIR_REG_PROTO_MAX
                self.be32(3, NF_NAT_RANGE_PROTO_SPECIFIED);
            }
        }
        self.end();
        self.end();
    }

    fn nft(&mut self, msg: u16, flags: u16) {
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | msg;
        self.begin(
            kind,
            NLM_F_REQUEST | NLM_F_ACK | flags,
            &nfgen(NFPROTO_INET, 0),
        );
    }

    fn chain(&mut self, name: &str, kind: &str, priority: i32, policy: u32) {
        self.nft(NFT_MSG_NEWCHAIN, NLM_F_CREATE);
        self.str(1, TABLE); // NFTA_CHAIN_TABLE
        self.str(3, name); // NFTA_CHAIN_NAME
        self.nest(4); // NFTA_CHAIN_HOOK
        self.be32(1, NF_INET_LOCAL_OUT); // NFTA_HOOK_HOOKNUM
        self.be32(2, priority as u32); // NFTA_HOOK_PRIORITY
        self.end();
        self.be32(5, policy); // NFTA_CHAIN_POLICY
        self.str(7, kind); // NFTA_CHAIN_TYPE
        self.end();
    }

    fn rule(&mut self, chain: &str, exprs: &[Expr<'_>]) {
        self.nft(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
        self.str(1, TABLE); // NFTA_RULE_TABLE
        self.str(2, chain); // NFTA_RULE_CHAIN
        self.nest(4); // NFTA_RULE_EXPRESSIONS
        for e in exprs {
            self.expr(e);
        }
        self.end();
        self.end();
    }
}

const TABLE: &str = "toolgate";
const NAT: &str = "nat_out";
const FILTER: &str = "filter_out";

/// The gated namespace's nftables transaction: TCP to any non-loopback address goes to
/// `gate_port` on loopback, UDP to port 53 to the DNS stub, every other packet leaving for
/// another address is dropped.
pub(crate) fn ruleset(gate_port: u16) -> Batch {
    let mut w = Writer::default();
    let subsys = nfgen(0, NFNL_SUBSYS_NFTABLES);
    w.begin(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, &subsys);
    w.end();
    w.nft(NFT_MSG_NEWTABLE, NLM_F_CREATE);
    w.str(1, TABLE); // NFTA_TABLE_NAME
    w.end();
    w.chain(NAT, "nat", -100, NF_ACCEPT);
    w.chain(FILTER, "filter", 0, NF_DROP);

    let dns = 53u16.to_be_bytes();
    let gate = gate_port.to_be_bytes();
    let v4 = [NFPROTO_IPV4];
    let v6 = [NFPROTO_IPV6];
    let localhost6 = std::net::Ipv6Addr::LOCALHOST.octets();
    // `ip daddr 127.0.0.0/8` (its first byte) and `ip6 daddr ::1`.
    let ip_daddr_127 = daddr_is(&v4, 16, &[127]);
    let ip6_daddr_1 = daddr_is(&v6, 24, &localhost6);
    fn with<'a>(head: &[Expr<'a>], verdict: u32) -> Vec<Expr<'a>> {
        head.iter()
            .copied()
            .chain([Expr::Verdict(verdict)])
            .collect()
    }

    w.rule(
        NAT,
        &[
            Expr::Meta(NFT_META_L4PROTO),
            Expr::Cmp(NFT_CMP_EQ, &[libc::IPPROTO_UDP as u8]),
            Expr::Payload {
                base: NFT_PAYLOAD_TRANSPORT_HEADER,
                offset: 2,
                len: 2,
            },
            Expr::Cmp(NFT_CMP_EQ, &dns),
            Expr::Value(&dns),
            Expr::Redirect,
        ],
    );
    w.rule(NAT, &with(&ip_daddr_127, NFT_RETURN));
    w.rule(NAT, &with(&ip6_daddr_1, NFT_RETURN));
    w.rule(
        NAT,
        &[
            Expr::Meta(NFT_META_L4PROTO),
            Expr::Cmp(NFT_CMP_EQ, &[libc::IPPROTO_TCP as u8]),
            Expr::Value(&gate),
            Expr::Redirect,
        ],
    );
    w.rule(FILTER, &with(&ip_daddr_127, NF_ACCEPT));
    w.rule(FILTER, &with(&ip6_daddr_1, NF_ACCEPT));
    let dst_nat = IPS_DST_NAT.to_ne_bytes();
    w.rule(
        FILTER,
        &[
            Expr::Ct(NFT_CT_STATUS),
            Expr::And(&dst_nat),
            Expr::Cmp(NFT_CMP_NEQ, &[0; 4]),
            Expr::Verdict(NF_ACCEPT),
        ],
    );
    w.begin(NFNL_MSG_BATCH_END, NLM_F_REQUEST, &subsys);
    w.end();
    w.finish()
}

/// `ip addr add RUN_ADDR/32 dev lo` and `ip route add default dev lo`: every IPv4 destination
/// is routable (out through `lo`, where the nat chain rewrites it before it is delivered).
pub(crate) fn routes_v4() -> Batch {
    let mut w = Writer::default();
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let mut ifaddr = vec![libc::AF_INET as u8, 32, 0, 0];
    ifaddr.extend_from_slice(&LOOPBACK_IFINDEX.to_ne_bytes());
    w.begin(RTM_NEWADDR, flags, &ifaddr);
    w.attr(IFA_LOCAL, &RUN_ADDR.octets());
    w.attr(IFA_ADDRESS, &RUN_ADDR.octets());
    w.end();
    route(
        &mut w,
        libc::AF_INET as u8,
        RT_TABLE_MAIN,
        RT_SCOPE_LINK,
        RTN_UNICAST,
    );
    w.finish()
}

/// `ip -6 route add local ::/0 dev lo table local`: every IPv6 destination is routable. (A
/// unicast route through `lo` would be turned into a reject route by the kernel.)
pub(crate) fn routes_v6() -> Batch {
    let mut w = Writer::default();
    route(
        &mut w,
        libc::AF_INET6 as u8,
        RT_TABLE_LOCAL,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    );
    w.finish()
}

fn route(w: &mut Writer, family: u8, table: u8, scope: u8, kind: u8) {
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut rtmsg = vec![family, 0, 0, 0, table, RTPROT_STATIC, scope, kind];
    rtmsg.extend_from_slice(&0u32.to_ne_bytes());
    w.begin(RTM_NEWROUTE, flags, &rtmsg);
    w.attr(RTA_OIF, &LOOPBACK_IFINDEX.to_ne_bytes());
    w.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `buf` into `(type, flags, payload)` per message, checking every length.
    fn messages(buf: &[u8]) -> Vec<(u16, u16, &[u8])> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
            assert!(
                len >= 16 && at + len <= buf.len() && len.is_multiple_of(4),
                "len {len}"
            );
            let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().unwrap());
            let flags = u16::from_ne_bytes(buf[at + 6..at + 8].try_into().unwrap());
            out.push((kind, flags, &buf[at + 16..at + len]));
            at += len;
        }
        out
    }

    /// Walks attributes in `buf` (nested ones recursively), checking each length fits, and
    /// returns `(depth, type, payload)` in order.
    fn attrs(buf: &[u8], depth: usize, out: &mut Vec<(usize, u16, Vec<u8>)>) {
        let mut at = 0;
        while at < buf.len() {
            let len = u16::from_ne_bytes(buf[at..at + 2].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(buf[at + 2..at + 4].try_into().unwrap());
            assert!(
                len >= 4 && at + len <= buf.len(),
                "attribute overruns its parent"
            );
            let body = &buf[at + 4..at + len];
            out.push((depth, kind & !NLA_F_NESTED, body.to_vec()));
            if kind & NLA_F_NESTED != 0 {
                attrs(body, depth + 1, out);
            }
            at += (len + 3) & !3;
        }
    }

    #[test]
    fn the_ruleset_is_one_transaction_of_ten_acknowledged_messages() {
        let b = ruleset(17700);
        let msgs = messages(&b.bytes);
        let kinds: Vec<u16> = msgs.iter().map(|m| m.0).collect();
        let nft = |m: u16| (NFNL_SUBSYS_NFTABLES << 8) | m;
        let mut want = vec![NFNL_MSG_BATCH_BEGIN, nft(0), nft(3), nft(3)];
        want.extend([nft(6); 7]);
        want.push(NFNL_MSG_BATCH_END);
        assert_eq!(kinds, want);
        assert_eq!(b.acks, 10);
        assert_eq!(
            msgs[0].2,
            &[0, 0, 0, 10],
            "batch for the nftables subsystem"
        );
        assert!(
            msgs[1..11]
                .iter()
                .all(|m| m.1 & NLM_F_ACK != 0 && m.2[0] == NFPROTO_INET)
        );
        assert_eq!(msgs[0].1 & NLM_F_ACK, 0);
    }

    #[test]
    fn the_filter_chain_drops_by_default_and_the_nat_chain_runs_first() {
        let b = ruleset(17700);
        let msgs = messages(&b.bytes);
        let mut nat = Vec::new();
        attrs(&msgs[2].2[4..], 0, &mut nat);
        let mut filter = Vec::new();
        attrs(&msgs[3].2[4..], 0, &mut filter);
        let get = |a: &[(usize, u16, Vec<u8>)], depth, kind| {
            a.iter()
                .find(|x| x.0 == depth && x.1 == kind)
                .map(|x| x.2.clone())
                .unwrap()
        };
        assert_eq!(get(&nat, 0, 3), b"nat_out\0");
        assert_eq!(get(&nat, 0, 7), b"nat\0");
        assert_eq!(get(&nat, 1, 2), (-100i32).to_be_bytes());
        assert_eq!(get(&nat, 1, 1), 3u32.to_be_bytes(), "the output hook");
        assert_eq!(get(&nat, 0, 5), NF_ACCEPT.to_be_bytes());
        assert_eq!(get(&filter, 0, 5), NF_DROP.to_be_bytes());
        assert_eq!(get(&filter, 1, 2), 0u32.to_be_bytes());
    }

    #[test]
    fn tcp_is_redirected_to_the_gate_port_and_dns_to_53() {
        let b = ruleset(17700);
        let msgs = messages(&b.bytes);
        let values = |i: usize| {
            let mut a = Vec::new();
            attrs(&msgs[i].2[4..], 0, &mut a);
            a
        };
        let names = |a: &[(usize, u16, Vec<u8>)]| -> Vec<String> {
            a.iter()
                .filter(|x| x.0 == 2 && x.1 == 1)
                .map(|x| {
                    String::from_utf8_lossy(&x.2)
                        .trim_end_matches('\0')
                        .to_owned()
                })
                .collect()
        };
        let dns = values(4);
        assert_eq!(
            names(&dns),
            ["meta", "cmp", "payload", "cmp", "immediate", "redir"]
        );
        // The port both compared and loaded: 53, big-endian.
        assert_eq!(
            dns.iter().filter(|x| x.2 == [0, 53]).count(),
            2,
            "dport 53 and :53"
        );
        let tcp = values(7);
        assert_eq!(names(&tcp), ["meta", "cmp", "immediate", "redir"]);
        assert!(tcp.iter().any(|x| x.2 == 17700u16.to_be_bytes()));
        assert!(tcp.iter().any(|x| x.2 == [libc::IPPROTO_TCP as u8]));
        let ret4 = values(5);
        assert!(ret4.iter().any(|x| x.2 == [127]));
        assert!(ret4.iter().any(|x| x.2 == NFT_RETURN.to_be_bytes()));
        let ct = values(10);
        assert_eq!(names(&ct), ["ct", "bitwise", "cmp", "immediate"]);
        assert!(ct.iter().any(|x| x.2 == IPS_DST_NAT.to_ne_bytes()));
    }

    #[test]
    fn routes_make_every_destination_reachable_through_lo() {
        let v4 = routes_v4();
        let msgs = messages(&v4.bytes);
        assert_eq!(v4.acks, 2);
        assert_eq!(msgs[0].0, RTM_NEWADDR);
        assert_eq!(&msgs[0].2[..4], &[libc::AF_INET as u8, 32, 0, 0]);
        assert_eq!(
            &msgs[0].2[8..],
            &[8, 0, 2, 0, 198, 19, 255, 254, 8, 0, 1, 0, 198, 19, 255, 254]
        );
        assert_eq!(msgs[1].0, RTM_NEWROUTE);
        assert_eq!(msgs[1].2[1], 0, "a default route");
        assert_eq!(msgs[1].2[4], RT_TABLE_MAIN);
        let v6 = routes_v6();
        let msgs = messages(&v6.bytes);
        assert_eq!((v6.acks, msgs.len()), (1, 1));
        assert_eq!(msgs[0].2[0], libc::AF_INET6 as u8);
        assert_eq!((msgs[0].2[4], msgs[0].2[7]), (RT_TABLE_LOCAL, RTN_LOCAL));
        assert_eq!(&msgs[0].2[12..], &[8, 0, 4, 0, 1, 0, 0, 0]);
    }
}
