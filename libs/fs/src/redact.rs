//! Redaction of credentials written into URLs (`https://user:token@host`, `postgres://u:pw@h/db`).
//!
//! What reads and searches show of a file is its *view*: the bytes with the userinfo part of
//! every URL replaced by [`MARKER`]. A span is redacted when:
//! - `://` follows a scheme character (ASCII alphanumeric, `+`, `-` or `.`),
//! - then 1 to [`MAX_USERINFO`] userinfo bytes (RFC 3986: unreserved, `%`, sub-delims, `:`)
//!   end at `@`,
//! - and the userinfo is not harmless: a bare well-known account name (`git@`, `hg@`,
//!   `anonymous@`) or only shell variable references (`$TOKEN`, `oauth2:$TOKEN`) are kept.
//!   Any other user name is redacted with its password: user names are often tokens
//!   themselves (`https://ghp_xxx@github.com`).
//!
//! Whether a span is redacted depends only on the bytes from one before its `://` to
//! [`MAX_USERINFO`] + 1 after it, so a whole-file pass, a streamed pass and a window around a
//! byte range agree: no choice of range, cap or chunking shows part of a credential the
//! whole view hides.

use std::io::Read;
use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem;

/// What replaces a URL's userinfo.
pub(crate) const MARKER: &[u8] = b"***";

/// The longest userinfo recognised, in bytes; longer runs are not URL credentials.
pub(crate) const MAX_USERINFO: usize = 4096;

/// Bytes of context a window needs on each side of a selection to decide every span that
/// overlaps it (the byte before `://`, `://` itself, the userinfo and its `@`).
pub(crate) const CONTEXT: usize = MAX_USERINFO + 4;

/// The searcher for `://`, built once (a searcher per call costs more than short inputs).
static SEPARATOR: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| memmem::Finder::new(b"://"));

/// User names that identify an account kind, not a person or a token.
const HARMLESS_USERS: &[&[u8]] = &[b"git", b"hg", b"anonymous"];

/// Returns `input` with the userinfo of every URL replaced by `***`, or `None` when no URL in
/// it carries credentials (then nothing is allocated).
///
/// `https://user:ghp_x@github.com/o/r.git` becomes `https://***@github.com/o/r.git`;
/// `ssh://git@github.com/o/r` and `https://$TOKEN@host` stay as they are. Works on arbitrary
/// bytes; nothing outside the userinfo changes.
pub fn redact_url_credentials(input: &[u8]) -> Option<Vec<u8>> {
    let Next::Span(first) = next_span(input, 0, None, true) else {
        return None;
    };
    let mut out = Vec::with_capacity(input.len());
    let mut pos = 0;
    let mut span = first;
    loop {
        out.extend_from_slice(&input[pos..span.start]);
        out.extend_from_slice(MARKER);
        pos = span.end;
        match next_span(input, span.end + 1, None, true) {
            Next::Span(r) => span = r,
            _ => break,
        }
    }
    out.extend_from_slice(&input[pos..]);
    Some(out)
}

/// The userinfo spans of `input`, in order (`input[span.end]` is the `@`).
pub(crate) fn credential_spans(input: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Next::Span(r) = next_span(input, from, None, true) {
        from = r.end + 1;
        spans.push(r);
    }
    spans
}

/// The view of `window[sel]`: every span of `window` that overlaps `sel` has its part inside
/// `sel` replaced by the marker. `None` when nothing in `sel` is redacted.
///
/// The window must extend [`CONTEXT`] bytes on each side of `sel`, or to the file's start
/// and end, or to a line boundary (spans never cross a newline).
pub(crate) fn redact_window(window: &[u8], sel: Range<usize>) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut pos = sel.start;
    let mut from = sel.start.saturating_sub(CONTEXT);
    while let Next::Span(r) = next_span(window, from, None, true) {
        from = r.end + 1;
        if r.end <= sel.start {
            continue;
        }
        if r.start >= sel.end {
            break;
        }
        let o = out.get_or_insert_with(|| Vec::with_capacity(sel.len()));
        let (a, b) = (r.start.max(sel.start), r.end.min(sel.end));
        o.extend_from_slice(&window[pos..a]);
        o.extend_from_slice(MARKER);
        pos = b;
    }
    let mut o = out?;
    o.extend_from_slice(&window[pos..sel.end]);
    Some(o)
}

/// What the scan found next.
enum Next {
    /// A userinfo to redact.
    Span(Range<usize>),
    /// A URL whose userinfo runs to the end of the input: more input decides it. Holds the
    /// position of its `://`.
    Undecided(usize),
    /// Nothing more in this input.
    End,
}

/// Finds the next span whose `://` starts at or after `from`. `before` is the byte preceding
/// `buf` in the stream, if any; `complete` says that no byte follows `buf`.
fn next_span(buf: &[u8], from: usize, before: Option<u8>, complete: bool) -> Next {
    let mut at = from;
    while let Some(i) = SEPARATOR.find(&buf[at.min(buf.len())..]) {
        let sep = at + i;
        let start = sep + 3;
        at = start;
        let scheme_byte = if sep == 0 { before } else { Some(buf[sep - 1]) };
        if !scheme_byte.is_some_and(is_scheme_byte) {
            continue;
        }
        let limit = buf.len().min(start + MAX_USERINFO + 1);
        match buf[start..limit].iter().position(|&b| !is_userinfo_byte(b)) {
            Some(n) if n > 0 && buf[start + n] == b'@' && !harmless(&buf[start..start + n]) => {
                return Next::Span(start..start + n);
            }
            Some(_) => {}
            None if buf.len() - start <= MAX_USERINFO && !complete => return Next::Undecided(sep),
            None => {}
        }
    }
    Next::End
}

fn is_scheme_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

fn is_userinfo_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'%'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
        )
}

/// A bare well-known account, or nothing but shell variable references (`$TOKEN`), whose
/// values are not in the file.
fn harmless(userinfo: &[u8]) -> bool {
    if HARMLESS_USERS.contains(&userinfo) {
        return true;
    }
    let mut parts = userinfo.split(|&b| b == b':');
    let user = parts.next().unwrap_or_default();
    let rest: Vec<&[u8]> = parts.collect();
    if rest.is_empty() {
        return is_variable(user);
    }
    // `user:$PASSWORD` with a variable password: harmless when the user is a variable or
    // a name that says which kind of token follows (`x-access-token`, `oauth2`).
    rest.iter().all(|p| is_variable(p))
        && (is_variable(user) || user.is_empty() || is_token_kind(user))
}

fn is_variable(part: &[u8]) -> bool {
    match part.split_first() {
        Some((b'$', name)) => {
            !name.is_empty()
                && !name[0].is_ascii_digit()
                && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        _ => false,
    }
}

fn is_token_kind(user: &[u8]) -> bool {
    matches!(
        user,
        b"x-access-token" | b"oauth2" | b"x-oauth-basic" | b"x-token-auth" | b"git" | b"token"
    )
}

/// Redacts a stream chunk by chunk, holding back only what later bytes may still decide
/// (at most [`CONTEXT`] bytes plus the last chunk).
#[derive(Default)]
pub(crate) struct Redactor {
    /// Raw bytes not yet passed on, after `done` bytes already passed on (the last of
    /// which is kept as the scheme byte of a `://` that may start the next chunk).
    raw: Vec<u8>,
    done: usize,
    found: bool,
}

impl Redactor {
    /// Whether some span was redacted so far.
    pub(crate) fn found(&self) -> bool {
        self.found
    }

    /// Feeds raw bytes; `sink` receives the view, in order, as far as it is decided.
    pub(crate) fn feed(&mut self, input: &[u8], sink: &mut impl FnMut(&[u8])) {
        if self.raw.len() == self.done && self.clean(input) {
            sink(input);
            self.keep_last(input);
            return;
        }
        self.raw.extend_from_slice(input);
        self.drain(false, sink);
    }

    /// Passes on everything held back; call once at the end of the stream.
    pub(crate) fn finish(&mut self, sink: &mut impl FnMut(&[u8])) {
        self.drain(true, sink);
    }

    /// Whether `chunk`, following what was passed on, can be passed on unchanged at once.
    fn clean(&self, chunk: &[u8]) -> bool {
        let before = self.done.checked_sub(1).map(|i| self.raw[i]);
        matches!(next_span(chunk, 0, before, false), Next::End)
            && !chunk.ends_with(b":")
            && !chunk.ends_with(b":/")
    }

    fn keep_last(&mut self, chunk: &[u8]) {
        if let Some(&last) = chunk.last() {
            self.raw.clear();
            self.raw.push(last);
            self.done = 1;
        }
    }

    fn drain(&mut self, eof: bool, sink: &mut impl FnMut(&[u8])) {
        let len = self.raw.len();
        let mut pos = self.done;
        let mut from = self.done;
        let stop = loop {
            match next_span(&self.raw, from, None, eof) {
                Next::Span(r) => {
                    sink(&self.raw[pos..r.start]);
                    sink(MARKER);
                    self.found = true;
                    pos = r.end;
                    from = r.end + 1;
                }
                Next::Undecided(sep) => break sep.max(pos),
                // A `:` or `:/` at the end may begin a `://` in the next chunk.
                Next::End if eof => break len,
                Next::End => break len.saturating_sub(2).max(pos),
            }
        };
        sink(&self.raw[pos..stop]);
        let keep_from = stop.saturating_sub(1);
        self.raw.drain(..keep_from);
        self.done = stop - keep_from;
    }
}

/// A reader that yields the view of another: URL credentials redacted.
pub(crate) struct RedactingReader<R> {
    inner: R,
    redactor: Redactor,
    out: Vec<u8>,
    out_pos: usize,
    eof: bool,
}

impl<R: Read> RedactingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        RedactingReader {
            inner,
            redactor: Redactor::default(),
            out: Vec::new(),
            out_pos: 0,
            eof: false,
        }
    }
}

impl<R: Read> Read for RedactingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.out_pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.out_pos);
                buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
                self.out_pos += n;
                return Ok(n);
            }
            if self.eof {
                return Ok(0);
            }
            self.out.clear();
            self.out_pos = 0;
            // The caller's buffer is the scratch space: a clean chunk (the common case) is
            // returned where it was read, without a copy.
            let n = self.inner.read(buf)?;
            let out = &mut self.out;
            if n == 0 {
                self.eof = true;
                self.redactor.finish(&mut |b| out.extend_from_slice(b));
                continue;
            }
            let r = &mut self.redactor;
            if r.raw.len() == r.done && r.clean(&buf[..n]) {
                r.keep_last(&buf[..n]);
                return Ok(n);
            }
            r.raw.extend_from_slice(&buf[..n]);
            r.drain(false, &mut |b| out.extend_from_slice(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn red(s: &str) -> String {
        match redact_url_credentials(s.as_bytes()) {
            Some(v) => String::from_utf8(v).unwrap(),
            None => s.to_owned(),
        }
    }

    /// The view through the streaming redactor, fed in chunks of `size`.
    fn streamed(input: &[u8], size: usize) -> Vec<u8> {
        let mut r = Redactor::default();
        let mut out = Vec::new();
        for c in input.chunks(size) {
            r.feed(c, &mut |b| out.extend_from_slice(b));
        }
        r.finish(&mut |b| out.extend_from_slice(b));
        out
    }

    fn read_through(input: &[u8], buf_size: usize) -> Vec<u8> {
        let mut r = RedactingReader::new(input);
        let mut out = Vec::new();
        let mut buf = vec![0u8; buf_size];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn token_in_a_git_remote_url_is_redacted() {
        assert_eq!(
            red("[remote \"origin\"]\n\turl = https://user:ghp_abc123@github.com/o/r.git\n"),
            "[remote \"origin\"]\n\turl = https://***@github.com/o/r.git\n"
        );
        assert_eq!(
            red("https://ghp_abc@github.com/o/r"),
            "https://***@github.com/o/r"
        );
        assert_eq!(
            red("DATABASE_URL=postgres://app:s3cr%40t@db:5432/x and redis://:pw@cache"),
            "DATABASE_URL=postgres://***@db:5432/x and redis://***@cache"
        );
        assert_eq!(red("git+https://u:p@h/x"), "git+https://***@h/x");
    }

    #[test]
    fn urls_without_credentials_are_left_alone_without_allocating() {
        for s in [
            "see https://github.com/o/r and mailto:a@b.c",
            "ssh://git@github.com/o/r.git",
            "git@github.com:o/r.git",
            "https://$GITHUB_TOKEN@github.com/o/r",
            "https://x-access-token:${{ secrets.T }}@github.com",
            "https://x-access-token:$TOKEN@github.com",
            "https://@host",
            "://user:pw@host",
            "https://host/path?q=a@b",
            "",
        ] {
            assert!(redact_url_credentials(s.as_bytes()).is_none(), "{s}");
        }
    }

    #[test]
    fn a_secret_next_to_a_variable_or_a_harmless_user_is_still_redacted() {
        assert_eq!(red("https://git:pw@h"), "https://***@h");
        assert_eq!(red("https://$U:hunter2@h"), "https://***@h");
        assert_eq!(red("https://alice@h"), "https://***@h");
    }

    #[test]
    fn non_utf8_bytes_around_a_credential_survive() {
        let input = b"\xff\xfe https://u:p@h \x80";
        assert_eq!(
            redact_url_credentials(input).unwrap(),
            b"\xff\xfe https://***@h \x80"
        );
    }

    #[test]
    fn overlong_userinfo_is_not_a_credential_anywhere() {
        let long = format!("https://{}@h", "a".repeat(MAX_USERINFO + 1));
        assert!(redact_url_credentials(long.as_bytes()).is_none());
        let max = format!("https://{}@h", "a".repeat(MAX_USERINFO));
        assert_eq!(red(&max), "https://***@h");
    }

    #[test]
    fn streaming_agrees_with_the_whole_input_at_every_chunk_size() {
        let mut input = Vec::new();
        input.extend_from_slice(b"x https://user:tok@github.com y\n");
        input.extend_from_slice(b"https://example.com/a https://git@h ");
        input.extend_from_slice(format!("ftp://{}@h\n", "p".repeat(300)).as_bytes());
        input.extend_from_slice(b"end:");
        let whole = redact_url_credentials(&input).unwrap();
        for size in [1, 2, 3, 5, 7, 64, 1000, input.len()] {
            assert_eq!(streamed(&input, size), whole, "chunk {size}");
            assert_eq!(read_through(&input, size), whole, "reader buffer {size}");
        }
    }

    #[test]
    fn windows_redact_the_part_of_a_credential_they_hold() {
        let input = b"a https://user:token@h b";
        // 15..20 is "token".
        assert_eq!(redact_window(input, 15..20).unwrap(), b"***");
        assert_eq!(redact_window(input, 0..12).unwrap(), b"a https://***");
        assert!(redact_window(input, 20..input.len()).is_none());
        assert_eq!(
            redact_window(input, 0..input.len()).unwrap(),
            redact_url_credentials(input).unwrap()
        );
    }

    #[test]
    fn spans_point_at_the_userinfo() {
        let input = b"https://a:b@h x://c@d";
        assert_eq!(credential_spans(input), [8..11, 18..19]);
    }
}
