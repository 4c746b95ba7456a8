use super::*;
use crate::quoting::ansi_c;

fn argvs(script: &str) -> Vec<Vec<String>> {
    analyze_script(script, ".")
        .commands
        .into_iter()
        .map(|c| c.argv)
        .collect()
}

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn quote_removal_matches_bash() {
    assert_eq!(argvs("r'm' -rf x"), vec![v(&["rm", "-rf", "x"])]);
    assert_eq!(argvs("r\\m x"), vec![v(&["rm", "x"])]);
    assert_eq!(argvs("$'r\\155' x"), vec![v(&["rm", "x"])]);
    assert_eq!(argvs("ec\\\nho a"), vec![v(&["echo", "a"])]);
    assert_eq!(argvs("echo \"a\\qb\\$c\""), vec![v(&["echo", "a\\qb$c"])]);
}

#[test]
fn sh_nl_03_carriage_return_is_not_a_separator() {
    assert_eq!(argvs("echo a\rb"), vec![v(&["echo", "a\rb"])]);
}

#[test]
fn substitutions_are_extracted_everywhere() {
    let a = argvs(
        "echo \"$(touch /tmp/pwn)\"; X=`id` ls <(ls) >(cat) ; f() { whoami; }; cat <<EOF\n$(date)\nEOF",
    );
    for want in [
        v(&["touch", "/tmp/pwn"]),
        v(&["id"]),
        v(&["whoami"]),
        v(&["date"]),
    ] {
        assert!(a.contains(&want), "{want:?} missing from {a:?}");
    }
}

#[test]
fn parser_input_ends_every_script_with_a_newline() {
    assert_eq!(parser_input("ls").unwrap(), "ls\n");
    assert_eq!(parser_input("ls\n").unwrap(), "ls\n");
    assert_eq!(parser_input("echo x\\\\").unwrap(), "echo x\\\\\n");
    assert!(parser_input("echo x\\").is_err());
}

#[test]
fn scripts_that_hung_the_parser_are_classified() {
    // Each of these made brush-parser 0.4 allocate until the process was killed.
    for script in [
        "cat<<\r $(",
        "cat<<\x0c ${",
        "$(<<  ",
        "$(<< '' ",
        "$(<<  i&#",
        "<<]$( ))#",
        "\\<<<\r ",
        "\n];rmf()$(!>incurl<<-  in>(~&curl))do-C&&#)<<-rm||EOF>",
    ] {
        let d = crate::Policy::builtin_default().classify(
            &crate::ToolCall::script(script),
            &crate::CallContext::default(),
        );
        assert_ne!(d.tier, toolgate_core::Tier::Auto, "{script:?}");
    }
}

#[test]
fn nesting_estimate_counts_depth_not_length() {
    assert_eq!(nesting_estimate("ls; ls; ls"), 0);
    assert_eq!(nesting_estimate("if a; then b; fi; if c; then d; fi"), 1);
    assert_eq!(nesting_estimate("{ ( echo $(ls) ); }"), 3);
    assert!(nesting_estimate(&"{ ".repeat(100)) >= 100);
}

#[test]
fn ansi_c_decoding() {
    assert_eq!(ansi_c("r\\155"), "rm");
    assert_eq!(ansi_c("\\x72\\u006d"), "rm");
    assert_eq!(ansi_c("a\\tb\\'"), "a\tb'");
}

#[test]
fn cd_moves_the_working_directory_for_paths() {
    let a = analyze_script("cd .claude/ && mv test.txt settings.json", ".");
    let mv = &a.commands[1];
    assert!(
        mv.paths
            .iter()
            .any(|p| p.path == ".claude/settings.json" && p.access == Access::Write)
    );
}

#[test]
fn wrappers_unwrap_to_the_inner_program() {
    let a = analyze_script(
        "env -i FOO=1 nice -n 5 timeout -s KILL 5 nohup stdbuf -oL sudo ls",
        ".",
    );
    let names: Vec<_> = a.commands[0].layers.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(names, ["env", "nice", "timeout", "nohup", "stdbuf", "sudo"]);
    assert!(a.commands[0].rules.contains(&&baseline::PRIVILEGE));
}

#[test]
fn a_plain_word_reads_as_the_parser_reads_it() {
    // Every word of one or two characters from the plain set, and a few longer ones, is
    // expanded by the shortcut exactly as through brush-parser's word parser.
    let plain: Vec<char> = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .chain("-_./,:=+@%".chars())
        .collect();
    let mut words: Vec<String> = plain.iter().map(char::to_string).collect();
    for a in &plain {
        for b in &plain {
            words.push(format!("{a}{b}"));
        }
    }
    words.extend(
        [
            "--flag=value",
            "a=b",
            "x=y:z",
            "src/main.rs",
            "-",
            "--",
            "user@host:path",
            "100%",
            "a,b",
            "g++",
            "./x.sh",
            "/usr/bin/env",
            "..",
        ]
        .map(str::to_owned),
    );
    for w in &words {
        assert!(words::is_plain_word(w), "{w}");
        let options = brush_parser::ParserOptions::default();
        let pieces = brush_parser::word::parse(w, &options).expect("a plain word parses");
        let mut e = Expanded::default();
        let mut a = Analyzer::default();
        let mut ctx = Ctx {
            cwd: Some(".".to_owned()),
            stdin_fetch: false,
            stdin_text: None,
            derived: false,
        };
        a.pieces(&pieces, false, &mut ctx, 0, &mut e);
        assert_eq!(e.text, *w, "{w}");
        assert!(
            e.is_static() && !e.tilde && !e.fetch && e.raw.is_none(),
            "{w}: {e:?}"
        );
        let fast = a.word(w, &mut ctx, 0);
        assert_eq!(fast.text, e.text, "{w}");
        assert!(fast.is_static() && !fast.tilde, "{w}");
    }
    for w in [
        "", "a b", "'a'", "$x", "a*", "~", "{a,b}", "a\\b", "#x", "(a)", "`x`",
    ] {
        assert!(!words::is_plain_word(w), "{w}");
    }
}
