//! The walk over the parsed script: lists, pipelines, compound commands, functions,
//! substitutions and redirections, down to each simple command.

use super::{
    Analyzer, Ctx, Expanded, MAX_BODY_BYTES, MAX_NESTING, MAX_SCRIPT_BYTES, SENTINEL, ShellPath,
    nesting_estimate, parser_input,
};
use crate::paths::Access;
use crate::{baseline, compute, paths};
use brush_parser::ast;

impl Analyzer {
    pub(super) fn script(&mut self, script: &str, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn compound_list(&mut self, list: &ast::CompoundList, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn and_or(&mut self, list: &ast::AndOrList, ctx: &mut Ctx, depth: usize) {
        self.pipeline(&list.first, ctx, depth);
        for next in &list.additional {
            let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
            self.pipeline(p, ctx, depth);
        }
    }

    pub(super) fn pipeline(&mut self, p: &ast::Pipeline, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn command(&mut self, c: &ast::Command, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn test_expr(&mut self, e: &ast::ExtendedTestExpr, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn compound(&mut self, cc: &ast::CompoundCommand, ctx: &mut Ctx, depth: usize) {
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
    pub(super) fn arithmetic(&mut self, text: &str, ctx: &mut Ctx, depth: usize) {
        if text.contains("$(") || text.contains('`') {
            self.word(text, ctx, depth);
        }
    }

    pub(super) fn function(&mut self, f: &ast::FunctionDefinition, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn simple(&mut self, sc: &ast::SimpleCommand, ctx: &mut Ctx, depth: usize) {
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

    pub(super) fn assignment_value(
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
    pub(super) fn substitution_list(
        &mut self,
        list: &ast::CompoundList,
        ctx: &Ctx,
        depth: usize,
    ) -> bool {
        let start = self.commands.len();
        let mut local = ctx.clone();
        local.stdin_fetch = false;
        self.compound_list(list, &mut local, depth + 1);
        self.commands[start..].iter().any(|c| c.fetch)
    }

    pub(super) fn substitution_script(&mut self, script: &str, ctx: &Ctx, depth: usize) -> bool {
        let start = self.commands.len();
        let mut local = ctx.clone();
        local.stdin_fetch = false;
        self.script(script, &mut local, depth + 1);
        self.commands[start..].iter().any(|c| c.fetch)
    }

    pub(super) fn redirect(
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
}
