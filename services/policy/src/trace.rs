//! W3C trace context: the trace id of an incoming `traceparent` header.

/// The trace id of a W3C `traceparent` (`version-traceid-parentid-flags`), or `None` when
/// the header is malformed: a bad header never fails a call, it only goes unlinked.
pub fn trace_id(traceparent: &str) -> Option<String> {
    let mut parts = traceparent.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four fields; later versions may append more.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    if !hex(version, 2) || version == "ff" || !hex(flags, 2) {
        return None;
    }
    if !hex(trace, 32) || zero(trace) || !hex(span, 16) || zero(span) {
        return None;
    }
    Some(trace.to_owned())
}

#[cfg(test)]
mod tests {
    use super::trace_id;

    #[test]
    fn valid_headers_yield_their_trace_id() {
        assert_eq!(
            trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        // A future version may carry more fields.
        assert!(trace_id("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz").is_some());
    }

    #[test]
    fn malformed_headers_are_ignored() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }
}
