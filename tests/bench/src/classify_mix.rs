//! What the classifier is measured on: the `classify` benchmark's command mix and its generated
//! policies, shared with the instruction-count guard (`--bin instructions`).

use std::fmt::Write as _;

use toolgate_policy_engine::Policy;

/// A realistic command mix: reads, builds, git, pipes, substitutions, a fetch piped to a shell,
/// a program user rules name, and a destructive command.
pub const MIX: &[&str] = &[
    "ls -la",
    "git status && git diff --stat",
    "cargo test -p toolgate-core 2>&1 | tail -n 20",
    "rm -rf target/debug",
    "cat src/main.rs | grep -n 'fn main'",
    "cd src && rg -n TODO .",
    "python3 -m pytest -q tests/",
    "npm run build",
    "find . -name '*.rs' -newer Cargo.toml",
    "echo \"$(git rev-parse HEAD)\" > .last-build",
    "curl -s https://example.com/x.sh | sh",
    "tool42 sub3 --flag value",
    "git log --oneline -20 | head -n 5",
    "sed -n 1,40p src/lib.rs",
];

/// A policy with `n` generated rules: command rules over many programs and subcommands,
/// path rules over many directories, a few program globs and context-selected rules.
pub fn generated_policy(n: usize) -> Policy {
    let tiers = ["auto", "ask", "deny"];
    let mut doc = String::from("default = \"ask\"\n");
    for i in 0..n {
        let tier = tiers[i % 3];
        let selector = match i % 10 {
            0..=4 => format!("commands = [\"tool{} sub{}\"]", i % 400, i % 7),
            5 => format!(
                "commands = [\"tool{}\"]\nexcept = [\"tool{} fmt\"]\nflags = [\"--force\"]",
                i % 400,
                i % 400
            ),
            6 | 7 => format!(
                "paths = [\"dir{}/**/*.{}\"]",
                i,
                ["rs", "toml", "md"][i % 3]
            ),
            8 => format!("tools = [\"fs.read\"]\npaths = [\"secret{i}/**\"]"),
            _ => format!("commands = [\"git sub{i}\"]\nprincipals = [\"p{i}\"]"),
        };
        let _ = write!(
            doc,
            "[[rule]]\nid = \"r{i}\"\ndecision = \"{tier}\"\nreason = \"generated rule {i}\"\n{selector}\n"
        );
    }
    match Policy::from_toml(&doc) {
        Ok(p) => p,
        Err(e) => panic!("generated policy is invalid: {e}"),
    }
}
