//! Words: bash quote removal and expansion of what the script alone decides, and the paths
//! they name.

use super::{Analyzer, Ctx, Expanded, ShellPath};
use crate::paths;
use crate::paths::Access;
use crate::quoting::{ansi_c, unescape_backquoted};
use brush_parser::word::{ParameterExpr, ParameterTransformOp, WordPiece, WordPieceWithSource};

impl Analyzer {
    pub(super) fn path_of(&self, e: &Expanded, access: Access, ctx: &Ctx) -> ShellPath {
        path_for(&e.text, e.is_static(), access, ctx.cwd.as_deref())
    }

    pub(super) fn word(&mut self, raw: &str, ctx: &mut Ctx, depth: usize) -> Expanded {
        if is_plain_word(raw) {
            // Most words (`-la`, `src/main.rs`, `test`) are their own text: no quoting, no
            // expansion, no glob. Parsing them is a fifth of what classifying costs.
            return Expanded::literal(raw.to_owned());
        }
        let options = brush_parser::ParserOptions::default();
        let mut e = Expanded::default();
        match brush_parser::word::parse(raw, &options) {
            Ok(pieces) => {
                if let Some(WordPieceWithSource {
                    piece: WordPiece::TildeExpansion(_),
                    ..
                }) = pieces.first()
                {
                    e.tilde = true;
                }
                self.pieces(&pieces, false, ctx, depth, &mut e);
            }
            Err(_) => {
                e.text = raw.to_owned();
                e.risky = Some("a word could not be parsed");
            }
        }
        if !e.is_static() {
            e.raw = Some(raw.to_owned());
        }
        e
    }

    pub(super) fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        in_dq: bool,
        ctx: &mut Ctx,
        depth: usize,
        e: &mut Expanded,
    ) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !in_dq {
                        if t.contains(['*', '?', '[']) {
                            e.glob = true;
                        }
                        if t.contains('{') && (t.contains(',') || t.contains("..")) {
                            e.dynamic = true;
                            e.risky.get_or_insert("brace expansion");
                        }
                        if t.starts_with('~') && e.text.is_empty() {
                            e.tilde = true;
                        }
                    }
                    e.text.push_str(t);
                }
                WordPiece::SingleQuotedText(t) => e.text.push_str(t),
                WordPiece::AnsiCQuotedText(t) => e.text.push_str(&ansi_c(t)),
                WordPiece::EscapeSequence(s) => {
                    let c = s.strip_prefix('\\').unwrap_or(s);
                    if in_dq && !(c.starts_with(['$', '`', '"', '\\', '\n'])) {
                        e.text.push('\\');
                    }
                    if c != "\n" {
                        e.text.push_str(c);
                    }
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, true, ctx, depth, e);
                }
                WordPiece::TildeExpansion(t) => {
                    e.tilde = true;
                    e.text.push_str(&format!("~{}", tilde_suffix(t)));
                }
                WordPiece::ParameterExpansion(expr) => {
                    e.dynamic = true;
                    self.parameter(expr, ctx, depth, e);
                    e.text.push_str(&parameter_text(p));
                }
                WordPiece::CommandSubstitution(body) => {
                    e.dynamic = true;
                    e.fetch |= self.substitution_script(body, ctx, depth);
                    e.text.push_str(&format!("$({body})"));
                }
                WordPiece::BackquotedCommandSubstitution(body) => {
                    e.dynamic = true;
                    let body = unescape_backquoted(body);
                    e.fetch |= self.substitution_script(&body, ctx, depth);
                    e.text.push_str(&format!("$({body})"));
                }
                WordPiece::ArithmeticExpression(a) => {
                    e.dynamic = true;
                    self.arithmetic(&a.value, ctx, depth);
                    e.text.push_str(&format!("$(({}))", a.value));
                }
            }
        }
    }

    pub(super) fn parameter(
        &mut self,
        expr: &ParameterExpr,
        ctx: &mut Ctx,
        depth: usize,
        e: &mut Expanded,
    ) {
        let nested: Option<&String> = match expr {
            ParameterExpr::Parameter { indirect, .. } => {
                if *indirect {
                    e.risky = Some("indirect expansion ${!name}");
                }
                None
            }
            ParameterExpr::UseDefaultValues {
                default_value: v,
                indirect,
                ..
            }
            | ParameterExpr::AssignDefaultValues {
                default_value: v,
                indirect,
                ..
            } => {
                if *indirect {
                    e.risky = Some("indirect expansion ${!name}");
                }
                v.as_ref()
            }
            ParameterExpr::UseAlternativeValue {
                alternative_value: v,
                ..
            } => v.as_ref(),
            ParameterExpr::IndicateErrorIfNullOrUnset {
                error_message: v, ..
            } => v.as_ref(),
            ParameterExpr::Transform { op, .. } => {
                if matches!(
                    op,
                    ParameterTransformOp::PromptExpand
                        | ParameterTransformOp::ExpandEscapeSequences
                ) {
                    e.risky = Some("prompt or escape expansion ${name@P} can run commands");
                }
                None
            }
            other => {
                let dbg = format!("{other:?}");
                if dbg.contains("$(") || dbg.contains('`') {
                    e.risky = Some("command substitution inside a parameter expansion");
                }
                None
            }
        };
        if let Some(v) = nested {
            let inner = self.word(v, ctx, depth);
            e.fetch |= inner.fetch;
            if inner.risky.is_some() {
                e.risky = inner.risky;
            }
        }
    }
}

pub(super) fn path_for(text: &str, known: bool, access: Access, cwd: Option<&str>) -> ShellPath {
    match (known, paths::resolve(cwd, text)) {
        (true, Some(path)) => ShellPath {
            path,
            access,
            known: true,
        },
        _ => ShellPath {
            path: format!("?{text}"),
            access,
            known: false,
        },
    }
}

/// How a parameter expansion is shown in an explanation's argv (its value is unknown).
pub(super) fn parameter_text(p: &WordPieceWithSource) -> String {
    match &p.piece {
        // `Parameter`'s Display already spells `${name}`.
        WordPiece::ParameterExpansion(ParameterExpr::Parameter {
            parameter,
            indirect: false,
        }) => parameter.to_string(),
        _ => "${...}".to_owned(),
    }
}

pub(super) fn tilde_suffix(t: &brush_parser::word::TildeExpr) -> String {
    use brush_parser::word::TildeExpr;
    match t {
        TildeExpr::Home => String::new(),
        TildeExpr::UserHome(u) => u.clone(),
        TildeExpr::WorkingDir => "+".to_owned(),
        TildeExpr::OldWorkingDir => "-".to_owned(),
        TildeExpr::NthDirFromTopOfDirStack { n, plus_used } => {
            format!("{}{n}", if *plus_used { "+" } else { "" })
        }
        TildeExpr::NthDirFromBottomOfDirStack { n } => format!("-{n}"),
    }
}

/// Whether bash reads `raw` as literal text with nothing to remove or expand: only letters,
/// digits and punctuation that means nothing inside a word (no quotes, `$`, backquote,
/// backslash, glob or brace characters, tilde, parentheses or `#`).
pub(super) fn is_plain_word(raw: &str) -> bool {
    !raw.is_empty()
        && raw.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b',' | b':' | b'=' | b'+' | b'@' | b'%'
                )
        })
}
