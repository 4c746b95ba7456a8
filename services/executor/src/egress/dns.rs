//! DNS messages (the subset the gate speaks) and the run's DNS stub.
//!
//! The stub never asks anyone: it answers an `A` query with a placeholder address from
//! 198.18.0.0/15 that stands for the name within the run, so a run's lookups carry nothing
//! out of it. The name is resolved for real only once a connection to it is allowed.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::egress::sniff::normalize;

/// Resource record types the gate reads or answers.
pub(crate) const TYPE_A: u16 = 1;
/// An AAAA record.
pub(crate) const TYPE_AAAA: u16 = 28;
/// The Internet class.
pub(crate) const CLASS_IN: u16 = 1;

/// Response codes.
pub(crate) const RCODE_NOERROR: u8 = 0;
const RCODE_FORMERR: u8 = 1;
pub(crate) const RCODE_NXDOMAIN: u8 = 3;
const RCODE_NOTIMP: u8 = 4;
const RCODE_REFUSED: u8 = 5;

/// Header flag bits.
const QR: u16 = 0x8000;
const TC: u16 = 0x0200;
const RD: u16 = 0x0100;
const RA: u16 = 0x0080;

/// How long a stub answer may be cached by the run's resolver library.
const PLACEHOLDER_TTL: u32 = 300;

/// Why a message could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// It ended inside a field.
    #[error("truncated message")]
    Truncated,
    /// A name was malformed: a loop of compression pointers, an over-long name or label, or
    /// a label byte a host name cannot hold.
    #[error("malformed name")]
    Name,
}

/// A message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub id: u16,
    pub flags: u16,
    pub questions: u16,
    pub answers: u16,
}

impl Header {
    /// The response code.
    pub(crate) fn rcode(&self) -> u8 {
        (self.flags & 0x000f) as u8
    }
    /// Whether the answer was cut to fit a datagram.
    pub(crate) fn truncated(&self) -> bool {
        self.flags & TC != 0
    }
    fn opcode(&self) -> u16 {
        (self.flags >> 11) & 0xf
    }
}

/// One question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Question {
    /// The name as sent (case kept, no trailing dot).
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
}

/// One answer record's data, where the gate reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Data {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Other,
}

/// A message: header, questions and answer records (authority and additional sections
/// are not read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub header: Header,
    pub questions: Vec<Question>,
    pub answers: Vec<Data>,
}

struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Result<&[u8], Error> {
        let end = self.pos.checked_add(n).ok_or(Error::Truncated)?;
        let b = self.msg.get(self.pos..end).ok_or(Error::Truncated)?;
        self.pos = end;
        Ok(b)
    }
    fn u16(&mut self) -> Result<u16, Error> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, Error> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A name, following compression pointers (each must point backwards, so they cannot
    /// loop), at most 255 bytes on the wire.
    fn name(&mut self) -> Result<String, Error> {
        let mut name = String::new();
        let mut at = self.pos;
        let mut end = None;
        let mut wire_len = 0usize;
        loop {
            let len = *self.msg.get(at).ok_or(Error::Truncated)?;
            match len & 0xc0 {
                0x00 if len == 0 => {
                    end.get_or_insert(at + 1);
                    break;
                }
                0x00 => {
                    let label = self
                        .msg
                        .get(at + 1..at + 1 + usize::from(len))
                        .ok_or(Error::Truncated)?;
                    wire_len += 1 + label.len();
                    if wire_len > 255 || !label.iter().all(|b| b.is_ascii_graphic() && *b != b'.') {
                        return Err(Error::Name);
                    }
                    if !name.is_empty() {
                        name.push('.');
                    }
                    name.extend(label.iter().map(|b| char::from(*b)));
                    at += 1 + label.len();
                }
                0xc0 => {
                    let lo = *self.msg.get(at + 1).ok_or(Error::Truncated)?;
                    let target = (usize::from(len & 0x3f) << 8) | usize::from(lo);
                    if target >= at {
                        return Err(Error::Name);
                    }
                    end.get_or_insert(at + 2);
                    at = target;
                }
                _ => return Err(Error::Name),
            }
        }
        self.pos = end.unwrap_or(at + 1);
        Ok(name)
    }
}

/// Reads a message.
pub(crate) fn parse(msg: &[u8]) -> Result<Message, Error> {
    let mut r = Reader { msg, pos: 0 };
    let header = Header {
        id: r.u16()?,
        flags: r.u16()?,
        questions: r.u16()?,
        answers: r.u16()?,
    };
    r.bytes(4)?; // authority and additional counts
    // Each question takes at least 5 bytes: a count beyond what the message holds is a lie.
    if usize::from(header.questions) > msg.len() / 5 {
        return Err(Error::Truncated);
    }
    let mut questions = Vec::with_capacity(usize::from(header.questions));
    for _ in 0..header.questions {
        questions.push(Question {
            name: r.name()?,
            qtype: r.u16()?,
            qclass: r.u16()?,
        });
    }
    let mut answers = Vec::new();
    for _ in 0..header.answers {
        r.name()?;
        let rtype = r.u16()?;
        let class = r.u16()?;
        r.u32()?;
        let len = usize::from(r.u16()?);
        let data = r.bytes(len)?;
        answers.push(match (rtype, class, data.len()) {
            (TYPE_A, CLASS_IN, 4) => Data::A(Ipv4Addr::new(data[0], data[1], data[2], data[3])),
            (TYPE_AAAA, CLASS_IN, 16) => {
                let mut o = [0u8; 16];
                o.copy_from_slice(data);
                Data::Aaaa(Ipv6Addr::from(o))
            }
            _ => Data::Other,
        });
    }
    Ok(Message {
        header,
        questions,
        answers,
    })
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// A query for `name` (a validated host name) of type `qtype`, recursion desired.
pub(crate) fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(18 + name.len());
    for v in [id, RD, 1, 0, 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    put_name(&mut out, name);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out
}

/// A response to the query `header` / `question` with `rcode` and an `A` answer if any.
fn response(
    header: Header,
    question: Option<&Question>,
    rcode: u8,
    a: Option<Ipv4Addr>,
) -> Vec<u8> {
    let flags = QR | (header.flags & (0x7800 | RD)) | RA | u16::from(rcode);
    let mut out = Vec::with_capacity(64);
    for v in [
        header.id,
        flags,
        u16::from(question.is_some()),
        u16::from(a.is_some()),
        0,
        0,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    if let Some(q) = question {
        put_name(&mut out, &q.name);
        out.extend_from_slice(&q.qtype.to_be_bytes());
        out.extend_from_slice(&q.qclass.to_be_bytes());
        if let Some(addr) = a {
            out.extend_from_slice(&[0xc0, 12]); // the question's name
            out.extend_from_slice(&TYPE_A.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
            out.extend_from_slice(&PLACEHOLDER_TTL.to_be_bytes());
            out.extend_from_slice(&4u16.to_be_bytes());
            out.extend_from_slice(&addr.octets());
        }
    }
    out
}

/// The first placeholder address (198.18.0.1) as a number.
const POOL_FIRST: u32 = u32::from_be_bytes([198, 18, 0, 1]);
/// The last one handed out (198.19.255.253): .254 is the namespace's own address and .255
/// the range's broadcast address.
const POOL_LAST: u32 = u32::from_be_bytes([198, 19, 255, 253]);

/// The run's placeholder addresses: one per name, stable for the run, never reused.
#[derive(Debug)]
pub(crate) struct Placeholders {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
    next: u32,
    max: usize,
}

impl Placeholders {
    /// A pool handing out at most `max` names.
    pub(crate) fn new(max: usize) -> Self {
        Placeholders {
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            next: POOL_FIRST,
            max,
        }
    }

    /// The placeholder for `name` (normalized), a new one on first sight; `None` once the
    /// pool is exhausted.
    pub(crate) fn address(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        if self.by_name.len() >= self.max || self.next > POOL_LAST {
            return None;
        }
        let a = Ipv4Addr::from(self.next);
        self.next += 1;
        self.by_name.insert(name.to_owned(), a);
        self.by_addr.insert(a, name.to_owned());
        Some(a)
    }

    /// The name a placeholder stands for.
    pub(crate) fn name(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }
}

/// Why the stub refused a query, as the run's report records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The name asked for (normalized when it could be).
    pub name: String,
    /// `denied` (the policy's denied hosts) or `query_type` (a type the stub does not
    /// answer).
    pub refusal: &'static str,
}

/// What the stub does with one datagram.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The response to send back; `None`: drop the datagram (not a query).
    pub reply: Option<Vec<u8>>,
    /// A refusal for the report.
    pub refused: Option<Refused>,
}

/// Answers the datagram `msg`: `A` with a placeholder, `AAAA` with nothing, a name `denied`
/// says is denied with NXDOMAIN, anything else with REFUSED (or FORMERR / NOTIMP).
pub(crate) fn answer(msg: &[u8], pool: &mut Placeholders, denied: impl Fn(&str) -> bool) -> Answer {
    let reply = |r, refused| Answer {
        reply: Some(r),
        refused,
    };
    let Ok(head) = Reader { msg, pos: 0 }.bytes(12).map(|b| Header {
        id: u16::from_be_bytes([b[0], b[1]]),
        flags: u16::from_be_bytes([b[2], b[3]]),
        questions: u16::from_be_bytes([b[4], b[5]]),
        answers: u16::from_be_bytes([b[6], b[7]]),
    }) else {
        return Answer {
            reply: None,
            refused: None,
        };
    };
    if head.flags & QR != 0 {
        // A response sent to the stub: never answer it (no loops).
        return Answer {
            reply: None,
            refused: None,
        };
    }
    if head.opcode() != 0 {
        return reply(response(head, None, RCODE_NOTIMP, None), None);
    }
    let q = match parse(msg) {
        Ok(m) if m.questions.len() == 1 => m.questions.into_iter().next(),
        _ => None,
    };
    let Some(q) = q else {
        return reply(response(head, None, RCODE_FORMERR, None), None);
    };
    let Some(name) = normalize(&q.name) else {
        return reply(
            response(head, Some(&q), RCODE_REFUSED, None),
            Some(Refused {
                name: q.name.to_ascii_lowercase(),
                refusal: "query_type",
            }),
        );
    };
    if denied(&name) {
        return reply(
            response(head, Some(&q), RCODE_NXDOMAIN, None),
            Some(Refused {
                name,
                refusal: "denied",
            }),
        );
    }
    match (q.qtype, q.qclass) {
        (TYPE_A, CLASS_IN) => match pool.address(&name) {
            Some(a) => reply(response(head, Some(&q), RCODE_NOERROR, Some(a)), None),
            None => reply(response(head, Some(&q), RCODE_REFUSED, None), None),
        },
        (TYPE_AAAA, CLASS_IN) => reply(response(head, Some(&q), RCODE_NOERROR, None), None),
        _ => reply(
            response(head, Some(&q), RCODE_REFUSED, None),
            Some(Refused {
                name,
                refusal: "query_type",
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(pool: &mut Placeholders, name: &str, qtype: u16) -> (Message, Option<Refused>) {
        let a = answer(&query(0x1234, name, qtype), pool, |n| {
            n == "evil.example" || n.ends_with(".evil.example")
        });
        (parse(&a.reply.unwrap()).unwrap(), a.refused)
    }

    #[test]
    fn a_names_get_stable_placeholders_and_nothing_else_gets_an_address() {
        let mut pool = Placeholders::new(16);
        let (m, refused) = ask(&mut pool, "PyPI.org.", TYPE_A);
        assert_eq!(refused, None);
        assert_eq!(m.header.id, 0x1234);
        assert_eq!(m.header.rcode(), RCODE_NOERROR);
        assert_eq!(
            m.questions[0].name, "PyPI.org",
            "the question comes back as asked"
        );
        assert_eq!(m.answers, vec![Data::A(Ipv4Addr::new(198, 18, 0, 1))]);
        let (again, _) = ask(&mut pool, "pypi.org", TYPE_A);
        assert_eq!(again.answers, m.answers, "stable within the run");
        let (other, _) = ask(&mut pool, "files.pythonhosted.org", TYPE_A);
        assert_eq!(other.answers, vec![Data::A(Ipv4Addr::new(198, 18, 0, 2))]);
        assert_eq!(
            pool.name(Ipv4Addr::new(198, 18, 0, 2)),
            Some("files.pythonhosted.org")
        );

        let (v6, refused) = ask(&mut pool, "pypi.org", TYPE_AAAA);
        assert_eq!(
            (v6.header.rcode(), v6.answers.len(), refused),
            (RCODE_NOERROR, 0, None)
        );
        for t in [16u16, 255, 15, 33, 12] {
            let (m, refused) = ask(&mut pool, "pypi.org", t);
            assert_eq!(m.header.rcode(), RCODE_REFUSED, "type {t}");
            assert_eq!(refused.unwrap().refusal, "query_type");
        }
    }

    #[test]
    fn denied_names_do_not_exist() {
        let mut pool = Placeholders::new(16);
        for t in [TYPE_A, TYPE_AAAA, 16] {
            let (m, refused) = ask(&mut pool, "x.Evil.example", t);
            assert_eq!(m.header.rcode(), RCODE_NXDOMAIN);
            assert_eq!(
                refused,
                Some(Refused {
                    name: "x.evil.example".into(),
                    refusal: "denied"
                })
            );
        }
        assert_eq!(pool.name(Ipv4Addr::new(198, 18, 0, 1)), None);
    }

    #[test]
    fn the_pool_never_hands_out_the_namespaces_own_address_and_ends() {
        let mut pool = Placeholders::new(usize::MAX);
        let mut last = None;
        let mut n = 0u32;
        while let Some(a) = pool.address(&format!("h{n}.example")) {
            assert_ne!(a, Ipv4Addr::new(198, 19, 255, 254));
            assert_ne!(a, Ipv4Addr::new(198, 19, 255, 255));
            last = Some(a);
            n += 1;
        }
        assert_eq!(last, Some(Ipv4Addr::new(198, 19, 255, 253)));
        assert_eq!(n, 131_069);
        let mut small = Placeholders::new(1);
        assert!(small.address("a.example").is_some());
        assert!(small.address("a.example").is_some());
        assert!(small.address("b.example").is_none());
    }

    #[test]
    fn compression_pointers_are_followed_but_never_loop() {
        // Answer to "a.example" with the record's owner as a pointer to the question.
        let mut msg = query(7, "a.example", TYPE_A);
        msg[2] |= 0x80;
        msg[7] = 1;
        msg.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 216, 34]);
        let m = parse(&msg).unwrap();
        assert_eq!(m.answers, vec![Data::A(Ipv4Addr::new(93, 184, 216, 34))]);
        // A pointer to itself, and one forwards.
        let mut looped = msg.clone();
        let at = looped.len() - 16;
        looped[at + 1] = at as u8;
        assert_eq!(parse(&looped), Err(Error::Name));
        let mut forward = msg.clone();
        forward[at + 1] = (at + 4) as u8;
        assert_eq!(parse(&forward), Err(Error::Name));
    }

    #[test]
    fn garbage_never_panics_and_gets_at_most_an_error_answer() {
        let mut pool = Placeholders::new(16);
        let q = query(9, "a.example", TYPE_A);
        for len in 0..q.len() {
            let a = answer(&q[..len], &mut pool, |_| false);
            if let Some(r) = a.reply {
                let m = parse(&r).unwrap();
                assert_ne!(m.header.rcode(), RCODE_NOERROR, "cut at {len}");
            }
        }
        let mut seed = 0x9e37_79b9_u32;
        for _ in 0..20_000 {
            let mut m = q.clone();
            for _ in 0..3 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let i = seed as usize % m.len();
                m[i] = (seed >> 24) as u8;
            }
            let _ = answer(&m, &mut pool, |_| false);
            let _ = parse(&m);
        }
        // A response is never answered; two questions are a format error; a name with a
        // byte no host name has is refused.
        let mut response = q.clone();
        response[2] |= 0x80;
        assert_eq!(answer(&response, &mut pool, |_| false).reply, None);
        let mut two = q.clone();
        two[5] = 2;
        let r = parse(&answer(&two, &mut pool, |_| false).reply.unwrap()).unwrap();
        assert_eq!(r.header.rcode(), RCODE_FORMERR);
        let odd = query(3, "a\u{1}b.example", TYPE_A);
        let a = answer(&odd, &mut pool, |_| false);
        assert!(a.reply.is_some());
    }
}
