//! Reading a known program's arguments the way its own option parser does (GNU `getopt_long`):
//! which words are option values and which are operands.
//!
//! Without this, `tail -n 20 f` names a file `20`, and worse, `awk -F , 'BEGIN{system("id")}'`
//! or `sed -l 5 '1e id' f` have their program text checked in the wrong word. The table below
//! lists, per program, the options that *require* a value and, apart, every other long option:
//! getopt_long takes any unique prefix of a long option (`--compress-prog=sh` is
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

const TABLES: &[Table] = &[
    Table {
        names: &["head"],
        short: "cn",
        short_optional: "",
        long: &["--bytes", "--lines"],
        flags: &[
            "--help",
            "--quiet",
            "--silent",
            "--verbose",
            "--version",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["tail"],
        short: "cns",
        short_optional: "",
        long: &[
            "--bytes",
            "--lines",
            "--sleep-interval",
            "--pid",
            "--max-unchanged-stats",
        ],
        flags: &[
            "--follow",
            "--help",
            "--quiet",
            "--retry",
            "--silent",
            "--verbose",
            "--version",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["grep", "egrep", "fgrep"],
        short: "efmABCdDX",
        short_optional: "",
        long: &[
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
        flags: &[
            "--basic-regexp",
            "--binary",
            "--byte-offset",
            "--color",
            "--colour",
            "--count",
            "--dereference-recursive",
            "--extended-regexp",
            "--files-with-matches",
            "--files-without-match",
            "--fixed-strings",
            "--help",
            "--ignore-case",
            "--initial-tab",
            "--invert-match",
            "--line-buffered",
            "--line-number",
            "--line-regexp",
            "--no-filename",
            "--no-group-separator",
            "--no-ignore-case",
            "--no-messages",
            "--null",
            "--null-data",
            "--only-matching",
            "--perl-regexp",
            "--quiet",
            "--recursive",
            "--silent",
            "--text",
            "--version",
            "--with-filename",
            "--word-regexp",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-f", "--file", "--exclude-from"],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["sort"],
        short: "kotSTy",
        short_optional: "",
        long: &[
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
        flags: &[
            "--check",
            "--debug",
            "--dictionary-order",
            "--general-numeric-sort",
            "--help",
            "--human-numeric-sort",
            "--ignore-case",
            "--ignore-leading-blanks",
            "--ignore-nonprinting",
            "--merge",
            "--month-sort",
            "--numeric-sort",
            "--random-sort",
            "--reverse",
            "--stable",
            "--unique",
            "--version",
            "--version-sort",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["--random-source", "--files0-from"],
        writes: &["-o", "--output", "-T", "--temporary-directory"],
        stop_at_operand: false,
    },
    Table {
        names: &["cut"],
        short: "bcdf",
        short_optional: "",
        long: &[
            "--bytes",
            "--characters",
            "--delimiter",
            "--fields",
            "--output-delimiter",
        ],
        flags: &[
            "--complement",
            "--help",
            "--only-delimited",
            "--version",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["uniq"],
        short: "fsw",
        short_optional: "",
        long: &["--skip-fields", "--skip-chars", "--check-chars"],
        flags: &[
            "--all-repeated",
            "--count",
            "--group",
            "--help",
            "--ignore-case",
            "--repeated",
            "--unique",
            "--version",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["wc"],
        short: "",
        short_optional: "",
        long: &["--files0-from"],
        flags: &[
            "--bytes",
            "--chars",
            "--help",
            "--lines",
            "--max-line-length",
            "--version",
            "--words",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["--files0-from"],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["nl"],
        short: "bdfhilnsvw",
        short_optional: "",
        long: &[
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
        flags: &["--help", "--no-renumber", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["fold"],
        short: "w",
        short_optional: "",
        long: &["--width"],
        flags: &["--bytes", "--help", "--spaces", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["base64"],
        short: "w",
        short_optional: "",
        long: &["--wrap"],
        flags: &["--decode", "--help", "--ignore-garbage", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["od"],
        short: "AjNSt",
        short_optional: "w",
        long: &[
            "--address-radix",
            "--skip-bytes",
            "--read-bytes",
            "--format",
            "--endian",
        ],
        flags: &[
            "--help",
            "--output-duplicates",
            "--strings",
            "--traditional",
            "--version",
            "--width",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["du"],
        short: "BdtX",
        short_optional: "",
        long: &[
            "--block-size",
            "--max-depth",
            "--files0-from",
            "--threshold",
            "--time-style",
            "--exclude-from",
            "--exclude",
        ],
        flags: &[
            "--all",
            "--apparent-size",
            "--bytes",
            "--count-links",
            "--dereference",
            "--dereference-args",
            "--help",
            "--human-readable",
            "--inodes",
            "--no-dereference",
            "--null",
            "--one-file-system",
            "--separate-dirs",
            "--si",
            "--summarize",
            "--time",
            "--total",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-X", "--exclude-from", "--files0-from"],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["ls"],
        short: "ITw",
        short_optional: "",
        long: &[
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
            "--time",
        ],
        flags: &[
            "--all",
            "--almost-all",
            "--author",
            "--classify",
            "--color",
            "--context",
            "--dereference",
            "--dereference-command-line",
            "--dereference-command-line-symlink-to-dir",
            "--directory",
            "--dired",
            "--escape",
            "--file-type",
            "--full-time",
            "--group-directories-first",
            "--help",
            "--hide-control-chars",
            "--human-readable",
            "--hyperlink",
            "--ignore-backups",
            "--inode",
            "--kibibytes",
            "--literal",
            "--no-group",
            "--numeric-uid-gid",
            "--quote-name",
            "--recursive",
            "--reverse",
            "--show-control-chars",
            "--si",
            "--size",
            "--version",
            "--zero",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["diff"],
        short: "CUWFxXSIDL",
        short_optional: "",
        long: &[
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
        flags: &[
            "--binary",
            "--forward-ed",
            "--inhibit-hunk-merge",
            "--presume-output-tty",
            "--sdiff-merge-assist",
            "--brief",
            "--color",
            "--context",
            "--ed",
            "--expand-tabs",
            "--help",
            "--ignore-all-space",
            "--ignore-blank-lines",
            "--ignore-case",
            "--ignore-file-name-case",
            "--ignore-space-change",
            "--ignore-tab-expansion",
            "--ignore-trailing-space",
            "--initial-tab",
            "--left-column",
            "--minimal",
            "--new-file",
            "--no-dereference",
            "--no-ignore-file-name-case",
            "--normal",
            "--paginate",
            "--rcs",
            "--recursive",
            "--report-identical-files",
            "--show-c-function",
            "--side-by-side",
            "--speed-large-files",
            "--strip-trailing-cr",
            "--suppress-blank-empty",
            "--suppress-common-lines",
            "--text",
            "--unidirectional-new-file",
            "--unified",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-X", "--exclude-from", "--from-file", "--to-file"],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["stat"],
        short: "c",
        short_optional: "",
        long: &["--format", "--printf", "--cached"],
        flags: &[
            "--dereference",
            "--file-system",
            "--help",
            "--terse",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["tac"],
        short: "s",
        short_optional: "",
        long: &["--separator"],
        flags: &["--before", "--help", "--regex", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["paste"],
        short: "d",
        short_optional: "",
        long: &["--delimiters"],
        flags: &["--help", "--serial", "--version", "--zero-terminated"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["join"],
        short: "aejotv12",
        short_optional: "",
        long: &[],
        flags: &[
            "--check-order",
            "--header",
            "--help",
            "--ignore-case",
            "--nocheck-order",
            "--version",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["comm"],
        short: "",
        short_optional: "",
        long: &["--output-delimiter"],
        flags: &[
            "--check-order",
            "--help",
            "--nocheck-order",
            "--total",
            "--version",
            "--zero-terminated",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["fmt"],
        short: "pwg",
        short_optional: "",
        long: &["--prefix", "--width", "--goal"],
        flags: &[
            "--crown-margin",
            "--help",
            "--split-only",
            "--tagged-paragraph",
            "--uniform-spacing",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["realpath"],
        short: "",
        short_optional: "",
        long: &["--relative-to", "--relative-base"],
        flags: &[
            "--canonicalize-existing",
            "--canonicalize-missing",
            "--help",
            "--logical",
            "--no-symlinks",
            "--physical",
            "--quiet",
            "--strip",
            "--version",
            "--zero",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["hexdump"],
        short: "efns",
        short_optional: "",
        long: &["--format", "--format-file", "--length", "--skip"],
        flags: &[
            "--canonical",
            "--color",
            "--help",
            "--no-squeezing",
            "--one-byte-char",
            "--one-byte-octal",
            "--two-bytes-decimal",
            "--two-bytes-hex",
            "--two-bytes-octal",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-f", "--format-file"],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["strings"],
        short: "ntTesU",
        short_optional: "",
        long: &[
            "--bytes",
            "--radix",
            "--target",
            "--encoding",
            "--output-separator",
            "--unicode",
        ],
        flags: &[
            "--all",
            "--data",
            "--help",
            "--include-all-whitespace",
            "--print-file-name",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["file"],
        short: "mfFeP",
        short_optional: "",
        long: &[
            "--magic-file",
            "--files-from",
            "--separator",
            "--exclude",
            "--exclude-quiet",
            "--parameter",
        ],
        flags: &[
            "--apple",
            "--brief",
            "--checking-printout",
            "--compile",
            "--debug",
            "--dereference",
            "--extension",
            "--help",
            "--keep-going",
            "--list",
            "--mime",
            "--mime-encoding",
            "--mime-type",
            "--no-buffer",
            "--no-dereference",
            "--no-pad",
            "--no-sandbox",
            "--preserve-date",
            "--print0",
            "--raw",
            "--special-files",
            "--uncompress",
            "--uncompress-noreport",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-m", "--magic-file", "-f", "--files-from"],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["column"],
        short: "nONlEHRTWripcos",
        short_optional: "",
        long: &[
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
        flags: &[
            "--fillrows",
            "--help",
            "--json",
            "--keep-empty-lines",
            "--table",
            "--table-header-repeat",
            "--table-noheadings",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    // gawk's options (`gawk --help`); `-d`, `-D`, `-L`, `-o` and `-p` take an optional value.
    Table {
        names: &["awk", "gawk", "mawk", "nawk", "busybox-awk"],
        short: "fFveEilW",
        short_optional: "dDLop",
        long: &[
            "--file",
            "--field-separator",
            "--assign",
            "--source",
            "--exec",
            "--include",
            "--load",
        ],
        flags: &[
            "--bignum",
            "--characters-as-bytes",
            "--copyright",
            "--debug",
            "--dump-variables",
            "--gen-pot",
            "--help",
            "--lint",
            "--lint-old",
            "--no-optimize",
            "--non-decimal-data",
            "--optimize",
            "--posix",
            "--pretty-print",
            "--profile",
            "--re-interval",
            "--sandbox",
            "--trace",
            "--traditional",
            "--use-lc-numeric",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
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
        writes: &[],
        stop_at_operand: true,
    },
    Table {
        names: &["sed"],
        short: "efl",
        short_optional: "i",
        long: &["--expression", "--file", "--line-length"],
        flags: &[
            "--debug",
            "--follow-symlinks",
            "--help",
            "--in-place",
            "--null-data",
            "--posix",
            "--quiet",
            "--regexp-extended",
            "--sandbox",
            "--separate",
            "--silent",
            "--unbuffered",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-f", "--file"],
        writes: &[],
        stop_at_operand: false,
    },
    // rm takes no option values; the table is here so that abbreviations (`--no-pres`, `--recur`) resolve.
    Table {
        names: &["rm"],
        short: "",
        short_optional: "",
        long: &[],
        flags: &[
            "--dir",
            "--force",
            "--help",
            "--interactive",
            "--no-preserve-root",
            "--one-file-system",
            "--preserve-root",
            "--recursive",
            "--verbose",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["date"],
        short: "dfrs",
        short_optional: "I",
        long: &["--date", "--file", "--reference", "--set", "--rfc-3339"],
        flags: &[
            "--debug",
            "--help",
            "--iso-8601",
            "--resolution",
            "--rfc-email",
            "--universal",
            "--utc",
            "--uct",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-f", "--file"],
        writes: &[],
        stop_at_operand: false,
    },
    // Copies and moves: `-t DIR` / `--target-directory=DIR` is where they write, and the
    // operands are all sources then.
    Table {
        names: &["cp"],
        short: "St",
        short_optional: "",
        long: &[
            "--no-preserve",
            "--sparse",
            "--suffix",
            "--target-directory",
        ],
        flags: &[
            "--archive",
            "--attributes-only",
            "--backup",
            "--copy-contents",
            "--no-dereference",
            "--force",
            "--interactive",
            "--link",
            "--dereference",
            "--no-clobber",
            "--preserve",
            "--parents",
            "--recursive",
            "--reflink",
            "--remove-destination",
            "--strip-trailing-slashes",
            "--symbolic-link",
            "--no-target-directory",
            "--update",
            "--verbose",
            "--one-file-system",
            "--context",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &["-t", "--target-directory"],
        stop_at_operand: false,
    },
    Table {
        names: &["mv"],
        short: "St",
        short_optional: "",
        long: &["--suffix", "--target-directory"],
        flags: &[
            "--backup",
            "--force",
            "--interactive",
            "--no-clobber",
            "--strip-trailing-slashes",
            "--no-target-directory",
            "--update",
            "--verbose",
            "--context",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &["-t", "--target-directory"],
        stop_at_operand: false,
    },
    Table {
        names: &["ln"],
        short: "St",
        short_optional: "",
        long: &["--suffix", "--target-directory"],
        flags: &[
            "--symbolic",
            "--backup",
            "--directory",
            "--force",
            "--interactive",
            "--logical",
            "--no-dereference",
            "--physical",
            "--relative",
            "--no-target-directory",
            "--verbose",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &["-t", "--target-directory"],
        stop_at_operand: false,
    },
    Table {
        names: &["install"],
        short: "gmoSt",
        short_optional: "",
        long: &[
            "--group",
            "--mode",
            "--owner",
            "--strip-program",
            "--suffix",
            "--target-directory",
        ],
        flags: &[
            "--backup",
            "--compare",
            "--directory",
            "--preserve-timestamps",
            "--strip",
            "--no-target-directory",
            "--verbose",
            "--preserve-context",
            "--context",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &["-t", "--target-directory"],
        stop_at_operand: false,
    },
    // Exec wrappers (GNU getopt with `+`: options end at the command they run). The shell
    // module unwraps them through these tables, so `env --split-s='rm -rf /'` and
    // `timeout --sig KILL 5 rm` name the command they run however the options are spelled.
    Table {
        names: &["env"],
        short: "uCS",
        short_optional: "",
        long: &["--unset", "--chdir", "--split-string"],
        flags: &[
            "--ignore-environment",
            "--null",
            "--block-signal",
            "--default-signal",
            "--ignore-signal",
            "--list-signal-handling",
            "--debug",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: true,
    },
    Table {
        names: &["nice"],
        short: "n",
        short_optional: "",
        long: &["--adjustment"],
        flags: &["--help", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: true,
    },
    Table {
        names: &["timeout"],
        short: "sk",
        short_optional: "",
        long: &["--signal", "--kill-after"],
        flags: &[
            "--foreground",
            "--preserve-status",
            "--verbose",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: true,
    },
    Table {
        names: &["stdbuf"],
        short: "ioe",
        short_optional: "",
        long: &["--input", "--output", "--error"],
        flags: &["--help", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: true,
    },
    Table {
        names: &["ionice"],
        short: "cnpPu",
        short_optional: "",
        long: &["--class", "--classdata", "--pid", "--pgid", "--uid"],
        flags: &["--ignore", "--help", "--version"],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: true,
    },
    Table {
        names: &["xargs"],
        short: "adEILnPs",
        short_optional: "eil",
        long: &[
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
        flags: &[
            "--eof",
            "--replace",
            "--max-lines",
            "--null",
            "--no-run-if-empty",
            "--interactive",
            "--verbose",
            "--exit",
            "--open-tty",
            "--show-limits",
            "--help",
            "--version",
        ],
        abbreviations: true,
        long2: &[],
        reads: &["-a", "--arg-file"],
        writes: &[],
        stop_at_operand: true,
    },
    // jq reads its own options, not with getopt: only its exact long spellings count.
    // `-f`/`--from-file` is a flag that turns the first operand into the filter's file.
    Table {
        names: &["jq"],
        short: "",
        short_optional: "",
        long: &["--indent"],
        flags: &[],
        abbreviations: false,
        long2: &["--arg", "--argjson", "--slurpfile", "--rawfile"],
        reads: &["--slurpfile", "--rawfile"],
        writes: &[],
        stop_at_operand: false,
    },
    // git's subcommands read their options with parse-options, which takes any unique prefix of a
    // long option and `--no-` before most of them. Each table lists what `git <subcommand> -h` and
    // `git <subcommand> --git-completion-helper-all` (git 2.47) print; values are only checked
    // for the subcommands whose flags the baseline looks at. `--contains`, `--merged` and their
    // kin take the next word unless they are the last one, which `long` reads the same way.
    Table {
        names: &["git push"],
        short: "o",
        short_optional: "",
        long: &[
            "--repo",
            "--recurse-submodules",
            "--receive-pack",
            "--exec",
            "--push-option",
        ],
        flags: &[
            "--verbose",
            "--quiet",
            "--all",
            "--branches",
            "--mirror",
            "--delete",
            "--tags",
            "--dry-run",
            "--porcelain",
            "--force",
            "--force-with-lease",
            "--force-if-includes",
            "--thin",
            "--set-upstream",
            "--progress",
            "--prune",
            "--no-verify",
            "--verify",
            "--follow-tags",
            "--signed",
            "--atomic",
            "--ipv4",
            "--ipv6",
            "--no-verbose",
            "--no-quiet",
            "--no-repo",
            "--no-all",
            "--no-branches",
            "--no-mirror",
            "--no-delete",
            "--no-tags",
            "--no-dry-run",
            "--no-porcelain",
            "--no-force",
            "--no-force-with-lease",
            "--no-force-if-includes",
            "--no-recurse-submodules",
            "--no-thin",
            "--no-receive-pack",
            "--no-exec",
            "--no-set-upstream",
            "--no-progress",
            "--no-prune",
            "--no-follow-tags",
            "--no-signed",
            "--no-atomic",
            "--no-push-option",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git reset"],
        short: "",
        short_optional: "",
        long: &["--pathspec-from-file"],
        flags: &[
            "--quiet",
            "--no-refresh",
            "--refresh",
            "--mixed",
            "--soft",
            "--hard",
            "--merge",
            "--keep",
            "--recurse-submodules",
            "--patch",
            "--intent-to-add",
            "--pathspec-file-nul",
            "--no-quiet",
            "--no-recurse-submodules",
            "--no-patch",
            "--no-intent-to-add",
            "--no-pathspec-from-file",
            "--no-pathspec-file-nul",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git commit"],
        short: "FmcCt",
        short_optional: "Su",
        long: &[
            "--file",
            "--author",
            "--date",
            "--message",
            "--reedit-message",
            "--reuse-message",
            "--fixup",
            "--squash",
            "--trailer",
            "--template",
            "--cleanup",
            "--pathspec-from-file",
        ],
        flags: &[
            "--quiet",
            "--verbose",
            "--reset-author",
            "--signoff",
            "--edit",
            "--status",
            "--gpg-sign",
            "--all",
            "--include",
            "--interactive",
            "--patch",
            "--only",
            "--no-verify",
            "--verify",
            "--dry-run",
            "--short",
            "--branch",
            "--ahead-behind",
            "--porcelain",
            "--long",
            "--null",
            "--amend",
            "--no-post-rewrite",
            "--post-rewrite",
            "--untracked-files",
            "--pathspec-file-nul",
            "--allow-empty",
            "--allow-empty-message",
            "--no-quiet",
            "--no-verbose",
            "--no-file",
            "--no-author",
            "--no-date",
            "--no-message",
            "--no-reedit-message",
            "--no-reuse-message",
            "--no-fixup",
            "--no-squash",
            "--no-reset-author",
            "--no-signoff",
            "--no-template",
            "--no-edit",
            "--no-cleanup",
            "--no-status",
            "--no-gpg-sign",
            "--no-all",
            "--no-include",
            "--no-interactive",
            "--no-patch",
            "--no-only",
            "--no-dry-run",
            "--no-short",
            "--no-branch",
            "--no-ahead-behind",
            "--no-porcelain",
            "--no-long",
            "--no-null",
            "--no-amend",
            "--no-untracked-files",
            "--no-pathspec-from-file",
            "--no-pathspec-file-nul",
            "--no-allow-empty",
            "--no-allow-empty-message",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git clean"],
        short: "e",
        short_optional: "",
        long: &["--exclude"],
        flags: &[
            "--quiet",
            "--dry-run",
            "--force",
            "--interactive",
            "--no-quiet",
            "--no-dry-run",
            "--no-force",
            "--no-interactive",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git checkout"],
        short: "bB",
        short_optional: "t",
        long: &["--conflict", "--orphan", "--pathspec-from-file"],
        flags: &[
            "--guess",
            "--overlay",
            "--quiet",
            "--recurse-submodules",
            "--progress",
            "--merge",
            "--detach",
            "--track",
            "--force",
            "--overwrite-ignore",
            "--ignore-other-worktrees",
            "--ours",
            "--theirs",
            "--patch",
            "--ignore-skip-worktree-bits",
            "--pathspec-file-nul",
            "--no-guess",
            "--no-overlay",
            "--no-quiet",
            "--no-recurse-submodules",
            "--no-progress",
            "--no-merge",
            "--no-conflict",
            "--no-detach",
            "--no-track",
            "--no-force",
            "--no-orphan",
            "--no-overwrite-ignore",
            "--no-ignore-other-worktrees",
            "--no-patch",
            "--no-ignore-skip-worktree-bits",
            "--no-pathspec-from-file",
            "--no-pathspec-file-nul",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git switch"],
        short: "cC",
        short_optional: "t",
        long: &["--create", "--force-create", "--conflict", "--orphan"],
        flags: &[
            "--guess",
            "--discard-changes",
            "--quiet",
            "--recurse-submodules",
            "--progress",
            "--merge",
            "--detach",
            "--track",
            "--force",
            "--overwrite-ignore",
            "--ignore-other-worktrees",
            "--no-create",
            "--no-force-create",
            "--no-guess",
            "--no-discard-changes",
            "--no-quiet",
            "--no-recurse-submodules",
            "--no-progress",
            "--no-merge",
            "--no-conflict",
            "--no-detach",
            "--no-track",
            "--no-force",
            "--no-orphan",
            "--no-overwrite-ignore",
            "--no-ignore-other-worktrees",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git restore"],
        short: "s",
        short_optional: "",
        long: &["--source", "--conflict", "--pathspec-from-file"],
        flags: &[
            "--staged",
            "--worktree",
            "--ignore-unmerged",
            "--overlay",
            "--quiet",
            "--recurse-submodules",
            "--progress",
            "--merge",
            "--ours",
            "--theirs",
            "--patch",
            "--ignore-skip-worktree-bits",
            "--pathspec-file-nul",
            "--no-source",
            "--no-staged",
            "--no-worktree",
            "--no-ignore-unmerged",
            "--no-overlay",
            "--no-quiet",
            "--no-recurse-submodules",
            "--no-progress",
            "--no-merge",
            "--no-conflict",
            "--no-patch",
            "--no-ignore-skip-worktree-bits",
            "--no-pathspec-from-file",
            "--no-pathspec-file-nul",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git update-ref"],
        short: "m",
        short_optional: "",
        long: &[],
        flags: &[
            "--no-deref",
            "--deref",
            "--stdin",
            "--create-reflog",
            "--no-stdin",
            "--no-create-reflog",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git branch"],
        short: "u",
        short_optional: "t",
        long: &[
            "--set-upstream-to",
            "--contains",
            "--no-contains",
            "--with",
            "--without",
            "--merged",
            "--no-merged",
            "--sort",
            "--points-at",
            "--format",
        ],
        flags: &[
            "--verbose",
            "--quiet",
            "--track",
            "--set-upstream",
            "--unset-upstream",
            "--color",
            "--remotes",
            "--abbrev",
            "--all",
            "--delete",
            "--move",
            "--omit-empty",
            "--copy",
            "--list",
            "--show-current",
            "--create-reflog",
            "--edit-description",
            "--force",
            "--column",
            "--ignore-case",
            "--recurse-submodules",
            "--no-verbose",
            "--no-quiet",
            "--no-track",
            "--no-set-upstream",
            "--no-set-upstream-to",
            "--no-unset-upstream",
            "--no-color",
            "--no-abbrev",
            "--no-delete",
            "--no-move",
            "--no-omit-empty",
            "--no-copy",
            "--no-list",
            "--no-show-current",
            "--no-create-reflog",
            "--no-edit-description",
            "--no-force",
            "--no-column",
            "--no-sort",
            "--no-points-at",
            "--no-ignore-case",
            "--no-recurse-submodules",
            "--no-format",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
    Table {
        names: &["git tag"],
        short: "mFu",
        short_optional: "n",
        long: &[
            "--message",
            "--file",
            "--trailer",
            "--cleanup",
            "--local-user",
            "--contains",
            "--no-contains",
            "--with",
            "--without",
            "--merged",
            "--no-merged",
            "--sort",
            "--points-at",
            "--format",
        ],
        flags: &[
            "--list",
            "--delete",
            "--verify",
            "--annotate",
            "--edit",
            "--sign",
            "--force",
            "--create-reflog",
            "--column",
            "--omit-empty",
            "--color",
            "--ignore-case",
            "--no-annotate",
            "--no-file",
            "--no-edit",
            "--no-sign",
            "--no-cleanup",
            "--no-local-user",
            "--no-force",
            "--no-create-reflog",
            "--no-column",
            "--no-omit-empty",
            "--no-sort",
            "--no-points-at",
            "--no-format",
            "--no-color",
            "--no-ignore-case",
        ],
        abbreviations: true,
        long2: &[],
        reads: &[],
        writes: &[],
        stop_at_operand: false,
    },
];

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
    /// Every option given, abbreviations resolved, in order.
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
/// gets the conservative reading: every word that does not start with `-` is an operand.
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
        TABLES.iter().find(|t| {
            t.names
                .iter()
                .any(|n| n.split_once(' ') == Some((program, sub)))
        })
    });
    read(table, args)
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
    fn long_options_resolve_unique_prefixes() {
        let a = words("-S 64k --compress-prog=sh big.txt");
        let p = parse("sort", &a);
        assert!(p.has(&["--compress-program"]));
        assert_eq!(p.operands, ["big.txt"]);
        let a = words("--outp out f");
        let p = parse("sort", &a);
        assert_eq!(p.files, [("out", true)]);
        assert_eq!(p.operands, ["f"]);
        // An exact name wins over the longer names it prefixes.
        let a = words("--exclude zz x f");
        assert_eq!(parse("grep", &a).operands, ["x", "f"]);
        assert!(parse("grep", &a).ambiguous.is_none());
        let a = words("--expr=1e id f");
        assert_eq!(
            parse("sed", &a).values_of(&["-e"]).collect::<Vec<_>>(),
            Vec::<&str>::new()
        );
        assert_eq!(
            parse("sed", &a)
                .values_of(&["--expression"])
                .collect::<Vec<_>>(),
            ["1e"]
        );
        assert!(parse("rm", &words("--no-pres x")).has(&["--no-preserve-root"]));
    }

    #[test]
    fn ambiguous_prefixes_are_reported() {
        // `--s`: --sleep-interval, --silent.
        let a = words("--s 1 f");
        let p = parse("tail", &a);
        assert_eq!(p.ambiguous, Some("--s"));
        // The next word stays an operand: more paths, never fewer.
        assert_eq!(p.operands, ["1", "f"]);
        assert!(parse("awk", &words("--s {print}")).ambiguous.is_some());
        // jq compares whole words: a prefix is an unknown option, not an abbreviation.
        let a = words("--ar x y . f");
        let p = parse("jq", &a);
        assert!(p.ambiguous.is_none());
        assert_eq!(p.operands, ["x", "y", ".", "f"]);
    }

    #[test]
    fn clusters_end_in_the_option_that_takes_the_rest() {
        let a = words("-uoout.txt big.txt");
        let p = parse("sort", &a);
        assert!(p.has(&["-u", "-o"]));
        assert_eq!(p.files, [("out.txt", true)]);
        assert_eq!(p.operands, ["big.txt"]);
        // Optional values are only ever the rest of the word.
        let a = words("-ni.bak 1p f");
        let p = parse("sed", &a);
        assert!(p.has(&["-i"]));
        assert_eq!(p.operands, ["1p", "f"]);
        let a = words("-ofile {print} f");
        let p = parse("gawk", &a);
        assert!(p.has(&["-o"]));
        assert_eq!(p.operands, ["{print}", "f"]);
        let a = words("-o {print} f");
        assert_eq!(parse("gawk", &a).operands, ["{print}", "f"]);
    }

    #[test]
    fn stat_only_programs_read_abbreviations_too() {
        // ls, du, stat and realpath only stat their operands: argv_opens cannot watch them.
        assert_eq!(parse("ls", &words("--quoting literal f")).operands, ["f"]);
        assert!(parse("ls", &words("--hid x f")).ambiguous.is_some());
        assert_eq!(parse("ls", &words("--ti atime f")).ambiguous, Some("--ti"));
        assert_eq!(parse("du", &words("--max-d 1 f")).operands, ["f"]);
        assert_eq!(
            parse("du", &words("--exclude-f ex f")).files,
            [("ex", false)]
        );
        assert_eq!(parse("stat", &words("--form %s f")).operands, ["f"]);
        assert_eq!(
            parse("realpath", &words("--relative-t d f")).operands,
            ["f"]
        );
        assert_eq!(parse("sort", &words("-T. f")).files, [(".", true)]);
        assert_eq!(parse("wc", &words("--files0=l")).files, [("l", false)]);
        assert_eq!(
            parse("file", &words("-bf list --magic=m f")).files,
            [("list", false), ("m", false)]
        );
    }

    #[test]
    fn programs_without_a_table_count_every_letter_of_a_cluster() {
        let a = words("-uorigin/x --pag=sh f -- -z");
        let p = parse("frobnicate", &a);
        assert!(p.has(&["-u", "-o", "-x", "--pag"]));
        assert!(!p.has(&["-z", "--pager"]));
        assert!(p.may_have(&["--pager"]));
        assert_eq!(p.operands, ["f", "-z"]);
        assert!(p.values.is_empty() && p.ambiguous.is_none());
    }

    #[test]
    fn may_have_counts_unresolved_prefixes_only() {
        // Unknown to the table: it may abbreviate the option asked about.
        let a = words("--frob f");
        let p = parse("sort", &a);
        assert!(p.may_have(&["--frobnicate"]));
        // Resolved to another option: it is that option, not a prefix of this one.
        let a = words("--o f");
        let p = parse_subcommand("git", Some("commit"), &a);
        assert!(p.has(&["--only"]));
        assert!(!p.may_have(&["--output"]));
        // Two letters after `--` abbreviate nothing, and a short option is never a prefix.
        let a = words("-- -o");
        let p = parse("frobnicate", &a);
        assert!(!p.may_have(&["--output"]));
        // Ambiguous: it may be any of them.
        let a = words("--forc");
        let p = parse_subcommand("git", Some("push"), &a);
        assert_eq!(p.ambiguous, Some("--forc"));
        assert!(p.may_have(&["--force"]) && !p.has(&["--force"]));
    }

    #[test]
    fn has_in_full_ignores_abbreviations() {
        let a = words("--lis v*");
        let p = parse_subcommand("git", Some("tag"), &a);
        assert!(p.has(&["--list"]));
        assert!(!p.has_in_full("--list"));
        let a = words("--list=v*");
        let p = parse_subcommand("git", Some("tag"), &a);
        assert!(p.has_in_full("--list"));
    }

    #[test]
    fn git_subcommand_values_are_not_flags() {
        let git = |sub: &str, s: &str| -> (Vec<String>, bool) {
            let a = words(s);
            let p = parse_subcommand("git", Some(sub), &a);
            let ops = p.operands.iter().map(|o| (*o).to_owned()).collect();
            (ops, p.has(&["-f", "--force"]))
        };
        assert_eq!(
            git("push", "-o -f origin main"),
            (words("origin main"), false)
        );
        assert_eq!(git("push", "-fo x origin"), (words("origin"), true));
        assert_eq!(git("push", "-uf origin"), (words("origin"), true));
        assert_eq!(git("push", "--repo=x -f"), (vec![], true));
        assert_eq!(git("clean", "-xdf"), (vec![], true));
        assert_eq!(git("clean", "-ef"), (vec![], false));
        assert_eq!(git("checkout", "-fb new main"), (words("main"), true));
        // An optional value is the rest of the word: `-t` takes `fb`.
        assert_eq!(git("checkout", "-tfb new"), (words("new"), false));
        assert_eq!(git("commit", "-m -f"), (vec![], false));
        assert_eq!(git("commit", "-uno -f"), (vec![], true));
        assert_eq!(git("branch", "--contains -f x"), (words("x"), false));
        // A subcommand without a table, or no subcommand, gets the conservative reading.
        let a = words("-n 3 -f x");
        let p = parse_subcommand("git", Some("log"), &a);
        assert_eq!(p.operands, ["3", "x"]);
        assert!(p.has(&["-f"]));
        assert_eq!(parse_subcommand("git", None, &a).operands, ["3", "x"]);
        // A subcommand table is not a program's table.
        assert_eq!(parse("git push", &a).operands, ["3", "x"]);
    }

    #[test]
    fn git_subcommand_tables_list_exactly_gits_long_options() {
        // `--git-completion-helper-all` prints every long option, hidden ones too, with `=`
        // after those that require a value. Options that take the next word unless they are
        // the last one (`--contains`) print without `=` and are in `long` all the same.
        let repo = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(repo.path())
                .output()
                .expect("git is installed")
        };
        assert!(git(&["init", "-q"]).status.success());
        for t in TABLES {
            let Some(sub) = t.names[0].strip_prefix("git ") else {
                continue;
            };
            let out = git(&[sub, "--git-completion-helper-all"]);
            let helper = String::from_utf8(out.stdout).unwrap();
            let mut listed: Vec<&str> = t.long.iter().chain(t.flags).copied().collect();
            listed.sort_unstable();
            let mut printed: Vec<&str> = helper
                .split_whitespace()
                .filter(|o| *o != "--")
                .map(|o| o.trim_end_matches('='))
                .collect();
            printed.sort_unstable();
            assert_eq!(listed, printed, "git {sub}");
            for o in helper.split_whitespace() {
                if let Some(o) = o.strip_suffix('=') {
                    assert!(t.long.contains(&o), "git {sub} {o} takes a value");
                }
            }
        }
    }

    #[test]
    fn awk_options_end_at_the_program() {
        let a = words("-F , -v x=1 {print} -F f");
        let p = parse("awk", &a);
        assert_eq!(p.operands, ["{print}", "-F", "f"]);
        assert_eq!(p.values_of(&["-F"]).collect::<Vec<_>>(), [","]);
    }
}
