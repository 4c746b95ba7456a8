//! Which words of a run may name a workspace file whose content its approval must bind.
//!
//! Every word is tried, not only the script operand of a known interpreter: `sh x`,
//! `python3 -u x`, `make -f x`, `env sh x`, `./x` and whatever comes next are all covered,
//! and binding a file the command only reads is merely stricter. A script is split the way
//! bash splits words (quotes removed, operators and redirections separate), without
//! expansions: a word bash would compute at run time is tried as written and, naming
//! nothing, binds nothing; the policy asks about such words anyway.

use toolgate_process::Command;

/// The words of `command` to try as paths, in order.
pub(crate) fn words(command: &Command) -> Vec<String> {
    match command {
        Command::Argv(argv) => argv.clone(),
        Command::Script(script) => script_words(script),
    }
}

/// The words of a bash script after quote removal, split at blanks, newlines and the
/// operator characters `;&|()<>`. A `#` starting a word starts a comment.
fn script_words(script: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether the current word exists even if empty (`''`).
    let mut started = false;
    let mut chars = script.chars().peekable();
    let mut end = |word: &mut String, started: &mut bool| {
        if *started {
            words.push(std::mem::take(word));
        }
        *started = false;
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' | '`' => {
                end(&mut word, &mut started);
            }
            '#' if !started => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '\\' => {
                started = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(c) => word.push(c),
                }
            }
            '\'' => {
                started = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                started = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.peek() {
                            Some('"' | '\\' | '$' | '`') => word.extend(chars.next()),
                            Some('\n') => {
                                chars.next();
                            }
                            _ => word.push('\\'),
                        },
                        c => word.push(c),
                    }
                }
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    end(&mut word, &mut started);
    words.retain(|w| !w.is_empty());
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_words_are_what_bash_would_pass() {
        assert_eq!(script_words("sh build.sh"), ["sh", "build.sh"]);
        assert_eq!(
            script_words("cd sub && bash -- ./b'ui'ld.sh >out 2>&1; . \"my env.sh\""),
            [
                "cd",
                "sub",
                "bash",
                "--",
                "./build.sh",
                "out",
                "2",
                "1",
                ".",
                "my env.sh"
            ]
        );
        assert_eq!(
            script_words("python3 -u x.py|tee log # sh evil.sh\nmake -f ci.mk"),
            ["python3", "-u", "x.py", "tee", "log", "make", "-f", "ci.mk"]
        );
        assert_eq!(
            script_words(r#"b\uild.sh "a\"b" $(sh in.sh)"#),
            ["build.sh", "a\"b", "$", "sh", "in.sh"]
        );
    }
}
