//! One simple command: its computed forms, the layers it unwraps to (wrappers, loaders,
//! interpreters, scripts it wrote), and its program name.

use super::words::path_for;
use super::wrappers::{
    ShellInvocation, is_loader, is_wrapper, loader_options, shell_invocation, strip_proc_root,
    unwrap,
};
use super::{Analyzer, Ctx, Expanded, ShellCommand, ShellPath};
use crate::paths::Access;
use crate::{baseline, compute, paths};

impl Analyzer {
    /// Classifies one simple command given its expanded words.
    pub(super) fn simple_command(
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
    pub(super) fn assignments_by_builtins(
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
    pub(super) fn remember(&mut self, name: &str, value: &Expanded) {
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
    pub(super) fn computed(
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

    /// Unwraps the command layer by layer (loaders, wrappers such as `env` or `timeout`,
    /// interpreters, shell functions) and classifies each program with its arguments.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layers(
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
                self.function_call(cmd, &name, args, dynamic, ctx, depth);
                break;
            }
            let f = baseline::classify_argv(&name, args);
            cmd.rules.extend(f.rules.iter().copied());
            // What a deleting or discarding program acts on is decided at run time: by a
            // word that expands, or by the names xargs feeds it.
            let runtime_args = args.iter().any(|a| dynamic.contains(&a.as_str()));
            let fed_by_xargs = cmd.layers.iter().rev().skip(1).any(|(n, _)| n == "xargs");
            if (runtime_args || fed_by_xargs) && baseline::destroys_by_arguments(&name, args) {
                cmd.rules.push(&baseline::OPAQUE_DESTRUCTION);
                cmd.notes.push(format!(
                    "what `{name}` deletes, discards or moves is decided at run time"
                ));
            }
            self.commands_run_by(cmd, &name, args, &f.scripts, ctx, depth);
            self.declarations(cmd, &name, args, dynamic);
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
                git_directory(cmd, args, &mut cwd);
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
                self.interpreter_layer(cmd, &name, args, arg_fetch, dynamic, heredocs, ctx, depth);
                break;
            }
            if !heredocs.is_empty() && cmd.layers.len() > 1 && baseline::is_interpreter(&name) {
                cmd.rules.push(&baseline::SHELL_STDIN);
            }
            let Some(inner) = self.wrapper(cmd, &name, args, &mut cwd, ctx, depth) else {
                break;
            };
            argv = &args[inner..];
            fetch_args = &fetch_args[(1 + inner).min(fetch_args.len())..];
        }
    }

    /// A call of a shell function the script defined: its body again, with these arguments
    /// (`f() { rm "$@"; }; f -rf /`).
    fn function_call(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        args: &[String],
        dynamic: &[&str],
        ctx: &Ctx,
        depth: usize,
    ) {
        cmd.notes
            .push(format!("calls the shell function `{name}` analysed above"));
        if !args.iter().any(|a| dynamic.contains(&a.as_str()))
            && let Some(body) = self.bodies.get(name).cloned()
        {
            cmd.notes.push(format!(
                "analysing the body of `{name}` with the arguments `{}`",
                args.join(" ")
            ));
            self.vars.assign(compute::POSITIONAL, args.join(" "));
            self.script(&body, &mut ctx.derived(), depth + 1);
        }
    }

    /// The commands a program runs itself: the shell commands in its program text
    /// (`scripts`), what `xargs` builds from a known input, what `find -exec` runs.
    fn commands_run_by(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        args: &[String],
        scripts: &[String],
        ctx: &Ctx,
        depth: usize,
    ) {
        for script in scripts {
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
    }

    /// `export`, `declare` and the like: the values they give, and the variables that change
    /// what programs or git do.
    fn declarations(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        args: &[String],
        dynamic: &[&str],
    ) {
        if !matches!(
            name,
            "export" | "declare" | "typeset" | "local" | "readonly"
        ) {
            return;
        }
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

    /// An interpreter, `eval` or `source`: the code it runs, and for `python -m` the module's
    /// program as one more layer.
    #[allow(clippy::too_many_arguments)]
    fn interpreter_layer(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        args: &[String],
        arg_fetch: bool,
        dynamic: &[&str],
        heredocs: &[String],
        ctx: &mut Ctx,
        depth: usize,
    ) {
        if !baseline::is_shell(name)
            && baseline::has_inline_code(name, args)
            && args.iter().any(|a| dynamic.contains(&a.as_str()))
        {
            // Code computed at run time cannot be checked for deletions.
            cmd.rules.push(&baseline::OPAQUE_DESTRUCTION);
            cmd.notes
                .push(format!("{name} runs code computed at run time"));
        }
        self.interpreter(cmd, name, args, arg_fetch, heredocs, ctx, depth);
        // `python -m pytest` runs pytest: rules about the module's program apply.
        if name.starts_with("python")
            && let Some(i) = args.iter().position(|a| a == "-m")
            && let Some(module) = args.get(i + 1)
            && args[..i].iter().all(|a| a.starts_with('-'))
        {
            cmd.layers.push((module.clone(), args[i + 2..].to_vec()));
            cmd.notes
                .push(format!("{name} -m runs the module `{module}`"));
        }
    }

    /// An exec wrapper (`env`, `timeout`, `nice`, ...): what it changes for the program it
    /// runs, and the index in `args` of that program; `None` when there is no next layer.
    fn wrapper(
        &mut self,
        cmd: &mut ShellCommand,
        name: &str,
        args: &[String],
        cwd: &mut Option<String>,
        ctx: &Ctx,
        depth: usize,
    ) -> Option<usize> {
        let w = unwrap(name, args)?;
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
            *cwd = paths::resolve(cwd.as_deref(), dir);
        }
        if let Some(s) = w.split {
            cmd.rules.push(&baseline::DYNAMIC_ARGS);
            cmd.notes.push(format!("{name} -S splits `{s}` at runtime"));
            let joined = std::iter::once(s)
                .chain(args[w.inner.min(args.len())..].iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            self.script(&joined, &mut ctx.clone(), depth + 1);
            return None;
        }
        if w.no_exec || w.inner >= args.len() {
            return None;
        }
        cmd.notes.push(format!("{name} runs `{}`", args[w.inner]));
        Some(w.inner)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn interpreter(
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
            // A program fed as a heredoc, or written by this script, is inline code too.
            let written = args
                .iter()
                .find(|a| !a.starts_with('-'))
                .and_then(|file| paths::resolve(ctx.cwd.as_deref(), file))
                .and_then(|p| self.files.get(&p));
            if heredocs
                .iter()
                .map(String::as_str)
                .chain(written.map(String::as_str))
                .any(baseline::code_destroys)
            {
                cmd.rules.push(&baseline::INLINE_DELETION);
                cmd.notes.push(format!(
                    "the program {name} is given deletes or runs programs"
                ));
            }
            if stdin && heredocs.is_empty() && !ctx.stdin_fetch {
                cmd.rules.push(&baseline::SHELL_STDIN);
                cmd.notes
                    .push(format!("{name} reads its program from stdin"));
                match &ctx.stdin_text {
                    Some(text) if !baseline::code_destroys(text) => {}
                    Some(_) => cmd.rules.push(&baseline::INLINE_DELETION),
                    // A program built at run time: nothing says what it deletes.
                    None => cmd.rules.push(&baseline::OPAQUE_DESTRUCTION),
                }
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
                    if ctx.stdin_text.is_none() {
                        // Commands built at run time (`... | sed 's/^/rm /' | sh`): nothing
                        // says what they delete.
                        cmd.rules.push(&baseline::OPAQUE_DESTRUCTION);
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
    pub(super) fn written_script(
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
    pub(super) fn program_name(&mut self, raw: &str, cmd: &mut ShellCommand) -> String {
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

/// `git -C dir` runs in dir, so its path operands are relative to it; and git anywhere but
/// the workspace root may find a repository the agent wrote as plain files.
fn git_directory(cmd: &mut ShellCommand, args: &[String], cwd: &mut Option<String>) {
    for d in baseline::git_chdir(args) {
        cmd.paths
            .push(path_for(d, true, Access::Read, cwd.as_deref()));
        *cwd = paths::resolve(cwd.as_deref(), d);
        cmd.notes.push(format!("git runs in `{d}`"));
    }
    // Git discovers its repository from where it runs. Anywhere but the root, a
    // repository the agent wrote as plain files (HEAD, objects/, refs/, a config
    // with core.fsmonitor) may be found first, and git runs what its config names.
    if cwd.as_deref() != Some(".") {
        cmd.rules.push(&baseline::GIT_SUBDIRECTORY);
        cmd.notes.push(match cwd {
            Some(dir) => format!(
                "git runs in `{dir}`, not the workspace root: a repository there is not the workspace's own"
            ),
            None => "git runs in a directory known only at run time, so the repository it uses is unknown".to_owned(),
        });
    }
}
