//! Text an approver reads, made safe to put on a terminal.
//!
//! A request is written by the agent, and a terminal obeys what it prints: an escape
//! sequence can clear the line, move the cursor or rewrite what was shown (an approver once
//! saw `cargo fmt --check` and approved `rm -rf src`), a bidi override reorders it, a
//! zero-width character hides a difference. [`escape`] turns every such character into a
//! visible, unambiguous spelling, so what is shown is what runs.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::ToolCall;

/// `s` with every character a terminal could act on or hide shown as an escape.
///
/// - a backslash becomes `\\`, so an escape typed literally stays distinguishable;
/// - `\n`, `\r` and `\t` become `\n`, `\r`, `\t`; every other C0 control and DEL becomes
///   `\xNN` (`\x1b` for ESC);
/// - C1 controls (U+0080–U+009F), bidi embeddings, overrides, isolates and marks,
///   zero-width and other invisible formatting characters, line and paragraph separators,
///   variation selectors, tag characters, fillers and non-ASCII spaces become `\u{NNNN}`.
///
/// Everything else (printable ASCII, letters and symbols of any script) is kept. Text
/// without anything to escape is borrowed.
pub fn escape(s: &str) -> Cow<'_, str> {
    let Some(first) = s.find(|c| c == '\\' || needs_escape(c)) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// Appends `c` to `out`, escaped as [`escape`] does.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 || c == '\x7f' => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// `w` escaped, then quoted the way a shell would need it when it holds anything but
/// letters, digits and `-_./=:,+@%`: how argv words and env additions are shown.
pub fn word(w: &str) -> String {
    let w = escape(w);
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        w.into_owned()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// How many hex digits of a bound file's sha256 are shown.
const SHOWN_HEX: usize = 16;

/// What an approver reads about a call, as `(label, value)` rows in a fixed order, every
/// value display-safe. A multi-line script gets one row per line (`script`, then unlabelled
/// rows), each line starting with `| ` so no line can pass for a row of its own; each bound
/// file gets a `binds` row (`build.sh sha256:ab12…`).
pub fn call_rows(c: &ToolCall) -> Vec<(&'static str, String)> {
    let mut rows: Vec<(&'static str, String)> = vec![("tool", c.tool.as_str().to_owned())];
    let mut row = |label: &'static str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            rows.push((label, v));
        }
    };
    if let Some(script) = &c.script {
        if script.contains('\n') {
            for (i, line) in script.split('\n').enumerate() {
                rows_line(&mut row, i, line);
            }
        } else {
            row("script", Some(escape(script).into_owned()));
        }
    }
    if let Some(argv) = &c.argv {
        row(
            "argv",
            Some(argv.iter().map(|w| word(w)).collect::<Vec<_>>().join(" ")),
        );
    }
    row("path", c.path.as_deref().map(|p| escape(p).into_owned()));
    row("host", c.host.as_deref().map(|h| escape(h).into_owned()));
    row("port", c.port.map(|p| p.to_string()));
    row(
        "protocol",
        c.protocol.as_deref().map(|p| escape(p).into_owned()),
    );
    row("cwd", c.cwd.as_deref().map(|p| escape(p).into_owned()));
    if c.content_size.is_some() || c.content_sha256.is_some() {
        row(
            "content",
            Some(format!(
                "{} bytes, sha256 {}",
                c.content_size.unwrap_or_default(),
                escape(c.content_sha256.as_deref().unwrap_or("?"))
            )),
        );
    }
    if c.edit_old_sha256.is_some() {
        row(
            "edit",
            Some(format!(
                "replace sha256 {} with sha256 {} ({} occurrence(s))",
                escape(c.edit_old_sha256.as_deref().unwrap_or_default()),
                escape(c.edit_new_sha256.as_deref().unwrap_or_default()),
                c.expected_occurrences.unwrap_or(1)
            )),
        );
    }
    if let Some(p) = &c.pattern {
        row("pattern", Some(escape(p).into_owned()));
    }
    if !c.globs.is_empty() {
        row(
            "globs",
            Some(
                c.globs
                    .iter()
                    .map(|g| word(g))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        );
    }
    if !c.env.is_empty() {
        let env: Vec<_> = c
            .env
            .iter()
            .map(|(k, v)| word(&format!("{k}={v}")))
            .collect();
        row("env", Some(env.join(" ")));
    }
    row(
        "stdin",
        c.stdin_sha256.as_deref().map(|s| escape(s).into_owned()),
    );
    row("timeout", c.timeout_ms.map(|t| format!("{t} ms")));
    row(
        "sandbox",
        c.sandbox_profile.as_deref().map(|s| escape(s).into_owned()),
    );
    for (path, digest) in &c.bound_files {
        row("binds", Some(bound(path, digest)));
    }
    rows
}

/// One line of a multi-line script as a row.
fn rows_line(row: &mut impl FnMut(&'static str, Option<String>), i: usize, line: &str) {
    let label = if i == 0 { "script" } else { "" };
    row(label, Some(format!("| {}", escape(line))));
}

/// A bound file as shown: its path and the start of its digest.
fn bound(path: &str, digest: &str) -> String {
    let path = word(path);
    // `prefix:<cap>:<hex>:size:<n>:ctime:<t>`: a file over the executor's hashing cap.
    let parts: Vec<&str> = digest.split(':').collect();
    match parts.as_slice() {
        ["prefix", cap, hex, "size", size, "ctime", ctime] => format!(
            "{path} first {} of {} bytes sha256:{}…, changed {}",
            escape(cap),
            escape(size),
            escape(&hex.chars().take(SHOWN_HEX).collect::<String>()),
            escape(ctime)
        ),
        _ => format!(
            "{path} sha256:{}…",
            escape(&digest.chars().take(SHOWN_HEX).collect::<String>())
        ),
    }
}

/// [`call_rows`] as text: one `label` (padded to 12) and value per line.
pub fn call_text(c: &ToolCall) -> String {
    let mut out = String::new();
    for (label, value) in call_rows(c) {
        let _ = writeln!(out, "{label:<12}{value}");
    }
    out
}

/// Whether a terminal could act on `c`, or show it as nothing or as something else.
///
/// A backslash is not one of them (it is only escaped to keep [`escape`] unambiguous).
pub fn needs_escape(c: char) -> bool {
    matches!(c as u32,
        // C0 controls, DEL, C1 controls.
        0x00..=0x1f | 0x7f..=0x9f
        // No-break space, soft hyphen, combining grapheme joiner.
        | 0xa0 | 0xad | 0x34f
        // Arabic number signs and letter mark, syriac abbreviation mark.
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2
        // Hangul fillers, which look like nothing.
        | 0x115f | 0x1160 | 0x3164 | 0xffa0
        // Ogham space, mongolian vowel separator.
        | 0x1680 | 0x180e
        // Spaces of other widths, zero-width space, joiners, LRM, RLM.
        | 0x2000..=0x200f
        // Line and paragraph separators, bidi embeddings and overrides, narrow no-break space.
        | 0x2028..=0x202f
        // Medium mathematical space, word joiner, invisible operators, bidi isolates,
        // deprecated format characters.
        | 0x205f..=0x206f
        // Ideographic space.
        | 0x3000
        // Variation selectors, byte order mark, interlinear annotations.
        | 0xfe00..=0xfe0f | 0xfeff | 0xfff9..=0xfffb
        // Format characters of other planes: egyptian, shorthand, musical symbols.
        | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a
        // Tag characters (invisible ASCII) and supplementary variation selectors.
        | 0xe0000..=0xe007f | 0xe0100..=0xe01ef
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `s` holds nothing a terminal would act on or hide.
    fn inert(s: &str) -> bool {
        !s.chars().any(needs_escape)
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for s in [
            "cargo fmt --check",
            "",
            "héllo wörld",
            "日本語",
            "a=b 'c' \"d\"",
        ] {
            assert!(matches!(escape(s), Cow::Borrowed(_)), "{s}");
            assert_eq!(escape(s), s);
        }
    }

    #[test]
    fn an_erase_line_and_carriage_return_cannot_hide_the_real_command() {
        // What tmux showed an approver as `cargo fmt --check`.
        let hostile = "rm -rf src\x1b[2K\rcargo fmt --check";
        let shown = escape(hostile);
        assert_eq!(shown, r"rm -rf src\x1b[2K\rcargo fmt --check");
        assert!(inert(&shown));
    }

    #[test]
    fn csi_osc_and_c1_sequences_are_shown_not_obeyed() {
        // Cursor up and clear to the end of the screen.
        assert_eq!(escape("a\x1b[1A\x1b[J"), r"a\x1b[1A\x1b[J");
        // An OSC 8 hyperlink whose text differs from its target, BEL- and ST-terminated.
        assert_eq!(
            escape("\x1b]8;;https://evil.example\x07safe\x1b]8;;\x1b\\"),
            r"\x1b]8;;https://evil.example\x07safe\x1b]8;;\x1b\\"
        );
        // The 8-bit CSI (U+009B) and OSC (U+009D).
        assert_eq!(escape("\u{9b}2K\u{9d}0;title"), r"\u{9b}2K\u{9d}0;title");
        // Backspaces over-typing, DEL, NUL, a tab.
        assert_eq!(escape("rm\x08\x08ls\x7f\0\t"), r"rm\x08\x08ls\x7f\x00\t");
    }

    #[test]
    fn bidi_overrides_and_isolates_cannot_reorder_the_command() {
        // Shows as `rm -rf ./crs` reversed in a bidi-aware terminal.
        assert_eq!(escape("rm -rf \u{202e}crs"), r"rm -rf \u{202e}crs");
        for c in ['\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}'] {
            assert!(needs_escape(c), "{c:?}");
        }
        for c in [
            '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}', '\u{200e}', '\u{200f}',
        ] {
            assert!(needs_escape(c), "{c:?}");
        }
    }

    #[test]
    fn invisible_characters_cannot_hide_a_difference() {
        assert_eq!(escape("r\u{200b}m"), r"r\u{200b}m");
        assert_eq!(escape("\u{feff}ls"), r"\u{feff}ls");
        assert_eq!(escape("a\u{a0}b"), r"a\u{a0}b");
        assert_eq!(escape("x\u{e0041}"), r"x\u{e0041}");
        assert_eq!(escape("one\u{2028}two"), r"one\u{2028}two");
    }

    #[test]
    fn a_literal_backslash_escape_is_distinguishable_from_a_real_one() {
        let typed = escape(r"echo \x1b");
        let real = escape("echo \x1b");
        assert_eq!(typed, r"echo \\x1b");
        assert_eq!(real, r"echo \x1b");
        assert_ne!(typed, real);
    }

    #[test]
    fn an_approver_reads_every_field_of_a_hostile_call_inert() {
        let mut c = ToolCall::script("cargo fmt --check\x1b[2K\r\nrm -rf src\u{202e}");
        c.cwd = Some("sub\x1b]0;x\x07".into());
        c.env.insert("A\x1b".into(), "\u{9b}2J".into());
        c.bound_files.insert(
            "b\u{200b}uild.sh".into(),
            format!("{}\x1b", "ab".repeat(32)),
        );
        let text = call_text(&c);
        assert!(inert(&text.replace('\n', "")), "{text}");
        assert_eq!(
            text,
            concat!(
                "tool        process.run\n",
                "script      | cargo fmt --check\\x1b[2K\\r\n",
                "            | rm -rf src\\u{202e}\n",
                "cwd         sub\\x1b]0;x\\x07\n",
                "env         'A\\x1b=\\u{9b}2J'\n",
                "binds       'b\\u{200b}uild.sh' sha256:abababababababab…\n",
            )
        );
        let mut argv = ToolCall::argv(["rm", "-rf", "it's \x1b[8m"]);
        argv.bound_files.insert(
            "big.sh".into(),
            format!("prefix:1048576:{}:size:9000000:ctime:1.5", "cd".repeat(32)),
        );
        assert_eq!(
            call_text(&argv),
            concat!(
                "tool        process.run\n",
                "argv        rm -rf 'it'\\''s \\x1b[8m'\n",
                "binds       big.sh first 1048576 of 9000000 bytes sha256:cdcdcdcdcdcdcdcd…, changed 1.5\n",
            )
        );
    }

    #[test]
    fn a_connection_shows_its_destination_inert() {
        let mut c = ToolCall::new(crate::ToolKind::NetConnect);
        c.host = Some("evil.example\x1b[2K\rregistry.npmjs.org".into());
        c.port = Some(443);
        c.protocol = Some("tcp".into());
        c.sandbox_profile = Some("network".into());
        let text = call_text(&c);
        assert!(inert(&text.replace('\n', "")), "{text}");
        assert_eq!(
            text,
            concat!(
                "tool        net.connect\n",
                "host        evil.example\\x1b[2K\\rregistry.npmjs.org\n",
                "port        443\n",
                "protocol    tcp\n",
                "sandbox     network\n",
            )
        );
    }

    #[test]
    fn newlines_are_visible() {
        assert_eq!(escape("ls\nrm -rf /"), r"ls\nrm -rf /");
    }
}
