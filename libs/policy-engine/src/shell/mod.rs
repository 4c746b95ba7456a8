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

use crate::baseline::{self, BaselineRule};
use crate::compute;
use crate::paths::{self, Access};

mod command;
mod walk;
mod words;
mod wrappers;

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

#[cfg(test)]
mod tests;
