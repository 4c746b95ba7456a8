//! Rules learned from approvals ("always allow"): their shape, how one is proposed from an
//! asking call, how a set of them lifts later calls of the same shape, and the simulation
//! that refuses a rule which would let an example or an adversarial case through.
//!
//! A rule learned from a `net.connect` is one destination of networked runs ([`destination`]).
//!
//! A learned rule is a human's decision about one *shape* of command, so it only ever turns
//! an `ask` into `auto`, and only for what it covers:
//!
//! - each command of the call that asks must match one of the rule's shapes word for word
//!   (program, subcommand and options literal; only workspace paths and integers are
//!   placeholders), under the same sandbox profile, with no environment addition the rule
//!   did not have, and ask for no reason the rule was not made for (the ask-tier rule ids of
//!   the approved command: `git push origin +main` asks as a force push, which a rule learned
//!   from `git push origin main` does not lift);
//! - every path-level ask must be the policy default for a write inside the workspace that
//!   one of the lifted commands names; any other path rule, anything not fully analysed, and
//!   any other command of the same script still asks;
//! - a `deny` is never lifted.
//!
//! Shapes are written one per line as words: literals shell-quoted when they need it,
//! placeholders bare: `<path:workspace>` (a relative path that stays inside the workspace
//! and is not the workspace root, without glob or expansion characters), `<int>` (decimal
//! digits). Names that matter (remotes, branches, packages, hosts) stay literal, since
//! pushing to another remote is another decision.

use std::collections::{BTreeSet, HashMap};

use toolgate_core::{Tier, ToolKind};

use crate::baseline;
use crate::call::{CallContext, ToolCall};
use crate::engine::{Decision, Policy, RuleMatch, RuleSource};
use crate::network::Host;
use crate::paths;

pub mod destination;

pub use destination::DestinationPattern;

/// The shipped adversarial corpus: one bash script per line; `#` comments and blank lines
/// are ignored. A learned rule that would make any of them `auto` is refused.
pub const ADVERSARIAL_CORPUS: &str = include_str!("../corpus/adversarial.txt");

/// Placeholder for a relative path that stays inside the workspace (not its root).
pub const PATH_PLACEHOLDER: &str = "<path:workspace>";
/// Placeholder for a decimal integer.
pub const INT_PLACEHOLDER: &str = "<int>";

/// One word of a shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Exactly this word.
    Lit(String),
    /// Any decimal integer (1 to 18 digits).
    Int,
    /// A relative path inside the workspace, other than the workspace root.
    WorkspacePath,
}

/// One command shape: its words and the ask-tier rules it was approved over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The words, program first.
    pub words: Vec<Slot>,
    /// Ids of the ask-tier rules the approved command asked for (sorted): a command asking
    /// for any other reason is not lifted.
    pub lifts: Vec<String>,
}

/// What a learned rule matches: the shapes of a command, or one destination of networked
/// runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Learned from a `process.run`.
    Commands(CommandPattern),
    /// Learned from a `net.connect` (see [`destination`]).
    Destination(DestinationPattern),
}

/// What a rule learned from a `process.run` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPattern {
    /// The sandbox profile of the approved call (`""`: the executor's default).
    pub profile: String,
    /// Environment additions the approved call had (names); a call may add only these.
    pub env: Vec<String>,
    /// The command shapes, one per asking command of the approved call.
    pub shapes: Vec<Shape>,
}

/// Where a learned rule applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Only calls of this agent session.
    Session(String),
    /// Only calls from executors with exactly these workspace labels (see [`workspace_key`]).
    Workspace(String),
    /// Every call.
    All,
}

impl Scope {
    /// `session`, `workspace` or `all`.
    pub fn kind(&self) -> &'static str {
        match self {
            Scope::Session(_) => "session",
            Scope::Workspace(_) => "workspace",
            Scope::All => "all",
        }
    }

    /// The session id or workspace key; empty for `all`.
    pub fn value(&self) -> &str {
        match self {
            Scope::Session(v) | Scope::Workspace(v) => v,
            Scope::All => "",
        }
    }

    /// Rebuilds a scope from its stored kind and value.
    pub fn from_parts(kind: &str, value: &str) -> Result<Scope, String> {
        match kind {
            "session" => Ok(Scope::Session(value.to_owned())),
            "workspace" => Ok(Scope::Workspace(value.to_owned())),
            "all" => Ok(Scope::All),
            other => Err(format!(
                "unknown scope `{other}`; expected session, workspace or all"
            )),
        }
    }

    fn matches(&self, ctx: &CallContext) -> bool {
        match self {
            Scope::Session(s) => *s == ctx.session_id,
            Scope::Workspace(w) => *w == workspace_key(ctx),
            Scope::All => true,
        }
    }
}

/// The workspace a call comes from, as the policy knows it: the executor's workspace labels,
/// `k=v` sorted and joined with `,` (empty when it sends none, as `toolgate up` does).
pub fn workspace_key(ctx: &CallContext) -> String {
    ctx.labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A learned rule in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedRule {
    /// The ledger's id; decisions name it `learned.<id>`.
    pub id: String,
    /// What it matches.
    pub pattern: Pattern,
    /// Where it applies.
    pub scope: Scope,
    /// The approver who made it.
    pub created_by: String,
    /// The approval it was learned from.
    pub source_approval: String,
    /// When it stops applying (microseconds since the epoch); `None`: until revoked.
    pub expires_at_micros: Option<i64>,
}

impl LearnedRule {
    /// The rule id decisions report: `learned.<id>`.
    pub fn rule_id(&self) -> String {
        format!("learned.{}", self.id)
    }
}

/// Why no rule can be learned from a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The call was denied; a deny is never approvable, let alone learnable.
    #[error("the call was denied ({rule}); a learned rule never lifts a deny")]
    Denied {
        /// The deciding rule.
        rule: String,
    },
    /// Not a `process.run`, nothing asks, or the asks are not ones a rule may lift.
    #[error("{why}")]
    NotLearnable {
        /// What a human can do instead.
        why: String,
    },
    /// Part of the call depends on runtime expansion or could not be analysed.
    #[error(
        "`{command}` is not fully analysed ({why}); a rule can only cover what was checked, approve it once instead"
    )]
    NotAnalyzed {
        /// The command (or `script`).
        command: String,
        /// What was not analysed.
        why: String,
    },
    /// The command starts with a program that runs other code given to it.
    #[error(
        "`{command}` starts with `{prefix}`, which runs code given to it ({why}); such calls are approved one at a time"
    )]
    BannedPrefix {
        /// The command.
        command: String,
        /// The banned prefix.
        prefix: String,
        /// Why it is banned.
        why: &'static str,
    },
    /// The rule would cover more than the call's own verb.
    #[error("a rule for `{command}` would be broader than its verb: {why}")]
    TooBroad {
        /// The command.
        command: String,
        /// Why.
        why: String,
    },
    /// With the rule added, a policy example or an adversarial case would become `auto`.
    #[error(
        "the rule would turn {origin} `{case}` from {was} into auto; approve this call once instead"
    )]
    FlipsCase {
        /// `policy example` or `adversarial case`.
        origin: &'static str,
        /// The case, as written.
        case: String,
        /// Its tier without the rule.
        was: Tier,
    },
}

/// Rule ids that mark a part the analysis could not check, or an environment that changes
/// what runs: never lifted, and a call asking for one of them teaches nothing.
fn never_liftable(id: &str) -> bool {
    [
        &baseline::DYNAMIC_PROGRAM,
        &baseline::DYNAMIC_ARGS,
        &baseline::LOADER,
        &baseline::SENSITIVE_ENV,
        &baseline::UNPARSED,
        &baseline::BUDGET,
        &baseline::UNKNOWN_PATH,
        &baseline::RECURSIVE_FUNCTION,
        &baseline::GIT_FOREIGN,
    ]
    .iter()
    .any(|r| r.id == id)
}

/// The tier each matched rule id carries in `d`.
fn tier_of(d: &Decision, id: &str) -> Option<Tier> {
    d.matches.iter().find(|m| m.rule_id == id).map(|m| m.tier)
}

/// Ask-tier rule ids of one command, sorted.
fn ask_ids(d: &Decision, rule_ids: &[String]) -> Vec<String> {
    let set: BTreeSet<&str> = rule_ids
        .iter()
        .map(String::as_str)
        .filter(|id| tier_of(d, id) == Some(Tier::Ask))
        .collect();
    set.into_iter().map(str::to_owned).collect()
}

// ---------------------------------------------------------------------------------------------
// Words and placeholders.

/// Characters that make a word something other than one plain path.
fn is_plain_path_char(c: char) -> bool {
    !(c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '*' | '?'
                | '['
                | ']'
                | '{'
                | '}'
                | '$'
                | '`'
                | '\''
                | '"'
                | '\\'
                | '~'
                | '!'
                | ';'
                | '&'
                | '|'
                | '<'
                | '>'
                | '('
                | ')'
                | '#'
                | '='
                | ':'
                | '+'
                | '@'
        ))
}

/// The workspace path `word` names from `cwd`, when it is a plain relative path that stays
/// inside the workspace and is not its root.
fn workspace_path(word: &str, cwd: &str) -> Option<String> {
    if word.is_empty()
        || word.starts_with('-')
        || word.starts_with('/')
        || !word.chars().all(is_plain_path_char)
    {
        return None;
    }
    let resolved = paths::resolve(Some(cwd), word)?;
    (paths::inside_workspace(&resolved) && resolved != ".").then_some(resolved)
}

fn is_int(word: &str) -> bool {
    !word.is_empty() && word.len() <= 18 && word.bytes().all(|b| b.is_ascii_digit())
}

impl Slot {
    fn matches(&self, word: &str, cwd: &str) -> bool {
        match self {
            Slot::Lit(l) => l == word,
            Slot::Int => is_int(word),
            Slot::WorkspacePath => workspace_path(word, cwd).is_some(),
        }
    }

    /// The word as the rule shows it.
    fn render(&self) -> String {
        match self {
            Slot::Lit(l) => quote(l),
            Slot::Int => INT_PLACEHOLDER.to_owned(),
            Slot::WorkspacePath => PATH_PLACEHOLDER.to_owned(),
        }
    }

    /// The stored form: `=literal`, `<int>` or `<path:workspace>`.
    fn encode(&self) -> String {
        match self {
            Slot::Lit(l) => format!("={l}"),
            Slot::Int => INT_PLACEHOLDER.to_owned(),
            Slot::WorkspacePath => PATH_PLACEHOLDER.to_owned(),
        }
    }

    fn decode(s: &str) -> Result<Slot, String> {
        if let Some(l) = s.strip_prefix('=') {
            return Ok(Slot::Lit(l.to_owned()));
        }
        match s {
            INT_PLACEHOLDER => Ok(Slot::Int),
            PATH_PLACEHOLDER => Ok(Slot::WorkspacePath),
            other => Err(format!("unknown placeholder `{other}`")),
        }
    }
}

/// Shell-quotes a literal when it needs it (and always when it could read as a placeholder),
/// escaping control characters so the rule is safe to print on a terminal.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+^".contains(c));
    if plain {
        return word.to_owned();
    }
    let mut out = String::from("'");
    for c in word.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            c if c.is_control() => out.push_str(&c.escape_default().to_string()),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

impl Shape {
    /// Whether `argv` (run from `cwd`) has this shape.
    pub fn matches(&self, argv: &[String], cwd: &str) -> bool {
        argv.len() == self.words.len()
            && self
                .words
                .iter()
                .zip(argv)
                .all(|(slot, word)| slot.matches(word, cwd))
    }

    fn program(&self) -> Option<&str> {
        match self.words.first() {
            Some(Slot::Lit(p)) => Some(p),
            _ => None,
        }
    }
}

impl Pattern {
    /// The sandbox profile the rule applies under (`""`: the executor's default).
    pub fn profile(&self) -> &str {
        match self {
            Pattern::Commands(c) => &c.profile,
            Pattern::Destination(d) => &d.profile,
        }
    }

    /// The command shapes; none for a destination.
    pub fn shapes(&self) -> &[Shape] {
        match self {
            Pattern::Commands(c) => &c.shapes,
            Pattern::Destination(_) => &[],
        }
    }

    /// The rule as an approver reads it.
    pub fn to_text(&self) -> String {
        match self {
            Pattern::Commands(c) => c.to_text(),
            Pattern::Destination(d) => d.to_text(),
        }
    }

    /// The stored form (compact JSON), read back by [`Pattern::decode`].
    pub fn encode(&self) -> String {
        match self {
            Pattern::Commands(c) => c.encode(),
            Pattern::Destination(d) => d.encode(),
        }
    }

    /// Parses the stored form. A form without `kind` is a command pattern (as every rule
    /// stored before destinations were learned).
    pub fn decode(text: &str) -> Result<Pattern, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if v.get("v").and_then(serde_json::Value::as_u64) != Some(1) {
            return Err("unknown learned-rule pattern version".into());
        }
        match v.get("kind").map(|k| k.as_str()) {
            None | Some(Some("commands")) => CommandPattern::decode(&v).map(Pattern::Commands),
            Some(Some(destination::KIND)) => {
                DestinationPattern::decode(&v).map(Pattern::Destination)
            }
            Some(_) => Err("unknown learned-rule pattern kind".into()),
        }
    }
}

impl CommandPattern {
    /// The rule as an approver reads it: one command shape per line, then the conditions.
    pub fn to_text(&self) -> String {
        let mut out = Vec::new();
        for s in &self.shapes {
            let words: Vec<String> = s.words.iter().map(Slot::render).collect();
            out.push(words.join(" "));
        }
        let profile = if self.profile.is_empty() {
            "the executor's default".to_owned()
        } else {
            quote(&self.profile)
        };
        let env = if self.env.is_empty() {
            "none".to_owned()
        } else {
            self.env
                .iter()
                .map(|e| quote(e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let lifts: BTreeSet<&str> = self
            .shapes
            .iter()
            .flat_map(|s| s.lifts.iter().map(String::as_str))
            .collect();
        out.push(format!(
            "  (sandbox profile: {profile}; environment additions: {env}; lifts: {})",
            lifts.into_iter().collect::<Vec<_>>().join(", ")
        ));
        out.join("\n")
    }

    fn encode(&self) -> String {
        serde_json::json!({
            "v": 1,
            "profile": self.profile,
            "env": self.env,
            "shapes": self.shapes.iter().map(|s| serde_json::json!({
                "words": s.words.iter().map(Slot::encode).collect::<Vec<_>>(),
                "lifts": s.lifts,
            })).collect::<Vec<_>>(),
        })
        .to_string()
    }

    fn decode(v: &serde_json::Value) -> Result<CommandPattern, String> {
        let strings = |v: Option<&serde_json::Value>| -> Result<Vec<String>, String> {
            v.and_then(serde_json::Value::as_array)
                .ok_or("expected a list")?
                .iter()
                .map(|x| x.as_str().map(str::to_owned).ok_or("expected a string"))
                .collect::<Result<_, _>>()
                .map_err(str::to_owned)
        };
        let mut shapes = Vec::new();
        for s in v
            .get("shapes")
            .and_then(serde_json::Value::as_array)
            .ok_or("shapes: expected a list")?
        {
            let words = strings(s.get("words"))?
                .iter()
                .map(|w| Slot::decode(w))
                .collect::<Result<Vec<_>, _>>()?;
            if !matches!(words.first(), Some(Slot::Lit(_))) {
                return Err("a shape starts with its literal program".into());
            }
            shapes.push(Shape {
                words,
                lifts: strings(s.get("lifts"))?,
            });
        }
        if shapes.is_empty() {
            return Err("a pattern has at least one shape".into());
        }
        Ok(CommandPattern {
            profile: v
                .get("profile")
                .and_then(serde_json::Value::as_str)
                .ok_or("profile: expected a string")?
                .to_owned(),
            env: strings(v.get("env"))?,
            shapes,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Banned prefixes and verbs.

/// Programs whose arguments are other programs or code: a rule over them would cover
/// whatever they are given.
const BANNED_PROGRAMS: &[(&str, &str)] = &[
    ("sh", "a shell"),
    ("bash", "a shell"),
    ("dash", "a shell"),
    ("zsh", "a shell"),
    ("ksh", "a shell"),
    ("mksh", "a shell"),
    ("yash", "a shell"),
    ("fish", "a shell"),
    ("csh", "a shell"),
    ("tcsh", "a shell"),
    ("rbash", "a shell"),
    ("busybox", "a shell and every applet"),
    ("env", "runs the program it is given"),
    ("xargs", "runs the program it is given"),
    ("eval", "runs the text it is given"),
    ("exec", "runs the program it is given"),
    ("source", "runs the file it is given"),
    (".", "runs the file it is given"),
    ("command", "runs the program it is given"),
    ("builtin", "runs the builtin it is given"),
    ("nohup", "runs the program it is given"),
    ("setsid", "runs the program it is given"),
    ("timeout", "runs the program it is given"),
    ("nice", "runs the program it is given"),
    ("ionice", "runs the program it is given"),
    ("stdbuf", "runs the program it is given"),
    ("time", "runs the program it is given"),
    ("watch", "runs the program it is given"),
    ("parallel", "runs the programs it is given"),
    ("flock", "runs the program it is given"),
    ("chrt", "runs the program it is given"),
    ("taskset", "runs the program it is given"),
    ("script", "runs the program it is given"),
    ("strace", "runs the program it is given"),
    ("ltrace", "runs the program it is given"),
    ("gdb", "runs the program it is given"),
    ("valgrind", "runs the program it is given"),
    ("sudo", "privilege escalation"),
    ("su", "privilege escalation"),
    ("doas", "privilege escalation"),
    ("pkexec", "privilege escalation"),
    ("runuser", "privilege escalation"),
    ("setpriv", "privilege change"),
    ("chroot", "sandbox change"),
    ("unshare", "sandbox change"),
    ("nsenter", "sandbox change"),
    ("capsh", "privilege change"),
    ("ssh", "runs commands on another host"),
    ("scp", "copies to and from another host"),
    ("sftp", "copies to and from another host"),
    ("rsh", "runs commands on another host"),
    ("telnet", "a raw connection"),
    ("nc", "a raw connection"),
    ("ncat", "a raw connection"),
    ("netcat", "a raw connection"),
    ("socat", "a raw connection"),
    ("npx", "downloads and runs a package"),
    ("bunx", "downloads and runs a package"),
    ("pnpx", "downloads and runs a package"),
    ("uvx", "downloads and runs a package"),
    ("awk", "its argument is a program"),
    ("gawk", "its argument is a program"),
    ("mawk", "its argument is a program"),
    ("nawk", "its argument is a program"),
];

/// Two-word prefixes that run what they are given.
const BANNED_SUBCOMMANDS: &[(&str, &str, &str)] = &[
    ("npm", "exec", "downloads and runs a package"),
    ("pnpm", "dlx", "downloads and runs a package"),
    ("pnpm", "exec", "runs the program it is given"),
    ("yarn", "dlx", "downloads and runs a package"),
    ("pipx", "run", "downloads and runs a package"),
    ("docker", "exec", "runs the program it is given"),
    ("kubectl", "exec", "runs the program it is given"),
    ("deno", "eval", "its argument is a program"),
];

/// Interpreters that take inline code with an option (`-c`, `-e`, ...).
fn is_interpreter(name: &str) -> bool {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    matches!(
        stem,
        "python"
            | "pypy"
            | "perl"
            | "ruby"
            | "node"
            | "nodejs"
            | "deno"
            | "bun"
            | "php"
            | "lua"
            | "luajit"
            | "Rscript"
            | "R"
            | "julia"
            | "tclsh"
            | "wish"
            | "expect"
            | "osascript"
            | "pwsh"
            | "powershell"
            | "guile"
            | "racket"
            | "sbcl"
            | "ghci"
            | "irb"
            | "jshell"
    )
}

/// Whether an interpreter's argument gives it inline code: `-c`, `-e`, `-E`, `-r`, `-p`,
/// `-x` in a short cluster (`-Ic`, `-ne`), or `--eval`, `--command`, `--print`, `--exec`.
fn inline_code_option(arg: &str) -> bool {
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or(long);
        return ["eval", "command", "print", "exec", "execute", "interactive"]
            .iter()
            .any(|o| o.starts_with(name) && !name.is_empty());
    }
    arg.strip_prefix('-').is_some_and(|c| {
        c.chars()
            .any(|ch| matches!(ch, 'c' | 'e' | 'E' | 'r' | 'p' | 'x' | 'i'))
    })
}

/// Why `argv` may not start a learned rule, if it may not.
fn banned(argv: &[String]) -> Option<(String, &'static str)> {
    let program = argv.first()?;
    let name = program.rsplit('/').next().unwrap_or(program);
    if let Some((p, why)) = BANNED_PROGRAMS.iter().find(|(p, _)| *p == name) {
        return Some(((*p).to_owned(), *why));
    }
    if let Some(sub) = argv.get(1)
        && let Some((p, s, why)) = BANNED_SUBCOMMANDS
            .iter()
            .find(|(p, s, _)| *p == name && s == sub)
    {
        return Some((format!("{p} {s}"), *why));
    }
    if is_interpreter(name)
        && let Some(opt) = argv[1..]
            .iter()
            .take_while(|a| a.starts_with('-') && *a != "--")
            .find(|a| inline_code_option(a))
    {
        return Some((format!("{name} {opt}"), "an interpreter given inline code"));
    }
    if name == "find"
        && let Some(opt) = argv[1..].iter().find(|a| {
            matches!(
                a.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir" | "-fprint" | "-fprintf" | "-fls"
            )
        })
    {
        return Some((format!("find {opt}"), "find runs the command it is given"));
    }
    if name == "git" {
        // Global options before the subcommand that change what git runs or reads.
        for a in &argv[1..] {
            if !a.starts_with('-') {
                break;
            }
            if a == "-c"
                || a.starts_with("--config-env")
                || a.starts_with("--exec-path")
                || a == "-C"
                || a.starts_with("--git-dir")
                || a.starts_with("--work-tree")
            {
                return Some((
                    format!("git {a}"),
                    "git runs programs its configuration names",
                ));
            }
        }
    }
    None
}

/// Programs whose first operand is a verb: a rule must keep it literal.
const SUBCOMMAND_PROGRAMS: &[&str] = &[
    "git",
    "cargo",
    "npm",
    "pnpm",
    "yarn",
    "bun",
    "go",
    "pip",
    "pip3",
    "uv",
    "poetry",
    "gh",
    "glab",
    "docker",
    "podman",
    "kubectl",
    "helm",
    "terraform",
    "tofu",
    "aws",
    "gcloud",
    "az",
    "apt",
    "apt-get",
    "brew",
    "make",
    "just",
    "rustup",
    "twine",
    "gem",
    "dotnet",
    "mvn",
    "gradle",
    "systemctl",
    "svn",
    "hg",
];

// ---------------------------------------------------------------------------------------------
// Proposal.

/// Proposes the narrowest rule covering `call`, which `decision` (the policy's answer for it,
/// without learned rules) asked about. Does not simulate; see [`check_cases`].
pub fn propose(call: &ToolCall, decision: &Decision) -> Result<Pattern, Refusal> {
    if decision.tier == Tier::Deny {
        return Err(Refusal::Denied {
            rule: decision
                .deciding_rule()
                .map_or_else(|| "default".to_owned(), |m| m.rule_id.clone()),
        });
    }
    if call.tool == ToolKind::NetConnect {
        return destination::propose(call, decision).map(Pattern::Destination);
    }
    if call.tool != ToolKind::ProcessRun {
        return Err(Refusal::NotLearnable {
            why: format!(
                "rules are learned from process.run calls, not {}; approve this call once instead",
                call.tool
            ),
        });
    }
    if decision.tier == Tier::Auto {
        return Err(Refusal::NotLearnable {
            why: "the policy already allows this call; there is nothing to learn".into(),
        });
    }
    let redacted = |w: &str| w.contains(toolgate_core::REDACTED);
    let cwd = call.cwd.as_deref().unwrap_or(".");
    // A banned prefix anywhere in the call (its argv, or any command the analysis found,
    // asking or not, wrappers included) refuses it: the rule would be learned from code that
    // program was given.
    let argvs = call
        .argv
        .iter()
        .chain(decision.commands.iter().map(|c| &c.argv));
    for argv in argvs {
        if let Some((prefix, why)) = banned(argv) {
            return Err(Refusal::BannedPrefix {
                command: argv.join(" "),
                prefix,
                why,
            });
        }
    }
    let mut shapes: Vec<Shape> = Vec::new();
    for c in &decision.commands {
        if c.tier != Tier::Ask {
            continue;
        }
        let command = c.argv.join(" ");
        if !c.fully_analyzed {
            return Err(Refusal::NotAnalyzed {
                command,
                why: "part of it depends on runtime expansion".into(),
            });
        }
        let asks = ask_ids(decision, &c.rule_ids);
        if let Some(id) = asks.iter().find(|id| never_liftable(id)) {
            return Err(Refusal::NotAnalyzed {
                command,
                why: format!("it asks because of {id}"),
            });
        }
        if c.argv.iter().any(|w| redacted(w)) {
            return Err(Refusal::NotLearnable {
                why: format!(
                    "`{command}` contained a secret, which the ledger redacted; a rule cannot be written from it"
                ),
            });
        }
        let Some(program) = c.argv.first() else {
            continue;
        };
        if program.contains('/') {
            return Err(Refusal::TooBroad {
                command,
                why: format!(
                    "it names its program by path (`{program}`), whose content a rule cannot bind; approve it once"
                ),
            });
        }
        let mut words = vec![Slot::Lit(program.clone())];
        for w in &c.argv[1..] {
            words.push(if w.starts_with('-') {
                Slot::Lit(w.clone())
            } else if is_int(w) {
                Slot::Int
            } else if let Some(p) = workspace_path(w, cwd)
                && decision.paths.iter().any(|e| e.path == p)
            {
                Slot::WorkspacePath
            } else {
                Slot::Lit(w.clone())
            });
        }
        if SUBCOMMAND_PROGRAMS.contains(&program.as_str()) {
            // The verb is the first operand (after git's global options).
            let verb = c.argv[1..]
                .iter()
                .position(|a| !a.starts_with('-'))
                .map(|i| i + 1);
            match verb {
                None => {
                    return Err(Refusal::TooBroad {
                        command,
                        why: format!("`{program}` without a subcommand names no verb"),
                    });
                }
                Some(i) if !matches!(words[i], Slot::Lit(_)) => {
                    return Err(Refusal::TooBroad {
                        command,
                        why: format!("its verb `{}` would become a placeholder", c.argv[i]),
                    });
                }
                Some(_) => {}
            }
        }
        let shape = Shape { words, lifts: asks };
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    if shapes.is_empty() {
        return Err(Refusal::NotLearnable {
            why: format!(
                "no command of this call asks on its own; what asks is not something a rule may lift: {}",
                decision.message
            ),
        });
    }
    let pattern = Pattern::Commands(CommandPattern {
        profile: call.sandbox_profile.clone().unwrap_or_default(),
        env: call.env.keys().cloned().collect(),
        shapes,
    });
    // The rule must lift the call it is learned from, or it would teach nothing.
    let probe = LearnedSet::new(
        0,
        vec![LearnedRule {
            id: "proposed".into(),
            pattern: pattern.clone(),
            scope: Scope::All,
            created_by: String::new(),
            source_approval: String::new(),
            expires_at_micros: None,
        }],
    );
    let mut lifted = decision.clone();
    if probe
        .apply(&mut lifted, call, &CallContext::default(), 0)
        .is_none()
    {
        return Err(Refusal::NotLearnable {
            why: format!(
                "a rule over its commands would still leave this call asking (paths outside the workspace, protected paths or other parts ask on their own): {}",
                decision.message
            ),
        });
    }
    Ok(pattern)
}

// ---------------------------------------------------------------------------------------------
// Matching.

/// The learned rules in force, indexed by program. Built once per ledger revision.
#[derive(Debug, Default)]
pub struct LearnedSet {
    revision: u64,
    rules: Vec<LearnedRule>,
    by_program: HashMap<String, Vec<(usize, usize)>>,
    /// Destination rules by host and port.
    by_destination: HashMap<(String, u16), Vec<usize>>,
}

/// What lifted a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifted {
    /// `learned.<id>`.
    pub rule_id: String,
    /// Who made the rule.
    pub created_by: String,
}

impl LearnedSet {
    /// Indexes `rules` (the active ones of ledger revision `revision`).
    pub fn new(revision: u64, rules: Vec<LearnedRule>) -> LearnedSet {
        let mut by_program: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
        let mut by_destination: HashMap<(String, u16), Vec<usize>> = HashMap::new();
        for (r, rule) in rules.iter().enumerate() {
            for (s, shape) in rule.pattern.shapes().iter().enumerate() {
                if let Some(p) = shape.program() {
                    by_program.entry(p.to_owned()).or_default().push((r, s));
                }
            }
            if let Pattern::Destination(d) = &rule.pattern {
                by_destination
                    .entry((d.host.clone(), d.port))
                    .or_default()
                    .push(r);
            }
        }
        LearnedSet {
            revision,
            rules,
            by_program,
            by_destination,
        }
    }

    /// The ledger revision this set was built from.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The rules.
    pub fn rules(&self) -> &[LearnedRule] {
        &self.rules
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The effective policy version of a decision a learned rule made: the document's, plus
    /// this set's revision.
    pub fn version_of(&self, document_version: &str) -> String {
        format!("{document_version}+learned.r{}", self.revision)
    }

    /// Lifts `decision` (for `call` in `ctx`, its final sandbox profile in `call`) from `ask`
    /// to `auto` when learned rules cover every part that asks. Rules expired at `now_micros`
    /// (microseconds since the epoch) do not apply. Returns the rule that lifted it.
    pub fn apply(
        &self,
        decision: &mut Decision,
        call: &ToolCall,
        ctx: &CallContext,
        now_micros: i64,
    ) -> Option<Lifted> {
        if self.rules.is_empty() || decision.tier != Tier::Ask {
            return None;
        }
        match call.tool {
            ToolKind::ProcessRun => self.apply_commands(decision, call, ctx, now_micros),
            ToolKind::NetConnect => {
                let usable = |r: &LearnedRule| {
                    r.expires_at_micros.is_none_or(|e| now_micros < e) && r.scope.matches(ctx)
                };
                let host = match Host::parse(call.host.as_deref()?) {
                    Host::Name(n) => n,
                    Host::Ip(_) => return None,
                };
                let port = u16::try_from(call.port?).ok()?;
                let candidates = self.by_destination.get(&(host, port))?;
                let (r, d) = destination::lifting(
                    decision,
                    call,
                    candidates
                        .iter()
                        .map(|r| &self.rules[*r])
                        .filter(|r| usable(r)),
                )?;
                let lifted = Lifted {
                    rule_id: r.rule_id(),
                    created_by: r.created_by.clone(),
                };
                destination::lift(decision, r, d, &lifted);
                decision.policy_version = self.version_of(&decision.policy_version);
                Some(lifted)
            }
            _ => None,
        }
    }

    fn apply_commands(
        &self,
        decision: &mut Decision,
        call: &ToolCall,
        ctx: &CallContext,
        now_micros: i64,
    ) -> Option<Lifted> {
        // Something asks that no match explains (rules that disagree on the profile): a
        // human decides.
        let explained = decision
            .matches
            .iter()
            .map(|m| m.tier)
            .chain(decision.commands.iter().map(|c| c.tier))
            .chain(decision.paths.iter().map(|p| p.tier))
            .max();
        if explained != Some(Tier::Ask) {
            return None;
        }
        let profile = call.sandbox_profile.as_deref().unwrap_or_default();
        let cwd = call.cwd.as_deref().unwrap_or(".");
        let usable = |r: &LearnedRule| {
            r.expires_at_micros.is_none_or(|e| now_micros < e)
                && r.scope.matches(ctx)
                && matches!(&r.pattern, Pattern::Commands(p)
                    if p.profile == profile && call.env.keys().all(|k| p.env.contains(k)))
        };
        let mut lifted_by: Vec<Option<usize>> = vec![None; decision.commands.len()];
        for (i, c) in decision.commands.iter().enumerate() {
            if c.tier != Tier::Ask || !c.fully_analyzed {
                continue;
            }
            let asks = ask_ids(decision, &c.rule_ids);
            if asks.iter().any(|id| never_liftable(id)) {
                continue;
            }
            let Some(candidates) = c.argv.first().and_then(|p| self.by_program.get(p)) else {
                continue;
            };
            lifted_by[i] = candidates.iter().find_map(|&(r, s)| {
                let rule = &self.rules[r];
                let shape = &rule.pattern.shapes()[s];
                (usable(rule)
                    && shape.matches(&c.argv, cwd)
                    && asks.iter().all(|a| shape.lifts.contains(a)))
                .then_some(r)
            });
        }
        let first = lifted_by.iter().flatten().next().copied()?;
        // Everything else that asks must be covered too.
        let mut named: Vec<String> = Vec::new();
        for (c, by) in decision.commands.iter().zip(&lifted_by) {
            match by {
                Some(_) => named.extend(c.argv[1..].iter().filter_map(|w| workspace_path(w, cwd))),
                None if c.tier >= Tier::Ask => return None,
                None => {}
            }
        }
        let mut lifted_paths = vec![false; decision.paths.len()];
        for (i, p) in decision.paths.iter().enumerate() {
            if p.tier < Tier::Ask {
                continue;
            }
            let only_default = p.rule_ids.iter().all(|id| id == "default");
            if !(only_default
                && p.access == paths::Access::Write
                && paths::inside_workspace(&p.path)
                && p.path != "."
                && named.contains(&p.path))
            {
                return None;
            }
            lifted_paths[i] = true;
        }
        let covered: BTreeSet<&str> = decision
            .commands
            .iter()
            .zip(&lifted_by)
            .filter(|(_, by)| by.is_some())
            .flat_map(|(c, _)| c.rule_ids.iter().map(String::as_str))
            .chain(
                decision
                    .paths
                    .iter()
                    .zip(&lifted_paths)
                    .filter(|(_, l)| **l)
                    .flat_map(|(p, _)| p.rule_ids.iter().map(String::as_str)),
            )
            .collect();
        let uncovered = |m: &RuleMatch| -> bool {
            if m.tier < Tier::Ask {
                return false;
            }
            if never_liftable(&m.rule_id) || !covered.contains(m.rule_id.as_str()) {
                return true;
            }
            // Also asked by a command or path that stays as it is.
            decision
                .commands
                .iter()
                .zip(&lifted_by)
                .any(|(c, by)| by.is_none() && c.rule_ids.contains(&m.rule_id))
                || decision
                    .paths
                    .iter()
                    .zip(&lifted_paths)
                    .any(|(p, l)| !*l && p.rule_ids.contains(&m.rule_id))
        };
        if decision.matches.iter().any(uncovered) {
            return None;
        }

        let rule = &self.rules[first];
        let lifted = Lifted {
            rule_id: rule.rule_id(),
            created_by: rule.created_by.clone(),
        };
        for (c, by) in decision.commands.iter_mut().zip(&lifted_by) {
            if let Some(r) = by {
                let id = self.rules[*r].rule_id();
                c.tier = Tier::Auto;
                c.notes.push(format!(
                    "lifted to auto by {id}, learned from approval {} by {}",
                    self.rules[*r].source_approval, self.rules[*r].created_by
                ));
                c.rule_ids.push(id);
            }
        }
        for (p, l) in decision.paths.iter_mut().zip(&lifted_paths) {
            if *l {
                p.tier = Tier::Auto;
                p.rule_ids.push(lifted.rule_id.clone());
            }
        }
        let mut used: Vec<usize> = lifted_by.iter().flatten().copied().collect();
        used.sort_unstable();
        used.dedup();
        let matches: Vec<RuleMatch> = used
            .iter()
            .map(|r| {
                let rule = &self.rules[*r];
                RuleMatch {
                    rule_id: rule.rule_id(),
                    tier: Tier::Auto,
                    reason: format!(
                        "learned from approval {} by {}: {}",
                        rule.source_approval,
                        rule.created_by,
                        rule.pattern
                            .shapes()
                            .iter()
                            .map(|s| s
                                .words
                                .iter()
                                .map(Slot::render)
                                .collect::<Vec<_>>()
                                .join(" "))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                    source: RuleSource::User,
                    contained: None,
                }
            })
            .collect();
        lift_to_auto(decision, matches, &lifted);
        decision.policy_version = self.version_of(&decision.policy_version);
        Some(lifted)
    }
}

// ---------------------------------------------------------------------------------------------
// Simulation.

/// One case the simulation classifies.
#[derive(Debug, Clone)]
pub struct Case {
    /// `policy example` or `adversarial case`.
    pub source: &'static str,
    /// The case as written (the script, argv or path).
    pub label: String,
    /// The call.
    pub call: ToolCall,
    /// Its context.
    pub ctx: CallContext,
}

/// The cases of the shipped adversarial corpus.
pub fn corpus_cases() -> Vec<Case> {
    ADVERSARIAL_CORPUS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut call = ToolCall::new(ToolKind::ProcessRun);
            call.script = Some(l.to_owned());
            Case {
                source: "adversarial case",
                label: l.to_owned(),
                call,
                ctx: CallContext::default(),
            }
        })
        .collect()
}

/// The `[[example]]`s of a policy document (`text`, already valid as a policy).
pub fn example_cases(text: &str) -> Result<Vec<Case>, crate::Error> {
    let parsed = crate::document::parse(text)?;
    let mut out = Vec::new();
    for (_, ex) in parsed.examples {
        let tool = match &ex.tool {
            Some(t) => match t.get_ref().parse::<ToolKind>() {
                Ok(k) => k,
                Err(_) => continue,
            },
            None => ToolKind::ProcessRun,
        };
        let mut call = ToolCall::new(tool);
        call.script.clone_from(&ex.script);
        call.argv.clone_from(&ex.argv);
        call.path.clone_from(&ex.path);
        call.cwd.clone_from(&ex.cwd);
        let label = ex
            .script
            .clone()
            .or_else(|| ex.argv.as_ref().map(|a| a.join(" ")))
            .or_else(|| ex.path.as_ref().map(|p| format!("{tool} {p}")))
            .unwrap_or_else(|| tool.to_string());
        out.push(Case {
            source: "policy example",
            label,
            call,
            ctx: CallContext {
                session_id: ex.session.clone().unwrap_or_default(),
                principal: ex.principal.clone().unwrap_or_default(),
                labels: ex.labels.clone(),
            },
        });
    }
    Ok(out)
}

/// Refuses `candidate` when, added to `existing` (all scopes and expiries ignored: the
/// simulation asks what the rules could ever do), it turns any of `cases` from ask or deny
/// into auto under `policy`.
pub fn check_cases(
    policy: &Policy,
    existing: &[LearnedRule],
    candidate: &Pattern,
    cases: &[Case],
) -> Result<(), Refusal> {
    let everywhere = |r: &LearnedRule| LearnedRule {
        scope: Scope::All,
        expires_at_micros: None,
        ..r.clone()
    };
    let before = LearnedSet::new(0, existing.iter().map(everywhere).collect());
    let mut with: Vec<LearnedRule> = existing.iter().map(everywhere).collect();
    with.push(LearnedRule {
        id: "proposed".into(),
        pattern: candidate.clone(),
        scope: Scope::All,
        created_by: String::new(),
        source_approval: String::new(),
        expires_at_micros: None,
    });
    let after = LearnedSet::new(0, with);
    for case in cases {
        let decision = policy.classify(&case.call, &case.ctx);
        // Cases run under whatever profile the rule was learned for.
        let mut call = case.call.clone();
        call.sandbox_profile =
            (!candidate.profile().is_empty()).then(|| candidate.profile().to_owned());
        if let Some(p) = &decision.sandbox_profile {
            call.sandbox_profile = Some(p.clone());
        }
        let mut was = decision.clone();
        before.apply(&mut was, &call, &case.ctx, 0);
        if was.tier == Tier::Auto {
            continue;
        }
        let mut now = decision;
        after.apply(&mut now, &call, &case.ctx, 0);
        if now.tier == Tier::Auto {
            return Err(Refusal::FlipsCase {
                origin: case.source,
                case: case.label.clone(),
                was: was.tier,
            });
        }
    }
    Ok(())
}

/// Makes `decision` the `auto` that the learned rule `lifted` turns it into: the learned
/// rules' `matches` first, and a message that names the rule and what it lifted.
pub(crate) fn lift_to_auto(decision: &mut Decision, mut matches: Vec<RuleMatch>, lifted: &Lifted) {
    matches.append(&mut decision.matches);
    decision.matches = matches;
    decision.tier = Tier::Auto;
    decision.message = format!(
        "allowed by learned rule {} (made by {}), which lifts: {}",
        lifted.rule_id,
        lifted.created_by,
        decision
            .message
            .trim_start_matches("needs human approval: ")
    );
}

#[cfg(test)]
mod tests;
