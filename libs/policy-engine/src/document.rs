//! Policy documents: the TOML format, its validation and compilation into rules.
//!
//! The format is described in `POLICY.md` and `policy.schema.json`. Every error carries the
//! line (and where known the column) it refers to, so `toolgate policy validate` can point at
//! the exact spot.

use std::collections::{BTreeMap, HashSet};

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use toml::Spanned;
use toolgate_core::{Tier, ToolKind};

use crate::rule_fields::{List, Selectors, nonempty, rule_head};

pub use crate::error::Error;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDocument {
    default: Option<Spanned<String>>,
    safe_commands: Option<bool>,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
    #[serde(default)]
    example: Vec<Spanned<RawExample>>,
    /// Destinations of runs' connections (`[[network]]`).
    #[serde(default)]
    network: Vec<Spanned<crate::network::RawNetwork>>,
    /// The decision for a connection no `[[network]]` rule matches.
    network_default: Option<Spanned<String>>,
    /// What the kernel sandbox of each named profile guarantees (`[profiles.<name>]`).
    #[serde(default)]
    profiles: BTreeMap<String, Spanned<RawProfile>>,
}

/// `[profiles.<name>]`: the guarantees of an executor profile. Every field defaults to the
/// weakest value, so a profile declared without them is decided like an unknown one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    confined: Option<bool>,
    network: Option<bool>,
    /// The network is reached only through the egress gate (meaningful with `network`).
    egress_gated: Option<bool>,
    read_only_workspace: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: Spanned<String>,
    decision: Spanned<String>,
    reason: Spanned<String>,
    tools: List,
    paths: List,
    commands: List,
    except: List,
    flags: List,
    not_flags: List,
    sessions: List,
    principals: List,
    labels: Option<Spanned<BTreeMap<String, String>>>,
    /// The sandbox profile a run this rule matches must get.
    sandbox: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExample {
    pub tool: Option<Spanned<String>>,
    pub script: Option<String>,
    pub argv: Option<Vec<String>>,
    pub path: Option<String>,
    /// An `fs.delete` of a whole tree (or a recursive listing, search or find).
    #[serde(default)]
    pub recursive: bool,
    pub cwd: Option<String>,
    pub session: Option<String>,
    pub principal: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `net.connect`: the destination host, port and protocol (`tcp` when absent).
    pub host: Option<String>,
    pub port: Option<u32>,
    pub protocol: Option<String>,
    /// The sandbox profile of the run (a `net.connect`'s run, or a `process.run`).
    pub sandbox: Option<String>,
    pub decision: Spanned<String>,
}

/// A program matcher plus an expected subcommand prefix (`git push`, `terraform *`).
#[derive(Debug, Clone)]
pub(crate) struct CommandPattern {
    pub program: ProgramMatch,
    pub subcommands: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum ProgramMatch {
    Exact(String),
    Glob(String, GlobMatcher),
}

impl CommandPattern {
    fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = text.split_whitespace();
        let program = tokens.next().ok_or("empty command pattern")?;
        if program.contains('/') {
            return Err(format!(
                "command pattern `{text}`: name the program (`{}`), not a path; paths are matched by basename",
                program.rsplit('/').next().unwrap_or(program)
            ));
        }
        let program = if program.contains(['*', '?', '[']) {
            let glob = Glob::new(program).map_err(|e| format!("command pattern `{text}`: {e}"))?;
            ProgramMatch::Glob(program.to_owned(), glob.compile_matcher())
        } else {
            ProgramMatch::Exact(program.to_owned())
        };
        let rest: Vec<&str> = tokens.collect();
        let mut subcommands = Vec::new();
        for (i, t) in rest.iter().enumerate() {
            if *t == "*" {
                if i + 1 != rest.len() {
                    return Err(format!(
                        "command pattern `{text}`: `*` may only end a pattern"
                    ));
                }
            } else if t.starts_with('-') {
                return Err(format!(
                    "command pattern `{text}`: put flags like `{t}` in `flags` or `not_flags`"
                ));
            } else {
                subcommands.push((*t).to_owned());
            }
        }
        Ok(CommandPattern {
            program,
            subcommands,
        })
    }

    /// Whether `name args...` is matched.
    ///
    /// `words` are the layer's [`crate::baseline::subcommand_words`], computed once per
    /// layer by the caller rather than once per pattern.
    pub(crate) fn matches(&self, name: &str, words: &[&str]) -> bool {
        let program_ok = match &self.program {
            ProgramMatch::Exact(p) => p == name,
            ProgramMatch::Glob(_, g) => g.is_match(name),
        };
        if !program_ok {
            return false;
        }
        words.len() >= self.subcommands.len()
            && words.iter().zip(&self.subcommands).all(|(w, s)| w == s)
    }
}

/// A compiled user rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub id: String,
    pub tier: Tier,
    pub reason: String,
    pub line: usize,
    /// `None`: every tool kind.
    pub tools: Option<Vec<ToolKind>>,
    pub path_globs: Vec<String>,
    pub paths: Option<GlobSet>,
    pub commands: Vec<CommandPattern>,
    pub except: Vec<CommandPattern>,
    pub flags: Vec<String>,
    pub not_flags: Vec<String>,
    /// Who and where: sessions, principals, labels.
    pub selectors: Selectors,
    /// The sandbox profile every run this rule matches is decided under (`None`: whatever the
    /// request asked for, or the executor's default).
    pub sandbox: Option<String>,
}

impl Rule {
    /// Whether the rule applies to tool kind `k`.
    pub(crate) fn applies_to(&self, k: ToolKind) -> bool {
        self.tools.as_ref().is_none_or(|t| t.contains(&k))
    }

    /// Whether the session, principal and label selectors accept `ctx`.
    pub(crate) fn context_matches(&self, ctx: &crate::CallContext) -> bool {
        self.selectors.matches(ctx)
    }

    /// Whether one command layer matches the command selectors (not the path selector).
    /// `words` are the layer's [`crate::baseline::subcommand_words`].
    pub(crate) fn command_matches(&self, name: &str, args: &[String], words: &[&str]) -> bool {
        self.commands.iter().any(|p| p.matches(name, words))
            && !self.except.iter().any(|p| p.matches(name, words))
            && (self.flags.is_empty() || self.flags.iter().any(|f| has_flag(args, f)))
            && !self.not_flags.iter().any(|f| has_flag(args, f))
    }
}

/// Whether `flag` appears among the options of `args` (before `--`). A one-letter flag
/// (`-f`) also matches inside a cluster (`-fd`); a long one also matches `--flag=value`.
pub(crate) fn has_flag(args: &[String], flag: &str) -> bool {
    let short = flag.len() == 2 && flag.starts_with('-') && flag != "--";
    args.iter().take_while(|a| *a != "--").any(|a| {
        a == flag
            || (flag.starts_with("--") && a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
            || (short
                && a.starts_with('-')
                && !a.starts_with("--")
                && a[1..].chars().all(|c| c.is_ascii_alphanumeric())
                && a[1..].contains(&flag[1..]))
    })
}

/// A parsed document before the engine indexes it.
pub(crate) struct Parsed {
    pub default: Tier,
    /// The shipped profiles with the document's declarations over them.
    pub profiles: BTreeMap<String, crate::profile::Guarantees>,
    pub safe_commands: bool,
    pub rules: Vec<Rule>,
    pub network: Vec<crate::network::NetworkRule>,
    /// What a `net.connect` nothing matches gets.
    pub network_default: Tier,
    pub examples: Vec<(usize, RawExample)>,
    pub version: String,
}

/// 1-based (line, column) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Parses and validates a document, computing its version.
pub(crate) fn parse(text: &str) -> Result<Parsed, Error> {
    let raw: RawDocument = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        Error::Syntax {
            line,
            column,
            message: e.message().trim_end_matches('\n').to_owned(),
        }
    })?;
    let line = |s: std::ops::Range<usize>| line_col(text, s.start).0;
    let default = match &raw.default {
        None => Tier::Ask,
        Some(d) => d.get_ref().parse().map_err(|m| Error::Invalid {
            line: line(d.span()),
            message: format!("default: {m}"),
        })?,
    };
    let mut seen = HashSet::new();
    let rules = raw
        .rule
        .into_iter()
        .map(|r| rule(r, &mut seen, &line))
        .collect::<Result<Vec<_>, _>>()?;
    let network = crate::network::parse(raw.network, &mut seen, &line)?;
    // Unless the document says otherwise, a destination nothing speaks about asks (or is
    // denied, when everything unmatched is): `default = "auto"` is about commands and files,
    // never a licence to reach every host.
    let network_default = match &raw.network_default {
        None => default.max(Tier::Ask),
        Some(d) => d.get_ref().parse().map_err(|m| Error::Invalid {
            line: line(d.span()),
            message: format!("network_default: {m}"),
        })?,
    };
    let profiles = profiles(&raw.profiles, &line)?;
    let examples = raw
        .example
        .into_iter()
        .map(|e| (line(e.span()), e.into_inner()))
        .collect();
    Ok(Parsed {
        default,
        profiles,
        safe_commands: raw.safe_commands.unwrap_or(true),
        rules,
        network,
        network_default,
        examples,
        version: version(text)?,
    })
}

/// Validates and compiles one `[[rule]]`; `seen` holds the ids taken so far.
fn rule(
    r: Spanned<RawRule>,
    seen: &mut HashSet<String>,
    line: &dyn Fn(std::ops::Range<usize>) -> usize,
) -> Result<Rule, Error> {
    let rule_line = line(r.span());
    let r = r.into_inner();
    let id = r.id.get_ref().trim().to_owned();
    let err = |span: std::ops::Range<usize>, message: String| Error::Rule {
        line: line(span),
        rule: id.clone(),
        message,
    };
    let tier = rule_head(&r.id, &r.decision, &r.reason, seen, &err)?;
    let nonempty = |l: &List, field: &str| nonempty(l, field, &err);
    let tools = match nonempty(&r.tools, "tools")? {
        None => None,
        Some(list) => Some(
            list.iter()
                .map(|t| {
                    t.get_ref()
                        .parse::<ToolKind>()
                        .map_err(|m| err(t.span(), m))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let mut path_globs = Vec::new();
    let paths = match nonempty(&r.paths, "paths")? {
        None => None,
        Some(list) => {
            let mut b = GlobSetBuilder::new();
            for g in &list {
                b.add(compile_glob(g.get_ref()).map_err(|m| err(g.span(), m))?);
                path_globs.push(g.get_ref().clone());
            }
            Some(
                b.build()
                    .map_err(|e| err(rule_line_span(&r.paths), e.to_string()))?,
            )
        }
    };
    let patterns = |l: &List, field: &str| -> Result<Vec<CommandPattern>, Error> {
        nonempty(l, field)?
            .unwrap_or_default()
            .iter()
            .map(|p| CommandPattern::parse(p.get_ref()).map_err(|m| err(p.span(), m)))
            .collect::<Result<Vec<_>, _>>()
    };
    let commands = patterns(&r.commands, "commands")?;
    let except = patterns(&r.except, "except")?;
    let strings = |l: &List, field: &str| -> Result<Vec<String>, Error> {
        Ok(nonempty(l, field)?
            .unwrap_or_default()
            .into_iter()
            .map(Spanned::into_inner)
            .collect())
    };
    let flags = strings(&r.flags, "flags")?;
    let not_flags = strings(&r.not_flags, "not_flags")?;
    check_command_selectors(&r, &commands, tools.as_deref(), &flags, &not_flags).map_err(
        |message| Error::Rule {
            line: rule_line,
            rule: id.clone(),
            message,
        },
    )?;
    let selectors = Selectors::parse(&r.sessions, &r.principals, r.labels, &err)?;
    let sandbox = match r.sandbox {
        None => None,
        Some(p) => Some(sandbox_name(p.get_ref(), tools.as_deref()).map_err(|m| err(p.span(), m))?),
    };
    Ok(Rule {
        id,
        tier,
        reason: r.reason.into_inner().trim().to_owned(),
        line: rule_line,
        tools,
        path_globs,
        paths,
        commands,
        except,
        flags,
        not_flags,
        selectors,
        sandbox,
    })
}

/// The refinements of `commands` need commands, commands need `process.run`, and flags are
/// spelled as flags.
fn check_command_selectors(
    r: &RawRule,
    commands: &[CommandPattern],
    tools: Option<&[ToolKind]>,
    flags: &[String],
    not_flags: &[String],
) -> Result<(), String> {
    if commands.is_empty() {
        for (field, present) in [
            ("except", r.except.is_some()),
            ("flags", r.flags.is_some()),
            ("not_flags", r.not_flags.is_some()),
        ] {
            if present {
                return Err(format!(
                    "`{field}` only refines `commands`, and the rule has none"
                ));
            }
        }
    } else if tools.is_some_and(|t| !t.contains(&ToolKind::ProcessRun)) {
        return Err(
            "`commands` only match process.run calls, but `tools` excludes process.run".to_owned(),
        );
    }
    for f in flags.iter().chain(not_flags) {
        if !f.starts_with('-') || f == "-" || f == "--" {
            return Err(format!("flag `{f}` must start with `-` or `--`"));
        }
    }
    Ok(())
}

/// A rule's `sandbox`: a profile name, for a rule that can match `process.run`.
fn sandbox_name(raw: &str, tools: Option<&[ToolKind]>) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "`sandbox` must name a profile (letters, digits, `-`, `_`), not `{name}`"
        ));
    }
    if tools.is_some_and(|t| !t.contains(&ToolKind::ProcessRun)) {
        return Err(
            "`sandbox` applies to process.run calls, but `tools` excludes process.run".to_owned(),
        );
    }
    Ok(name.to_owned())
}

/// The shipped profiles plus the document's. A shipped name may only be declared with fewer
/// guarantees (stricter decisions): the executor refuses a configuration that makes it
/// weaker, so a document claiming more is wrong about what runs.
fn profiles(
    raw: &BTreeMap<String, Spanned<RawProfile>>,
    line: &dyn Fn(std::ops::Range<usize>) -> usize,
) -> Result<BTreeMap<String, crate::profile::Guarantees>, Error> {
    use crate::profile::{Guarantees, builtin};
    let mut out = builtin();
    for (name, p) in raw {
        let at = line(p.span());
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Error::Invalid {
                line: at,
                message: format!(
                    "profiles: `{name}` is not a profile name (letters, digits, `-`, `_`)"
                ),
            });
        }
        let r = p.get_ref();
        let g = Guarantees {
            confined: r.confined.unwrap_or(false),
            network: r.network.unwrap_or(true),
            egress_gated: r.egress_gated.unwrap_or(false),
            read_only_workspace: r.read_only_workspace.unwrap_or(false),
        };
        // Claiming fewer guarantees only makes decisions stricter; claiming more than the
        // executor enforces under that name would let the policy be fooled.
        if let Some(shipped) = out.get(name)
            && !shipped.at_least(g)
        {
            return Err(Error::Invalid {
                line: at,
                message: format!(
                    "profiles.{name}: a shipped profile may only be declared stricter, with no more guarantees than it has ({}); name a profile of your own for other guarantees",
                    shipped.describe()
                ),
            });
        }
        out.insert(name.clone(), g);
    }
    Ok(out)
}

fn rule_line_span(l: &List) -> std::ops::Range<usize> {
    l.as_ref().map_or(0..0, Spanned::span)
}

/// Compiles a path glob: `*` stays within one component, `**/` also matches at the root.
pub(crate) fn compile_glob(g: &str) -> Result<Glob, String> {
    if g.trim().is_empty() {
        return Err("empty path glob".to_owned());
    }
    if let Some(rest) = g.strip_prefix("./") {
        return Err(format!(
            "path glob `{g}`: paths are workspace-relative without `./`; write `{rest}`"
        ));
    }
    GlobBuilder::new(g)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid path glob `{g}`: {e}"))
}

/// sha256 hex of the canonical JSON form of the parsed document.
///
/// Reformatting, comments, key order and quoting style do not change the version; any change
/// of meaning does.
pub(crate) fn version(text: &str) -> Result<String, Error> {
    use sha2::{Digest, Sha256};
    let value: serde_json::Value = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        Error::Syntax {
            line,
            column,
            message: e.message().to_owned(),
        }
    })?;
    let mut canonical = String::new();
    crate::digest::write_value(&value, &mut canonical);
    Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn errors_carry_line_numbers() {
        let e = err(
            "default = \"ask\"\n\n[[rule]]\nid = \"x\"\ndecision = \"auto\"\nreason = \"r\"\ntools = [\"fs.chmod\"]\n",
        );
        assert!(
            e.starts_with("line 7: rule `x`: unknown tool kind `fs.chmod`"),
            "{e}"
        );
        let e = err("[[rule]]\nid = \"x\"\ndecision = \"maybe\"\nreason = \"r\"\n");
        assert!(
            e.starts_with("line 3: rule `x`: unknown decision `maybe`"),
            "{e}"
        );
        let e =
            err("[[rule]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\npaths = [\"a/[\"]\n");
        assert!(e.starts_with("line 5: rule `x`: invalid path glob"), "{e}");
        let e = err("[[rule]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\ncommands = []\n");
        assert!(e.contains("could never match"), "{e}");
        let e = err(
            "[[rule]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\ncommands = [\"git\"]\ntools = [\"fs.read\"]\n",
        );
        assert!(e.contains("excludes process.run"), "{e}");
        let e = err("[[rule]]\nid = \"x\"\ndecisoin = \"ask\"\n");
        assert!(e.starts_with("line 3, column 1:"), "{e}");
        let e = err(
            "[[rule]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\n[[rule]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\n",
        );
        assert!(e.starts_with("line 6: rule `x`: duplicate"), "{e}");
    }

    #[test]
    fn a_rule_names_a_sandbox_profile_only_for_runs() {
        let ok = parse(
            "[[rule]]\nid = \"npm\"\ndecision = \"auto\"\nreason = \"r\"\ncommands = [\"npm install\"]\nsandbox = \"network\"\n",
        )
        .unwrap();
        assert_eq!(ok.rules[0].sandbox.as_deref(), Some("network"));
        let e = err(
            "[[rule]]\nid = \"x\"\ndecision = \"auto\"\nreason = \"r\"\ntools = [\"fs.read\"]\nsandbox = \"network\"\n",
        );
        assert!(e.contains("excludes process.run"), "{e}");
        let e = err(
            "[[rule]]\nid = \"x\"\ndecision = \"auto\"\nreason = \"r\"\ncommands = [\"ls\"]\nsandbox = \"../x\"\n",
        );
        assert!(e.contains("must name a profile"), "{e}");
    }

    #[test]
    fn version_ignores_formatting_but_not_meaning() {
        let a = version(
            "default = \"ask\"\n[[rule]]\nid = \"a\"\ndecision = \"deny\"\nreason = \"r\"\n",
        )
        .unwrap();
        let b = version(
            "# comment\n[[rule]]\nreason = 'r'\ndecision = \"deny\"\nid = \"a\"\n\ndefault = \"ask\"\n",
        );
        // `default` after a table header belongs to the table, so this one differs in meaning.
        assert_ne!(a, b.unwrap());
        let c = version("# comment\ndefault   =   'ask'\n[[rule]]\nreason = 'r'\ndecision = \"deny\"\nid = \"a\"\n").unwrap();
        assert_eq!(a, c);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn globs_match_at_the_root_too() {
        let g = compile_glob("**/.env").unwrap().compile_matcher();
        assert!(g.is_match(".env") && g.is_match("a/b/.env") && !g.is_match("a/.env.example"));
        let g = compile_glob("src/*.rs").unwrap().compile_matcher();
        assert!(g.is_match("src/a.rs") && !g.is_match("src/x/a.rs"));
    }

    #[test]
    fn short_flags_match_in_clusters() {
        let a: Vec<String> = ["-fd", "--force-with-lease=x", "--", "-x"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert!(has_flag(&a, "-f") && has_flag(&a, "-d") && has_flag(&a, "--force-with-lease"));
        assert!(!has_flag(&a, "-x") && !has_flag(&a, "--force"));
    }
}
