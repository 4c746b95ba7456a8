//! Reading a known program's arguments the way its own option parser does (GNU `getopt_long`):
//! which words are option values and which are operands.
//!
//! Without this, `tail -n 20 f` names a file `20`, and worse, `awk -F , 'BEGIN{system("id")}'`
//! or `sed -l 5 '1e id' f` have their program text checked in the wrong word. The table below
//! lists, per program, only the options that *require* a value; an option that is missing from
//! it makes its value look like an operand, which can only add paths and stricter checks. An
//! option listed by mistake would hide a real operand, so every entry was taken from the
//! program's `getopt` option string or `--help`, programs with their own ad hoc parsers (such
//! as `xxd`, which takes any word starting with `-p` for `-postscript`) have no table, and
//! `tests/argv_opens.rs` runs the real programs to check that no file they open is missed.

/// How one program's options take values.
struct Table {
    /// Program names (basenames) the table applies to.
    names: &'static [&'static str],
    /// Short options that require a value: the rest of the cluster, else the next word.
    short: &'static str,
    /// Long options that require a value: after `=`, else the next word.
    long: &'static [&'static str],
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

const fn table(
    names: &'static [&'static str],
    short: &'static str,
    long: &'static [&'static str],
) -> Table {
    Table {
        names,
        short,
        long,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    }
}

const TABLES: &[Table] = &[
    table(&["head"], "cn", &["--bytes", "--lines"]),
    table(
        &["tail"],
        "cns",
        &[
            "--bytes",
            "--lines",
            "--sleep-interval",
            "--pid",
            "--max-unchanged-stats",
        ],
    ),
    Table {
        reads: &["-f", "--file", "--exclude-from"],
        ..table(
            &["grep", "egrep", "fgrep"],
            "efmABCdD",
            &[
                "--regexp",
                "--file",
                "--max-count",
                "--after-context",
                "--before-context",
                "--context",
                "--directories",
                "--devices",
                "--label",
                "--include",
                "--exclude",
                "--exclude-from",
                "--exclude-dir",
                "--binary-files",
                "--group-separator",
            ],
        )
    },
    Table {
        reads: &["--random-source", "--files0-from"],
        writes: &["-o", "--output", "-T", "--temporary-directory"],
        ..table(
            &["sort"],
            "kotST",
            &[
                "--key",
                "--output",
                "--field-separator",
                "--buffer-size",
                "--temporary-directory",
                "--random-source",
                "--sort",
                "--batch-size",
                "--compress-program",
                "--files0-from",
                "--parallel",
            ],
        )
    },
    table(
        &["cut"],
        "bcdf",
        &[
            "--bytes",
            "--characters",
            "--delimiter",
            "--fields",
            "--output-delimiter",
        ],
    ),
    table(
        &["uniq"],
        "fsw",
        &["--skip-fields", "--skip-chars", "--check-chars"],
    ),
    Table {
        reads: &["--files0-from"],
        ..table(&["wc"], "", &["--files0-from"])
    },
    table(
        &["nl"],
        "bdfhilnsvw",
        &[
            "--body-numbering",
            "--section-delimiter",
            "--footer-numbering",
            "--header-numbering",
            "--line-increment",
            "--join-blank-lines",
            "--number-format",
            "--number-separator",
            "--starting-line-number",
            "--number-width",
        ],
    ),
    table(&["fold"], "w", &["--width"]),
    table(&["base64"], "w", &["--wrap"]),
    table(
        &["od"],
        "AjNSt",
        &[
            "--address-radix",
            "--skip-bytes",
            "--read-bytes",
            "--format",
        ],
    ),
    Table {
        reads: &["-X", "--exclude-from", "--files0-from"],
        ..table(
            &["du"],
            "BdtX",
            &[
                "--block-size",
                "--max-depth",
                "--files0-from",
                "--threshold",
                "--time-style",
                "--exclude-from",
                "--exclude",
            ],
        )
    },
    table(
        &["ls"],
        "ITw",
        &[
            "--block-size",
            "--format",
            "--hide",
            "--indicator-style",
            "--ignore",
            "--quoting-style",
            "--sort",
            "--tabsize",
            "--width",
            "--time-style",
        ],
    ),
    Table {
        reads: &["-X", "--exclude-from", "--from-file", "--to-file"],
        ..table(
            &["diff"],
            "CUWFxXSIDL",
            &[
                "--width",
                "--show-function-line",
                "--tabsize",
                "--exclude",
                "--exclude-from",
                "--starting-file",
                "--from-file",
                "--to-file",
                "--ignore-matching-lines",
                "--ifdef",
                "--line-format",
                "--old-line-format",
                "--new-line-format",
                "--unchanged-line-format",
                "--old-group-format",
                "--new-group-format",
                "--unchanged-group-format",
                "--changed-group-format",
                "--horizon-lines",
                "--palette",
                "--label",
            ],
        )
    },
    table(&["stat"], "c", &["--format", "--printf", "--cached"]),
    table(&["tac"], "s", &["--separator"]),
    table(&["paste"], "d", &["--delimiters"]),
    table(&["join"], "aejotv12", &[]),
    table(&["comm"], "", &["--output-delimiter"]),
    table(&["fmt"], "pwg", &["--prefix", "--width", "--goal"]),
    table(&["realpath"], "", &["--relative-to", "--relative-base"]),
    Table {
        reads: &["-f"],
        ..table(&["hexdump"], "efns", &[])
    },
    table(
        &["strings"],
        "ntTe",
        &[
            "--bytes",
            "--radix",
            "--target",
            "--encoding",
            "--output-separator",
        ],
    ),
    Table {
        reads: &["-m", "--magic-file", "-f", "--files-from"],
        ..table(
            &["file"],
            "mfFeP",
            &[
                "--magic-file",
                "--files-from",
                "--separator",
                "--exclude",
                "--exclude-quiet",
                "--parameter",
            ],
        )
    },
    table(
        &["column"],
        "nONlEHRTWripcos",
        &[
            "--table-name",
            "--table-order",
            "--table-columns",
            "--table-columns-limit",
            "--table-noextreme",
            "--table-hide",
            "--table-right",
            "--table-truncate",
            "--table-wrap",
            "--tree",
            "--tree-id",
            "--tree-parent",
            "--output-width",
            "--output-separator",
            "--separator",
        ],
    ),
    Table {
        reads: &[
            "-f",
            "--file",
            "-E",
            "--exec",
            "-i",
            "--include",
            "-l",
            "--load",
        ],
        stop_at_operand: true,
        ..table(
            &["awk", "gawk", "mawk", "nawk", "busybox-awk"],
            "fFveEilW",
            &[
                "--file",
                "--field-separator",
                "--assign",
                "--source",
                "--exec",
                "--include",
                "--load",
            ],
        )
    },
    Table {
        reads: &["-f", "--file"],
        ..table(
            &["sed"],
            "efl",
            &["--expression", "--file", "--line-length"],
        )
    },
    // jq reads its own options, not with getopt: only its exact long spellings are listed.
    // `-f`/`--from-file` is a flag that turns the first operand into the filter's file.
    Table {
        long2: &["--arg", "--argjson", "--slurpfile", "--rawfile"],
        reads: &["--slurpfile", "--rawfile"],
        ..table(&["jq"], "", &["--indent"])
    },
];

/// An option as the program sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opt<'a> {
    /// `-x`, alone or in a cluster.
    Short(char),
    /// `--name`, without any `=value`.
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
    /// The values options took, in order.
    pub values: Vec<(Opt<'a>, &'a str)>,
    /// Files the options name: (path, written?).
    pub files: Vec<(&'a str, bool)>,
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
}

/// Reads `args` (without the program name) for the program `name`. A program without a table
/// gets the conservative reading: every word that does not start with `-` is an operand.
pub(crate) fn parse<'a>(name: &str, args: &'a [String]) -> Args<'a> {
    let table = TABLES.iter().find(|t| t.names.contains(&name));
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
        let Some(t) = table else { continue };
        if let Some(long) = w.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (&w[..2 + n.len()], Some(v)),
                None => (w, None),
            };
            let opt = Opt::Long(name);
            let taken: Vec<&str> = match attached {
                Some(v) if t.long2.contains(&name) => {
                    std::iter::once(v).chain(words.next()).collect()
                }
                Some(v) => vec![v],
                None if t.long2.contains(&name) => words.by_ref().take(2).collect(),
                None if t.long.contains(&name) => words.next().into_iter().collect(),
                None => Vec::new(),
            };
            out.take(t, opt, &taken);
            continue;
        }
        let cluster = &w[1..];
        for (i, c) in cluster.char_indices() {
            if t.short.contains(c) {
                let rest = &cluster[i + c.len_utf8()..];
                let value = if rest.is_empty() {
                    words.next()
                } else {
                    Some(rest)
                };
                out.take(t, Opt::Short(c), value.as_slice());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn option_values_are_not_operands() {
        let a = words("-n 20 f");
        assert_eq!(parse("tail", &a).operands, ["f"]);
        let a = words("-n20 --lines 3 --bytes=4 f -- -n");
        let p = parse("tail", &a);
        assert_eq!(p.operands, ["f", "-n"]);
        assert_eq!(
            p.values.iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            ["20", "3", "4"]
        );
        // In a cluster, the first option that takes a value takes the rest of the word.
        let a = words("-rnA 3 -m1e pat f");
        let p = parse("grep", &a);
        assert_eq!(p.operands, ["pat", "f"]);
        assert_eq!(p.values_of(&["-A"]).collect::<Vec<_>>(), ["3"]);
        assert_eq!(p.values_of(&["-m"]).collect::<Vec<_>>(), ["1e"]);
    }

    #[test]
    fn unknown_programs_keep_every_non_option_word() {
        let a = words("-n 20 f");
        assert_eq!(parse("frobnicate", &a).operands, ["20", "f"]);
    }

    #[test]
    fn file_valued_options_name_files() {
        let a = words("-f pats --exclude-from=ex foo f");
        assert_eq!(parse("grep", &a).files, [("pats", false), ("ex", false)]);
        let a = words("-o out -k 2 f");
        assert_eq!(parse("sort", &a).files, [("out", true)]);
        let a = words("--slurpfile s data.json --arg x y . in.json");
        let p = parse("jq", &a);
        assert_eq!(p.operands, [".", "in.json"]);
        assert_eq!(p.files, [("data.json", false)]);
    }

    #[test]
    fn awk_options_end_at_the_program() {
        let a = words("-F , -v x=1 {print} -F f");
        let p = parse("awk", &a);
        assert_eq!(p.operands, ["{print}", "-F", "f"]);
        assert_eq!(p.values_of(&["-F"]).collect::<Vec<_>>(), [","]);
    }
}
