#[test]
fn dev_null_is_harmless_but_devices_are_system_paths() {
    assert!(path_rule("/dev/null", Access::Write).is_none());
    assert!(path_rule("/dev/fd/3", Access::Write).is_none());
    assert_eq!(
        path_rule("/dev/sda", Access::Write).unwrap().id,
        "baseline.system-path-write"
    );
    assert_eq!(
        path_rule("~/.bashrc", Access::Write).unwrap().id,
        "baseline.system-path-write"
    );
    assert_eq!(
        path_rule("~/.ssh/my_id_rsa", Access::Write).unwrap().id,
        "baseline.system-path-write"
    );
    assert_eq!(
        path_rule("/etc/shadow", Access::Read).unwrap().id,
        "baseline.secret-read"
    );
    assert_eq!(
        path_rule(".git/hooks/pre-commit", Access::Write)
            .unwrap()
            .id,
        "baseline.git-internals-write"
    );
    assert!(path_rule("src/main.rs", Access::Write).is_none());
    assert!(path_rule(".git/config", Access::Read).is_none());
}

use super::sed_awk::sed_script_is_safe;
use super::*;

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

fn ids(s: &str) -> Vec<&'static str> {
    let a = argv(s);
    classify_argv(&a[0], &a[1..])
        .rules
        .iter()
        .map(|r| r.id)
        .collect()
}

fn safe(s: &str) -> bool {
    let a = argv(s);
    classify_argv(&a[0], &a[1..]).safe
}

#[test]
fn rm_flag_spellings_all_ask() {
    for c in [
        "rm -rf x",
        "rm -fr x",
        "rm -r -f x",
        "rm --recursive x",
        "rm -R x",
        "rm -f x",
        "rm --force x",
        "rm -vrf x",
    ] {
        assert!(ids(c).contains(&"baseline.rm-recursive-or-forced"), "{c}");
    }
    assert!(ids("rm x").is_empty());
}

#[test]
fn rm_of_root_or_home_is_denied() {
    for c in [
        "rm -rf /",
        "rm -rf /*",
        "rm -rf ~",
        "rm -r ~/",
        "rm --no-preserve-root -rf /",
        "rm -fr //",
    ] {
        assert!(ids(c).contains(&"baseline.rm-root"), "{c}");
    }
    assert!(!ids("rm -rf build").contains(&"baseline.rm-root"));
}

#[test]
fn sed_scripts() {
    for ok in [
        "1,5p",
        "s/a/b/g",
        "/x/d",
        "$!N;P;D",
        "y/abc/xyz/",
        "1~2p",
        "s|a|b|2",
    ] {
        assert!(sed_script_is_safe(ok), "{ok}");
    }
    for bad in [
        "w /tmp/o",
        "1,1w/tmp/o",
        "r/etc/passwd",
        "e",
        "s/x/id/e",
        "1p; s/x/id/e",
        "s/a/b/w /tmp/o",
        "$ W /tmp/o",
        "1e id",
        "R x",
    ] {
        assert!(!sed_script_is_safe(bad), "{bad}");
    }
}

#[test]
fn git_subcommands_and_global_options() {
    assert!(safe("git log -p -1"));
    assert!(safe("git status"));
    assert!(safe("git -C sub diff HEAD"));
    assert!(!safe("git -p status"));
    assert!(!safe("git push"));
    assert!(ids("git push --force origin main").contains(&"baseline.git-force-push"));
    assert!(ids("git push origin +main").contains(&"baseline.git-force-push"));
    assert!(ids("git push --force-with-lease").contains(&"baseline.git-force-push"));
    assert!(ids("git reset --hard HEAD~1").contains(&"baseline.git-history-rewrite"));
    assert!(ids("git commit --amend").contains(&"baseline.git-history-rewrite"));
    assert!(!ids("git reset HEAD~1").contains(&"baseline.git-history-rewrite"));
    assert_eq!(
        git_chdir(&argv("-C /path/to/repo push origin main")),
        vec!["/path/to/repo"]
    );
}

fn has(s: &str, id: &str) -> bool {
    ids(s).contains(&id)
}

#[test]
fn git_push_force_in_a_cluster_after_an_operand_or_abbreviated_asks() {
    for c in [
        "git push -fq",
        "git push -qf origin main",
        "git push origin main -f",
        "git push -uf origin main",
        "git push --force-with-lease=main",
        "git push --force-with-lease=main:abc origin main",
        "git push --force-w origin main",
        "git push --force-i origin main",
        "git push --forc origin main",
        "git push --fo origin main",
        "git -c x=y push --forc origin main",
        "git push --no-force -f",
        "git push --mir origin",
        "git push -d origin topic",
        "git push -vd origin topic",
        "git push --del origin topic",
        "git push --pru origin",
        "git push --end-of-options -f",
        "git push origin :topic",
    ] {
        assert!(has(c, "baseline.git-force-push"), "{c}");
    }
}

#[test]
fn git_push_option_values_are_not_flags() {
    for c in [
        "git push -o -f origin main",
        "git push -o-f origin main",
        "git push --push-option -d origin main",
        "git push --push-opt=-f origin main",
        "git push --repo -f",
        "git push -- -f",
    ] {
        assert!(!has(c, "baseline.git-force-push"), "{c}");
    }
    // A refspec is still read after an option that takes a value.
    assert!(has(
        "git push -o ci.skip origin +main",
        "baseline.git-force-push"
    ));
}

#[test]
fn git_push_ambiguous_prefix_asks_as_ambiguous() {
    // git itself refuses `--forc`: --force, --force-with-lease, --force-if-includes.
    assert!(has("git push --forc", "baseline.ambiguous-option"));
    assert!(has("git push --rec x", "baseline.ambiguous-option"));
    assert!(has("git push --rec x", "baseline.exec-or-write-flag"));
}

#[test]
fn git_push_receive_pack_spellings_are_unsafe() {
    for c in [
        "git push --receive-pack=x origin",
        "git push --recei x origin",
        "git push --exec x origin",
        "git push --ex=x origin",
    ] {
        assert!(has(c, "baseline.exec-or-write-flag"), "{c}");
    }
}

#[test]
fn git_clean_force_in_any_cluster_asks() {
    for c in [
        "git clean -xdf",
        "git clean -dfx",
        "git clean -qfd",
        "git clean -e x -f",
        "git clean --force",
        "git clean --fo",
        "git clean -n --force",
    ] {
        assert!(has(c, "baseline.git-discard-changes"), "{c}");
    }
    // `-e` takes the rest of the word or the next one: a pattern called `f`, no force.
    assert!(!has("git clean -ef", "baseline.git-discard-changes"));
    assert!(!has("git clean -e -f", "baseline.git-discard-changes"));
}

#[test]
fn git_reset_hard_however_spelled_asks() {
    for c in [
        "git reset --hard",
        "git reset --ha HEAD~1",
        "git reset --hard=",
        "git reset -q --hard",
        "git reset HEAD~1 --hard",
        "git reset --hard -- f",
    ] {
        assert!(has(c, "baseline.git-discard-changes"), "{c}");
    }
    assert!(has(
        "git reset --kee HEAD~1",
        "baseline.git-history-rewrite"
    ));
    // `--m` is --mixed or --merge: git refuses it, and the baseline asks.
    assert!(has("git reset --m HEAD~1", "baseline.git-history-rewrite"));
    // A file named `--hard` listing pathspecs is not a hard reset.
    assert!(!has(
        "git reset --pathspec-from-file --hard",
        "baseline.git-discard-changes"
    ));
}

#[test]
fn git_commit_message_is_not_amend() {
    assert!(!has(
        "git commit -m --amend",
        "baseline.git-history-rewrite"
    ));
    assert!(!has("git commit -m--amend", "baseline.git-history-rewrite"));
    assert!(!has(
        "git commit --message --amend",
        "baseline.git-history-rewrite"
    ));
    for c in [
        "git commit --amend",
        "git commit -am x --amend",
        "git commit --am -m x",
        "git commit -m x --amen",
    ] {
        assert!(has(c, "baseline.git-history-rewrite"), "{c}");
    }
    assert!(has(
        "git commit --template x",
        "baseline.exec-or-write-flag"
    ));
    assert!(has("git commit --templ=x", "baseline.exec-or-write-flag"));
}

#[test]
fn git_checkout_and_switch_force_and_values() {
    for c in [
        "git checkout -qf main",
        "git checkout main -f",
        "git checkout --forc main",
        "git switch -fc new",
        "git switch --disc main",
        "git checkout -2 f",
        "git checkout --the f",
        "git checkout -b new main -- f",
    ] {
        assert!(has(c, "baseline.git-discard-changes"), "{c}");
    }
    // Branch names are option values, not a second operand that would be a path.
    for c in [
        "git checkout -qb new main",
        "git checkout -bnew main",
        "git checkout --orphan=new main",
        "git switch -c -f",
        "git switch -C new main",
    ] {
        assert!(!has(c, "baseline.git-discard-changes"), "{c}");
    }
}

#[test]
fn git_restore_staged_only_when_it_is_an_option() {
    assert!(!has(
        "git restore --staged f",
        "baseline.git-discard-changes"
    ));
    assert!(!has("git restore -qS f", "baseline.git-discard-changes"));
    assert!(!has("git restore --stag f", "baseline.git-discard-changes"));
    for c in [
        // `-s` takes `-S` as the source; the work tree is restored.
        "git restore -s -S f",
        "git restore -sS f",
        "git restore -SW f",
        "git restore --staged --work f",
        // `--s` is --source or --staged: ambiguous, so not taken for --staged.
        "git restore --s f",
    ] {
        assert!(has(c, "baseline.git-discard-changes"), "{c}");
    }
}

#[test]
fn git_update_ref_delete_not_its_message() {
    assert!(has(
        "git update-ref -d refs/heads/x",
        "baseline.git-history-rewrite"
    ));
    assert!(has(
        "git update-ref -zd refs/heads/x",
        "baseline.git-history-rewrite"
    ));
    assert!(!has(
        "git update-ref -m -d refs/heads/x HEAD",
        "baseline.git-history-rewrite"
    ));
}

#[test]
fn git_tag_lists_only_with_a_real_list_option() {
    assert!(safe("git tag"));
    assert!(safe("git tag -l v*"));
    assert!(safe("git tag -n5 -l v*"));
    assert!(safe("git tag --list v*"));
    assert!(safe("git tag --list=v*"));
    // A message `-l` creates a tag.
    assert!(!safe("git tag -m -l v1"));
    assert!(!safe("git tag -ml v1"));
    assert!(!safe("git tag v1"));
    // Only the full spelling of a flag that makes a command safer counts.
    assert!(!safe("git tag --lis v*"));
    assert!(!safe("git tag --c"));
}

#[test]
fn git_branch_changes_are_not_read_only() {
    assert!(safe("git branch"));
    assert!(safe("git branch -vv"));
    assert!(safe("git branch --sort=-committerdate"));
    assert!(safe("git branch --format %(refname)"));
    assert!(safe("git branch --contains HEAD"));
    for c in [
        "git branch -vd x",
        "git branch -D x",
        "git branch -uorigin/main",
        "git branch --set-up=origin/main",
        "git branch --del x",
        "git branch --contains HEAD -d x",
        "git branch x",
        "git branch --unset",
    ] {
        assert!(!safe(c), "{c}");
    }
}

#[test]
fn git_abbreviations_resolve_to_the_option_git_picks() {
    // These ran against git 2.47: the abbreviation named the option shown, and nothing was
    // discarded, rewritten or run.
    // `--or` is --orphan, which takes `f.rs` as the new branch's name: no path operand.
    assert!(!has(
        "git checkout --or f.rs",
        "baseline.git-discard-changes"
    ));
    // `--tr` is --trailer, which takes `--amend` as its value.
    assert!(!has(
        "git commit --tr --amend",
        "baseline.git-history-rewrite"
    ));
    // `--r` is --recurse-submodules for checkout, not a prefix of --receive-pack.
    assert!(!has("git checkout --r -d", "baseline.exec-or-write-flag"));
    // `--ou` is --ours for restore, not --output; `--c` is --cleanup for commit, not --config.
    assert!(!has("git restore --ou -S f", "baseline.exec-or-write-flag"));
    assert!(!has(
        "git commit --c strip -m x",
        "baseline.exec-or-write-flag"
    ));
    // A subcommand without a table gets no such reading: `--o` for log still counts.
    assert!(has("git log --o x", "baseline.exec-or-write-flag"));
}

#[test]
fn git_subcommands_without_a_table_count_every_cluster_letter() {
    assert!(has("git ls-remote -qu x .", "baseline.exec-or-write-flag"));
    assert!(has("git grep -nO x", "baseline.exec-or-write-flag"));
    assert!(has("git log --out=x", "baseline.exec-or-write-flag"));
    assert!(has("git diff --ext", "baseline.exec-or-write-flag"));
    assert!(safe("git log -n 3 --stat"));
}

#[test]
fn rg_preprocessor_and_zip_spellings() {
    for c in [
        "rg -uuz pat .",
        "rg -z pat .",
        "rg -nz pat .",
        "rg --pre=x pat .",
        "rg --pr x pat .",
        "rg --search-z pat .",
        "rg --host=x pat .",
    ] {
        assert!(has(c, "baseline.exec-or-write-flag"), "{c}");
    }
    assert!(safe("rg -n pat src"));
    assert!(!has(
        "rg --pre-glob *.x pat .",
        "baseline.exec-or-write-flag"
    ));
}

#[test]
fn man_pager_and_tree_output_in_clusters() {
    assert!(has("man -aP cat ls", "baseline.exec-or-write-flag"));
    assert!(has("man --pag=sh ls", "baseline.exec-or-write-flag"));
    assert!(has("man -kH x", "baseline.exec-or-write-flag"));
    assert!(has("tree -ao out", "baseline.exec-or-write-flag"));
    assert!(has("tree -R", "baseline.exec-or-write-flag"));
    assert!(has("xxd -r -p x", "baseline.exec-or-write-flag"));
    assert!(safe("tree -a src"));
}

#[test]
fn man_local_file_and_config_file_ask_however_spelled() {
    for c in [
        "man -l page.1",
        "man --local-file page.1",
        "man --local page.1",
        "man -C evil.conf ls",
        "man -aC evil.conf ls",
        "man --config-file=evil.conf ls",
        "man --conf=evil.conf ls",
    ] {
        assert!(has(c, "baseline.exec-or-write-flag"), "{c}");
    }
}

#[test]
fn history_writes_in_clusters() {
    let a = argv("history -aw f");
    let f = classify_argv(&a[0], &a[1..]);
    assert_eq!(f.paths, [("f".to_owned(), Access::Write)]);
}

#[test]
fn package_manager_short_install_flags() {
    assert!(has("dpkg -i x.deb", "baseline.package-install"));
    assert!(has("rpm -Uvhi x.rpm", "baseline.package-install"));
    assert!(has("rpm -ivh x.rpm", "baseline.package-install"));
}

#[test]
fn interpreters_reading_stdin() {
    assert!(reads_program_from_stdin("sh", &[]));
    assert!(reads_program_from_stdin("bash", &argv("-s -- x")));
    assert!(reads_program_from_stdin("python3", &argv("-u")));
    assert!(reads_program_from_stdin("python3", &argv("-")));
    assert!(!reads_program_from_stdin("python3", &argv("script.py")));
    assert!(!reads_program_from_stdin("python3", &argv("-m json.tool")));
    assert!(!reads_program_from_stdin("bash", &argv("-c true")));
    assert!(!reads_program_from_stdin("perl", &argv("-e 1")));
}

#[test]
fn package_installs_ask() {
    for c in [
        "pip install x",
        "npm i left-pad",
        "cargo install ripgrep",
        "apt-get install -y x",
        "python3 -m pip install x",
        "npx cowsay",
        "yarn",
    ] {
        assert!(ids(c).contains(&"baseline.package-install"), "{c}");
    }
    assert!(!ids("cargo build").contains(&"baseline.package-install"));
}

#[test]
fn git_clone_config_and_upload_pack_short_forms_are_unsafe() {
    for c in [
        "git clone -c core.sshCommand=x ssh://h/r",
        "git clone -ccore.sshCommand=x ssh://h/r",
        "git clone -qc core.fsmonitor=x https://h/r",
        "git clone -u 'touch /tmp/x' file:///r",
        "git clone --config=core.sshCommand=x ssh://h/r",
        "git clone --upload-pack=x file:///r",
    ] {
        assert!(ids(c).contains(&UNSAFE_FLAG.id), "{c}: {:?}", ids(c));
    }
    assert!(ids("git clone -q https://h/r dir").is_empty());
}

#[test]
fn git_update_ref_stdin_can_delete_refs() {
    assert!(has(
        "git update-ref --stdin",
        "baseline.git-history-rewrite"
    ));
    assert!(has(
        "git update-ref -z --stdin",
        "baseline.git-history-rewrite"
    ));
}

#[test]
fn git_message_and_pathspec_files_are_paths_read() {
    let read = |s: &str| {
        let a = argv(s);
        classify_argv(&a[0], &a[1..])
            .paths
            .into_iter()
            .filter(|(_, access)| *access == Access::Read)
            .map(|(p, _)| p)
            .collect::<Vec<_>>()
    };
    for (c, path) in [
        ("git commit -F /etc/shadow", "/etc/shadow"),
        ("git commit -qF/etc/shadow", "/etc/shadow"),
        ("git commit --file=../secret", "../secret"),
        ("git commit --fil ../secret", "../secret"),
        ("git commit -t ~/.ssh/id_rsa", "~/.ssh/id_rsa"),
        ("git tag -a v1 -F ../notes", "../notes"),
        ("git reset --pathspec-from-file=/etc/passwd", "/etc/passwd"),
        (
            "git restore --pathspec-from-file /etc/passwd",
            "/etc/passwd",
        ),
    ] {
        assert!(read(c).iter().any(|p| p == path), "{c}: {:?}", read(c));
    }
    // A message given inline is not a path.
    assert!(read("git commit -m /etc/shadow").is_empty());
}
