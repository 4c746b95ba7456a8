//! Which words of a run name a workspace file that the run executes as a program or a
//! script, whose content its approval must bind.
//!
//! Only program and script positions bind: the program itself when it is a path (`./x`,
//! `tools/ci.sh`), the script operand of a shell or interpreter (`sh x`, `bash -e -- x`,
//! `python3 -u x`, `node x`, `deno run x`, `source x`, `. x`), what an option makes a
//! program read as code (`make -f x`, `awk -f x`, `sed -f x`, `node -r x`, `bash --rcfile
//! x`), and the redirected stdin of a shell or interpreter (`sh < x`), through wrappers
//! (`env`, `exec`, `command`, `nohup`, `time`, `nice`, `timeout`). Files a command only reads
//! or writes (`cat notes.txt`, `echo x >> log.txt`, `sed -i s/a/b/ f`) are not bound: a run
//! changing them must not turn the replay of its own `call_id` into "a different request".
//!
//! A script is split the way bash splits words (quotes removed, operators and redirections
//! separate commands and words), without expansions: a word bash would compute at run time
//! is taken as written and, naming nothing, binds nothing; the policy asks about such words
//! anyway.

use toolgate_process::Command;

/// The words of `command` that name what it executes, in order.
pub(crate) fn words(command: &Command) -> Vec<String> {
    let commands = match command {
        Command::Argv(argv) => vec![argv.iter().map(|w| Token::Word(w.clone())).collect()],
        Command::Script(script) => split_commands(&tokens(script)),
    };
    let mut out = Vec::new();
    for c in commands {
        executed(&c, &mut out);
    }
    out
}

/// One lexical token of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    /// `;`, `&`, `|`, `(`, `)`, a newline or a backquote: a command ends.
    Separator,
    /// `<`: the next word is read as stdin.
    Input,
    /// `>` (or `>>`, `&>`, `2>`...): the next word is written.
    Output,
}

/// The tokens of a bash script after quote removal. A `#` starting a word starts a comment.
fn tokens(script: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = String::new();
    // Whether the current word exists even if empty (`''`).
    let mut started = false;
    let mut chars = script.chars().peekable();
    let end = |out: &mut Vec<Token>, word: &mut String, started: &mut bool| {
        if *started && !word.is_empty() {
            out.push(Token::Word(std::mem::take(word)));
        }
        word.clear();
        *started = false;
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end(&mut out, &mut word, &mut started),
            '\n' | ';' | '&' | '|' | '(' | ')' | '`' => {
                end(&mut out, &mut word, &mut started);
                out.push(Token::Separator);
            }
            '<' | '>' => {
                // `2>` and `&>` name a descriptor, not a word.
                if word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    started = false;
                }
                end(&mut out, &mut word, &mut started);
                if out.last() == Some(&Token::Separator) && c == '>' {
                    // `&>`: the `&` was not a separator.
                    out.pop();
                }
                while matches!(chars.peek(), Some('>' | '&' | '|')) {
                    chars.next();
                }
                out.push(if c == '<' {
                    Token::Input
                } else {
                    Token::Output
                });
            }
            '#' if !started => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push(Token::Separator);
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
            '$' if chars.peek() == Some(&'(') => {
                end(&mut out, &mut word, &mut started);
                chars.next();
                out.push(Token::Separator);
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    end(&mut out, &mut word, &mut started);
    out
}

/// The simple commands of a token stream.
fn split_commands(tokens: &[Token]) -> Vec<Vec<Token>> {
    tokens
        .split(|t| *t == Token::Separator)
        .filter(|c| !c.is_empty())
        .map(<[Token]>::to_vec)
        .collect()
}

/// Shells: the first operand is a script.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "fish"];

/// Interpreters: the first operand is a script (`-c`/`-e`/`-m` style inline code is the
/// policy's business).
const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "bun",
    "tsx",
    "ts-node",
    "ruby",
    "perl",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "julia",
    "groovy",
    "osascript",
    "pwsh",
];

/// Options of shells and interpreters that take a separate value (so the value is no script).
const VALUE_OPTIONS: &[&str] = &[
    "-o",
    "+o",
    "-O",
    "+O",
    "-W",
    "-X",
    "-I",
    "-r",
    "--require",
    "--import",
    "--loader",
    "--rcfile",
    "--init-file",
    "-x",
    "-C",
    "-E",
];

/// Options whose value is a file the program executes as code.
const CODE_FILE_OPTIONS: &[&str] = &[
    "-r",
    "--require",
    "--import",
    "--loader",
    "--rcfile",
    "--init-file",
];

/// Wrappers that run the rest of their words as a command.
const WRAPPERS: &[&str] = &["env", "exec", "command", "nohup", "time", "nice", "builtin"];

/// Pushes the words of one simple command that name what it executes.
fn executed(command: &[Token], out: &mut Vec<String>) {
    // Redirections out of the way: inputs kept aside, outputs dropped with their targets.
    let mut words = Vec::new();
    let mut stdin = None;
    let mut it = command.iter();
    while let Some(t) = it.next() {
        match t {
            Token::Word(w) => words.push(w.as_str()),
            Token::Input => {
                if let Some(Token::Word(w)) = it.next() {
                    stdin = Some(w.as_str());
                }
            }
            Token::Output => {
                it.next();
            }
            Token::Separator => {}
        }
    }
    let mut i = 0;
    // Assignments before the program, then wrappers and their options.
    loop {
        while words.get(i).is_some_and(|w| is_assignment(w)) {
            i += 1;
        }
        let Some(program) = words.get(i) else { return };
        let name = base(program);
        if WRAPPERS.contains(&name) {
            i += 1;
            while words.get(i).is_some_and(|w| w.starts_with('-')) {
                i += 1;
            }
            continue;
        }
        if name == "timeout" {
            i += 1;
            while let Some(w) = words.get(i).filter(|w| w.starts_with('-')) {
                // `-s SIG` and `-k DURATION` take their value separately.
                i += if matches!(*w, "-s" | "-k" | "--signal" | "--kill-after") {
                    2
                } else {
                    1
                };
            }
            i += 1; // the duration
            continue;
        }
        break;
    }
    let program = words[i];
    let name = base(program);
    let args = &words[i + 1..];
    if program.contains('/') {
        out.push(program.to_owned());
    }
    match name {
        "source" | "." => out.extend(args.first().map(|w| (*w).to_owned())),
        "make" | "gmake" => out.extend(option_values(args, &["-f", "--file", "--makefile"])),
        "awk" | "gawk" | "mawk" | "nawk" | "sed" | "gsed" => {
            out.extend(option_values(args, &["-f", "--file"]));
        }
        "deno" if args.first() == Some(&"run") => out.extend(first_operand(&args[1..], false)),
        _ if SHELLS.contains(&name) || is_interpreter(name) => {
            out.extend(option_values(args, CODE_FILE_OPTIONS));
            match first_operand(args, SHELLS.contains(&name)) {
                Some(script) => out.push(script),
                None => out.extend(stdin.map(str::to_owned)),
            }
        }
        _ => {}
    }
}

/// `python3.12`, `python3` and `node` are interpreters; so is a versioned name of one.
fn is_interpreter(name: &str) -> bool {
    INTERPRETERS.contains(&name)
        || INTERPRETERS.iter().any(|i| {
            name.strip_prefix(i)
                .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        })
}

/// The first word after the options (`--` ends them). `-c` means inline code for a shell, as
/// `-c`, `-e`, `-m`, `-p` and `--eval` do for an interpreter: then no file operand follows.
fn first_operand(args: &[&str], shell: bool) -> Option<String> {
    let mut it = args.iter();
    while let Some(w) = it.next() {
        match *w {
            "--" => return it.next().map(|w| (*w).to_owned()),
            "-c" => return None,
            "-e" | "-m" | "--eval" | "--print" | "-p" if !shell => return None,
            w if VALUE_OPTIONS.contains(&w) => {
                it.next();
            }
            w if w.starts_with('-') || w.starts_with('+') => {}
            w => return Some(w.to_owned()),
        }
    }
    None
}

/// The values of `names` among `args`: `-f x`, `-fx` (short), `--file x`, `--file=x`.
fn option_values(args: &[&str], names: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(w) = it.next() {
        for name in names {
            if w == name {
                out.extend(it.clone().next().map(|v| (*v).to_owned()));
            } else if let Some(v) = w.strip_prefix(name) {
                if name.starts_with("--") {
                    if let Some(v) = v.strip_prefix('=') {
                        out.push(v.to_owned());
                    }
                } else if !v.is_empty() && name.len() == 2 {
                    out.push(v.to_owned());
                }
            }
        }
    }
    out
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

fn base(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(s: &str) -> Vec<String> {
        words(&Command::Script(s.to_owned()))
    }

    fn argv(a: &[&str]) -> Vec<String> {
        words(&Command::Argv(a.iter().map(|s| (*s).to_owned()).collect()))
    }

    #[test]
    fn programs_and_scripts_bind_in_every_spelling() {
        assert_eq!(argv(&["sh", "build.sh"]), ["build.sh"]);
        assert_eq!(argv(&["bash", "-e", "--", "ci.sh", "arg"]), ["ci.sh"]);
        assert_eq!(argv(&["python3", "-u", "x.py", "out.txt"]), ["x.py"]);
        // A program outside the workspace is tried too, and binds nothing when resolved.
        assert_eq!(
            argv(&["/usr/bin/python3.12", "-W", "error", "t.py"]),
            ["/usr/bin/python3.12", "t.py"]
        );
        assert_eq!(argv(&["./x", "data"]), ["./x"]);
        assert_eq!(argv(&["tools/run", "a"]), ["tools/run"]);
        assert_eq!(argv(&["make", "-f", "ci.mk", "all"]), ["ci.mk"]);
        assert_eq!(argv(&["make", "--file=ci.mk"]), ["ci.mk"]);
        assert_eq!(argv(&["env", "-i", "A=1", "sh", "x"]), ["x"]);
        assert_eq!(
            argv(&["timeout", "-s", "KILL", "5", "node", "s.js"]),
            ["s.js"]
        );
        assert_eq!(
            argv(&["node", "-r", "./hook.js", "app.js"]),
            ["./hook.js", "app.js"]
        );
        assert_eq!(argv(&["deno", "run", "-A", "main.ts"]), ["main.ts"]);
        assert_eq!(argv(&["awk", "-fprog.awk", "data"]), ["prog.awk"]);
        assert_eq!(
            script("cd sub && bash -- ./b'ui'ld.sh >out 2>&1; . \"my env.sh\""),
            ["./build.sh", "my env.sh"]
        );
        assert_eq!(
            script("python3 -u x.py|tee log # sh evil.sh\nmake -f ci.mk"),
            ["x.py", "ci.mk"]
        );
        assert_eq!(script("FOO=1 sh < script.sh"), ["script.sh"]);
        assert_eq!(script("x=$(sh in.sh) && echo $x"), ["in.sh"]);
    }

    #[test]
    fn files_a_command_only_reads_or_writes_do_not_bind() {
        assert!(script("echo run >> log.txt; echo twelve bytes").is_empty());
        assert!(script("cat notes.txt && sed -i s/a/b/ f.txt && cp a b").is_empty());
        assert!(argv(&["python3", "-c", "print(1)", "file.py"]).is_empty());
        assert!(argv(&["python3", "-m", "pytest", "tests/t.py"]).is_empty());
        assert!(script("bash -c 'sh x' 2> err.txt").is_empty());
        assert!(script("sort < data.txt > out.txt").is_empty());
    }
}
