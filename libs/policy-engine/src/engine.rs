//! The compiled policy: rule index and classification.
//!
//! Rules are indexed so a classification never scans every rule: call-level rules by tool
//! kind, path globs in one `GlobSet` per tool kind, command rules by program name (plus one
//! `GlobSet` for program globs). The result is the worst tier of all matches, baseline and
//! user alike; a unit nothing matches gets the document's default.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use globset::{GlobSet, GlobSetBuilder};
use toolgate_core::{Tier, ToolKind};

use crate::baseline::{self, BaselineRule};
use crate::call::{CallContext, ToolCall};
use crate::document::{self, Error, ProgramMatch, Rule};
use crate::memo::AnalysisMemo;
use crate::network::{Host, NetworkIndex, NetworkRule};
use crate::paths::{self, Access};
use crate::profile::{DecidedProfile, Guarantees};
use crate::shell::{self, Analysis, ShellPath};

/// Where a matching rule comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleSource {
    /// The built-in baseline.
    Baseline,
    /// The user policy document.
    User,
    /// No rule matched; the document's `default` applied.
    Default,
    /// The run's sandbox profile contains the effect: `sandbox.<profile>`.
    Sandbox,
}

impl RuleSource {
    /// The lowercase name used in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            RuleSource::Baseline => "baseline",
            RuleSource::User => "user",
            RuleSource::Default => "default",
            RuleSource::Sandbox => "sandbox",
        }
    }
}

/// One rule that matched a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMatch {
    /// Rule id (`baseline.*` for built-ins, `default` when nothing matched).
    pub rule_id: String,
    /// The tier the rule counts with in this call: its own, or `auto` when contained.
    pub tier: Tier,
    /// The rule's reason.
    pub reason: String,
    /// Baseline, user, default or sandbox.
    pub source: RuleSource,
    /// Set when the run's sandbox profile contains what the rule is about: the profile's
    /// name and the tier the rule would have imposed without it.
    pub contained: Option<(String, Tier)>,
}

/// One command of a `process.run` call with its own decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandExplanation {
    /// The argv as bash would execute it.
    pub argv: Vec<String>,
    /// The tier of this command alone.
    pub tier: Tier,
    /// Ids of the rules that matched it.
    pub rule_ids: Vec<String>,
    /// False when part of it depends on runtime expansion.
    pub fully_analyzed: bool,
    /// Observations for the approver (wrappers unwrapped, expansions seen...).
    pub notes: Vec<String>,
}

/// One path a call reads or writes, with its own decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathExplanation {
    /// The normalised path (`?word` when unknown before runtime).
    pub path: String,
    /// Read or write.
    pub access: Access,
    /// The tier of this access alone.
    pub tier: Tier,
    /// Ids of the rules that matched it.
    pub rule_ids: Vec<String>,
}

/// The answer for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The final tier: the worst of all matches.
    pub tier: Tier,
    /// Every rule that matched, deduplicated, in the order found.
    pub matches: Vec<RuleMatch>,
    /// For `process.run`: every extracted command.
    pub commands: Vec<CommandExplanation>,
    /// Every path checked.
    pub paths: Vec<PathExplanation>,
    /// The policy version that decided.
    pub policy_version: String,
    /// A sentence for the model (deny, ask) or the log (auto).
    pub message: String,
    /// For `process.run`: the sandbox profile a matching rule requires, which the run is decided
    /// and executed under whatever the request asked for. `None`: the request's (or the
    /// executor's default).
    pub sandbox_profile: Option<String>,
    /// For `process.run`: the profile the decision was made under and its guarantees.
    pub profile: Option<DecidedProfile>,
}

impl Decision {
    /// The first matching rule with the final tier: the rule id a deny or ask reports, or
    /// `sandbox.<profile>` when containment made the call auto.
    pub fn deciding_rule(&self) -> Option<&RuleMatch> {
        self.matches.iter().find(|m| m.tier == self.tier)
    }

    /// Whether a sandbox guarantee turned some rule or the default into `auto`.
    pub fn contained(&self) -> bool {
        self.matches.iter().any(|m| m.source == RuleSource::Sandbox)
    }
}

/// A rule as `GetPolicy` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSummary {
    /// Rule id.
    pub id: String,
    /// Its tier.
    pub tier: Tier,
    /// Its reason.
    pub reason: String,
    /// Baseline or user.
    pub source: RuleSource,
    /// Line of the rule in the document (0 for baseline rules).
    pub line: usize,
}

/// Globs compiled together, with the rule each glob belongs to.
#[derive(Debug, Default)]
struct GlobBucket {
    set: GlobSet,
    owners: Vec<u32>,
}

/// Path globs of one tool kind. Globs whose first component is literal (`src/**/*.rs`) are
/// bucketed by it, so a lookup only runs the globs that can match the path's first component
/// plus those starting with a wildcard (`**/.env`).
#[derive(Debug, Default)]
struct PathIndex {
    by_first: HashMap<String, GlobBucket>,
    rest: GlobBucket,
}

/// Command rules of one program, bucketed by the first subcommand they require.
#[derive(Debug, Default)]
struct ProgramRules {
    any: Vec<u32>,
    by_sub: HashMap<String, Vec<u32>>,
}

#[derive(Debug, Default)]
struct Index {
    call_level: [Vec<u32>; KINDS],
    paths: [PathIndex; KINDS],
    by_program: HashMap<String, ProgramRules>,
    program_globs: GlobSet,
    program_glob_owners: Vec<u32>,
    /// The first rule with each id, for what a match's rule requires (its sandbox).
    by_id: HashMap<String, u32>,
}

/// A loaded, validated and indexed policy.
#[derive(Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    index: Index,
    /// `[[network]]` rules and their index by host.
    network: Vec<NetworkRule>,
    network_index: NetworkIndex,
    default: Tier,
    /// What a `net.connect` no rule matches gets.
    network_default: Tier,
    safe_commands: bool,
    /// Guarantees of the sandbox profiles the policy knows, by name.
    profiles: std::collections::BTreeMap<String, Guarantees>,
    version: String,
    /// Recent script analyses; `None` analyses every script afresh.
    analyses: Option<AnalysisMemo>,
}

/// The default user policy shipped with toolgate.
pub const DEFAULT_POLICY_TOML: &str = include_str!("../default-policy.toml");

/// How many tool kinds there are: one index slot each.
const KINDS: usize = ToolKind::ALL.len();

const fn kind_index(k: ToolKind) -> usize {
    k as usize
}

impl Policy {
    /// Parses, validates and indexes a TOML document, then checks its examples.
    pub fn from_toml(text: &str) -> Result<Policy, Error> {
        let parsed = document::parse(text)?;
        let index =
            build_index(&parsed.rules).map_err(|message| Error::Invalid { line: 1, message })?;
        let network_index = NetworkIndex::build(&parsed.network)
            .map_err(|message| Error::Invalid { line: 1, message })?;
        let policy = Policy {
            rules: parsed.rules,
            index,
            network: parsed.network,
            network_index,
            default: parsed.default,
            network_default: parsed.network_default,
            safe_commands: parsed.safe_commands,
            profiles: parsed.profiles,
            version: parsed.version,
            analyses: Some(AnalysisMemo::default()),
        };
        for (i, (line, ex)) in parsed.examples.iter().enumerate() {
            let (call, ctx) = example_call(ex).map_err(|message| Error::Invalid {
                line: *line,
                message: format!("example {}: {message}", i + 1),
            })?;
            let expected: Tier =
                ex.decision
                    .get_ref()
                    .parse()
                    .map_err(|m: String| Error::Invalid {
                        line: *line,
                        message: format!("example {}: {m}", i + 1),
                    })?;
            let got = policy.classify(&call, &ctx);
            if got.tier != expected {
                return Err(Error::Example {
                    line: *line,
                    index: i + 1,
                    expected,
                    got: got.tier,
                    message: got.message,
                });
            }
        }
        Ok(policy)
    }

    /// Reads and loads a policy file.
    pub fn load(path: &Path) -> Result<Policy, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Policy::from_toml(&text)
    }

    /// The shipped default policy (`default-policy.toml`).
    pub fn builtin_default() -> Policy {
        match Policy::from_toml(DEFAULT_POLICY_TOML) {
            Ok(p) => p,
            // The shipped file is covered by a unit test; failing here is a build defect.
            Err(e) => panic!("default-policy.toml is invalid: {e}"),
        }
    }

    /// This policy without the memo of recent script analyses: every script is parsed and
    /// analysed on every call. For measuring the analysis itself; decisions are the same.
    pub fn without_analysis_memo(mut self) -> Policy {
        self.analyses = None;
        self
    }

    /// sha256 hex of the normalised document.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The tier of calls nothing matches.
    pub fn default_tier(&self) -> Tier {
        self.default
    }

    /// Whether the read-only allowlist may decide `auto`.
    pub fn safe_commands(&self) -> bool {
        self.safe_commands
    }

    /// The tier of `net.connect` calls no rule matches.
    pub fn network_default_tier(&self) -> Tier {
        self.network_default
    }

    /// Number of user rules (`[[rule]]` and `[[network]]`).
    pub fn rule_count(&self) -> usize {
        self.rules.len() + self.network.len()
    }

    /// Every baseline rule then every user rule, in order.
    pub fn summary(&self) -> Vec<RuleSummary> {
        baseline::ALL
            .iter()
            .filter(|r| self.safe_commands || !std::ptr::eq(**r, &baseline::SAFE))
            .map(|r| RuleSummary {
                id: r.id.to_owned(),
                tier: r.tier,
                reason: r.reason.to_owned(),
                source: RuleSource::Baseline,
                line: 0,
            })
            .chain(self.rules.iter().map(|r| RuleSummary {
                id: r.id.clone(),
                tier: r.tier,
                reason: r.reason.clone(),
                source: RuleSource::User,
                line: r.line,
            }))
            .chain(self.network.iter().map(|r| RuleSummary {
                id: r.id.clone(),
                tier: r.tier,
                reason: r.reason.clone(),
                source: RuleSource::User,
                line: r.line,
            }))
            .collect()
    }

    /// The host globs a run under `profile` in `ctx` may not reach on any port: the names of
    /// every `deny` network rule without `ports` (TCP or any protocol) that applies, and `*`
    /// when a rule denies every `net.connect` in this context. The egress gate's DNS stub
    /// answers these names as nonexistent. Address blocks are left out: the stub answers
    /// names, and the gate decides every connection anyway.
    pub fn denied_hosts(&self, profile: Option<&str>, ctx: &CallContext) -> Vec<String> {
        let all_denied = self.index.call_level[kind_index(ToolKind::NetConnect)]
            .iter()
            .map(|r| &self.rules[*r as usize])
            .any(|r| r.tier == Tier::Deny && r.context_matches(ctx));
        if all_denied {
            return vec!["*".to_owned()];
        }
        crate::network::denied_names(&self.network, profile, ctx)
    }

    /// Path globs of `deny` rules that apply to `kind` in `ctx` (rules without command
    /// selectors). The executor filters what a listing or search reveals with them, since a
    /// single classification only sees the path the call names.
    pub fn denied_path_globs(&self, kind: ToolKind, ctx: &CallContext) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| {
                r.tier == Tier::Deny
                    && r.commands.is_empty()
                    && r.applies_to(kind)
                    && r.context_matches(ctx)
            })
            .flat_map(|r| r.path_globs.iter().cloned())
            .collect()
    }

    /// The guarantees the policy knows for each profile name (shipped and declared).
    pub fn profiles(&self) -> &std::collections::BTreeMap<String, Guarantees> {
        &self.profiles
    }

    /// What the policy knows of a profile name.
    pub fn decided_profile(&self, name: Option<&str>) -> DecidedProfile {
        let found = name.and_then(|n| self.profiles.get(n));
        DecidedProfile {
            name: name.map(str::to_owned),
            guarantees: found.copied().unwrap_or(Guarantees::NONE),
            known: found.is_some(),
        }
    }

    /// Classifies one call. Pure: no I/O, no ledger.
    ///
    /// A `process.run` is decided under the guarantees of the profile it will run under: the
    /// one a matching rule requires, else the call's. What that profile contains counts as
    /// `auto`; an unknown, unconfined or missing profile contains nothing.
    pub fn classify(&self, call: &ToolCall, ctx: &CallContext) -> Decision {
        if call.tool == ToolKind::NetConnect {
            return self.classify_connect(call, ctx);
        }
        if call.tool != ToolKind::ProcessRun {
            return self.classify_under(call, ctx, None);
        }
        let asked = self.decided_profile(call.sandbox_profile.as_deref());
        let d = self.classify_under(call, ctx, Some(&asked));
        // The set of matching user rules does not depend on the profile, so a rule that
        // requires another profile is found in the first pass; decide again under it.
        match &d.sandbox_profile {
            Some(p) if Some(p) != call.sandbox_profile.as_ref() => {
                let required = self.decided_profile(Some(p));
                self.classify_under(call, ctx, Some(&required))
            }
            _ => d,
        }
    }

    fn classify_under(
        &self,
        call: &ToolCall,
        ctx: &CallContext,
        profile: Option<&DecidedProfile>,
    ) -> Decision {
        let mut b = Builder {
            profile: profile.cloned(),
            default: Some(self.default),
            ..Builder::default()
        };
        let kind = call.tool;
        let call_level: Vec<u32> = self.index.call_level[kind_index(kind)]
            .iter()
            .copied()
            .filter(|r| self.rules[*r as usize].context_matches(ctx))
            .collect();
        let overall = if kind == ToolKind::ProcessRun {
            self.classify_run(call, ctx, &call_level, &mut b)
        } else {
            self.classify_fs(call, ctx, &call_level, &mut b)
        };
        self.decide(call, b, overall)
    }

    /// The analysis of a `process.run`'s argv or script (remembered, for a script).
    fn analysis(&self, call: &ToolCall) -> Arc<Analysis> {
        let cwd = call.cwd.as_deref().unwrap_or(".");
        match (&call.argv, &call.script) {
            (Some(argv), None) => Arc::new(shell::analyze_argv(argv, cwd)),
            (None, Some(script)) => match &self.analyses {
                Some(memo) => {
                    memo.get_or_analyze(cwd, script, || shell::analyze_script(script, cwd))
                }
                None => Arc::new(shell::analyze_script(script, cwd)),
            },
            _ => {
                let mut a = Analysis::default();
                a.findings.push((
                    &baseline::UNPARSED,
                    "process.run needs exactly one of argv or script".to_owned(),
                ));
                Arc::new(a)
            }
        }
    }

    /// A `process.run`: its environment, the script's findings and paths, and each command.
    /// The worst tier of them all.
    fn classify_run(
        &self,
        call: &ToolCall,
        ctx: &CallContext,
        call_level: &[u32],
        b: &mut Builder,
    ) -> Tier {
        let analysis = self.analysis(call);
        let mut overall: Option<Tier> = None;
        for name in call.env.keys() {
            if baseline::is_sensitive_variable(name) {
                worse(&mut overall, b.baseline(&baseline::SENSITIVE_ENV));
            }
            if name.starts_with("GIT_") {
                worse(&mut overall, b.baseline(&baseline::GIT_FOREIGN));
            }
        }
        for (rule, _) in &analysis.findings {
            worse(&mut overall, b.baseline(rule));
        }
        for p in &analysis.paths {
            if let Some(t) = self.shell_path(p, ctx, b) {
                worse(&mut overall, t);
            }
        }
        for c in &analysis.commands {
            let tier = self.classify_command(c, ctx, call_level, b);
            for p in &c.paths {
                if let Some(t) = self.shell_path(p, ctx, b) {
                    worse(&mut overall, t);
                }
            }
            worse(&mut overall, tier);
        }
        if let Some(t) = overall {
            return t;
        }
        // Nothing ran and nothing matched (an empty script): the default decides.
        for r in call_level {
            worse(&mut overall, self.rules[*r as usize].tier);
            b.user(&self.rules[*r as usize]);
        }
        overall.unwrap_or_else(|| b.unmatched().1)
    }

    /// One command of a `process.run`: its baseline rules, the allowlist, the user rules that
    /// match it and the call-level ones, else the default; recorded in `b.commands`.
    fn classify_command(
        &self,
        c: &shell::ShellCommand,
        ctx: &CallContext,
        call_level: &[u32],
        b: &mut Builder,
    ) -> Tier {
        let mut tier: Option<Tier> = None;
        let mut ids = Vec::new();
        for r in &c.rules {
            let t = b.baseline(r);
            tier = Some(tier.map_or(t, |x| x.max(t)));
            ids.push(r.id.to_owned());
        }
        if c.safe && self.safe_commands && c.rules.is_empty() {
            tier = Some(tier.map_or(Tier::Auto, |t| t.max(Tier::Auto)));
            ids.push(baseline::SAFE.id.to_owned());
            b.baseline(&baseline::SAFE);
        }
        for r in self
            .command_rules(c, ctx)
            .into_iter()
            .chain(call_level.iter().copied())
        {
            let rule = &self.rules[r as usize];
            tier = Some(tier.map_or(rule.tier, |t| t.max(rule.tier)));
            if !ids.contains(&rule.id) {
                ids.push(rule.id.clone());
            }
            b.user(rule);
        }
        let mut notes = c.notes.clone();
        let tier = tier.unwrap_or_else(|| {
            let (id, t) = b.unmatched();
            notes.push(if id == "default" {
                format!("no rule matched; the policy default is {}", self.default)
            } else {
                format!(
                    "no rule asks about it, and it runs {}",
                    b.contained_phrase()
                )
            });
            ids.push(id);
            t
        });
        if ids.iter().any(|i| b.is_contained(i)) && !ids.iter().any(|i| i.starts_with("sandbox.")) {
            ids.push(b.sandbox_id());
        }
        b.commands.push(CommandExplanation {
            argv: c.argv.clone(),
            tier,
            rule_ids: ids,
            fully_analyzed: c.fully_analyzed,
            notes,
        });
        tier
    }

    /// A filesystem call on one path: the baseline's path rules, a recursive delete, the user
    /// path rules and call-level rules, else the default.
    fn classify_fs(
        &self,
        call: &ToolCall,
        ctx: &CallContext,
        call_level: &[u32],
        b: &mut Builder,
    ) -> Tier {
        let kind = call.tool;
        let path = paths::normalise(call.path.as_deref().unwrap_or("."));
        let access = if kind.writes() {
            Access::Write
        } else {
            Access::Read
        };
        let mut tier: Option<Tier> = None;
        let mut ids = Vec::new();
        if let Some(r) = baseline::path_rule(&path, access) {
            tier = Some(r.tier);
            ids.push(r.id.to_owned());
            b.baseline(r);
        }
        // Removing a whole tree destroys work no single-file check can weigh: a human
        // decides, as for `rm -r` in a script, whatever the rules say.
        if kind == ToolKind::FsDelete && call.recursive {
            let r = &baseline::RM_RECURSIVE;
            tier = Some(tier.map_or(r.tier, |t| t.max(r.tier)));
            ids.push(r.id.to_owned());
            b.baseline(r);
        }
        let mut matched = self.path_rules(kind, &path, ctx);
        matched.extend(call_level.iter().copied());
        self.fold_user_rules(matched, &mut tier, &mut ids, b);
        let tier = tier.unwrap_or_else(|| {
            ids.push("default".to_owned());
            b.fallback(self.default);
            self.default
        });
        b.paths.push(PathExplanation {
            path,
            access,
            tier,
            rule_ids: ids,
        });
        tier
    }

    /// The decision from what matched: the sandbox profile the matching rules require (a
    /// human decides when they disagree), containment reported first, and the message.
    fn decide(&self, call: &ToolCall, mut b: Builder, overall: Tier) -> Decision {
        let mut tier = overall;
        let mut sandboxes: Vec<&str> = Vec::new();
        if call.tool == ToolKind::ProcessRun {
            for m in &b.matches {
                if let Some(p) = self
                    .index
                    .by_id
                    .get(&m.rule_id)
                    .and_then(|r| self.rules[*r as usize].sandbox.as_deref())
                    && !sandboxes.contains(&p)
                {
                    sandboxes.push(p);
                }
            }
        }
        if let Some(i) = b
            .matches
            .iter()
            .position(|m| m.source == RuleSource::Sandbox)
        {
            // Containment is what made the auto parts auto: report it first.
            let m = b.matches.remove(i);
            b.matches.insert(0, m);
        }
        let mut message = message(tier, &b, call);
        let sandbox_profile = match sandboxes.as_slice() {
            [] => None,
            [one] => Some((*one).to_owned()),
            several => {
                // Rules disagree on the confinement: a human picks, never the looser one.
                let note = format!(
                    "matching rules require different sandbox profiles ({}); a human must decide",
                    several.join(", ")
                );
                if tier < Tier::Ask {
                    tier = Tier::Ask;
                    message = note;
                } else {
                    message = format!("{message}; {note}");
                }
                None
            }
        };
        Decision {
            tier,
            matches: b.matches,
            commands: b.commands,
            paths: b.paths,
            policy_version: self.version.clone(),
            message,
            sandbox_profile,
            profile: b.profile,
        }
    }

    /// A `net.connect`: the worst of the `[[network]]` rules matching its destination and the
    /// call-level `[[rule]]`s for `net.connect` (those naming no tools only when they ask or
    /// deny), else the network default.
    fn classify_connect(&self, call: &ToolCall, ctx: &CallContext) -> Decision {
        let mut b = Builder::default();
        let mut tier: Option<Tier> = None;
        let host = Host::parse(call.host.as_deref().unwrap_or_default());
        let protocol = call.protocol.as_deref().unwrap_or("tcp");
        // A port the wire cannot hold matches no rule with `ports`, only those without.
        let port = call.port.and_then(|p| u16::try_from(p).ok()).unwrap_or(0);
        for r in self.network_index.matching(
            &self.network,
            &host,
            port,
            protocol,
            call.sandbox_profile.as_deref(),
            ctx,
        ) {
            let rule = &self.network[r as usize];
            worse(&mut tier, rule.tier);
            b.push(&rule.id, rule.tier, &rule.reason, RuleSource::User);
        }
        for r in &self.index.call_level[kind_index(ToolKind::NetConnect)] {
            let rule = &self.rules[*r as usize];
            // A rule that names no tools reaches connections only to make them stricter: an
            // `auto` written for commands and files never opens the network.
            let about_connections = rule.tools.is_some() || rule.tier != Tier::Auto;
            if about_connections && rule.context_matches(ctx) {
                worse(&mut tier, rule.tier);
                b.user(rule);
            }
        }
        let tier = tier.unwrap_or_else(|| {
            b.push(
                "default",
                self.network_default,
                "no network rule matched this destination; the policy's network default applies",
                RuleSource::Default,
            )
        });
        let message = message(tier, &b, call);
        Decision {
            tier,
            matches: b.matches,
            commands: Vec::new(),
            paths: Vec::new(),
            policy_version: self.version.clone(),
            message,
            sandbox_profile: None,
            profile: Some(self.decided_profile(call.sandbox_profile.as_deref())),
        }
    }

    /// User rules whose command selectors match some layer of `c` (and whose path selector,
    /// if any, matches one of its paths).
    fn command_rules(&self, c: &shell::ShellCommand, ctx: &CallContext) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        for (name, args) in &c.layers {
            let mut candidates: Vec<u32> = Vec::new();
            // Read the layer's subcommand words once, and only when some rule could need them.
            let mut words: Option<Vec<&str>> = None;
            if let Some(p) = self.index.by_program.get(name.as_str()) {
                candidates.extend_from_slice(&p.any);
                if !p.by_sub.is_empty()
                    && let Some(first) = words
                        .get_or_insert_with(|| baseline::subcommand_words(name, args))
                        .first()
                    && let Some(v) = p.by_sub.get(*first)
                {
                    candidates.extend_from_slice(v);
                }
            }
            if !self.index.program_glob_owners.is_empty() {
                candidates.extend(
                    self.index
                        .program_globs
                        .matches(name.as_str())
                        .into_iter()
                        .map(|i| self.index.program_glob_owners[i]),
                );
            }
            for r in candidates {
                let rule = &self.rules[r as usize];
                if out.contains(&r)
                    || !rule.context_matches(ctx)
                    || !rule.command_matches(
                        name,
                        args,
                        words.get_or_insert_with(|| baseline::subcommand_words(name, args)),
                    )
                {
                    continue;
                }
                if let Some(globs) = &rule.paths
                    && !c.paths.iter().any(|p| p.known && globs.is_match(&p.path))
                {
                    continue;
                }
                out.push(r);
            }
        }
        out.sort_unstable();
        out
    }

    /// User path rules for a call of `kind` on `path`.
    /// Folds the user rules `matched` (indices, any order, repeats allowed) into the decision
    /// so far: each once, in rule order, raising `tier` and naming itself.
    fn fold_user_rules(
        &self,
        mut matched: Vec<u32>,
        tier: &mut Option<Tier>,
        ids: &mut Vec<String>,
        b: &mut Builder,
    ) {
        matched.sort_unstable();
        matched.dedup();
        for r in matched {
            let rule = &self.rules[r as usize];
            *tier = Some(tier.map_or(rule.tier, |t| t.max(rule.tier)));
            ids.push(rule.id.clone());
            b.user(rule);
        }
    }

    fn path_rules(&self, kind: ToolKind, path: &str, ctx: &CallContext) -> Vec<u32> {
        let idx = &self.index.paths[kind_index(kind)];
        let first = path.split('/').next().unwrap_or(path);
        let buckets = [idx.by_first.get(first), Some(&idx.rest)];
        let mut out = Vec::new();
        for b in buckets.into_iter().flatten() {
            if b.owners.is_empty() {
                continue;
            }
            out.extend(
                b.set
                    .matches(path)
                    .into_iter()
                    .map(|i| b.owners[i])
                    .filter(|r| self.rules[*r as usize].context_matches(ctx)),
            );
        }
        out
    }

    /// Classifies a path a shell command touches; `None` when nothing objects to it.
    fn shell_path(&self, p: &ShellPath, ctx: &CallContext, b: &mut Builder) -> Option<Tier> {
        let mut tier: Option<Tier> = None;
        let mut ids = Vec::new();
        if !p.known {
            tier = Some(b.baseline(&baseline::UNKNOWN_PATH));
            ids.push(baseline::UNKNOWN_PATH.id.to_owned());
        } else {
            if let Some(r) = baseline::path_rule(&p.path, p.access) {
                tier = Some(b.baseline(r));
                ids.push(r.id.to_owned());
            }
            let fs_kind = if p.access == Access::Read {
                ToolKind::FsRead
            } else {
                ToolKind::FsWrite
            };
            let mut matched = self.path_rules(fs_kind, &p.path, ctx);
            matched.extend(self.path_rules(ToolKind::ProcessRun, &p.path, ctx));
            // A shell access is judged like the fs call it amounts to: the fs kind's
            // call-level rules apply too.
            matched.extend(
                self.index.call_level[kind_index(fs_kind)]
                    .iter()
                    .copied()
                    .filter(|r| self.rules[*r as usize].context_matches(ctx)),
            );
            self.fold_user_rules(matched, &mut tier, &mut ids, b);
            // A write nothing speaks about gets the default, as an fs.write would; an
            // unmatched read is covered by the rule that allowed the command.
            if tier.is_none() && p.access == Access::Write && !paths::is_harmless_device(&p.path) {
                let (id, t) = b.unmatched();
                ids.push(id);
                tier = Some(t);
            }
        }
        if tier.is_some()
            || !b
                .paths
                .iter()
                .any(|e| e.path == p.path && e.access == p.access)
        {
            b.paths.push(PathExplanation {
                path: p.path.clone(),
                access: p.access,
                tier: tier.unwrap_or(Tier::Auto),
                rule_ids: ids,
            });
        }
        tier
    }
}

fn worse(overall: &mut Option<Tier>, t: Tier) {
    *overall = Some(overall.map_or(t, |o| o.max(t)));
}

/// The first path component of a glob when it is literal (no glob syntax in it).
fn literal_first_component(glob: &str) -> Option<&str> {
    let first = glob.split('/').next()?;
    (!first.is_empty() && !first.contains(['*', '?', '[', ']', '{', '}', '\\'])).then_some(first)
}

fn build_index(rules: &[Rule]) -> Result<Index, String> {
    let mut index = Index::default();
    type Builders = (
        HashMap<String, (GlobSetBuilder, Vec<u32>)>,
        (GlobSetBuilder, Vec<u32>),
    );
    let mut path_builders: Vec<Builders> = (0..KINDS)
        .map(|_| (HashMap::new(), (GlobSetBuilder::new(), Vec::new())))
        .collect();
    let mut program_globs = GlobSetBuilder::new();
    for (i, rule) in rules.iter().enumerate() {
        let i = u32::try_from(i).map_err(|_| "too many rules".to_owned())?;
        index.by_id.entry(rule.id.clone()).or_insert(i);
        if !rule.commands.is_empty() {
            for p in &rule.commands {
                match &p.program {
                    ProgramMatch::Exact(name) => {
                        let rules = index.by_program.entry(name.clone()).or_default();
                        let v = match p.subcommands.first() {
                            None => &mut rules.any,
                            Some(sub) => rules.by_sub.entry(sub.clone()).or_default(),
                        };
                        if !v.contains(&i) {
                            v.push(i);
                        }
                    }
                    ProgramMatch::Glob(g, _) => {
                        program_globs.add(globset::Glob::new(g).map_err(|e| e.to_string())?);
                        index.program_glob_owners.push(i);
                    }
                }
            }
        } else if !rule.path_globs.is_empty() {
            for k in ToolKind::ALL.iter().filter(|k| rule.applies_to(**k)) {
                let (by_first, rest) = &mut path_builders[kind_index(*k)];
                for g in &rule.path_globs {
                    let (b, owners) = match literal_first_component(g) {
                        Some(first) => by_first
                            .entry(first.to_owned())
                            .or_insert_with(|| (GlobSetBuilder::new(), Vec::new())),
                        None => &mut *rest,
                    };
                    b.add(document::compile_glob(g)?);
                    owners.push(i);
                }
            }
        } else {
            for k in ToolKind::ALL.iter().filter(|k| rule.applies_to(**k)) {
                index.call_level[kind_index(*k)].push(i);
            }
        }
    }
    let bucket = |(b, owners): (GlobSetBuilder, Vec<u32>)| -> Result<GlobBucket, String> {
        Ok(GlobBucket {
            set: b.build().map_err(|e| e.to_string())?,
            owners,
        })
    };
    for (k, (by_first, rest)) in path_builders.into_iter().enumerate() {
        index.paths[k] = PathIndex {
            by_first: by_first
                .into_iter()
                .map(|(first, b)| Ok((first, bucket(b)?)))
                .collect::<Result<_, String>>()?,
            rest: bucket(rest)?,
        };
    }
    index.program_globs = program_globs.build().map_err(|e| e.to_string())?;
    Ok(index)
}

fn example_call(ex: &document::RawExample) -> Result<(ToolCall, CallContext), String> {
    let tool = match &ex.tool {
        Some(t) => t.get_ref().parse::<ToolKind>()?,
        None if ex.script.is_some() || ex.argv.is_some() => ToolKind::ProcessRun,
        None if ex.host.is_some() => ToolKind::NetConnect,
        None => return Err("give `tool`, or `script` / `argv` for process.run".to_owned()),
    };
    let mut call = ToolCall::new(tool);
    call.script.clone_from(&ex.script);
    call.argv.clone_from(&ex.argv);
    call.path.clone_from(&ex.path);
    call.recursive = ex.recursive;
    call.cwd.clone_from(&ex.cwd);
    call.host.clone_from(&ex.host);
    call.port = ex.port;
    call.protocol.clone_from(&ex.protocol);
    call.sandbox_profile.clone_from(&ex.sandbox);
    if tool == ToolKind::ProcessRun && call.script.is_some() == call.argv.is_some() {
        return Err("a process.run example needs exactly one of `script` or `argv`".to_owned());
    }
    if tool == ToolKind::NetConnect {
        if call.host.is_none() || call.port.is_none() {
            return Err("a net.connect example needs `host` and `port`".to_owned());
        }
    } else if tool != ToolKind::ProcessRun && call.path.is_none() {
        return Err(format!("a {tool} example needs `path`"));
    }
    let ctx = CallContext {
        session_id: ex.session.clone().unwrap_or_default(),
        principal: ex.principal.clone().unwrap_or_default(),
        labels: ex.labels.clone(),
    };
    Ok((call, ctx))
}

#[derive(Default)]
struct Builder {
    matches: Vec<RuleMatch>,
    commands: Vec<CommandExplanation>,
    paths: Vec<PathExplanation>,
    /// The profile a `process.run` is decided under.
    profile: Option<DecidedProfile>,
    /// The document's default tier (`None` outside `classify_under`: ask).
    default: Option<Tier>,
}

impl Builder {
    fn push(&mut self, id: &str, tier: Tier, reason: &str, source: RuleSource) -> Tier {
        if !self.matches.iter().any(|m| m.rule_id == id) {
            self.matches.push(RuleMatch {
                rule_id: id.to_owned(),
                tier,
                reason: reason.to_owned(),
                source,
                contained: None,
            });
        }
        tier
    }

    fn guarantees(&self) -> Guarantees {
        self.profile
            .as_ref()
            .map_or(Guarantees::NONE, |p| p.guarantees)
    }

    /// A baseline rule that matched: the tier it counts with (`auto` when the profile
    /// contains it; a deny is never contained).
    fn baseline(&mut self, r: &'static BaselineRule) -> Tier {
        if r.tier == Tier::Ask && self.guarantees().contains(r.contained) {
            self.note_sandbox();
            let profile = self.sandbox_name();
            if !self.matches.iter().any(|m| m.rule_id == r.id) {
                self.matches.push(RuleMatch {
                    rule_id: r.id.to_owned(),
                    tier: Tier::Auto,
                    reason: r.reason.to_owned(),
                    source: RuleSource::Baseline,
                    contained: Some((profile, r.tier)),
                });
            }
            return Tier::Auto;
        }
        self.push(r.id, r.tier, r.reason, RuleSource::Baseline)
    }

    fn sandbox_name(&self) -> String {
        self.profile
            .as_ref()
            .and_then(|p| p.name.clone())
            .unwrap_or_default()
    }

    fn sandbox_id(&self) -> String {
        self.profile
            .as_ref()
            .map_or_else(|| "sandbox.none".to_owned(), DecidedProfile::rule_id)
    }

    fn contained_phrase(&self) -> String {
        format!("in the {} sandbox", self.sandbox_name())
    }

    /// Whether the match `id` was contained by the profile.
    fn is_contained(&self, id: &str) -> bool {
        self.matches
            .iter()
            .any(|m| m.rule_id == id && m.contained.is_some())
    }

    /// Records that the profile's guarantees made something auto.
    fn note_sandbox(&mut self) {
        if let Some(p) = &self.profile {
            let (id, reason) = (p.rule_id(), p.reason());
            self.push(&id, Tier::Auto, &reason, RuleSource::Sandbox);
        }
    }

    /// What a command or a write nothing speaks about gets: the default, or `auto` when the
    /// default asks and the profile contains code (an unknown program, a plain write).
    fn unmatched(&mut self) -> (String, Tier) {
        let t = self.default.unwrap_or(Tier::Ask);
        if t == Tier::Ask && self.guarantees().contains_code() {
            self.note_sandbox();
            return (self.sandbox_id(), Tier::Auto);
        }
        self.fallback(t);
        ("default".to_owned(), t)
    }

    fn user(&mut self, r: &Rule) -> Tier {
        self.push(&r.id, r.tier, &r.reason, RuleSource::User)
    }

    fn fallback(&mut self, t: Tier) -> Tier {
        self.push(
            "default",
            t,
            "no rule matched this call; the policy default applies",
            RuleSource::Default,
        )
    }
}

fn message(tier: Tier, b: &Builder, call: &ToolCall) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(128);
    match tier {
        Tier::Deny => out.push_str("denied, not approvable: "),
        Tier::Ask => out.push_str("needs human approval: "),
        Tier::Auto => out.push_str("allowed: "),
    }
    // What is refused or asked about; an allowed call is explained by its rules alone.
    if tier != Tier::Auto {
        if let Some(c) = b.commands.iter().find(|c| c.tier == tier) {
            let _ = write!(out, "command `{}`", c.argv.join(" "));
        } else if let Some(p) = b.paths.iter().find(|p| p.tier == tier) {
            let _ = write!(out, "{} of `{}`", p.access.as_str(), p.path);
        } else if call.tool == ToolKind::NetConnect {
            let _ = write!(
                out,
                "connection to {}:{} ({})",
                call.host.as_deref().unwrap_or("?"),
                call.port.unwrap_or_default(),
                call.protocol.as_deref().unwrap_or("tcp")
            );
        } else {
            let _ = write!(out, "{} call", call.tool);
        }
        out.push_str(": ");
    }
    // A contained rule is explained by the sandbox's own match.
    let worst = b
        .matches
        .iter()
        .filter(|m| m.tier == tier && m.contained.is_none());
    for (i, m) in worst.enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        let _ = write!(out, "{} ({})", m.reason, m.rule_id);
    }
    out
}
