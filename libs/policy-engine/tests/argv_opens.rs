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
