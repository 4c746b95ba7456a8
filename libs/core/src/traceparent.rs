//! The W3C `traceparent` header (Trace Context, level 1): the one parser every hop uses,
//! for gRPC metadata, an MCP request's `params._meta.traceparent`, a ledger row's trace id
//! and a child's `TRACEPARENT` variable.
//!
//! A malformed value never fails a call: callers drop it and the call goes unlinked.

use std::fmt;

/// A valid `traceparent`: `version-traceid-parentid-flags`, lowercase hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The format version (`00` today; `ff` is never valid).
    pub version: u8,
    /// The trace's id; never all zero.
    pub trace_id: [u8; 16],
    /// The id of the caller's span; never all zero.
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

/// Why a value is not a `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Fewer than four `-`-separated fields.
    MissingField,
    /// The version is not two lowercase hex digits, or is the forbidden `ff`.
    Version,
    /// Version `00` followed by more than its four fields.
    ExtraField,
    /// The trace id is not 32 lowercase hex digits.
    TraceId,
    /// The trace id is all zero.
    ZeroTraceId,
    /// The parent id is not 16 lowercase hex digits.
    ParentId,
    /// The parent id is all zero.
    ZeroParentId,
    /// The flags are not two lowercase hex digits.
    Flags,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::MissingField => "a traceparent has four fields: version-traceid-parentid-flags",
            Error::Version => {
                "the traceparent version is not two lowercase hex digits other than ff"
            }
            Error::ExtraField => "a version 00 traceparent has exactly four fields",
            Error::TraceId => "the trace id is not 32 lowercase hex digits",
            Error::ZeroTraceId => "the trace id is all zero",
            Error::ParentId => "the parent id is not 16 lowercase hex digits",
            Error::ZeroParentId => "the parent id is all zero",
            Error::Flags => "the trace flags are not two lowercase hex digits",
        })
    }
}

impl std::error::Error for Error {}

impl TraceParent {
    /// The sampled bit of [`Self::flags`].
    pub const SAMPLED: u8 = 0x01;

    /// Parses a `traceparent` value exactly as written (no surrounding whitespace).
    ///
    /// A later version than `00` may append fields after the flags; they are ignored, as
    /// the specification asks of a parser that knows only version `00`.
    pub fn parse(value: &str) -> Result<TraceParent, Error> {
        let mut fields = value.split('-');
        let mut next = || fields.next().ok_or(Error::MissingField);
        let (version, trace, parent, flags) = (next()?, next()?, next()?, next()?);
        let version = match hex::<1>(version) {
            Some([v]) if v != 0xff => v,
            _ => return Err(Error::Version),
        };
        let trace_id = hex::<16>(trace).ok_or(Error::TraceId)?;
        if trace_id == [0; 16] {
            return Err(Error::ZeroTraceId);
        }
        let parent_id = hex::<8>(parent).ok_or(Error::ParentId)?;
        if parent_id == [0; 8] {
            return Err(Error::ZeroParentId);
        }
        let [flags] = hex::<1>(flags).ok_or(Error::Flags)?;
        if version == 0 && fields.next().is_some() {
            return Err(Error::ExtraField);
        }
        Ok(TraceParent {
            version,
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The trace id as 32 lowercase hex digits, as ledger rows and logs carry it.
    pub fn trace_id_hex(&self) -> String {
        to_hex(&self.trace_id)
    }
}

/// Formats as version `00` (the only version this crate writes).
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            to_hex(&self.trace_id),
            to_hex(&self.parent_id),
            self.flags
        )
    }
}

impl std::str::FromStr for TraceParent {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        TraceParent::parse(s)
    }
}

/// `N` bytes from exactly `2 * N` lowercase hex digits (upper case is invalid in a
/// `traceparent`).
fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

fn to_hex(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::{Error, TraceParent};

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_header_parses_and_formats_back() {
        let tp = TraceParent::parse(VALID).unwrap();
        assert_eq!(tp.version, 0);
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            tp.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(tp.flags, TraceParent::SAMPLED);
        assert_eq!(tp.to_string(), VALID);
        assert_eq!(VALID.parse::<TraceParent>(), Ok(tp));
    }

    #[test]
    fn a_later_version_may_append_fields() {
        let tp = TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
            .unwrap();
        assert_eq!(tp.version, 1);
        assert_eq!(
            TraceParent::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .map(|t| t.version),
            Ok(0xcc)
        );
    }

    #[test]
    fn each_malformed_kind_is_named() {
        for (bad, why) in [
            ("", Error::MissingField),
            ("garbage", Error::MissingField),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                Error::MissingField,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Error::Version,
            ),
            (
                "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Error::Version,
            ),
            (
                "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Error::Version,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                Error::ExtraField,
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                Error::TraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                Error::TraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736a-00f067aa0ba902b7-01",
                Error::TraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
                Error::TraceId,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                Error::ZeroTraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
                Error::ParentId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
                Error::ParentId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                Error::ZeroParentId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                Error::Flags,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
                Error::Flags,
            ),
            (
                " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Error::Version,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
                Error::Flags,
            ),
        ] {
            assert_eq!(TraceParent::parse(bad), Err(why), "{bad:?}");
        }
    }
}
