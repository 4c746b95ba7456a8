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
fn operands_for_user_rules_ignore_tables() {
    let a = words("-n 20 - f -- -x");
    assert_eq!(operands(&a), ["20", "-", "f", "-x"]);
    // tail's table would take `20` as -n's value; these words ignore every table.
    assert_eq!(parse("tail", &a).operands, ["-", "f", "-x"]);
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
fn git_subcommand_tables_list_every_long_option_the_installed_git_has() {
    // `--git-completion-helper-all` prints every long option, hidden ones too, with `=`
    // after those that require a value. Options that take the next word unless they are
    // the last one (`--contains`) print without `=` and are in `long` all the same.
    // The tables may know more than an older git (they follow git 2.47); a newer git's
    // option missing from them fails here, which is the prompt to review the table.
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(repo.path())
            .output()
            .expect("git is installed")
    };
    assert!(git(&["init", "-q"]).status.success());
    for t in super::git::SUBCOMMANDS {
        let sub = t.names[0].strip_prefix("git ").unwrap();
        let out = git(&[sub, "--git-completion-helper-all"]);
        let helper = String::from_utf8(out.stdout).unwrap();
        let listed: Vec<&str> = t.long.iter().chain(t.flags).copied().collect();
        let missing: Vec<&str> = helper
            .split_whitespace()
            .filter(|o| *o != "--")
            .map(|o| o.trim_end_matches('='))
            .filter(|o| !listed.contains(o))
            .collect();
        assert!(
            missing.is_empty(),
            "git {sub}: not in the table: {missing:?}"
        );
        for o in helper.split_whitespace() {
            if let Some(o) = o.strip_suffix('=') {
                assert!(t.long.contains(&o), "git {sub} {o} takes a value");
            }
        }
    }
}

#[test]
fn git_subcommand_tables_read_short_options_as_git_h_prints_them() {
    // `git <sub> -h` prints `-b <branch>` for a short option that requires a value,
    // `-n[<n>]` or `-t, --track[=...]` for an optional one, and the option alone for a flag.
    let repo = tempfile::tempdir().unwrap();
    for t in super::git::SUBCOMMANDS {
        let sub = t.names[0].strip_prefix("git ").unwrap();
        let out = std::process::Command::new("git")
            .args([sub, "-h"])
            .current_dir(repo.path())
            .output()
            .expect("git is installed");
        // Outside a repository some subcommands print their usage on stderr.
        let usage = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        let (mut required, mut optional) = (String::new(), String::new());
        let mut seen = String::new();
        for line in usage.lines() {
            let spec = line.trim_start();
            let spec = spec.split_once("  ").map_or(spec, |(s, _)| s);
            let mut chars = spec.chars();
            let (Some('-'), Some(c)) = (chars.next(), chars.next()) else {
                continue;
            };
            if c == '-' {
                continue;
            }
            seen.push(c);
            if spec.contains(" <") {
                required.push(c);
            } else if spec.contains("[=") || spec.contains("[<") {
                optional.push(c);
            }
        }
        assert!(!seen.is_empty(), "git {sub} -h printed no short option");
        let sorted = |s: &str| {
            let mut v: Vec<char> = s.chars().collect();
            v.sort_unstable();
            v
        };
        // Exact for every short option this git prints; the table may also know options an
        // older git does not have.
        let known = |table: &str| -> Vec<char> {
            sorted(table)
                .into_iter()
                .filter(|c| seen.contains(*c))
                .collect()
        };
        assert_eq!(known(t.short), sorted(&required), "git {sub}");
        assert_eq!(known(t.short_optional), sorted(&optional), "git {sub}");
    }
}

#[test]
fn awk_options_end_at_the_program() {
    let a = words("-F , -v x=1 {print} -F f");
    let p = parse("awk", &a);
    assert_eq!(p.operands, ["{print}", "-F", "f"]);
    assert_eq!(p.values_of(&["-F"]).collect::<Vec<_>>(), [","]);
}
