//! The paths the analysis derives from a command's arguments, checked against the files the
//! real program opens.
//!
//! Each case runs the real program in a throwaway directory where every argument word is also
//! a file, and an inotify watch on that directory records every file the program opens. The
//! set must equal the paths the policy lists for the command: no file the program opens may be
//! missing (an option wrongly taken to need a value would hide an operand), and no option
//! value may be listed as a path (`tail -n 20 f` opens no `20`).
//!
//! Programs that only `stat` their operands (`ls`, `du`, `stat`) cannot be observed this way
//! and are covered by the unit tests of `argv.rs`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use toolgate_policy_engine::{CallContext, Policy, ToolCall};

const CASES: &[&[&str]] = &[
    &["tail", "-n", "20", "f"],
    &["tail", "-n20", "--lines", "3", "f"],
    &["tail", "-c", "5", "-s", "1", "f"],
    &["head", "-n", "3", "f", "g"],
    &["head", "-c", "7", "f"],
    &["grep", "-e", "x", "f"],
    &["grep", "-A", "2", "-B", "1", "x", "f"],
    &["grep", "-nm", "1", "x", "f"],
    &["grep", "--label", "l", "--max-count", "2", "-e", "x", "f"],
    &["grep", "-f", "pats", "f"],
    &["sort", "-t", ",", "-k", "2", "f"],
    &["sort", "-S", "1M", "--random-source", "r", "-R", "f"],
    &["sort", "-k", "1", "-o", "out", "f"],
    &["cut", "-d", ",", "-f", "1", "f"],
    &["cut", "-c", "1-3", "f"],
    &["uniq", "-f", "1", "-s", "2", "-w", "3", "f"],
    &["nl", "-w", "3", "-s", "x", "f"],
    &["fold", "-w", "10", "f"],
    &["base64", "-w", "0", "f"],
    &["od", "-N", "4", "-j", "1", "f"],
    &["od", "-t", "x1", "f"],
    &["diff", "-U", "1", "a", "b"],
    &["diff", "-C", "1", "a", "b"],
    &["diff", "-L", "la", "-L", "lb", "a", "b"],
    &["diff", "-I", "x", "-W", "80", "-y", "a", "b"],
    &["tac", "-s", "x", "f"],
    &["paste", "-d", ",", "a", "b"],
    &["join", "-t", ",", "-1", "1", "-2", "1", "a", "b"],
    &["comm", "--output-delimiter", ",", "a", "b"],
    &["fmt", "-w", "20", "f"],
    &["hexdump", "-n", "4", "-s", "1", "f"],
    &["strings", "-n", "2", "f"],
    &["column", "-s", ",", "-t", "f"],
    &["jq", "--arg", "x", "y", "--indent", "2", ".", "f"],
    &["jq", "--slurpfile", "s", "g", ".", "f"],
    &["awk", "-F", ",", "{print $1}", "f"],
    &["awk", "-v", "x=1", "{print x}", "f"],
    &["gawk", "-e", "{print}", "f"],
    &["sed", "-l", "5", "-n", "1p", "f"],
    &["sed", "-n", "-e", "1p", "f"],
    &["sed", "--expression=1p", "-n", "f"],
    &["cat", "f", "g"],
];

/// Every file `argv` opens in `dir`, observed with inotify.
fn opened(dir: &Path, argv: &[&str]) -> BTreeSet<String> {
    use rustix::fs::inotify;
    let events = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .expect("inotify_init1");
    inotify::add_watch(&events, dir, inotify::WatchFlags::OPEN).expect("inotify_add_watch");

    Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));

    let mut buf = [std::mem::MaybeUninit::uninit(); 1 << 14];
    let mut reader = inotify::Reader::new(&events, &mut buf);
    let mut names = BTreeSet::new();
    loop {
        match reader.next() {
            Ok(event) => {
                if event.events().contains(inotify::ReadFlags::ISDIR) {
                    continue;
                }
                if let Some(name) = event.file_name() {
                    names.insert(name.to_string_lossy().into_owned());
                }
            }
            Err(rustix::io::Errno::AGAIN) => break names,
            Err(e) => panic!("reading inotify events: {e}"),
        }
    }
}

/// The shell spelling of `argv`, each word single-quoted.
fn script(argv: &[&str]) -> String {
    argv.iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn derived_paths_equal_the_files_real_programs_open() {
    let policy = Policy::builtin_default();
    let mut failures = Vec::new();
    for argv in CASES {
        let dir = tempfile::tempdir().unwrap();
        for w in &argv[1..] {
            if !w.is_empty() && !w.starts_with('-') && !w.contains('/') && *w != "." {
                // Valid JSON for jq, long enough for `sort --random-source`.
                let body = format!("{{\"a\":1}}\n{}\n", " ".repeat(4096));
                std::fs::write(dir.path().join(w), body).unwrap();
            }
        }
        let opened = opened(dir.path(), argv);
        assert!(
            !opened.is_empty(),
            "{argv:?} opened nothing: is it installed?"
        );
        let decision = policy.classify(&ToolCall::script(script(argv)), &CallContext::default());
        let derived: BTreeSet<String> = decision.paths.iter().map(|p| p.path.clone()).collect();
        if derived != opened {
            failures.push(format!(
                "{argv:?}: program opened {opened:?}, policy lists {derived:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Abbreviated, attached and clustered spellings of every option that takes a value, checked
/// against the real programs (issue 13 §1: `sort -S 64k --compress-prog=sh` was `auto`).
mod spellings {
    use super::*;
    use toolgate_core::Tier;

    /// One option that takes a value: the program, its short and long spelling, a value the
    /// program accepts, the operands after it, and a short flag without a value to cluster in
    /// front of it.
    struct ValueOpt {
        prog: &'static str,
        short: Option<char>,
        long: Option<&'static str>,
        value: &'static str,
        operands: &'static [&'static str],
        flag: Option<char>,
        /// Words before the option (`-y` for diff's `--width`).
        before: &'static [&'static str],
    }

    const fn o(
        prog: &'static str,
        short: Option<char>,
        long: Option<&'static str>,
        value: &'static str,
        operands: &'static [&'static str],
        flag: Option<char>,
    ) -> ValueOpt {
        ValueOpt {
            prog,
            short,
            long,
            value,
            operands,
            flag,
            before: &[],
        }
    }

    /// Programs that only stat their operands (`ls`, `du`, `stat`, `realpath`), options
    /// whose files name further files (`--files0-from`, `file -f`) or lie outside the
    /// directory (`file -m`), and `sort -T` (a directory) are covered by `argv.rs` tests.
    const OPTS: &[ValueOpt] = &[
        o("head", Some('c'), Some("--bytes"), "5", &["f"], Some('q')),
        o("head", Some('n'), Some("--lines"), "3", &["f"], Some('q')),
        o("tail", Some('c'), Some("--bytes"), "5", &["f"], Some('q')),
        o("tail", Some('n'), Some("--lines"), "3", &["f"], Some('q')),
        o(
            "tail",
            Some('s'),
            Some("--sleep-interval"),
            "1",
            &["f"],
            Some('q'),
        ),
        o("tail", None, Some("--pid"), "1", &["f"], None),
        o(
            "tail",
            None,
            Some("--max-unchanged-stats"),
            "5",
            &["f"],
            None,
        ),
        o("grep", Some('e'), Some("--regexp"), "x", &["f"], Some('i')),
        o("grep", Some('f'), Some("--file"), "pats", &["f"], Some('i')),
        o(
            "grep",
            Some('m'),
            Some("--max-count"),
            "1",
            &["x", "f"],
            Some('i'),
        ),
        o(
            "grep",
            Some('A'),
            Some("--after-context"),
            "1",
            &["x", "f"],
            Some('i'),
        ),
        o(
            "grep",
            Some('B'),
            Some("--before-context"),
            "1",
            &["x", "f"],
            Some('i'),
        ),
        o(
            "grep",
            Some('C'),
            Some("--context"),
            "1",
            &["x", "f"],
            Some('i'),
        ),
        o(
            "grep",
            Some('d'),
            Some("--directories"),
            "read",
            &["x", "f"],
            Some('i'),
        ),
        o(
            "grep",
            Some('D'),
            Some("--devices"),
            "read",
            &["x", "f"],
            Some('i'),
        ),
        o("grep", None, Some("--label"), "l", &["x", "f"], None),
        o("grep", None, Some("--include"), "zz", &["x", "f"], None),
        o("grep", None, Some("--exclude"), "zz", &["x", "f"], None),
        o(
            "grep",
            None,
            Some("--exclude-from"),
            "pats",
            &["x", "f"],
            None,
        ),
        o("grep", None, Some("--exclude-dir"), "zz", &["x", "f"], None),
        o(
            "grep",
            None,
            Some("--binary-files"),
            "text",
            &["x", "f"],
            None,
        ),
        o(
            "grep",
            None,
            Some("--group-separator"),
            "s",
            &["x", "f"],
            None,
        ),
        o("sort", Some('k'), Some("--key"), "1", &["f"], Some('r')),
        o(
            "sort",
            Some('o'),
            Some("--output"),
            "out",
            &["f"],
            Some('u'),
        ),
        o(
            "sort",
            Some('t'),
            Some("--field-separator"),
            ",",
            &["f"],
            Some('r'),
        ),
        o(
            "sort",
            Some('S'),
            Some("--buffer-size"),
            "1M",
            &["f"],
            Some('r'),
        ),
        o(
            "sort",
            None,
            Some("--random-source"),
            "rnd",
            &["-R", "f"],
            None,
        ),
        o("sort", None, Some("--sort"), "numeric", &["f"], None),
        o("sort", None, Some("--batch-size"), "2", &["f"], None),
        o(
            "sort",
            None,
            Some("--compress-program"),
            "cat",
            &["f"],
            None,
        ),
        o("sort", None, Some("--parallel"), "2", &["f"], None),
        o("cut", Some('b'), Some("--bytes"), "1", &["f"], None),
        o("cut", Some('c'), Some("--characters"), "1", &["f"], None),
        o("cut", Some('f'), Some("--fields"), "1", &["f"], Some('s')),
        ValueOpt {
            before: &["-f", "1"],
            ..o(
                "cut",
                Some('d'),
                Some("--delimiter"),
                ",",
                &["f"],
                Some('s'),
            )
        },
        ValueOpt {
            before: &["-f", "1"],
            ..o("cut", None, Some("--output-delimiter"), "x", &["f"], None)
        },
        o(
            "uniq",
            Some('f'),
            Some("--skip-fields"),
            "1",
            &["f"],
            Some('c'),
        ),
        o(
            "uniq",
            Some('s'),
            Some("--skip-chars"),
            "1",
            &["f"],
            Some('c'),
        ),
        o(
            "uniq",
            Some('w'),
            Some("--check-chars"),
            "1",
            &["f"],
            Some('c'),
        ),
        o(
            "nl",
            Some('b'),
            Some("--body-numbering"),
            "a",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('d'),
            Some("--section-delimiter"),
            "x",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('f'),
            Some("--footer-numbering"),
            "a",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('h'),
            Some("--header-numbering"),
            "a",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('i'),
            Some("--line-increment"),
            "1",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('l'),
            Some("--join-blank-lines"),
            "1",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('n'),
            Some("--number-format"),
            "ln",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('s'),
            Some("--number-separator"),
            "x",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('v'),
            Some("--starting-line-number"),
            "1",
            &["f"],
            Some('p'),
        ),
        o(
            "nl",
            Some('w'),
            Some("--number-width"),
            "3",
            &["f"],
            Some('p'),
        ),
        o("fold", Some('w'), Some("--width"), "10", &["f"], Some('s')),
        o("base64", Some('w'), Some("--wrap"), "0", &["f"], Some('i')),
        o(
            "od",
            Some('A'),
            Some("--address-radix"),
            "x",
            &["f"],
            Some('v'),
        ),
        o(
            "od",
            Some('j'),
            Some("--skip-bytes"),
            "1",
            &["f"],
            Some('v'),
        ),
        o(
            "od",
            Some('N'),
            Some("--read-bytes"),
            "4",
            &["f"],
            Some('v'),
        ),
        o("od", Some('S'), None, "3", &["f"], Some('v')),
        o("od", Some('t'), Some("--format"), "x1", &["f"], Some('v')),
        o("od", None, Some("--endian"), "little", &["f"], None),
        o("diff", Some('C'), None, "1", &["a", "b"], Some('a')),
        o("diff", Some('U'), None, "1", &["a", "b"], Some('a')),
        ValueOpt {
            before: &["-y"],
            ..o(
                "diff",
                Some('W'),
                Some("--width"),
                "80",
                &["a", "b"],
                Some('a'),
            )
        },
        o(
            "diff",
            Some('F'),
            Some("--show-function-line"),
            "x",
            &["a", "b"],
            Some('a'),
        ),
        o(
            "diff",
            Some('x'),
            Some("--exclude"),
            "zz",
            &["a", "b"],
            Some('a'),
        ),
        o(
            "diff",
            Some('X'),
            Some("--exclude-from"),
            "pats",
            &["a", "b"],
            Some('a'),
        ),
        o(
            "diff",
            Some('S'),
            Some("--starting-file"),
            "zz",
            &["a", "b"],
            Some('a'),
        ),
        o(
            "diff",
            Some('I'),
            Some("--ignore-matching-lines"),
            "x",
            &["a", "b"],
            Some('a'),
        ),
        o(
            "diff",
            Some('D'),
            Some("--ifdef"),
            "X",
            &["a", "b"],
            Some('a'),
        ),
        o(
            "diff",
            Some('L'),
            Some("--label"),
            "l",
            &["a", "b"],
            Some('a'),
        ),
        o("diff", None, Some("--tabsize"), "4", &["a", "b"], None),
        o("diff", None, Some("--from-file"), "a", &["b"], None),
        o("diff", None, Some("--to-file"), "b", &["a"], None),
        o("diff", None, Some("--line-format"), "%L", &["a", "b"], None),
        o(
            "diff",
            None,
            Some("--old-line-format"),
            "%L",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--new-line-format"),
            "%L",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--unchanged-line-format"),
            "%L",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--old-group-format"),
            "%<",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--new-group-format"),
            "%>",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--unchanged-group-format"),
            "%=",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--changed-group-format"),
            "%<",
            &["a", "b"],
            None,
        ),
        o(
            "diff",
            None,
            Some("--horizon-lines"),
            "1",
            &["a", "b"],
            None,
        ),
        o("diff", None, Some("--palette"), "ad=1", &["a", "b"], None),
        o(
            "tac",
            Some('s'),
            Some("--separator"),
            "x",
            &["f"],
            Some('b'),
        ),
        o(
            "paste",
            Some('d'),
            Some("--delimiters"),
            ",",
            &["a", "b"],
            Some('s'),
        ),
        o("join", Some('a'), None, "1", &["a", "b"], Some('i')),
        o("join", Some('e'), None, "x", &["a", "b"], Some('i')),
        o("join", Some('j'), None, "1", &["a", "b"], Some('i')),
        o("join", Some('o'), None, "auto", &["a", "b"], Some('i')),
        o("join", Some('t'), None, ",", &["a", "b"], Some('i')),
        o("join", Some('v'), None, "1", &["a", "b"], Some('i')),
        o("join", Some('1'), None, "1", &["a", "b"], Some('i')),
        o("join", Some('2'), None, "1", &["a", "b"], Some('i')),
        o(
            "comm",
            None,
            Some("--output-delimiter"),
            ",",
            &["a", "b"],
            None,
        ),
        o("fmt", Some('p'), Some("--prefix"), "x", &["f"], Some('u')),
        o("fmt", Some('w'), Some("--width"), "20", &["f"], Some('u')),
        o("fmt", Some('g'), Some("--goal"), "10", &["f"], Some('u')),
        o(
            "hexdump",
            Some('e'),
            Some("--format"),
            "\"%x\"",
            &["f"],
            Some('v'),
        ),
        o(
            "hexdump",
            Some('f'),
            Some("--format-file"),
            "fmt",
            &["f"],
            Some('v'),
        ),
        o(
            "hexdump",
            Some('n'),
            Some("--length"),
            "4",
            &["f"],
            Some('v'),
        ),
        o("hexdump", Some('s'), Some("--skip"), "1", &["f"], Some('v')),
        o(
            "strings",
            Some('n'),
            Some("--bytes"),
            "2",
            &["f"],
            Some('a'),
        ),
        o(
            "strings",
            Some('t'),
            Some("--radix"),
            "x",
            &["f"],
            Some('a'),
        ),
        o(
            "strings",
            Some('e'),
            Some("--encoding"),
            "s",
            &["f"],
            Some('a'),
        ),
        o(
            "strings",
            Some('s'),
            Some("--output-separator"),
            "x",
            &["f"],
            Some('a'),
        ),
        o(
            "strings",
            Some('U'),
            Some("--unicode"),
            "default",
            &["f"],
            Some('a'),
        ),
        o(
            "file",
            Some('F'),
            Some("--separator"),
            "x",
            &["f"],
            Some('b'),
        ),
        o(
            "file",
            Some('e'),
            Some("--exclude"),
            "ascii",
            &["f"],
            Some('b'),
        ),
        o("file", None, Some("--exclude-quiet"), "ascii", &["f"], None),
        o(
            "file",
            Some('P'),
            Some("--parameter"),
            "bytes=100",
            &["f"],
            Some('b'),
        ),
        ValueOpt {
            before: &["-t"],
            ..o(
                "column",
                Some('s'),
                Some("--separator"),
                ",",
                &["f"],
                Some('L'),
            )
        },
        o(
            "column",
            Some('c'),
            Some("--output-width"),
            "20",
            &["f"],
            Some('L'),
        ),
        ValueOpt {
            before: &["-t"],
            ..o(
                "column",
                Some('o'),
                Some("--output-separator"),
                "x",
                &["f"],
                Some('L'),
            )
        },
        ValueOpt {
            before: &["-t"],
            ..o(
                "column",
                Some('N'),
                Some("--table-columns"),
                "a",
                &["f"],
                Some('L'),
            )
        },
        o(
            "awk",
            Some('F'),
            Some("--field-separator"),
            ",",
            &["{print}", "f"],
            Some('b'),
        ),
        o(
            "awk",
            Some('v'),
            Some("--assign"),
            "x=1",
            &["{print}", "f"],
            Some('b'),
        ),
        o(
            "awk",
            Some('f'),
            Some("--file"),
            "prog.awk",
            &["f"],
            Some('b'),
        ),
        o(
            "awk",
            Some('e'),
            Some("--source"),
            "{print}",
            &["f"],
            Some('b'),
        ),
        o(
            "awk",
            Some('E'),
            Some("--exec"),
            "prog.awk",
            &["f"],
            Some('b'),
        ),
        o(
            "awk",
            Some('i'),
            Some("--include"),
            "inc.awk",
            &["{print}", "f"],
            Some('b'),
        ),
        o(
            "sed",
            Some('e'),
            Some("--expression"),
            "1p",
            &["f"],
            Some('n'),
        ),
        o(
            "sed",
            Some('f'),
            Some("--file"),
            "script.sed",
            &["f"],
            Some('n'),
        ),
        o(
            "sed",
            Some('l'),
            Some("--line-length"),
            "5",
            &["-n", "1p", "f"],
            Some('n'),
        ),
        o("date", Some('f'), Some("--file"), "dates", &[], Some('u')),
        // Copies: `-t DIR` writes into a directory, which inotify on the top directory does
        // not show as an open; corpus.rs covers it. The other values are checked here.
        o(
            "cp",
            Some('S'),
            Some("--suffix"),
            ".bak",
            &["f", "g"],
            Some('v'),
        ),
        o("cp", None, Some("--sparse"), "auto", &["f", "g"], None),
        o(
            "install",
            Some('S'),
            Some("--suffix"),
            ".bak",
            &["f", "g"],
            Some('v'),
        ),
        o(
            "install",
            Some('m'),
            Some("--mode"),
            "644",
            &["f", "g"],
            Some('v'),
        ),
        // Exec wrappers: the file the command they run opens shows where the command starts.
        o(
            "env",
            Some('u'),
            Some("--unset"),
            "X",
            &["cat", "f"],
            Some('v'),
        ),
        o(
            "env",
            Some('C'),
            Some("--chdir"),
            ".",
            &["cat", "f"],
            Some('v'),
        ),
        o(
            "env",
            Some('S'),
            Some("--split-string"),
            "cat f",
            &[],
            Some('v'),
        ),
        o(
            "nice",
            Some('n'),
            Some("--adjustment"),
            "5",
            &["cat", "f"],
            None,
        ),
        o(
            "timeout",
            Some('s'),
            Some("--signal"),
            "KILL",
            &["5", "cat", "f"],
            Some('v'),
        ),
        o(
            "timeout",
            Some('k'),
            Some("--kill-after"),
            "1",
            &["5", "cat", "f"],
            Some('v'),
        ),
        o(
            "stdbuf",
            Some('i'),
            Some("--input"),
            "0",
            &["cat", "f"],
            None,
        ),
        o(
            "stdbuf",
            Some('o'),
            Some("--output"),
            "L",
            &["cat", "f"],
            None,
        ),
        o(
            "stdbuf",
            Some('e'),
            Some("--error"),
            "L",
            &["cat", "f"],
            None,
        ),
        o(
            "ionice",
            Some('c'),
            Some("--class"),
            "2",
            &["cat", "f"],
            Some('t'),
        ),
        o(
            "ionice",
            Some('n'),
            Some("--classdata"),
            "7",
            &["cat", "f"],
            Some('t'),
        ),
    ];

    /// Every spelling of `opt` a getopt-style parser accepts, plus the ambiguous prefixes
    /// (which the real program refuses).
    fn spellings(opt: &ValueOpt) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let with = |option: Vec<String>| -> Vec<String> {
            let mut argv = vec![opt.prog.to_owned()];
            argv.extend(opt.before.iter().map(|s| (*s).to_owned()));
            argv.extend(option);
            argv.extend(opt.operands.iter().map(|s| (*s).to_owned()));
            argv
        };
        if let Some(c) = opt.short {
            out.push(with(vec![format!("-{c}"), opt.value.to_owned()]));
            out.push(with(vec![format!("-{c}{}", opt.value)]));
            if let Some(f) = opt.flag {
                out.push(with(vec![format!("-{f}{c}"), opt.value.to_owned()]));
                out.push(with(vec![format!("-{f}{c}{}", opt.value)]));
            }
        }
        if let Some(long) = opt.long {
            for end in 3..=long.len() {
                let prefix = &long[..end];
                out.push(with(vec![prefix.to_owned(), opt.value.to_owned()]));
                out.push(with(vec![format!("{prefix}={}", opt.value)]));
            }
        }
        out
    }

    /// How the real program took a spelling.
    enum Outcome {
        /// It ran and opened these files.
        Ran(BTreeSet<String>),
        /// It refused an ambiguous abbreviation (gawk prints its usage instead of saying so).
        Ambiguous,
        /// It refused the spelling for another reason (`--binary=text`: `--binary` is a flag
        /// of its own and takes no value), so nothing ran.
        Refused,
    }

    fn run(dir: &Path, argv: &[String]) -> Outcome {
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        let opened = opened(dir, &words);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("ambiguous") || (argv[0] == "awk" && stderr.starts_with("Usage:")) {
            Outcome::Ambiguous
        } else if !out.status.success() && opened.is_empty() {
            Outcome::Refused
        } else {
            Outcome::Ran(opened)
        }
    }

    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let body = format!("a,1\nb,2\n{}\n", " ".repeat(4096));
        for (name, content) in [
            ("f", body.as_str()),
            ("x", "x\n"),
            ("a", "a,1\nb,2\n"),
            ("b", "a,3\nc,4\n"),
            ("pats", "x\n"),
            ("rnd", body.as_str()),
            ("prog.awk", "{print}\n"),
            ("inc.awk", "\n"),
            ("script.sed", "1p\n"),
            ("fmt", "\"%x\"\n"),
            ("dates", "2020-01-01\n"),
        ] {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        dir
    }

    #[test]
    fn abbreviated_and_clustered_option_values_read_as_the_program_reads_them() {
        let policy = Policy::builtin_default();
        let mut failures = Vec::new();
        for opt in OPTS {
            let mut full_tier = None;
            for (n, argv) in spellings(opt).into_iter().enumerate() {
                let dir = workspace();
                let outcome = run(dir.path(), &argv);
                let words: Vec<&str> = argv.iter().map(String::as_str).collect();
                let d = policy.classify(&ToolCall::script(script(&words)), &CallContext::default());
                let flagged = d
                    .matches
                    .iter()
                    .any(|m| m.rule_id == "baseline.ambiguous-option");
                let opened = match outcome {
                    Outcome::Ambiguous => {
                        if !flagged || d.tier < Tier::Ask {
                            failures
                                .push(format!("{argv:?}: ambiguous to the program, {}", d.tier));
                        }
                        continue;
                    }
                    Outcome::Refused if n == 0 => {
                        failures.push(format!("{argv:?}: the plain spelling failed: a bad value?"));
                        continue;
                    }
                    Outcome::Refused => continue,
                    Outcome::Ran(opened) => opened,
                };
                if n == 0 && opened.is_empty() {
                    failures.push(format!("{argv:?} opened nothing: a bad test value?"));
                }
                if flagged {
                    failures.push(format!(
                        "{argv:?}: the program reads it, policy says ambiguous"
                    ));
                }
                let derived: BTreeSet<String> = d.paths.iter().map(|p| p.path.clone()).collect();
                if derived != opened {
                    failures.push(format!(
                        "{argv:?}: program opened {opened:?}, policy lists {derived:?}"
                    ));
                }
                // The first spelling is the plain one; no other may be decided more leniently.
                let full = *full_tier.get_or_insert(d.tier);
                if d.tier < full {
                    failures.push(format!(
                        "{argv:?}: {} where the plain spelling is {full}",
                        d.tier
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
