//! Shell analysis: every command bash would execute, from a real bash parse.
//!
//! Scripts are parsed with `brush-parser` (the parser of the brush shell). The walker visits
//! every construct (lists, pipelines, subshells, groups, loops, conditionals, functions,
//! command and process substitutions, heredocs fed to shells) and produces, for each simple
//! command, its argv after bash quote removal, the wrapper chain it unwraps to, the built-in
//! findings and the paths it reads or writes. Anything that depends on runtime expansion is
//! marked as not fully analysed, which the engine turns into at least `ask`.

use std::collections::HashSet;

use brush_parser::ast;
use brush_parser::word::{ParameterExpr, ParameterTransformOp, WordPiece, WordPieceWithSource};

use crate::baseline::{self, BaselineRule};
use crate::compute;
use crate::paths::{self, Access};

/// Most simple commands one analysis extracts before giving up (then at least `ask`).
const MAX_COMMANDS: usize = 2_000;
/// Longest function body re-analysed with the arguments of a call.
const MAX_BODY_BYTES: usize = 16 * 1024;
/// Deepest nesting of `bash -c`, `eval`, substitutions and heredocs analysed.
const MAX_DEPTH: usize = 16;
/// Longest script analysed.
const MAX_SCRIPT_BYTES: usize = 512 * 1024;
/// Deepest syntactic nesting handed to the parser. brush-parser recurses on nesting, and a
/// stack overflow aborts the whole process (tokio workers have 2 MiB stacks), so deeper
/// scripts are not parsed at all: at least ask.
const MAX_NESTING: usize = 64;

/// A path a command reads or writes, resolved against the tracked working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPath {
    /// Normalised path: workspace-relative, absolute, or `~/...`; `?word` when unknown.
    pub path: String,
    /// Read or write.
    pub access: Access,
    /// False when the path depends on runtime expansion or an unknown working directory.
    pub known: bool,
}

/// One simple command bash would execute.
#[derive(Debug, Clone)]
pub struct ShellCommand {
    /// The argv as bash would execute it (after quote removal; expansions left as written).
    pub argv: Vec<String>,
    /// The program and arguments of each wrapper layer (`env`, `timeout`, ... then the inner
    /// program), program names reduced to their basename.
    pub layers: Vec<(String, Vec<String>)>,
    /// False when some part depends on runtime expansion.
    pub fully_analyzed: bool,
    /// Human-readable observations for approvers.
    pub notes: Vec<String>,
    /// Built-in rules this command triggered.
    pub rules: Vec<&'static BaselineRule>,
    /// Whether every layer is on the read-only allowlist.
    pub safe: bool,
    /// Paths the command reads or writes (operands and redirections).
    pub paths: Vec<ShellPath>,
    /// Whether the command fetches remote content (for fetch-and-execute detection).
    fetch: bool,
    /// Not written in the script as a command bash runs itself: what a dynamic command
    /// computes to (`$(echo rm) -rf /` → `rm -rf /`), or a command another program runs with
    /// a string the script gives it (`find -exec`, awk's `system()`, `... | bash`, `xargs`).
    pub derived: bool,
}

/// Everything an analysis found.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Every simple command, in source order.
    pub commands: Vec<ShellCommand>,
    /// Findings that belong to the script rather than one command (parse errors, budget,
    /// fork bombs, assignments without a command).
    pub findings: Vec<(&'static BaselineRule, String)>,
    /// Paths touched by redirections that belong to no command (`> file`).
    pub paths: Vec<ShellPath>,
}

impl Analysis {
    /// Whether nothing stopped the analysis from seeing everything.
    pub fn complete(&self) -> bool {
        self.findings.iter().all(|(r, _)| {
            !std::ptr::eq(*r, &baseline::UNPARSED) && !std::ptr::eq(*r, &baseline::BUDGET)
        }) && self.commands.iter().all(|c| c.fully_analyzed)
    }
}

/// Analyses a bash script run in `cwd` (workspace-relative, `.` for the root).
pub fn analyze_script(script: &str, cwd: &str) -> Analysis {
    let mut a = Analyzer::default();
    let mut ctx = Ctx {
        cwd: Some(paths::normalise(cwd)),
        stdin_fetch: false,
        stdin_text: None,
        derived: false,
    };
    a.script(script, &mut ctx, 0);
    a.finish()
}

/// Analyses an argv executed directly (no shell): words are taken literally.
pub fn analyze_argv(argv: &[String], cwd: &str) -> Analysis {
    let mut a = Analyzer::default();
    let mut ctx = Ctx {
        cwd: Some(paths::normalise(cwd)),
        stdin_fetch: false,
        stdin_text: None,
        derived: false,
    };
    if argv.is_empty() {
        a.findings
            .push((&baseline::UNPARSED, "empty argv".to_owned()));
    } else {
        let words: Vec<Expanded> = argv.iter().map(|s| Expanded::literal(s.clone())).collect();
        a.simple_command(&words, &[], Vec::new(), &[], &mut ctx, 0);
    }
    a.finish()
}

#[derive(Debug, Clone)]
struct Ctx {
    /// Working directory; `None` once it depends on runtime values.
    cwd: Option<String>,
    /// Whether stdin carries the output of a network fetcher (`curl x | ...`).
    stdin_fetch: bool,
    /// What stdin carries when the script alone decides it (`echo ... | base64 -d | bash`).
    stdin_text: Option<String>,
    /// Commands analysed here are derived (see [`ShellCommand::derived`]).
    derived: bool,
}

impl Ctx {
    /// A copy for analysing commands derived from what the script computes or hands over.
    fn derived(&self) -> Ctx {
        Ctx {
            stdin_fetch: false,
            stdin_text: None,
            derived: true,
            ..self.clone()
        }
    }
}

/// A word after quote removal, with what its expansion depends on.
#[derive(Debug, Clone, Default)]
struct Expanded {
    text: String,
    /// Contains parameter, command, arithmetic or brace expansion.
    dynamic: bool,
    /// Contains an unquoted glob character.
    glob: bool,
    /// Starts with an unquoted tilde.
    tilde: bool,
    /// An expansion that runs code or reads names indirectly (`${x@P}`, `${!x}`).
    risky: Option<&'static str>,
    /// Contains a substitution whose commands fetch remote content.
    fetch: bool,
    /// The word as written, kept for dynamic words only: what it computes to is worked out
    /// from it when needed (see [`crate::compute`]).
    raw: Option<String>,
}

impl Expanded {
    fn literal(text: String) -> Self {
        Expanded {
            text,
            ..Default::default()
        }
    }

    fn is_static(&self) -> bool {
        !(self.dynamic || self.glob || self.risky.is_some())
    }
}

#[derive(Default)]
struct Analyzer {
    commands: Vec<ShellCommand>,
    findings: Vec<(&'static BaselineRule, String)>,
    paths: Vec<ShellPath>,
    functions: HashSet<String>,
    exhausted: bool,
    /// Literal values the script assigns to variables, for computing dynamic words.
    vars: compute::Vars,
    /// Files the script writes with content it decides (`echo 'rm -rf /' > x.sh`), by
    /// resolved path, so that running or sourcing them later is analysed.
    files: std::collections::HashMap<String, String>,
    /// The text of each function body, to analyse a call with the arguments it is given.
    bodies: std::collections::HashMap<String, String>,
}

impl Analyzer {
    fn finish(self) -> Analysis {
        Analysis {
            commands: self.commands,
            findings: self.findings,
            paths: self.paths,
        }
    }

    fn over_budget(&mut self, depth: usize) -> bool {
        if self.exhausted {
            return true;
        }
        if depth > MAX_DEPTH || self.commands.len() >= MAX_COMMANDS {
            self.exhausted = true;
            self.findings.push((
                &baseline::BUDGET,
                format!(
                    "stopped after {} commands at nesting depth {depth}",
                    self.commands.len()
                ),
            ));
            return true;
        }
        false
    }

    fn script(&mut self, script: &str, ctx: &mut Ctx, depth: usize) {
        if self.over_budget(depth) {
            return;
        }
        if script.len() > MAX_SCRIPT_BYTES {
            self.exhausted = true;
            self.findings.push((
                &baseline::BUDGET,
                format!("script is {} bytes", script.len()),
            ));
            return;
        }
        let nesting = nesting_estimate(script);
        if nesting > MAX_NESTING {
            self.findings.push((
                &baseline::BUDGET,
                format!("nesting depth {nesting} exceeds {MAX_NESTING}"),
            ));
            return;
        }
        let input = match parser_input(script) {
            Ok(input) => input,
            Err(why) => {
                self.findings.push((&baseline::UNPARSED, why.to_owned()));
                return;
            }
        };
        let options = brush_parser::ParserOptions::default();
        let mut parser =
            brush_parser::Parser::new(std::io::Cursor::new(input.as_bytes()), &options);
        // brush-parser is written to return errors, but a panic on hostile input must not
        // take the policy service down: treat it like a parse error (at least ask).
        let parsed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parser.parse_program()));
        let Ok(parsed) = parsed else {
            self.findings.push((
                &baseline::UNPARSED,
                "the bash parser failed on this input".to_owned(),
            ));
            return;
        };
        match parsed {
            Ok(program) => {
                for list in &program.complete_commands {
                    self.compound_list(list, ctx, depth);
                }
            }
            Err(e) => self
                .findings
                .push((&baseline::UNPARSED, format!("bash parse error: {e}"))),
        }
    }

    fn compound_list(&mut self, list: &ast::CompoundList, ctx: &mut Ctx, depth: usize) {
        for item in &list.0 {
            if matches!(item.1, ast::SeparatorOperator::Async) {
                // A background job runs in a subshell: its `cd` does not move us.
                let mut local = ctx.clone();
                self.and_or(&item.0, &mut local, depth);
            } else {
                self.and_or(&item.0, ctx, depth);
            }
        }
    }

    fn and_or(&mut self, list: &ast::AndOrList, ctx: &mut Ctx, depth: usize) {
        self.pipeline(&list.first, ctx, depth);
        for next in &list.additional {
            let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
            self.pipeline(p, ctx, depth);
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline, ctx: &mut Ctx, depth: usize) {
        if p.seq.len() == 1 {
            self.command(&p.seq[0], ctx, depth);
            return;
        }
        let mut fetch_seen = ctx.stdin_fetch;
        let mut text = ctx.stdin_text.clone();
        for (i, cmd) in p.seq.iter().enumerate() {
            // Each element of a multi-command pipeline runs in its own subshell.
            let mut local = ctx.clone();
            local.stdin_fetch = if i == 0 { ctx.stdin_fetch } else { fetch_seen };
            local.stdin_text = text.take();
            let start = self.commands.len();
            self.command(cmd, &mut local, depth);
            fetch_seen |= self.commands[start..].iter().any(|c| c.fetch);
            // What this stage prints, if the script alone decides it, is the next one's stdin.
            text = compute::command_output(
                cmd,
                local.stdin_text.as_deref(),
                i > 0 || ctx.stdin_text.is_some(),
                &self.vars,
                0,
            );
        }
    }

    fn command(&mut self, c: &ast::Command, ctx: &mut Ctx, depth: usize) {
        if self.over_budget(depth) {
            return;
        }
        match c {
            ast::Command::Simple(sc) => self.simple(sc, ctx, depth),
            ast::Command::Compound(cc, redirects) => {
                let mut heredocs = Vec::new();
                let mut out = Vec::new();
                if let Some(list) = redirects {
                    for r in &list.0 {
                        self.redirect(r, ctx, depth, &mut out, &mut heredocs);
                    }
                }
                self.paths.extend(out);
                let start = self.commands.len();
                self.compound(cc, ctx, depth);
                // A heredoc on a compound feeds the stdin of the commands inside: if a shell
                // there reads its program from stdin, the heredoc is that program.
                let shell_reads_stdin = self.commands[start..].iter().any(|c| {
                    c.rules
                        .iter()
                        .any(|r| std::ptr::eq(*r, &baseline::SHELL_STDIN))
                        && c.layers.last().is_some_and(|l| baseline::is_shell(&l.0))
                });
                if shell_reads_stdin {
                    for doc in heredocs {
                        self.script(&doc, &mut ctx.clone(), depth + 1);
                    }
                }
            }
            ast::Command::Function(f) => self.function(f, ctx, depth),
            ast::Command::ExtendedTest(t, redirects) => {
                self.test_expr(&t.expr, ctx, depth);
                if let Some(list) = redirects {
                    let mut out = Vec::new();
                    let mut docs = Vec::new();
                    for r in &list.0 {
                        self.redirect(r, ctx, depth, &mut out, &mut docs);
                    }
                    self.paths.extend(out);
                }
            }
        }
    }

    fn test_expr(&mut self, e: &ast::ExtendedTestExpr, ctx: &mut Ctx, depth: usize) {
        match e {
            ast::ExtendedTestExpr::And(a, b) | ast::ExtendedTestExpr::Or(a, b) => {
                self.test_expr(a, ctx, depth);
                self.test_expr(b, ctx, depth);
            }
            ast::ExtendedTestExpr::Not(a) | ast::ExtendedTestExpr::Parenthesized(a) => {
                self.test_expr(a, ctx, depth);
            }
            ast::ExtendedTestExpr::UnaryTest(_, w) => {
                self.word(&w.value, ctx, depth);
            }
            ast::ExtendedTestExpr::BinaryTest(_, a, b) => {
                self.word(&a.value, ctx, depth);
                self.word(&b.value, ctx, depth);
            }
        }
    }

    fn compound(&mut self, cc: &ast::CompoundCommand, ctx: &mut Ctx, depth: usize) {
        match cc {
            ast::CompoundCommand::BraceGroup(g) => self.compound_list(&g.list, ctx, depth),
            ast::CompoundCommand::Subshell(s) => {
                let mut local = ctx.clone();
                self.compound_list(&s.list, &mut local, depth);
            }
            ast::CompoundCommand::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    let e = self.word(&w.value, ctx, depth);
                    // The loop variable takes each field in turn.
                    let fields = match &e.raw {
                        None => Some(vec![vec![e.text.clone()]]),
                        Some(raw) => compute::word(raw, &self.vars),
                    };
                    for field in fields.into_iter().flatten().flatten() {
                        self.vars.assign(&f.variable_name, field);
                    }
                }
                self.compound_list(&f.body.list, ctx, depth);
            }
            ast::CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value, ctx, depth);
                }
                self.compound_list(&f.body.list, ctx, depth);
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, ctx, depth);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, ctx, depth);
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list, ctx, depth);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition, ctx, depth);
                self.compound_list(&i.then, ctx, depth);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c, ctx, depth);
                    }
                    self.compound_list(&e.body, ctx, depth);
                }
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0, ctx, depth);
                self.compound_list(&w.1.list, ctx, depth);
            }
            ast::CompoundCommand::Coprocess(c) => {
                let mut local = ctx.clone();
                self.command(&c.body, &mut local, depth);
            }
            ast::CompoundCommand::Arithmetic(a) => self.arithmetic(&a.expr.value, ctx, depth),
        }
    }

    /// Arithmetic text can hold command substitutions (also inside array subscripts).
    fn arithmetic(&mut self, text: &str, ctx: &mut Ctx, depth: usize) {
        if text.contains("$(") || text.contains('`') {
            self.word(text, ctx, depth);
        }
    }

    fn function(&mut self, f: &ast::FunctionDefinition, ctx: &mut Ctx, depth: usize) {
        let name = f.fname.value.clone();
        let body = f.body.to_string();
        if body.len() <= MAX_BODY_BYTES {
            self.bodies.insert(name.clone(), body);
        }
        let start = self.commands.len();
        let mut local = ctx.clone();
        self.compound(&f.body.0, &mut local, depth);
        if let Some(list) = &f.body.1 {
            let mut out = Vec::new();
            let mut docs = Vec::new();
            for r in &list.0 {
                self.redirect(r, &mut local, depth, &mut out, &mut docs);
            }
            self.paths.extend(out);
        }
        let calls = self.commands[start..]
            .iter()
            .filter(|c| c.argv.first().is_some_and(|a| *a == name))
            .count();
        if calls >= 2 {
            self.findings.push((
                &baseline::FORK_BOMB,
                format!("function `{name}` calls itself {calls} times"),
            ));
        } else if calls == 1 {
            self.findings.push((
                &baseline::RECURSIVE_FUNCTION,
                format!("function `{name}` calls itself"),
            ));
        }
        self.functions.insert(name);
    }

    fn simple(&mut self, sc: &ast::SimpleCommand, ctx: &mut Ctx, depth: usize) {
        let mut words = Vec::new();
        let mut assigns = Vec::new();
        let mut redirect_paths = Vec::new();
        let mut heredocs = Vec::new();
        let items = sc
            .prefix
            .iter()
            .flat_map(|p| p.0.iter().map(|i| (i, true)))
            .chain(sc.word_or_name.iter().map(|_| (&SENTINEL, false)))
            .chain(
                sc.suffix
                    .iter()
                    .flat_map(|s| s.0.iter().map(|i| (i, false))),
            );
        let mut fd = 63u32;
        let mut stdout_to: Option<(String, bool)> = None;
        for (item, in_prefix) in items {
            if std::ptr::eq(item, &SENTINEL) {
                if let Some(w) = &sc.word_or_name {
                    words.push(self.word(&w.value, ctx, depth));
                }
                continue;
            }
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => {
                    if let ast::IoRedirect::File(
                        None | Some(1),
                        kind @ (ast::IoFileRedirectKind::Write
                        | ast::IoFileRedirectKind::Append
                        | ast::IoFileRedirectKind::Clobber),
                        ast::IoFileRedirectTarget::Filename(w),
                    ) = r
                        && w.value.bytes().all(|b| {
                            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/')
                        })
                    {
                        stdout_to = Some((
                            w.value.clone(),
                            matches!(kind, ast::IoFileRedirectKind::Append),
                        ));
                    }
                    self.redirect(r, ctx, depth, &mut redirect_paths, &mut heredocs);
                }
                ast::CommandPrefixOrSuffixItem::AssignmentWord(a, w) => {
                    if in_prefix {
                        let value = self.assignment_value(&a.value, ctx, depth);
                        let name = match &a.name {
                            ast::AssignmentName::VariableName(n)
                            | ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
                        };
                        assigns.push((name, value));
                    } else {
                        words.push(self.word(&w.value, ctx, depth));
                    }
                }
                ast::CommandPrefixOrSuffixItem::Word(w) => {
                    words.push(self.word(&w.value, ctx, depth));
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    let fetch = self.substitution_list(&sub.list, ctx, depth);
                    // `bash <(echo 'rm -rf /')` runs what the substitution prints.
                    let path = format!("/dev/fd/{fd}");
                    match compute::output(&sub.list.to_string(), &self.vars, 1) {
                        Some(content) => {
                            self.files.insert(path, content);
                        }
                        None => {
                            self.files.remove(&path);
                        }
                    }
                    // Bash passes the substitution as a /dev/fd path, counting down from 63.
                    words.push(Expanded {
                        text: format!("/dev/fd/{fd}"),
                        fetch,
                        ..Default::default()
                    });
                    fd = fd.saturating_sub(1);
                }
            }
        }
        // What a filter writes to a file is kept, for a later `bash file` or `. file`.
        if let Some((target, append)) = stdout_to
            && words.iter().all(Expanded::is_static)
            && let Some(path) = paths::resolve(ctx.cwd.as_deref(), &target)
        {
            let argv: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
            match compute::filter(&argv, heredocs.first().map(String::as_str)) {
                Some(content) if append => self.files.entry(path).or_default().push_str(&content),
                Some(content) => {
                    self.files.insert(path, content);
                }
                None => {
                    self.files.remove(&path);
                }
            }
        }
        self.simple_command(&words, &assigns, redirect_paths, &heredocs, ctx, depth);
    }

    fn assignment_value(
        &mut self,
        v: &ast::AssignmentValue,
        ctx: &mut Ctx,
        depth: usize,
    ) -> Expanded {
        match v {
            ast::AssignmentValue::Scalar(w) => self.word(&w.value, ctx, depth),
            ast::AssignmentValue::Array(items) => {
                let mut out = Expanded::default();
                for (k, w) in items {
                    if let Some(k) = k {
                        self.word(&k.value, ctx, depth);
                    }
                    let e = self.word(&w.value, ctx, depth);
                    out.dynamic |= e.dynamic;
                    out.fetch |= e.fetch;
                    if !out.text.is_empty() {
                        out.text.push(' ');
                    }
                    out.text.push_str(&e.text);
                }
                out
            }
        }
    }

    /// Analyses a substitution body; returns whether it fetches remote content.
    fn substitution_list(&mut self, list: &ast::CompoundList, ctx: &Ctx, depth: usize) -> bool {
        let start = self.commands.len();
        let mut local = ctx.clone();
        local.stdin_fetch = false;
        self.compound_list(list, &mut local, depth + 1);
        self.commands[start..].iter().any(|c| c.fetch)
    }

    fn substitution_script(&mut self, script: &str, ctx: &Ctx, depth: usize) -> bool {
        let start = self.commands.len();
        let mut local = ctx.clone();
        local.stdin_fetch = false;
        self.script(script, &mut local, depth + 1);
        self.commands[start..].iter().any(|c| c.fetch)
    }

    fn redirect(
        &mut self,
        r: &ast::IoRedirect,
        ctx: &mut Ctx,
        depth: usize,
        out: &mut Vec<ShellPath>,
        heredocs: &mut Vec<String>,
    ) {
        match r {
            ast::IoRedirect::File(_, kind, target) => {
                let access = match kind {
                    ast::IoFileRedirectKind::Read | ast::IoFileRedirectKind::DuplicateInput => {
                        Access::Read
                    }
                    _ => Access::Write,
                };
                match target {
                    ast::IoFileRedirectTarget::Filename(w) => {
                        let e = self.word(&w.value, ctx, depth);
                        out.push(self.path_of(&e, access, ctx));
                    }
                    ast::IoFileRedirectTarget::Fd(_) => {}
                    ast::IoFileRedirectTarget::Duplicate(w) => {
                        let e = self.word(&w.value, ctx, depth);
                        let t = e.text.trim_end_matches('-');
                        if !(t.is_empty() || t.chars().all(|c| c.is_ascii_digit()))
                            || !e.is_static()
                        {
                            // `>&file` writes a file, like `&>file`.
                            out.push(self.path_of(&e, access, ctx));
                        }
                    }
                    ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                        self.substitution_list(&sub.list, ctx, depth);
                    }
                }
            }
            ast::IoRedirect::HereDocument(_, doc) => {
                let body = if doc.requires_expansion {
                    let options = brush_parser::ParserOptions::default();
                    match brush_parser::word::parse_heredoc(&doc.doc.value, &options) {
                        Ok(pieces) => {
                            let mut e = Expanded::default();
                            self.pieces(&pieces, true, ctx, depth, &mut e);
                            e.text
                        }
                        Err(_) => doc.doc.value.clone(),
                    }
                } else {
                    doc.doc.value.clone()
                };
                heredocs.push(body);
            }
            ast::IoRedirect::HereString(_, w) => {
                let e = self.word(&w.value, ctx, depth);
                heredocs.push(e.text);
            }
            ast::IoRedirect::OutputAndError(w, _) => {
                let e = self.word(&w.value, ctx, depth);
                out.push(self.path_of(&e, Access::Write, ctx));
            }
        }
    }

    fn path_of(&self, e: &Expanded, access: Access, ctx: &Ctx) -> ShellPath {
        path_for(&e.text, e.is_static(), access, ctx.cwd.as_deref())
    }

    fn word(&mut self, raw: &str, ctx: &mut Ctx, depth: usize) -> Expanded {
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

    fn pieces(
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

    fn parameter(&mut self, expr: &ParameterExpr, ctx: &mut Ctx, depth: usize, e: &mut Expanded) {
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

    /// Classifies one simple command given its expanded words.
    fn simple_command(
        &mut self,
        words: &[Expanded],
        assigns: &[(String, Expanded)],
        redirect_paths: Vec<ShellPath>,
        heredocs: &[String],
        ctx: &mut Ctx,
        depth: usize,
    ) {
        if words.is_empty() {
            for (name, value) in assigns {
                self.remember(name, value);
                if baseline::is_sensitive_variable(name) {
                    self.findings.push((
                        &baseline::SENSITIVE_ENV,
                        format!("assigns {name}={}", value.text),
                    ));
                }
                if name.starts_with("GIT_") {
                    self.findings.push((
                        &baseline::GIT_FOREIGN,
                        format!(
                            "assigns {name}, which changes the repository or configuration git uses"
                        ),
                    ));
                }
                if value.risky.is_some() {
                    self.findings.push((
                        &baseline::DYNAMIC_ARGS,
                        format!("assignment {name}: {}", value.risky.unwrap_or_default()),
                    ));
                }
            }
            self.paths.extend(redirect_paths);
            return;
        }
        let mut cmd = ShellCommand {
            argv: words.iter().map(|w| w.text.clone()).collect(),
            layers: Vec::new(),
            fully_analyzed: true,
            notes: Vec::new(),
            rules: Vec::new(),
            safe: true,
            paths: redirect_paths,
            fetch: false,
            derived: ctx.derived,
        };
        for (name, value) in assigns {
            // Every assignment is shown: approvers should see the environment a command gets.
            cmd.notes.push(format!("assigns {name}={}", value.text));
            if baseline::is_sensitive_variable(name) {
                cmd.rules.push(&baseline::SENSITIVE_ENV);
            }
            if name.starts_with("GIT_") {
                cmd.rules.push(&baseline::GIT_FOREIGN);
                cmd.notes.push(format!(
                    "{name} changes which repository, configuration or programs git uses"
                ));
            }
            if let Some(r) = value.risky {
                cmd.rules.push(&baseline::DYNAMIC_ARGS);
                cmd.notes.push(format!("assignment {name}: {r}"));
            }
        }
        let program = &words[0];
        let echo_like = matches!(
            program.text.as_str(),
            "echo" | "printf" | "true" | "false" | ":" | "test" | "["
        );
        // Printing a dynamic word decides nothing; anything else is classified as computed.
        if !(echo_like && program.raw.is_none()) && words.iter().any(|w| w.raw.is_some()) {
            self.computed(words, assigns, heredocs, ctx, depth, &mut cmd);
        }
        if !program.is_static() || program.tilde {
            cmd.rules.push(&baseline::DYNAMIC_PROGRAM);
            cmd.fully_analyzed = false;
            cmd.safe = false;
            cmd.notes.push(format!(
                "the program name is computed at run time from `{}`",
                program.text
            ));
            self.commands.push(cmd);
            return;
        }
        for w in &words[1..] {
            if let Some(r) = w.risky {
                cmd.rules.push(&baseline::DYNAMIC_ARGS);
                cmd.notes.push(format!("`{}`: {r}", w.text));
                cmd.fully_analyzed = false;
            } else if (w.dynamic || w.glob) && !echo_like {
                cmd.rules.push(&baseline::DYNAMIC_ARGS);
                cmd.notes.push(format!("`{}` expands at runtime", w.text));
                cmd.fully_analyzed = false;
            }
        }
        let texts: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
        let fetch_args: Vec<bool> = words.iter().map(|w| w.fetch).collect();
        let dynamic: Vec<&str> = words
            .iter()
            .filter(|w| !w.is_static())
            .map(|w| w.text.as_str())
            .collect();
        self.layers(
            &mut cmd,
            &texts,
            &fetch_args,
            &dynamic,
            heredocs,
            ctx,
            depth,
        );
        cmd.rules.sort_by_key(|r| r.id);
        cmd.rules.dedup_by_key(|r| r.id);
        if !cmd.rules.is_empty() || !cmd.fully_analyzed {
            cmd.safe = false;
        }
        self.commands.push(cmd);
    }

    /// Values builtins give variables: `set -- a b`, `printf -v R fmt args`, `read R <<< w`.
    fn assignments_by_builtins(
        &mut self,
        name: &str,
        args: &[String],
        dynamic: &[&str],
        heredocs: &[String],
    ) {
        if args.iter().any(|a| dynamic.contains(&a.as_str())) {
            return;
        }
        match name {
            "set" => {
                let values = match args.iter().position(|a| a == "--") {
                    Some(i) => &args[i + 1..],
                    None if args.first().is_some_and(|a| !a.starts_with(['-', '+'])) => args,
                    None => return,
                };
                self.vars.assign(compute::POSITIONAL, values.join(" "));
            }
            "printf" if args.len() >= 3 && args[0] == "-v" => {
                if let Some(out) = compute::filter(
                    &std::iter::once("printf".to_owned())
                        .chain(args[2..].iter().cloned())
                        .collect::<Vec<_>>(),
                    None,
                ) {
                    self.vars.assign(&args[1], out);
                }
            }
            "read" => {
                if let Some(doc) = heredocs.first()
                    && let Some(var) = args.iter().rev().find(|a| !a.starts_with('-'))
                {
                    let line = doc.lines().next().unwrap_or("").trim();
                    self.vars.assign(var, line.to_owned());
                }
            }
            _ => {}
        }
    }

    /// Records the value an assignment gives a variable, when the script alone decides it.
    fn remember(&mut self, name: &str, value: &Expanded) {
        match &value.raw {
            None => self.vars.assign(name, value.text.clone()),
            // An assignment is neither brace-expanded nor split: join what `word` split.
            Some(raw) => {
                for fields in compute::word(raw, &self.vars).into_iter().flatten() {
                    self.vars.assign(name, fields.join(" "));
                }
            }
        }
    }

    /// Classifies what a command with dynamic words computes to, when the script alone
    /// decides it: `$(echo rm) -rf /` is also analysed as `rm -rf /`, so a deny stays a deny.
    /// The dynamic command itself keeps its findings (at least `ask`); each computed argv
    /// is analysed as a command of its own, and both say so in their notes.
    fn computed(
        &mut self,
        words: &[Expanded],
        assigns: &[(String, Expanded)],
        heredocs: &[String],
        ctx: &Ctx,
        depth: usize,
        cmd: &mut ShellCommand,
    ) {
        // Each computed argv is a command of its own, so the command budget bounds this too.
        if self.over_budget(depth + 1) {
            return;
        }
        let mut argvs: Vec<Vec<String>> = vec![Vec::new()];
        for w in words {
            let alts = match &w.raw {
                None => vec![vec![w.text.clone()]],
                Some(raw) => match compute::word(raw, &self.vars) {
                    Some(alts) => alts,
                    None => {
                        cmd.notes.push(format!(
                            "`{}` is computed at run time; the script alone does not decide its value",
                            w.text
                        ));
                        return;
                    }
                },
            };
            if argvs.len() * alts.len() > compute::MAX_ALTERNATIVES {
                cmd.notes.push(format!(
                    "`{}` has too many possible values to follow",
                    w.text
                ));
                return;
            }
            argvs = argvs
                .iter()
                .flat_map(|a| {
                    alts.iter().map(move |f| {
                        let mut a = a.clone();
                        a.extend(f.iter().cloned());
                        a
                    })
                })
                .collect();
        }
        let written = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        for argv in argvs.into_iter().filter(|a| !a.is_empty()) {
            let shown = argv.join(" ");
            cmd.notes.push(format!(
                "computed from the script alone, `{written}` runs `{shown}` (analysed as its own command)"
            ));
            let lits: Vec<Expanded> = argv.into_iter().map(Expanded::literal).collect();
            self.simple_command(
                &lits,
                assigns,
                Vec::new(),
                heredocs,
                &mut ctx.derived(),
                depth + 1,
            );
            if let Some(c) = self.commands.last_mut() {
                c.notes.insert(
                    0,
                    format!("computed from the script alone from `{written}`"),
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn layers(
        &mut self,
        cmd: &mut ShellCommand,
        argv: &[String],
        fetch_args: &[bool],
        dynamic: &[&str],
        heredocs: &[String],
        ctx: &mut Ctx,
        depth: usize,
    ) {
        let mut argv = argv;
        let mut fetch_args = fetch_args;
        let mut cwd = ctx.cwd.clone();
        let mut first = true;
        while let Some(raw) = argv.first() {
            let args = &argv[1..];
            let name = self.program_name(raw, cmd);
            if is_loader(&name) {
                cmd.rules.push(&baseline::LOADER);
                cmd.notes.push(format!(
                    "`{raw}` is the dynamic loader; classifying the program it loads"
                ));
                let skip = loader_options(args);
                argv = &args[skip.min(args.len())..];
                fetch_args = &fetch_args[(1 + skip).min(fetch_args.len())..];
                continue;
            }
            cmd.layers.push((name.clone(), args.to_vec()));
            cmd.fetch |= baseline::is_fetcher(&name);
            if raw.contains('/') {
                // `./x.sh` after `echo 'rm -rf /' > x.sh`.
                self.written_script(cmd, raw, raw, &ctx.clone(), depth);
            }
            if first && matches!(name.as_str(), "cd" | "pushd") {
                let target = args
                    .iter()
                    .find(|a| !a.starts_with('-'))
                    .map_or("~", String::as_str);
                let unknown = dynamic.contains(&target);
                ctx.cwd = if unknown {
                    None
                } else {
                    paths::resolve(ctx.cwd.as_deref(), target)
                };
            }
            first = false;
            if self.functions.contains(&name) && !raw.contains('/') {
                cmd.notes
                    .push(format!("calls the shell function `{name}` analysed above"));
                // `f() { rm "$@"; }; f -rf /`: the body again, with these arguments.
                if !args.iter().any(|a| dynamic.contains(&a.as_str()))
                    && let Some(body) = self.bodies.get(&name).cloned()
                {
                    cmd.notes.push(format!(
                        "analysing the body of `{name}` with the arguments `{}`",
                        args.join(" ")
                    ));
                    self.vars.assign(compute::POSITIONAL, args.join(" "));
                    self.script(&body, &mut ctx.derived(), depth + 1);
                }
                break;
            }
            let f = baseline::classify_argv(&name, args);
            cmd.rules.extend(f.rules.iter().copied());
            for script in &f.scripts {
                cmd.notes.push(format!(
                    "{name} runs the shell command `{script}`: analysing it"
                ));
                self.script(script, &mut ctx.derived(), depth + 1);
            }
            if name == "xargs"
                && let Some(text) = &ctx.stdin_text
                && args.first().is_some_and(|a| !a.starts_with('-'))
            {
                // xargs without options appends the words of its input to its command.
                let argv: Vec<String> = args
                    .iter()
                    .cloned()
                    .chain(text.split_whitespace().map(str::to_owned))
                    .collect();
                cmd.notes.push(format!(
                    "computed from the script alone, xargs runs `{}`: analysing it",
                    argv.join(" ")
                ));
                let lits: Vec<Expanded> = argv.into_iter().map(Expanded::literal).collect();
                self.simple_command(&lits, &[], Vec::new(), &[], &mut ctx.derived(), depth + 1);
            }
            if name == "find" {
                for argv in baseline::find_exec_commands(args) {
                    let shown = argv.join(" ");
                    cmd.notes.push(format!(
                        "find runs `{shown}` for what it finds: analysing it"
                    ));
                    let lits: Vec<Expanded> = argv.into_iter().map(Expanded::literal).collect();
                    self.simple_command(&lits, &[], Vec::new(), &[], &mut ctx.derived(), depth + 1);
                }
            }
            if matches!(
                name.as_str(),
                "export" | "declare" | "typeset" | "local" | "readonly"
            ) {
                for a in args {
                    let Some((n, v)) = a.split_once('=') else {
                        continue;
                    };
                    if !dynamic.contains(&a.as_str()) {
                        self.vars.assign(n, v.to_owned());
                    }
                    if baseline::is_sensitive_variable(n.trim_end_matches('+')) {
                        cmd.rules.push(&baseline::SENSITIVE_ENV);
                        cmd.notes.push(format!("{name} sets {n}"));
                    }
                    if n.starts_with("GIT_") {
                        cmd.rules.push(&baseline::GIT_FOREIGN);
                    }
                }
            }
            self.assignments_by_builtins(&name, args, dynamic, heredocs);
            // `eval` and `sh -c` are transparent: the commands they run are analysed separately.
            cmd.safe &= f.safe
                || is_wrapper(&name)
                || name == "eval"
                || (baseline::is_shell(&name)
                    && args
                        .iter()
                        .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c')));
            if name == "git" {
                // `git -C dir` runs in dir: its path operands are relative to it.
                for d in baseline::git_chdir(args) {
                    cmd.paths
                        .push(path_for(d, true, Access::Read, cwd.as_deref()));
                    cwd = paths::resolve(cwd.as_deref(), d);
                    cmd.notes.push(format!("git runs in `{d}`"));
                }
                // Git discovers its repository from where it runs. Anywhere but the root, a
                // repository the agent wrote as plain files (HEAD, objects/, refs/, a config
                // with core.fsmonitor) may be found first, and git runs what its config names.
                if cwd.as_deref() != Some(".") {
                    cmd.rules.push(&baseline::GIT_FOREIGN);
                    cmd.notes.push(match &cwd {
                        Some(dir) => format!(
                            "git runs in `{dir}`, not the workspace root: a repository there is not the workspace's own"
                        ),
                        None => "git runs in a directory known only at run time, so the repository it uses is unknown".to_owned(),
                    });
                }
            }
            for (p, access) in &f.paths {
                let known = !dynamic
                    .iter()
                    .any(|d| d.contains(p.as_str()) || p.contains(d));
                cmd.paths.push(path_for(p, known, *access, cwd.as_deref()));
            }
            if name == "trap"
                && let Some(handler) = args.first().filter(|a| !a.starts_with('-'))
            {
                cmd.notes
                    .push(format!("trap: analysing the handler `{handler}`"));
                self.script(handler, &mut ctx.clone(), depth + 1);
            }
            let arg_fetch = fetch_args.iter().skip(1).any(|f| *f);
            if baseline::is_interpreter(&name) || matches!(name.as_str(), "eval" | "source" | ".") {
                self.interpreter(cmd, &name, args, arg_fetch, heredocs, ctx, depth);
                break;
            }
            if !heredocs.is_empty() && cmd.layers.len() > 1 && baseline::is_interpreter(&name) {
                cmd.rules.push(&baseline::SHELL_STDIN);
            }
            let Some(w) = unwrap(&name, args) else { break };
            if w.ambiguous {
                cmd.rules.push(&baseline::AMBIGUOUS_OPTION);
            }
            for (n, v) in &w.assigns {
                if baseline::is_sensitive_variable(n) {
                    cmd.rules.push(&baseline::SENSITIVE_ENV);
                    cmd.notes.push(format!("{name} sets {n}={v}"));
                }
                if n.starts_with("GIT_") {
                    cmd.rules.push(&baseline::GIT_FOREIGN);
                }
            }
            if let Some(dir) = w.chdir {
                cwd = paths::resolve(cwd.as_deref(), dir);
            }
            if let Some(s) = w.split {
                cmd.rules.push(&baseline::DYNAMIC_ARGS);
                cmd.notes.push(format!("{name} -S splits `{s}` at runtime"));
                let joined = std::iter::once(s)
                    .chain(args[w.inner.min(args.len())..].iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                self.script(&joined, &mut ctx.clone(), depth + 1);
                break;
            }
            if w.no_exec || w.inner >= args.len() {
                break;
            }
            cmd.notes.push(format!("{name} runs `{}`", args[w.inner]));
            argv = &args[w.inner..];
            fetch_args = &fetch_args[(1 + w.inner).min(fetch_args.len())..];
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn interpreter(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        args: &[String],
        arg_fetch: bool,
        heredocs: &[String],
        ctx: &mut Ctx,
        depth: usize,
    ) {
        if arg_fetch {
            cmd.rules.push(&baseline::FETCH_EXEC);
            cmd.notes
                .push(format!("{name} runs code produced by a network fetch"));
        }
        if name == "eval" {
            let script = args.join(" ");
            cmd.notes
                .push("eval: analysing its arguments as a script".to_owned());
            let mut local = ctx.clone();
            self.script(&script, &mut local, depth + 1);
            return;
        }
        if matches!(name, "source" | ".") {
            match args.first() {
                Some(file) if !self.written_script(cmd, name, file, ctx, depth) => {
                    cmd.notes.push(format!(
                        "{name} runs the commands in `{file}` in this shell; that file is not part of the script, so its contents were not analysed"
                    ));
                }
                Some(_) => {}
                None => cmd.notes.push(format!("{name} without a file name")),
            }
            return;
        }
        let stdin = baseline::reads_program_from_stdin(name, args);
        if stdin && ctx.stdin_fetch {
            cmd.rules.push(&baseline::FETCH_EXEC);
            cmd.notes.push(format!(
                "{name} reads its program from a network fetch piped into it"
            ));
        }
        if !heredocs.is_empty() {
            cmd.rules.push(&baseline::SHELL_STDIN);
            cmd.notes
                .push(format!("{name} is fed a heredoc or here-string"));
        }
        if !baseline::is_shell(name) {
            if baseline::has_inline_code(name, args) {
                cmd.rules.push(&baseline::INLINE_CODE);
                cmd.notes.push(format!("{name} runs inline code"));
            }
            if stdin && heredocs.is_empty() && !ctx.stdin_fetch {
                cmd.rules.push(&baseline::SHELL_STDIN);
                cmd.notes
                    .push(format!("{name} reads its program from stdin"));
            }
            return;
        }
        match shell_invocation(args) {
            ShellInvocation::Script(i) => {
                let script = &args[i];
                cmd.notes.push(format!("{name} -c: analysing `{script}`"));
                // `bash -c 'rm "$@"' _ -rf /`: the words after the name are `$@`.
                if let Some(params) = args.get(i + 2..) {
                    self.vars.assign(compute::POSITIONAL, params.join(" "));
                }
                let mut local = ctx.clone();
                local.stdin_fetch = false;
                self.script(script, &mut local, depth + 1);
            }
            ShellInvocation::Stdin => {
                if heredocs.is_empty() {
                    if !ctx.stdin_fetch {
                        cmd.rules.push(&baseline::SHELL_STDIN);
                        cmd.notes.push(format!("{name} reads commands from stdin"));
                    }
                    if let Some(text) = &ctx.stdin_text {
                        cmd.notes.push(format!(
                            "computed from the script alone, {name} reads the program `{}`: analysing it",
                            text.trim_end()
                        ));
                        let text = text.clone();
                        self.script(&text, &mut ctx.derived(), depth + 1);
                    }
                } else {
                    for doc in heredocs {
                        let mut local = ctx.clone();
                        local.stdin_fetch = false;
                        self.script(doc, &mut local, depth + 1);
                    }
                }
            }
            ShellInvocation::File(i) => {
                cmd.rules.push(&baseline::SCRIPT_FILE);
                cmd.notes
                    .push(format!("{name} runs the script file `{}`", args[i]));
                self.written_script(cmd, name, &args[i], ctx, depth);
            }
            ShellInvocation::RcFile => {
                cmd.rules.push(&baseline::SCRIPT_FILE);
                cmd.notes.push(format!("{name} loads an rc file"));
            }
        }
    }

    /// Analyses a script file the script itself wrote earlier; false if it did not.
    fn written_script(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        file: &str,
        ctx: &Ctx,
        depth: usize,
    ) -> bool {
        let Some(content) = paths::resolve(ctx.cwd.as_deref(), file)
            .and_then(|p| self.files.get(&p))
            .cloned()
        else {
            return false;
        };
        cmd.notes.push(format!(
            "computed from the script alone, `{file}` holds `{}`: {name} runs it, analysing it",
            content.trim_end()
        ));
        self.script(&content, &mut ctx.derived(), depth + 1);
        true
    }

    /// Reduces a program word to the basename classified, noting path tricks.
    fn program_name(&mut self, raw: &str, cmd: &mut ShellCommand) -> String {
        if !raw.contains('/') {
            return raw.to_owned();
        }
        let mut p = paths::normalise(raw);
        if let Some(rest) = strip_proc_root(&p) {
            cmd.rules.push(&baseline::LOADER);
            cmd.notes.push(format!("`{raw}` goes through /proc/*/root"));
            p = rest;
        }
        let (dir, base) = p.rsplit_once('/').unwrap_or(("", &p));
        const SYSTEM_BIN: &[&str] = &[
            "/bin",
            "/usr/bin",
            "/usr/local/bin",
            "/sbin",
            "/usr/sbin",
            "/usr/local/sbin",
        ];
        if !SYSTEM_BIN.contains(&dir) && !is_loader(base) {
            cmd.rules.push(&baseline::PATH_PROGRAM);
            cmd.notes
                .push(format!("`{raw}` is not a program from a system directory"));
        }
        base.to_owned()
    }
}

/// Placeholder that marks where the command word sits among prefix and suffix items.
static SENTINEL: ast::CommandPrefixOrSuffixItem = ast::CommandPrefixOrSuffixItem::Word(ast::Word {
    value: String::new(),
    loc: None,
});

/// The text handed to brush-parser: the script with a final newline.
///
/// brush-parser 0.4's tokenizer allocates without bound when the input ends while a
/// here-document still waits for its body inside an unterminated `$(` or `${` (for example
/// `$(cat <<EOF x` or `cat<<\r $(`). A final newline ends that wait, and it changes nothing
/// bash runs: `bash -c` reads the script as if it ended one. The one exception is a script
/// ending in an unescaped backslash, which bash keeps literally but a newline would turn into a
/// line continuation; such a script is not parsed at all (at least ask).
fn parser_input(script: &str) -> Result<std::borrow::Cow<'_, str>, &'static str> {
    if script.ends_with('\n') {
        return Ok(script.into());
    }
    let backslashes = script.bytes().rev().take_while(|b| *b == b'\\').count();
    if backslashes % 2 == 1 {
        return Err("a script ending in a lone backslash is not analysed");
    }
    Ok(format!("{script}\n").into())
}

/// An upper bound on a script's syntactic nesting: brackets and compound-command keywords,
/// counted without regard to quoting (overcounting only costs an approval).
fn nesting_estimate(script: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for word in script.split(|c: char| c.is_whitespace() || c == ';') {
        match word {
            "if" | "do" | "case" => depth += 1,
            "fi" | "done" | "esac" => depth = depth.saturating_sub(1),
            _ => {}
        }
        for c in word.chars() {
            match c {
                '(' | '{' | '[' | '`' => depth += 1,
                ')' | '}' | ']' => depth = depth.saturating_sub(1),
                _ => {}
            }
            max = max.max(depth);
        }
        max = max.max(depth);
    }
    max
}

fn path_for(text: &str, known: bool, access: Access, cwd: Option<&str>) -> ShellPath {
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
fn parameter_text(p: &WordPieceWithSource) -> String {
    match &p.piece {
        // `Parameter`'s Display already spells `${name}`.
        WordPiece::ParameterExpansion(ParameterExpr::Parameter {
            parameter,
            indirect: false,
        }) => parameter.to_string(),
        _ => "${...}".to_owned(),
    }
}

fn tilde_suffix(t: &brush_parser::word::TildeExpr) -> String {
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

fn strip_proc_root(p: &str) -> Option<String> {
    let rest = p.strip_prefix("/proc/")?;
    let (who, rest) = rest.split_once('/')?;
    let who_ok = who == "self" || who == "thread-self" || who.chars().all(|c| c.is_ascii_digit());
    let rest = rest.strip_prefix("root")?;
    (who_ok && (rest.is_empty() || rest.starts_with('/'))).then(|| {
        if rest.is_empty() {
            "/".to_owned()
        } else {
            rest.to_owned()
        }
    })
}

fn is_loader(name: &str) -> bool {
    (name.starts_with("ld-linux")
        || name.starts_with("ld-")
        || name.starts_with("ld64")
        || name == "ld.so")
        && name.contains(".so")
}

/// How many loader options precede the program a dynamic loader runs.
fn loader_options(args: &[String]) -> usize {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "--library-path"
            | "--preload"
            | "--audit"
            | "--argv0"
            | "--inhibit-rpath"
            | "--glibc-hwcaps-prepend"
            | "--glibc-hwcaps-mask" => i += 2,
            s if s.starts_with("--") => i += 1,
            _ => break,
        }
    }
    i
}

fn is_wrapper(name: &str) -> bool {
    matches!(
        name,
        "env"
            | "nice"
            | "nohup"
            | "timeout"
            | "setsid"
            | "stdbuf"
            | "command"
            | "exec"
            | "time"
            | "builtin"
            | "ionice"
    )
}

/// What a wrapper runs.
struct Unwrapped<'a> {
    /// Index into args of the inner program.
    inner: usize,
    assigns: Vec<(&'a str, &'a str)>,
    chdir: Option<&'a str>,
    split: Option<&'a str>,
    no_exec: bool,
    /// An abbreviated option matched several: where the command starts is a guess.
    ambiguous: bool,
}

/// Parses an exec wrapper's options; `None` if `name` is not a wrapper.
fn unwrap<'a>(name: &str, args: &'a [String]) -> Option<Unwrapped<'a>> {
    let mut w = Unwrapped {
        inner: 0,
        assigns: Vec::new(),
        chdir: None,
        split: None,
        no_exec: false,
        ambiguous: false,
    };
    // Wrappers with an argv table are read as their getopt reads them: abbreviations,
    // clusters (`env -iS'rm -rf /'`), values attached or not.
    if matches!(
        name,
        "env" | "nice" | "timeout" | "stdbuf" | "ionice" | "xargs"
    ) {
        let p = crate::argv::parse(name, args);
        let mut i = args.len() - p.operands.len();
        w.chdir = p.values_of(&["-C", "--chdir"]).last();
        w.split = p.values_of(&["-S", "--split-string"]).last();
        w.ambiguous = p.ambiguous.is_some();
        if name == "env" {
            // `env -` is `env -i`; then NAME=VALUE words up to the command.
            if args.get(i).is_some_and(|a| a == "-")
                && args.get(i.wrapping_sub(1)).is_none_or(|a| a != "--")
            {
                i += 1;
            }
            while let Some(a) = args.get(i)
                && let Some((n, v)) = a.split_once('=')
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                w.assigns.push((n, v));
                i += 1;
            }
        }
        if name == "timeout" {
            // The duration precedes the command.
            i += 1;
        }
        w.inner = i;
        return Some(w);
    }
    // (options taking a separate value, flags, whether a positional precedes the command)
    let (with_value, positional_first): (&[&str], bool) = match name {
        "env" => (
            &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
            false,
        ),
        "nice" => (&["-n", "--adjustment"], false),
        "nohup" | "builtin" | "setsid" | "busybox" => (&[], false),
        "timeout" => (&["-s", "--signal", "-k", "--kill-after"], true),
        "stdbuf" => (&["-i", "-o", "-e", "--input", "--output", "--error"], false),
        "xargs" => (
            &[
                "-a",
                "--arg-file",
                "-d",
                "--delimiter",
                "-E",
                "--eof",
                "-I",
                "--replace",
                "-L",
                "--max-lines",
                "-n",
                "--max-args",
                "-P",
                "--max-procs",
                "-s",
                "--max-chars",
                "--process-slot-var",
            ],
            false,
        ),
        "command" | "exec" | "time" => (&["-a", "-f", "-o", "--format", "--output"], false),
        "ionice" => (&["-c", "--class", "-n", "--classdata"], false),
        _ => return None,
    };
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let a = a.as_str();
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            if name == "env"
                && let Some((n, v)) = a.split_once('=')
                && !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                w.assigns.push((n, v));
                i += 1;
                continue;
            }
            break;
        }
        if a == "-i" && name == "env" {
            i += 1;
            continue;
        }
        if name == "command" && (a.contains('v') || a.contains('V')) {
            w.no_exec = true;
        }
        let (flag, attached) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ if !a.starts_with("--")
                && a.len() > 2
                && a.get(..2).is_some_and(|f| with_value.contains(&f)) =>
            {
                (&a[..2], Some(&a[2..]))
            }
            _ => (a, None),
        };
        let value = if with_value.contains(&flag) {
            match attached {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    args.get(i).map(String::as_str)
                }
            }
        } else {
            None
        };
        match (flag, value) {
            ("-C" | "--chdir", Some(v)) => w.chdir = Some(v),
            ("-S" | "--split-string", Some(v)) => w.split = Some(v),
            _ => {}
        }
        i += 1;
    }
    if positional_first {
        i += 1;
    }
    w.inner = i;
    Some(w)
}

enum ShellInvocation {
    Script(usize),
    Stdin,
    File(usize),
    RcFile,
}

fn shell_invocation(args: &[String]) -> ShellInvocation {
    let mut i = 0;
    let mut c_flag = false;
    let mut s_flag = false;
    while let Some(a) = args.get(i) {
        let a = a.as_str();
        if a == "--" || a == "-" {
            i += 1;
            break;
        }
        if a == "--rcfile" || a == "--init-file" {
            return ShellInvocation::RcFile;
        }
        if a.starts_with("--") {
            i += 1;
            continue;
        }
        if (a.starts_with('-') || a.starts_with('+')) && a.len() > 1 {
            let cluster = &a[1..];
            c_flag |= cluster.contains('c');
            s_flag |= cluster.contains('s');
            if cluster.contains('o') || cluster.contains('O') {
                i += 1;
            }
            i += 1;
            continue;
        }
        break;
    }
    if c_flag {
        return if i < args.len() {
            ShellInvocation::Script(i)
        } else {
            ShellInvocation::Stdin
        };
    }
    if s_flag || i >= args.len() {
        ShellInvocation::Stdin
    } else {
        ShellInvocation::File(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(script: &str) -> Vec<Vec<String>> {
        analyze_script(script, ".")
            .commands
            .into_iter()
            .map(|c| c.argv)
            .collect()
    }

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn quote_removal_matches_bash() {
        assert_eq!(argvs("r'm' -rf x"), vec![v(&["rm", "-rf", "x"])]);
        assert_eq!(argvs("r\\m x"), vec![v(&["rm", "x"])]);
        assert_eq!(argvs("$'r\\155' x"), vec![v(&["rm", "x"])]);
        assert_eq!(argvs("ec\\\nho a"), vec![v(&["echo", "a"])]);
        assert_eq!(argvs("echo \"a\\qb\\$c\""), vec![v(&["echo", "a\\qb$c"])]);
    }

    #[test]
    fn sh_nl_03_carriage_return_is_not_a_separator() {
        assert_eq!(argvs("echo a\rb"), vec![v(&["echo", "a\rb"])]);
    }

    #[test]
    fn substitutions_are_extracted_everywhere() {
        let a = argvs(
            "echo \"$(touch /tmp/pwn)\"; X=`id` ls <(ls) >(cat) ; f() { whoami; }; cat <<EOF\n$(date)\nEOF",
        );
        for want in [
            v(&["touch", "/tmp/pwn"]),
            v(&["id"]),
            v(&["whoami"]),
            v(&["date"]),
        ] {
            assert!(a.contains(&want), "{want:?} missing from {a:?}");
        }
    }

    #[test]
    fn parser_input_ends_every_script_with_a_newline() {
        assert_eq!(parser_input("ls").unwrap(), "ls\n");
        assert_eq!(parser_input("ls\n").unwrap(), "ls\n");
        assert_eq!(parser_input("echo x\\\\").unwrap(), "echo x\\\\\n");
        assert!(parser_input("echo x\\").is_err());
    }

    #[test]
    fn scripts_that_hung_the_parser_are_classified() {
        // Each of these made brush-parser 0.4 allocate until the process was killed.
        for script in [
            "cat<<\r $(",
            "cat<<\x0c ${",
            "$(<<  ",
            "$(<< '' ",
            "$(<<  i&#",
            "<<]$( ))#",
            "\\<<<\r ",
            "\n];rmf()$(!>incurl<<-  in>(~&curl))do-C&&#)<<-rm||EOF>",
        ] {
            let d = crate::Policy::builtin_default().classify(
                &crate::ToolCall::script(script),
                &crate::CallContext::default(),
            );
            assert_ne!(d.tier, toolgate_core::Tier::Auto, "{script:?}");
        }
    }

    #[test]
    fn nesting_estimate_counts_depth_not_length() {
        assert_eq!(nesting_estimate("ls; ls; ls"), 0);
        assert_eq!(nesting_estimate("if a; then b; fi; if c; then d; fi"), 1);
        assert_eq!(nesting_estimate("{ ( echo $(ls) ); }"), 3);
        assert!(nesting_estimate(&"{ ".repeat(100)) >= 100);
    }

    #[test]
    fn ansi_c_decoding() {
        assert_eq!(ansi_c("r\\155"), "rm");
        assert_eq!(ansi_c("\\x72\\u006d"), "rm");
        assert_eq!(ansi_c("a\\tb\\'"), "a\tb'");
    }

    #[test]
    fn cd_moves_the_working_directory_for_paths() {
        let a = analyze_script("cd .claude/ && mv test.txt settings.json", ".");
        let mv = &a.commands[1];
        assert!(
            mv.paths
                .iter()
                .any(|p| p.path == ".claude/settings.json" && p.access == Access::Write)
        );
    }

    #[test]
    fn wrappers_unwrap_to_the_inner_program() {
        let a = analyze_script(
            "env -i FOO=1 nice -n 5 timeout -s KILL 5 nohup stdbuf -oL sudo ls",
            ".",
        );
        let names: Vec<_> = a.commands[0].layers.iter().map(|l| l.0.as_str()).collect();
        assert_eq!(names, ["env", "nice", "timeout", "nohup", "stdbuf", "sudo"]);
        assert!(a.commands[0].rules.contains(&&baseline::PRIVILEGE));
    }
}
