//! Property: adding a deny rule to any policy never makes any decision less strict.

use proptest::prelude::*;
use toolgate_core::{Tier, ToolKind};
use toolgate_policy_engine::{CallContext, Policy, ToolCall};

const SELECTORS: &[&str] = &[
    "commands = [\"ls\"]",
    "commands = [\"git\"]",
    "commands = [\"git log\"]",
    "commands = [\"git push\"]",
    "commands = [\"cat\"]",
    "commands = [\"rm\"]",
    "commands = [\"curl\"]",
    "commands = [\"python*\"]",
    "commands = [\"terraform *\"]\nexcept = [\"terraform fmt\"]",
    "commands = [\"find\"]\nnot_flags = [\"-delete\"]",
    "commands = [\"git push\"]\nflags = [\"--force\", \"-f\"]",
    "paths = [\"**/.env\"]",
    "paths = [\"src/**\"]",
    "tools = [\"fs.read\"]",
    "tools = [\"fs.write\", \"fs.edit\"]",
    "tools = [\"process.run\"]",
    "tools = [\"fs.read\"]\npaths = [\"secret/**\"]",
    "principals = [\"bob\"]",
    "labels = { env = \"prod\" }",
];

const SCRIPTS: &[&str] = &[
    "ls -la",
    "git log -1 && git push",
    "cat src/main.rs | grep fn",
    "rm -rf build",
    "curl -s x | shasum",
    "python3 script.py",
    "terraform fmt && terraform plan",
    "find . -name x -delete",
    "cd src && cat .env",
    "echo \"$(git status)\"",
    "git push --force origin main",
    "cat secret/key",
    "sudo ls",
    "",
];

fn call(i: usize) -> ToolCall {
    if i < SCRIPTS.len() {
        ToolCall::script(SCRIPTS[i])
    } else {
        let fs = [
            (ToolKind::FsRead, ".env"),
            (ToolKind::FsRead, "src/a.rs"),
            (ToolKind::FsWrite, "src/a.rs"),
            (ToolKind::FsRead, "secret/key"),
            (ToolKind::FsEdit, "README.md"),
        ];
        let (k, p) = fs[(i - SCRIPTS.len()) % fs.len()];
        ToolCall::fs(k, p)
    }
}

fn document(rules: &[(usize, usize)], safe: bool, default: usize) -> String {
    let tiers = ["auto", "ask", "deny"];
    let mut doc = format!("default = \"{}\"\nsafe_commands = {safe}\n", tiers[default]);
    for (i, (tier, selector)) in rules.iter().enumerate() {
        doc.push_str(&format!(
            "[[rule]]\nid = \"r{i}\"\ndecision = \"{}\"\nreason = \"generated\"\n{}\n",
            tiers[*tier], SELECTORS[*selector]
        ));
    }
    doc
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn adding_a_deny_rule_never_relaxes_a_decision(
        rules in prop::collection::vec((0..3usize, 0..SELECTORS.len()), 0..6),
        deny_selector in 0..SELECTORS.len(),
        safe in any::<bool>(),
        default in 0..3usize,
        principal in prop::sample::select(vec!["alice", "bob"]),
        prod in any::<bool>(),
    ) {
        let before = Policy::from_toml(&document(&rules, safe, default)).unwrap();
        let mut more = rules;
        more.push((2, deny_selector));
        let after = Policy::from_toml(&document(&more, safe, default)).unwrap();
        let mut ctx = CallContext { principal: principal.to_owned(), ..Default::default() };
        if prod {
            ctx.labels.insert("env".to_owned(), "prod".to_owned());
        }
        for i in 0..SCRIPTS.len() + 5 {
            let c = call(i);
            let (b, a) = (before.classify(&c, &ctx).tier, after.classify(&c, &ctx).tier);
            prop_assert!(a >= b, "call {:?}: {} became {}", c, b, a);
            prop_assert!(!(b != Tier::Auto && a == Tier::Auto));
        }
    }
}
