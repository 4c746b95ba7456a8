//! Bash's quoting decoders, shared by the shell walker (which reads words) and the expansion
//! evaluator in `compute` (which computes their values): neither owns them.

/// Undoes the backslash escapes bash removes inside a backquoted command substitution
/// (`\$`, `` \` ``, `\\`); every other backslash stays.
pub(crate) fn unescape_backquoted(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek().is_some_and(|n| matches!(n, '$' | '`' | '\\')) {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// Decodes the body of a `$'...'` word the way bash does.
pub(crate) fn ansi_c(s: &str) -> String {
    let mut out = String::new();
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    let num = |b: &[char], i: &mut usize, radix: u32, max: usize| -> Option<u32> {
        let start = *i;
        while *i < b.len() && *i - start < max && b[*i].is_digit(radix) {
            *i += 1;
        }
        (start != *i).then(|| {
            u32::from_str_radix(&b[start..*i].iter().collect::<String>(), radix).unwrap_or(0)
        })
    };
    while i < b.len() {
        if b[i] != '\\' || i + 1 >= b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        let c = b[i];
        i += 1;
        match c {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(c),
            '0'..='7' => {
                i -= 1;
                let v = num(&b, &mut i, 8, 3).unwrap_or(0);
                out.push(char::from_u32(v & 0xff).unwrap_or('\u{fffd}'));
            }
            'x' => match num(&b, &mut i, 16, 2) {
                Some(v) => out.push(char::from_u32(v).unwrap_or('\u{fffd}')),
                None => out.push_str("\\x"),
            },
            'u' | 'U' => match num(&b, &mut i, 16, if c == 'u' { 4 } else { 8 }) {
                Some(v) => out.push(char::from_u32(v).unwrap_or('\u{fffd}')),
                None => {
                    out.push('\\');
                    out.push(c);
                }
            },
            'c' => {
                if let Some(&n) = b.get(i) {
                    out.push(char::from_u32((n as u32) & 0x1f).unwrap_or('\u{fffd}'));
                    i += 1;
                }
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}
