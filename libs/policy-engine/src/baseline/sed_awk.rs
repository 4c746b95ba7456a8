//! sed scripts and awk programs: whether they only read, and the shell commands they run.

/// The double-quoted string literals of an awk program.
pub(super) fn awk_strings(program: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = program.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => s.extend(chars.next()),
                '"' => break,
                c => s.push(c),
            }
        }
        if !s.trim().is_empty() {
            out.push(s);
        }
    }
    out
}

/// Returns (any unsafe sed flag, whether scripts came from -e/-f/--expression).
pub(super) fn sed_flags(parsed: &crate::argv::Args<'_>) -> (bool, bool) {
    // A script from a file nobody reviewed.
    let mut bad = parsed.values_of(&["-f", "--file"]).next().is_some();
    let mut from_flags = bad;
    for script in parsed.values_of(&["-e", "--expression"]) {
        from_flags = true;
        bad |= !sed_script_is_safe(script);
    }
    // In place, however spelled: `-i`, `-ni.bak`, `--in-pl`, `--in-place=.bak`.
    bad |= parsed.has(&["-i", "--in-place", "--follow-symlinks"]);
    (bad, from_flags)
}

/// The shell commands a sed script's `e command` and `s/re/replacement/e` run, where the
/// script spells them. Only called for scripts already refused by [`sed_script_is_safe`]:
/// the scan is loose (an `e` inside a regex may be taken for the command), which can only
/// add commands to an analysis that asks anyway.
pub(super) fn sed_exec_commands(script: &str) -> Vec<String> {
    let c: Vec<char> = script.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let starts_command = i == 0
            || c[..i].iter().rev().find(|x| **x != ' ').is_none_or(|p| {
                p.is_ascii_digit() || matches!(p, ';' | '{' | '}' | '$' | '/' | ',' | '!' | '\n')
            });
        if starts_command && c[i] == 'e' {
            let end = c[i + 1..]
                .iter()
                .position(|x| *x == '\n')
                .map_or(c.len(), |p| i + 1 + p);
            let cmd: String = c[i + 1..end].iter().collect();
            if !cmd.trim().is_empty() {
                out.push(cmd.trim().to_owned());
            }
            i = end;
            continue;
        }
        if starts_command && c[i] == 's' && i + 1 < c.len() && c[i + 1] != '\n' {
            let d = c[i + 1];
            // Three delimited parts: pattern, replacement, flags up to the next separator.
            let mut parts = vec![String::new()];
            let mut j = i + 2;
            while j < c.len() && parts.len() < 3 {
                if c[j] == '\\' && j + 1 < c.len() {
                    // `\/` is the delimiter itself; other escapes are kept for the regex.
                    if c[j + 1] != d {
                        parts.last_mut().unwrap_or(&mut String::new()).push('\\');
                    }
                    if let Some(p) = parts.last_mut() {
                        p.push(c[j + 1]);
                    }
                    j += 2;
                    continue;
                }
                if c[j] == d {
                    parts.push(String::new());
                } else if let Some(p) = parts.last_mut() {
                    p.push(c[j]);
                }
                j += 1;
            }
            let flags: String = c[j.min(c.len())..]
                .iter()
                .take_while(|x| !matches!(x, ';' | '\n' | '}'))
                .collect();
            if parts.len() == 3 && flags.contains('e') && !parts[1].trim().is_empty() {
                out.push(parts[1].clone());
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// Whether a sed script uses only commands that neither write files nor run programs.
///
/// A small parser over sed's grammar: addresses, then a command letter; `s` and `y` have
/// delimited arguments whose flags are checked; `w`, `W`, `r`, `R` and `e` are refused, as is
/// anything this parser does not recognise.
pub(crate) fn sed_script_is_safe(script: &str) -> bool {
    let b: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i].is_whitespace() || b[*i] == ';') {
            *i += 1;
        }
    };
    // Skips a delimited section starting after the opening delimiter; returns false if unterminated.
    let delimited = |i: &mut usize, d: char| -> bool {
        while *i < b.len() {
            if b[*i] == '\\' {
                *i += 2;
                continue;
            }
            if b[*i] == d {
                *i += 1;
                return true;
            }
            *i += 1;
        }
        false
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return true;
        }
        // Addresses: numbers, $, /re/, \cREc, with , ~ + and ! modifiers.
        loop {
            match b.get(i) {
                Some(c) if c.is_ascii_digit() || matches!(c, '$' | ',' | '~' | '+' | '!' | ' ') => {
                    i += 1;
                }
                Some('/') => {
                    i += 1;
                    if !delimited(&mut i, '/') {
                        return false;
                    }
                    while matches!(b.get(i), Some('I' | 'M')) {
                        i += 1;
                    }
                }
                Some('\\') => {
                    let Some(&d) = b.get(i + 1) else { return false };
                    i += 2;
                    if !delimited(&mut i, d) {
                        return false;
                    }
                }
                _ => break,
            }
        }
        let Some(&cmd) = b.get(i) else { return true };
        i += 1;
        match cmd {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P'
            | 'x' | 'z' | 'F' => {}
            'q' | 'Q' | 'L' => {
                while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == ' ') {
                    i += 1;
                }
            }
            ':' | 'b' | 't' | 'T' => {
                while b.get(i).is_some_and(|c| *c != ';' && *c != '\n') {
                    i += 1;
                }
            }
            '#' => {
                while b.get(i).is_some_and(|c| *c != '\n') {
                    i += 1;
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line (with backslash continuations).
                while i < b.len() && b[i] != '\n' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            's' | 'y' => {
                let Some(&d) = b.get(i) else { return false };
                if d == '\n' || d == '\\' {
                    return false;
                }
                i += 1;
                if !delimited(&mut i, d) || !delimited(&mut i, d) {
                    return false;
                }
                if cmd == 's' {
                    while let Some(&c) = b.get(i) {
                        match c {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' => i += 1,
                            c if c.is_ascii_digit() => i += 1,
                            // `e` executes the pattern space, `w` writes a file.
                            'e' | 'w' | 'W' => return false,
                            _ => break,
                        }
                    }
                }
            }
            _ => return false,
        }
    }
}

/// Whether an awk program avoids `system()`, pipes, `getline` from commands and output
/// redirection.
///
/// In awk, `>` redirects only in a `print` or `printf` statement outside parentheses
/// (`print $1 > "f"`); anywhere else (`$3 >= 10`, `if (NR > 1)`, `print (a > b)`) it
/// compares. String literals are skipped.
pub(crate) fn awk_program_is_safe(program: &str) -> bool {
    !(program.contains("system")
        || program.contains('|')
        || awk_redirects(program)
        || program.contains("getline")
        || program.contains("@load")
        || program.contains("ENVIRON"))
}

/// Whether an awk program has a `>` that redirects a `print`/`printf` (see above).
fn awk_redirects(program: &str) -> bool {
    let c: Vec<char> = program.chars().collect();
    let mut i = 0;
    // Inside a print statement: the parenthesis depth at its start.
    let mut printing: Option<usize> = None;
    let mut depth = 0usize;
    while i < c.len() {
        match c[i] {
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ';' | '\n' | '{' | '}' => printing = None,
            '>' if printing.is_some_and(|d| d == depth) => return true,
            ch if ch.is_ascii_alphabetic() || ch == '_' => {
                let start = i;
                while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                let word: String = c[start..i].iter().collect();
                let boundary = start == 0
                    || !(c[start - 1].is_ascii_alphanumeric()
                        || c[start - 1] == '_'
                        || c[start - 1] == '$');
                if boundary && matches!(word.as_str(), "print" | "printf") {
                    printing = Some(depth);
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    false
}
