//! Reading a known program's arguments the way its own option parser does (GNU `getopt_long`):
//! which words are option values and which are operands.
//!
//! Without this, `tail -n 20 f` names a file `20`, and worse, `awk -F , 'BEGIN{system("id")}'`
//! or `sed -l 5 '1e id' f` have their program text checked in the wrong word. The tables in
//! `tables.rs` list, per program, the options that *require* a value and, apart, every other
//! long option: getopt_long takes any unique prefix of a long option (`--compress-prog=sh` is
//! `--compress-program`), and whether a prefix is unique depends on all of them. An ambiguous
//! prefix is reported, and the baseline asks. An option missing from the table makes its value
//! look like an operand, which can only add paths and stricter checks. An option listed by
//! mistake would hide a real operand, so every entry was taken from the program's `getopt`
//! option string or `--help`, programs with their own ad hoc parsers (such as `xxd`, which
//! takes any word starting with `-p` for `-postscript`) have no table, and
//! `tests/engine/argv_opens.rs` runs the real programs, with every abbreviated and clustered spelling
//! of every option that takes a value, to check that no file they open is missed.
//!
//! git's subcommands read their options with git's parse-options, which follows the same
//! rules. Those the baseline looks into have tables named `git <subcommand>`, read with
//! [`parse_subcommand`] (so that `git commit -m -f` has no `-f`, and `git clean -xdf` has),
//! and a unit test compares each with the long options the installed git prints.

mod git;
mod tables;
#[cfg(test)]
mod tests;

use tables::TABLES;

/// How one program's options take values.
struct Table {
    /// Program names (basenames) the table applies to.
    names: &'static [&'static str],
    /// Short options that require a value: the rest of the cluster, else the next word.
    short: &'static str,
    /// Short options with an optional value (`sed -i[SUFFIX]`): only the rest of the cluster.
    short_optional: &'static str,
    /// Long options that require a value: after `=`, else the next word.
    long: &'static [&'static str],
    /// Every other long option (no value, or an optional value given only after `=`). They
    /// are listed because getopt_long resolves an abbreviation against all of a program's
    /// long options: `--s` is ambiguous for `tail` only because `--silent` exists.
    flags: &'static [&'static str],
    /// Whether a unique prefix of a long option names it (getopt_long, argp). False for
    /// programs with their own parser that compares whole words (jq).
    abbreviations: bool,
    /// Long options followed by two values (jq's `--arg NAME VALUE`).
    long2: &'static [&'static str],
    /// Options (`-f` or `--file`) whose value (the last, for two values) is a file it reads.
    reads: &'static [&'static str],
    /// Options whose value is a file or directory it writes.
    writes: &'static [&'static str],
    /// Whether options end at the first operand (awk's program text), as with `+` in a
    /// `getopt` option string; otherwise options and operands may be mixed (GNU's default).
    stop_at_operand: bool,
}

/// An option as the program sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opt<'a> {
    /// `-x`, alone or in a cluster.
    Short(char),
    /// `--name`, without any `=value`: the full name an abbreviation resolved to, or the
    /// spelling itself when the table does not know it.
    Long(&'a str),
}

impl Opt<'_> {
    /// Whether this is the option spelled `spelled` (`-f` or `--file`).
    pub(crate) fn is(&self, spelled: &str) -> bool {
        match self {
            Opt::Short(c) => spelled.strip_prefix('-').is_some_and(|s| {
                let mut chars = s.chars();
                chars.next() == Some(*c) && chars.next().is_none()
            }),
            Opt::Long(name) => *name == spelled,
        }
    }
}

/// A command's arguments as its option parser reads them.
#[derive(Debug, Default)]
pub(crate) struct Args<'a> {
    /// The words that are not options or option values, in order.
    pub operands: Vec<&'a str>,
    /// Every option given, abbreviations resolved, in order. Without a table, every letter
    /// of a cluster, and long options as spelled.
    pub options: Vec<Opt<'a>>,
    /// The values options took, in order.
    pub values: Vec<(Opt<'a>, &'a str)>,
    /// Files the options name: (path, written?).
    pub files: Vec<(&'a str, bool)>,
    /// A long option spelled as a prefix of several options: the program refuses it or
    /// picks one by rules this table does not model, so what it does is not known.
    pub ambiguous: Option<&'a str>,
    /// Long options (without `=value`) the table did not resolve to one of its own: unknown
    /// to it, ambiguous, or given to a program without a table.
    unresolved: Vec<&'a str>,
    /// Long options (without `=value`) given with their full name, not abbreviated.
    in_full: Vec<&'a str>,
}

impl<'a> Args<'a> {
    /// The values of the options spelled in `spellings`.
    pub(crate) fn values_of<'s>(
        &'s self,
        spellings: &'s [&str],
    ) -> impl Iterator<Item = &'a str> + 's {
        self.values
            .iter()
            .filter(|(o, _)| spellings.iter().any(|s| o.is(s)))
            .map(|(_, v)| *v)
    }

    /// Whether any option spelled in `spellings` was given, however it was abbreviated or
    /// clustered.
    pub(crate) fn has(&self, spellings: &[&str]) -> bool {
        self.options
            .iter()
            .any(|o| spellings.iter().any(|s| o.is(s)))
    }

    /// Whether an option spelled in `spellings` may have been given: [`Args::has`], or a long
    /// option the table did not resolve (unknown to it, ambiguous, or for a program without a
    /// table) that is a prefix of one of them. The program refuses an unknown or ambiguous
    /// prefix, or, when the table is not complete, may read it as that option: counting it
    /// only asks where nothing would have run. Use this for options that make a decision
    /// stricter; an option that makes a command safer must be matched with
    /// [`Args::has_in_full`].
    pub(crate) fn may_have(&self, spellings: &[&str]) -> bool {
        self.has(spellings)
            || self.unresolved.iter().any(|u| {
                u.len() > 2
                    && spellings
                        .iter()
                        .any(|s| s.starts_with("--") && s.starts_with(u))
            })
    }

    /// Whether the long option `long` was given spelled in full, bare or as `--long=value`.
    pub(crate) fn has_in_full(&self, long: &str) -> bool {
        self.in_full.contains(&long)
    }
}

/// How a long option takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arity {
    /// Only after `=` (no value, or an optional one).
    Attached,
    /// After `=`, else the next word.
    One,
    /// Two values (jq's `--arg NAME VALUE`).
    Two,
}

/// What a long option's name (without `=value`) resolves to.
enum Resolved {
    Known(&'static str, Arity),
    /// Not in the table: taken as a flag, so a value it may take stays an operand.
    Unknown,
    Ambiguous,
}

impl Table {
    fn all_long(&self) -> impl Iterator<Item = (&'static str, Arity)> + '_ {
        let with = |names: &'static [&'static str], a| names.iter().map(move |n| (*n, a));
        with(self.long, Arity::One)
            .chain(with(self.long2, Arity::Two))
            .chain(with(self.flags, Arity::Attached))
    }

    /// Resolves `--name` the way getopt_long does: an exact match wins, else a unique prefix
    /// names its option, and a prefix of several is ambiguous. glibc accepts a prefix of
    /// several options that all behave the same; treating it as ambiguous only asks more.
    fn resolve(&self, name: &str) -> Resolved {
        if let Some((n, a)) = self.all_long().find(|(n, _)| *n == name) {
            return Resolved::Known(n, a);
        }
        // `--` alone never gets here; `--x` needs at least one letter to abbreviate anything.
        if !self.abbreviations || name.len() < 3 {
            return Resolved::Unknown;
        }
        let mut found = None;
        for (n, a) in self.all_long().filter(|(n, _)| n.starts_with(name)) {
            if found.is_some() {
                return Resolved::Ambiguous;
            }
            found = Some((n, a));
        }
        found.map_or(Resolved::Unknown, |(n, a)| Resolved::Known(n, a))
    }
}

/// Reads `args` (without the program name) for the program `name`. A program without a table
/// gets the conservative reading: every word that does not start with `-` is an operand, and
/// every letter of a cluster an option.
pub(crate) fn parse<'a>(name: &str, args: &'a [String]) -> Args<'a> {
    read(TABLES.iter().find(|t| t.names.contains(&name)), args)
}

/// Reads the arguments after `program`'s subcommand `sub` (`git push`'s) with that
/// subcommand's table, or without a table (the conservative reading) when it has none.
pub(crate) fn parse_subcommand<'a>(
    program: &str,
    sub: Option<&str>,
    args: &'a [String],
) -> Args<'a> {
    let table = sub.and_then(|sub| {
        git::SUBCOMMANDS.iter().find(|t| {
            t.names
                .iter()
                .any(|n| n.split_once(' ') == Some((program, sub)))
        })
    });
    read(table, args)
}

/// The operands of `args` read without a table: every word that does not start with `-`
/// (and `-` itself), and every word after `--`. User rules' subcommand lists are compared with
/// these words, whichever programs have tables.
pub(crate) fn operands(args: &[String]) -> Vec<&str> {
    read(None, args).operands
}

fn read<'a>(table: Option<&Table>, args: &'a [String]) -> Args<'a> {
    let mut out = Args::default();
    let mut words = args.iter().map(String::as_str);
    while let Some(w) = words.next() {
        if w == "--" {
            out.operands.extend(words.by_ref());
            break;
        }
        if w == "-" || !w.starts_with('-') {
            out.operands.push(w);
            if table.is_some_and(|t| t.stop_at_operand) {
                out.operands.extend(words.by_ref());
                break;
            }
            continue;
        }
        let long = w.strip_prefix("--").map(|long| match long.split_once('=') {
            Some((n, v)) => (&w[..2 + n.len()], Some(v)),
            None => (w, None),
        });
        let Some(t) = table else {
            // Nothing is known to take a value: the next word stays an operand, and every
            // letter of a cluster counts as an option (`-uorigin/x` holds a `-u` and an `-x`
            // to a reader that does not know `-u` takes the rest). More options and more
            // operands than the program sees, never fewer.
            match long {
                Some((spelled, _)) => {
                    out.options.push(Opt::Long(spelled));
                    out.unresolved.push(spelled);
                    out.in_full.push(spelled);
                }
                None => out.options.extend(w[1..].chars().map(Opt::Short)),
            }
            continue;
        };
        if let Some((spelled, attached)) = long {
            let (opt, arity) = match t.resolve(spelled) {
                Resolved::Known(full, arity) => (Opt::Long(full), arity),
                Resolved::Unknown => {
                    out.unresolved.push(spelled);
                    (Opt::Long(spelled), Arity::Attached)
                }
                Resolved::Ambiguous => {
                    out.ambiguous.get_or_insert(w);
                    out.unresolved.push(spelled);
                    (Opt::Long(spelled), Arity::Attached)
                }
            };
            if opt == Opt::Long(spelled) {
                out.in_full.push(spelled);
            }
            out.options.push(opt);
            let mut taken = [None, None];
            match (attached, arity) {
                (Some(v), Arity::Two) => taken = [Some(v), words.next()],
                (Some(v), _) => taken[0] = Some(v),
                (None, Arity::Two) => taken = [words.next(), words.next()],
                (None, Arity::One) => taken[0] = words.next(),
                (None, Arity::Attached) => {}
            }
            let n = taken.iter().take_while(|v| v.is_some()).count();
            let taken: [&str; 2] = taken.map(Option::unwrap_or_default);
            out.take(t, opt, &taken[..n]);
            continue;
        }
        let cluster = &w[1..];
        for (i, c) in cluster.char_indices() {
            out.options.push(Opt::Short(c));
            let rest = &cluster[i + c.len_utf8()..];
            if t.short.contains(c) {
                let value = if rest.is_empty() {
                    words.next()
                } else {
                    Some(rest)
                };
                out.take(t, Opt::Short(c), value.as_slice());
                break;
            }
            if t.short_optional.contains(c) {
                // An optional value is only ever the rest of the word.
                if !rest.is_empty() {
                    out.take(t, Opt::Short(c), &[rest]);
                }
                break;
            }
        }
    }
    out
}

impl<'a> Args<'a> {
    fn take(&mut self, t: &Table, opt: Opt<'a>, values: &[&'a str]) {
        let Some(last) = values.last() else { return };
        self.values.extend(values.iter().map(|v| (opt, *v)));
        if t.reads.iter().any(|s| opt.is(s)) {
            self.files.push((last, false));
        } else if t.writes.iter().any(|s| opt.is(s)) {
            self.files.push((last, true));
        }
    }
}
