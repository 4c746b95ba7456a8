//! Values a script computes from its own text: what a dynamic word will be when the script
//! alone decides it.
//!
//! `$(echo rm) -rf /`, `R=rm; $R -rf /`, `{r,R}{m,M} -rf /` and
//! `echo cm0gLXJmIC8= | base64 -d | bash` all run `rm -rf /`, and nothing outside the script
//! changes that. The shell module still treats such words as dynamic (at least `ask`), but it
//! also classifies what they compute to, so a deny stays a deny whatever the spelling.
//!
//! Everything here is pure and bounded: only literals, variables assigned literals earlier in
//! the same script, brace expansion, and the output of `echo`, `printf`, `base64 -d`, `rev`,
//! `tr`, `xxd -r -p` and `cat` are computed. Anything else is "not computable" (`None`), and
//! a variable is taken to possibly hold every value the script ever assigns to it, because a
//! value that may run is enough to deny.

use std::collections::HashMap;

use brush_parser::ast;
use brush_parser::word::{
    Parameter, ParameterExpr, SpecialParameter, WordPiece, WordPieceWithSource,
};

/// Most alternative values of one word (or argvs of one command) followed.
pub(crate) const MAX_ALTERNATIVES: usize = 8;
/// Most words one brace expansion produces.
const MAX_BRACE_WORDS: usize = 64;
/// Deepest nesting of substitutions computed.
const MAX_DEPTH: usize = 4;
/// Longest computed value kept.
const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Values the script assigned to shell variables, in the order seen.
#[derive(Debug, Default, Clone)]
pub(crate) struct Vars(HashMap<String, Vec<String>>);

impl Vars {
    /// Records that `name` may hold `value`.
    pub(crate) fn assign(&mut self, name: &str, value: String) {
        let values = self.0.entry(name.to_owned()).or_default();
        if values.len() < MAX_ALTERNATIVES && !values.contains(&value) {
            values.push(value);
        }
    }

    fn get(&self, name: &str) -> Option<&[String]> {
        self.0.get(name).map(Vec::as_slice)
    }
}

/// The alternative field lists a word expands to (after brace expansion and, for unquoted
/// expansions, field splitting), or `None` when some part is not computable.
pub(crate) fn word(raw: &str, vars: &Vars) -> Option<Vec<Vec<String>>> {
    word_at(raw, vars, 0)
}

fn word_at(raw: &str, vars: &Vars, depth: usize) -> Option<Vec<Vec<String>>> {
    let options = brush_parser::ParserOptions::default();
    let pieces = brush_parser::word::parse(raw, &options).ok()?;
    let mut t = Templates {
        alts: vec![String::new()],
        split: false,
    };
    t.pieces(&pieces, false, vars, depth)?;
    let mut out = Vec::new();
    for template in &t.alts {
        let mut fields = Vec::new();
        for w in brace_expand(template)? {
            let w = unescape(&w);
            if t.split {
                fields.extend(w.split_whitespace().map(str::to_owned));
            } else {
                fields.push(w);
            }
        }
        out.push(fields);
    }
    Some(out)
}

/// Alternative texts of a word being built. Quoted and computed characters are written
/// backslash-escaped so that brace expansion, which bash performs before every other
/// expansion and only on unquoted text, leaves them alone.
struct Templates {
    alts: Vec<String>,
    /// An unquoted expansion whose value bash splits into fields.
    split: bool,
}

impl Templates {
    fn push_raw(&mut self, s: &str) {
        for a in &mut self.alts {
            a.push_str(s);
        }
    }

    fn push_quoted(&mut self, s: &str) {
        for a in &mut self.alts {
            push_escaped(a, s);
        }
    }

    /// Appends one of `values` to each alternative (their cross product).
    fn push_values(&mut self, values: &[String]) -> Option<()> {
        if values.len() == 1 {
            self.push_quoted(&values[0]);
            return Some(());
        }
        if self.alts.len() * values.len() > MAX_ALTERNATIVES {
            return None;
        }
        let mut next = Vec::with_capacity(self.alts.len() * values.len());
        for a in &self.alts {
            for v in values {
                let mut s = a.clone();
                push_escaped(&mut s, v);
                next.push(s);
            }
        }
        self.alts = next;
        Some(())
    }

    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        in_dq: bool,
        vars: &Vars,
        depth: usize,
    ) -> Option<()> {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) if !in_dq => {
                    // Globs are not computed: what they match depends on the file system.
                    if t.contains(['*', '?', '[']) {
                        return None;
                    }
                    self.push_raw(t);
                }
                WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => self.push_quoted(t),
                WordPiece::AnsiCQuotedText(t) => self.push_quoted(&crate::quoting::ansi_c(t)),
                WordPiece::EscapeSequence(s) => {
                    let c = s.strip_prefix('\\').unwrap_or(s);
                    if in_dq && !c.starts_with(['$', '`', '"', '\\', '\n']) {
                        self.push_quoted("\\");
                    }
                    if c != "\n" {
                        self.push_quoted(c);
                    }
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, true, vars, depth)?;
                }
                WordPiece::ParameterExpansion(expr) => {
                    let (values, list) = parameter(expr, vars, depth)?;
                    // `"${a[@]}"` and `"$@"` are one word per element even when quoted.
                    self.split |= !in_dq || list;
                    self.push_values(&values)?;
                }
                WordPiece::CommandSubstitution(body) => {
                    let out = output(body, vars, depth + 1)?;
                    self.split |= !in_dq;
                    self.push_quoted(out.trim_end_matches('\n'));
                }
                WordPiece::BackquotedCommandSubstitution(body) => {
                    let body = crate::quoting::unescape_backquoted(body);
                    let out = output(&body, vars, depth + 1)?;
                    self.split |= !in_dq;
                    self.push_quoted(out.trim_end_matches('\n'));
                }
                WordPiece::TildeExpansion(_) | WordPiece::ArithmeticExpression(_) => return None,
            }
        }
        Some(())
    }
}

/// Where `set --` values are kept among the variables (no variable can be named so).
pub(crate) const POSITIONAL: &str = "@";

/// The values a parameter expansion may take: `$R`, `${R}`, `${R:-default}`, an array's
/// elements `${a[@]}` and the positional parameters `$@` set by `set --`. The flag says
/// whether the value is a list of words (split even inside double quotes).
fn parameter(expr: &ParameterExpr, vars: &Vars, depth: usize) -> Option<(Vec<String>, bool)> {
    fn list_name(p: &Parameter) -> Option<&str> {
        match p {
            Parameter::NamedWithAllIndices { name, .. } => Some(name.as_str()),
            Parameter::Special(SpecialParameter::AllPositionalParameters { .. }) => {
                Some(POSITIONAL)
            }
            _ => None,
        }
    }
    if let ParameterExpr::Parameter {
        parameter,
        indirect: false,
    } = expr
        && let Some(name) = list_name(parameter)
    {
        let values = vars.get(name)?.to_vec();
        return Some((values, true));
    }
    // `$1`..: the n-th word of each `set --` / call argument list seen.
    if let ParameterExpr::Parameter {
        parameter: Parameter::Positional(n @ 1..),
        indirect: false,
    } = expr
    {
        let values: Vec<String> = vars
            .get(POSITIONAL)?
            .iter()
            .filter_map(|v| v.split_whitespace().nth(*n as usize - 1).map(str::to_owned))
            .collect();
        return (!values.is_empty()).then_some((values, false));
    }
    let (name, default) = match expr {
        ParameterExpr::Parameter {
            parameter: Parameter::Named(name),
            indirect: false,
        } => (name, None),
        ParameterExpr::UseDefaultValues {
            parameter: Parameter::Named(name),
            indirect: false,
            default_value,
            ..
        }
        | ParameterExpr::AssignDefaultValues {
            parameter: Parameter::Named(name),
            indirect: false,
            default_value,
            ..
        } => (name, Some(default_value.as_deref().unwrap_or(""))),
        _ => return None,
    };
    let mut values: Vec<String> = vars.get(name).map(<[String]>::to_vec).unwrap_or_default();
    if let Some(d) = default {
        // A default applies when the variable is unset or empty: one more possible value.
        for fields in word_at(d, vars, depth + 1)? {
            values.push(fields.join(" "));
        }
    }
    (!values.is_empty() && values.len() <= MAX_ALTERNATIVES).then_some((values, false))
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        out.push('\\');
        out.push(c);
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// Bash brace expansion of a template (backslash-escaped characters are literal):
/// `{a,b}` alternatives and `{1..3}` / `{a..c}` sequences, nested, left to right. `None` when
/// it would produce more than [`MAX_BRACE_WORDS`] words.
pub(crate) fn brace_expand(s: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = s.chars().collect();
    let Some((open, close, parts)) = first_brace(&chars) else {
        return Some(vec![s.to_owned()]);
    };
    let prefix: String = chars[..open].iter().collect();
    let suffix: String = chars[close + 1..].iter().collect();
    let mut out = Vec::new();
    for part in parts {
        for rest in brace_expand(&format!("{prefix}{part}{suffix}"))? {
            out.push(rest);
            if out.len() > MAX_BRACE_WORDS {
                return None;
            }
        }
    }
    Some(out)
}

/// The first brace group that expands: its `{`, its `}` and the texts it expands to.
fn first_brace(c: &[char]) -> Option<(usize, usize, Vec<String>)> {
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '{' => {
                if let Some((close, parts)) = group(c, i) {
                    return Some((i, close, parts));
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// Reads the group opening at `open`: comma alternatives (at least one top-level comma) or
/// a sequence. A group that is neither (`{x}`, `{}`) is literal text in bash.
fn group(c: &[char], open: usize) -> Option<(usize, Vec<String>)> {
    let mut depth = 0;
    let mut parts = Vec::new();
    let mut start = open + 1;
    let mut i = open + 1;
    while i < c.len() {
        match c[i] {
            '\\' => i += 1,
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            '}' => {
                parts.push(c[start..i].iter().collect::<String>());
                if parts.len() > 1 {
                    return Some((i, parts));
                }
                return sequence(&parts[0]).map(|seq| (i, seq));
            }
            ',' if depth == 0 => {
                parts.push(c[start..i].iter().collect());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `1..5`, `5..1`, `a..e`, with an optional `..step`.
fn sequence(s: &str) -> Option<Vec<String>> {
    let mut it = s.split("..");
    let (a, b) = (it.next()?, it.next()?);
    let step: i64 = it.next().map_or(Some(1), |x| x.parse().ok())?;
    if it.next().is_some() || step == 0 {
        return None;
    }
    // i128 so that no bound or step a script spells can overflow.
    let step = i128::from(step).abs();
    let range = |x: i128, y: i128| -> Vec<i128> {
        let dir = if y >= x { 1 } else { -1 };
        (0..=MAX_BRACE_WORDS as i128)
            .map(|k| x + dir * k * step)
            .take_while(|v| if dir > 0 { *v <= y } else { *v >= y })
            .collect()
    };
    if let (Ok(x), Ok(y)) = (a.parse::<i64>(), b.parse::<i64>()) {
        let (x, y) = (i128::from(x), i128::from(y));
        return Some(range(x, y).into_iter().map(|v| v.to_string()).collect());
    }
    let (mut ca, mut cb) = (a.chars(), b.chars());
    match (ca.next(), ca.next(), cb.next(), cb.next()) {
        (Some(x), None, Some(y), None) if x.is_ascii_alphabetic() && y.is_ascii_alphabetic() => {
            Some(
                range(i128::from(u32::from(x)), i128::from(u32::from(y)))
                    .into_iter()
                    .filter_map(|v| u8::try_from(v).ok())
                    .map(|v| char::from(v).to_string())
                    .collect(),
            )
        }
        _ => None,
    }
}

/// What a command substitution's body prints, when the script alone decides it.
pub(crate) fn output(script: &str, vars: &Vars, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH || script.len() > MAX_VALUE_BYTES {
        return None;
    }
    let options = brush_parser::ParserOptions::default();
    let input = format!("{script}\n");
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(input.as_bytes()), &options);
    let program = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parser.parse_program()))
        .ok()?
        .ok()?;
    let mut out = String::new();
    for list in &program.complete_commands {
        for item in &list.0 {
            if !item.0.additional.is_empty() {
                return None;
            }
            let mut text: Option<String> = None;
            for (i, cmd) in item.0.first.seq.iter().enumerate() {
                text = Some(command_output(cmd, text.as_deref(), i > 0, vars, depth)?);
            }
            out.push_str(&text?);
        }
    }
    Some(out)
}

/// What one simple command of a pipeline prints given its input (`piped`: its stdin is the
/// previous stage's output, `input`), when computable.
pub(crate) fn command_output(
    cmd: &ast::Command,
    input: Option<&str>,
    piped: bool,
    vars: &Vars,
    depth: usize,
) -> Option<String> {
    let ast::Command::Simple(sc) = cmd else {
        return None;
    };
    let mut argv: Vec<String> = Vec::new();
    let mut here: Option<String> = None;
    if sc.prefix.is_some() {
        // Assignments or redirections before the program: not a plain filter.
        return None;
    }
    let items = sc.suffix.iter().flat_map(|s| s.0.iter());
    let push_word = |argv: &mut Vec<String>, raw: &str| -> Option<()> {
        let alts = word_at(raw, vars, depth)?;
        let [fields] = alts.as_slice() else {
            return None;
        };
        argv.extend(fields.iter().cloned());
        Some(())
    };
    let program = &sc.word_or_name.as_ref()?.value;
    // Most pipeline stages are not filters: decide that before parsing any word.
    if program
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'/')
        && !is_filter(program)
    {
        return None;
    }
    // `cat file` prints a file's contents, which the script does not decide.
    if program == "cat"
        && items
            .clone()
            .any(|i| matches!(i, ast::CommandPrefixOrSuffixItem::Word(_)))
    {
        return None;
    }
    push_word(&mut argv, program)?;
    for item in items {
        match item {
            // After the program, `x=y` is an ordinary argument (`echo cm0=`).
            ast::CommandPrefixOrSuffixItem::Word(w)
            | ast::CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                push_word(&mut argv, &w.value)?;
            }
            ast::CommandPrefixOrSuffixItem::IoRedirect(ast::IoRedirect::HereString(_, w)) => {
                let alts = word_at(&w.value, vars, depth)?;
                let [fields] = alts.as_slice() else {
                    return None;
                };
                here = Some(format!("{}\n", fields.join(" ")));
            }
            ast::CommandPrefixOrSuffixItem::IoRedirect(ast::IoRedirect::HereDocument(_, doc))
                if !doc.requires_expansion =>
            {
                here = Some(doc.doc.value.clone());
            }
            // Output redirections send the output elsewhere; other items are unknowns.
            _ => return None,
        }
    }
    let input = here.as_deref().or(if piped { input } else { None });
    let out = filter(&argv, input)?;
    (out.len() <= MAX_VALUE_BYTES).then_some(out)
}

fn is_filter(program: &str) -> bool {
    let name = program.rsplit('/').next().unwrap_or(program);
    matches!(
        name,
        "echo" | "printf" | "cat" | "base64" | "rev" | "tr" | "xxd" | "which" | "command" | "type"
    )
}

/// The output of a text filter the script runs on known input.
pub(crate) fn filter(argv: &[String], input: Option<&str>) -> Option<String> {
    let (name, args) = argv.split_first()?;
    let name = name.rsplit('/').next().unwrap_or(name);
    match name {
        "echo" => Some(echo(args)),
        "printf" => printf(args),
        "cat" if args.is_empty() || args.iter().all(|a| a == "-") => input.map(str::to_owned),
        "base64"
            if args.iter().all(|a| {
                matches!(
                    a.as_str(),
                    "-d" | "--decode" | "-di" | "-id" | "-i" | "--ignore-garbage"
                )
            }) && args.iter().any(|a| a.contains('d')) =>
        {
            base64_decode(input?)
        }
        "rev" if args.is_empty() => Some(
            input?
                .split_inclusive('\n')
                .map(|l| {
                    let (line, nl) = l.strip_suffix('\n').map_or((l, ""), |x| (x, "\n"));
                    line.chars().rev().collect::<String>() + nl
                })
                .collect(),
        ),
        "tr" => match args {
            [d, set] if d == "-d" => tr(set, "", input?),
            [a, b] => tr(a, b, input?),
            _ => None,
        },
        // `$(which rm)` names the program `rm` (its path depends on PATH, the name does not).
        "which" => match args {
            [p] if !p.starts_with('-') => Some(format!("{p}\n")),
            _ => None,
        },
        "command" | "type" => match args {
            [flag, p] if matches!(flag.as_str(), "-v" | "-P" | "-p") => Some(format!("{p}\n")),
            _ => None,
        },
        "xxd"
            if matches!(args, [a, b] if a == "-r" && b == "-p")
                || matches!(args, [a] if a == "-rp" || a == "-pr") =>
        {
            hex_decode(input?)
        }
        _ => None,
    }
}

fn echo(args: &[String]) -> String {
    let mut newline = true;
    let mut escapes = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let Some(flags) = a.strip_prefix('-') else {
            break;
        };
        if flags.is_empty() || !flags.chars().all(|c| matches!(c, 'n' | 'e' | 'E')) {
            break;
        }
        for c in flags.chars() {
            match c {
                'n' => newline = false,
                'e' => escapes = true,
                _ => escapes = false,
            }
        }
        i += 1;
    }
    let mut out = args[i..].join(" ");
    if escapes {
        out = crate::quoting::ansi_c(&out);
    }
    if newline {
        out.push('\n');
    }
    out
}

/// bash's `printf` for `%s`, `%b`, `%c`, `%d`-like conversions (the argument as written) and
/// `%%`; the format is reused while arguments remain.
fn printf(args: &[String]) -> Option<String> {
    let (format, mut rest) = args.split_first()?;
    if format == "-v" || format.starts_with("--") {
        return None;
    }
    let format = crate::quoting::ansi_c(format);
    let mut out = String::new();
    loop {
        let mut used = 0;
        let mut chars = format.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            // Flags, width and precision are ignored: the text is what matters.
            while chars
                .peek()
                .is_some_and(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | ' ' | '#' | '.'))
            {
                chars.next();
            }
            match chars.next()? {
                '%' => out.push('%'),
                conv => {
                    let arg = rest.get(used).map_or("", String::as_str);
                    used += 1;
                    match conv {
                        'b' => out.push_str(&crate::quoting::ansi_c(arg)),
                        'c' => out.extend(arg.chars().next()),
                        's' | 'd' | 'i' | 'u' | 'x' | 'X' | 'o' | 'q' => out.push_str(arg),
                        _ => return None,
                    }
                }
            }
        }
        if used == 0 || used >= rest.len() {
            break;
        }
        rest = &rest[used..];
    }
    Some(out)
}

fn base64_decode(input: &str) -> Option<String> {
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in input.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' | b' ' | b'\t' => continue,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hex_decode(input: &str) -> Option<String> {
    let digits: Vec<u8> = input
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .map(|b| (b as char).to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    let bytes = digits
        .chunks(2)
        .map(|p| p[0] << 4 | p.get(1).copied().unwrap_or(0));
    String::from_utf8(bytes.collect()).ok()
}

/// `tr SET1 SET2` with literal characters and `a-z` ranges (the ROT13 spelling).
fn tr(a: &str, b: &str, input: &str) -> Option<String> {
    let set = |s: &str| -> Option<Vec<char>> {
        if s.starts_with('-') || s.contains(['[', '\\']) {
            return None;
        }
        let c: Vec<char> = s.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < c.len() {
            if i + 2 < c.len() && c[i + 1] == '-' {
                out.extend(c[i]..=c[i + 2]);
                i += 3;
            } else {
                out.push(c[i]);
                i += 1;
            }
        }
        Some(out)
    };
    let (from, to) = (set(a)?, set(b)?);
    let Some(&last) = to.last() else {
        // `tr -d SET`.
        return Some(input.chars().filter(|c| !from.contains(c)).collect());
    };
    Some(
        input
            .chars()
            .map(|c| {
                from.iter()
                    .rposition(|f| *f == c)
                    .map_or(c, |i| to.get(i).copied().unwrap_or(last))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(raw: &str, vars: &Vars) -> Option<Vec<String>> {
        let mut alts = word(raw, vars)?;
        assert_eq!(alts.len(), 1, "{raw}");
        alts.pop()
    }

    #[test]
    fn substitutions_of_literals() {
        let v = Vars::default();
        assert_eq!(one("$(echo rm)", &v).unwrap(), ["rm"]);
        assert_eq!(one("`echo rm`", &v).unwrap(), ["rm"]);
        assert_eq!(one("\"$(echo rm -rf)\"", &v).unwrap(), ["rm -rf"]);
        assert_eq!(one("$(echo rm -rf)", &v).unwrap(), ["rm", "-rf"]);
        assert_eq!(one("$(printf %s r m)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(printf 'r\\x6d')", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo -e 'r\\x6d')", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo cm0= | base64 -d)", &v).unwrap(), ["rm"]);
        assert_eq!(
            one("\"$(echo cm0gLXJmIC8= | base64 -d)\"", &v).unwrap(),
            ["rm -rf /"]
        );
        assert_eq!(one("$(base64 -d <<< cm0=)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo mr | rev)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo ez | tr a-z n-za-m)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo 726d | xxd -r -p)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo $(echo rm))", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(which rm)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(command -v rm)", &v).unwrap(), ["rm"]);
        assert_eq!(one("$(echo rxm | tr -d x)", &v).unwrap(), ["rm"]);
        assert!(word("$(curl x)", &v).is_none());
        assert!(word("$(cat f)", &v).is_none());
        assert!(word("$HOME", &v).is_none());
        assert!(word("*", &v).is_none());
    }

    #[test]
    fn variables_take_every_value_assigned() {
        let mut v = Vars::default();
        v.assign("R", "rm".into());
        assert_eq!(one("$R", &v).unwrap(), ["rm"]);
        assert_eq!(one("${R}", &v).unwrap(), ["rm"]);
        assert_eq!(one("\"$R\"x", &v).unwrap(), ["rmx"]);
        v.assign("R", "ls".into());
        assert_eq!(word("$R", &v).unwrap(), [["rm"], ["ls"]]);
        assert_eq!(one("${X:-rm}", &Vars::default()).unwrap(), ["rm"]);
        assert!(word("${!R}", &v).is_none());
        v.assign("a", "rm -rf /".into());
        assert_eq!(one("\"${a[@]}\"", &v).unwrap(), ["rm", "-rf", "/"]);
        v.assign(POSITIONAL, "rm -rf /".into());
        assert_eq!(one("\"$@\"", &v).unwrap(), ["rm", "-rf", "/"]);
    }

    #[test]
    fn braces_expand_left_to_right() {
        let v = Vars::default();
        assert_eq!(one("{r,R}{m,M}", &v).unwrap(), ["rm", "rM", "Rm", "RM"]);
        assert_eq!(one("r{m,}", &v).unwrap(), ["rm", "r"]);
        assert_eq!(one("/{,}", &v).unwrap(), ["/", "/"]);
        assert_eq!(one("{a..c}", &v).unwrap(), ["a", "b", "c"]);
        assert_eq!(one("{1..3}", &v).unwrap(), ["1", "2", "3"]);
        assert_eq!(one("'{r,R}'", &v).unwrap(), ["{r,R}"]);
        assert_eq!(one("{x}", &v).unwrap(), ["{x}"]);
        assert_eq!(one("{a,{b,c}}d", &v).unwrap(), ["ad", "bd", "cd"]);
        assert!(word("{1..100000}", &v).is_none());
        assert!(word("{-9223372036854775808..9223372036854775807}", &v).is_none());
        assert_eq!(one("{1..9..9223372036854775807}", &v).unwrap(), ["1"]);
        assert_eq!(one("{5..1..2}", &v).unwrap(), ["5", "3", "1"]);
    }
}
