//! `fs.delete` under the shipped default policy and under policies that try to wave a tree
//! through: one file is a write, a tree always asks, secrets and `.git` stay denied.

use toolgate_core::{Tier, ToolKind};
use toolgate_policy_engine::{CallContext, DEFAULT_POLICY_TOML, Policy, ToolCall};

fn delete(path: &str, recursive: bool) -> ToolCall {
    ToolCall {
        recursive,
        ..ToolCall::fs(ToolKind::FsDelete, path)
    }
}

fn tier(policy: &Policy, call: &ToolCall) -> (Tier, Vec<String>) {
    let d = policy.classify(call, &CallContext::default());
    (d.tier, d.matches.into_iter().map(|m| m.rule_id).collect())
}

#[test]
fn the_default_policy_treats_one_deletion_as_a_write_and_asks_for_a_tree() {
    let p = Policy::from_toml(DEFAULT_POLICY_TOML).unwrap();
    for path in ["src/main.rs", "build/out.log", "a/b/c", "empty-dir"] {
        assert_eq!(tier(&p, &delete(path, false)).0, Tier::Auto, "{path}");
        let (t, rules) = tier(&p, &delete(path, true));
        assert_eq!(t, Tier::Ask, "{path} recursive");
        assert!(
            rules.contains(&"baseline.rm-recursive-or-forced".to_owned()),
            "{rules:?}"
        );
    }
    for (path, recursive) in [
        ("config/.env", false),
        (".env.production", true),
        ("keys/id_ed25519", false),
        ("deploy/.npmrc", true),
        (".git", true),
        (".git/config", false),
        ("vendor/lib/.git/hooks/pre-commit", false),
        (".claude/settings.json", false),
    ] {
        assert_eq!(
            tier(&p, &delete(path, recursive)).0,
            Tier::Deny,
            "{path} {recursive}"
        );
    }
    // Editor and CI configs ask, as their writes do.
    for path in [".vscode/settings.json", ".github/workflows/ci.yml"] {
        assert_eq!(tier(&p, &delete(path, false)).0, Tier::Ask, "{path}");
    }
    // Outside the workspace asks at least, like a write there.
    assert!(tier(&p, &delete("../elsewhere", false)).0 >= Tier::Ask);
}

#[test]
fn no_rule_makes_a_recursive_deletion_auto() {
    for doc in [
        "default = \"auto\"\n",
        "default = \"ask\"\n[[rule]]\nid = \"d\"\ndecision = \"auto\"\nreason = \"r\"\ntools = [\"fs.delete\"]\n",
        "default = \"ask\"\n[[rule]]\nid = \"d\"\ndecision = \"auto\"\nreason = \"r\"\ntools = [\"fs.delete\"]\npaths = [\"build/**\", \"build\"]\n",
    ] {
        let p = Policy::from_toml(doc).unwrap();
        assert_eq!(tier(&p, &delete("build", true)).0, Tier::Ask, "{doc}");
        assert_eq!(tier(&p, &delete("build", false)).0, Tier::Auto, "{doc}");
    }
    // A rule may still deny deletions outright, recursive or not.
    let p = Policy::from_toml(
        "default = \"auto\"\n[[rule]]\nid = \"keep-docs\"\ndecision = \"deny\"\nreason = \"r\"\ntools = [\"fs.delete\"]\npaths = [\"docs/**\"]\n",
    )
    .unwrap();
    assert_eq!(tier(&p, &delete("docs/a.md", false)).0, Tier::Deny);
    assert_eq!(tier(&p, &delete("docs/a.md", true)).0, Tier::Deny);
    assert_eq!(tier(&p, &delete("src/a.rs", false)).0, Tier::Auto);
    // ... and an fs.write rule does not speak about deletions.
    let p = Policy::from_toml(
        "default = \"ask\"\n[[rule]]\nid = \"w\"\ndecision = \"auto\"\nreason = \"r\"\ntools = [\"fs.write\"]\n",
    )
    .unwrap();
    assert_eq!(tier(&p, &delete("src/a.rs", false)).0, Tier::Ask);
}

#[test]
fn recursive_is_part_of_the_digest() {
    let a = toolgate_policy_engine::request_digest(&delete("build", false), "s", "p", "v");
    let b = toolgate_policy_engine::request_digest(&delete("build", true), "s", "p", "v");
    assert_ne!(a, b, "approving one file must not approve the tree");
}
