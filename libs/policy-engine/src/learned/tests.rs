use std::collections::BTreeMap;

use toolgate_core::{Tier, ToolKind};

use crate::call::{CallContext, ToolCall};
use crate::engine::{DEFAULT_POLICY_TOML, Policy};
use crate::learned::{
    CommandPattern, LearnedRule, LearnedSet, Pattern, Refusal, Scope, Slot, check_cases,
    corpus_cases, example_cases, propose,
};

fn script(s: &str) -> ToolCall {
    let mut c = ToolCall::new(ToolKind::ProcessRun);
    c.script = Some(s.to_owned());
    c
}

fn ctx(session: &str) -> CallContext {
    CallContext {
        session_id: session.into(),
        principal: "agent".into(),
        labels: BTreeMap::new(),
    }
}

fn proposal(policy: &Policy, s: &str) -> Result<Pattern, Refusal> {
    let call = script(s);
    propose(&call, &policy.classify(&call, &ctx("s1")))
}

/// The command pattern of a proposal.
fn commands(p: &Pattern) -> &CommandPattern {
    match p {
        Pattern::Commands(c) => c,
        Pattern::Destination(d) => panic!("a destination: {d:?}"),
    }
}

fn rule(pattern: Pattern, scope: Scope, expires: Option<i64>) -> LearnedRule {
    LearnedRule {
        id: "rul_1".into(),
        pattern,
        scope,
        created_by: "alice".into(),
        source_approval: "apr_1".into(),
        expires_at_micros: expires,
    }
}

fn tier_with(set: &LearnedSet, policy: &Policy, s: &str, session: &str, now: i64) -> Tier {
    let call = script(s);
    let c = ctx(session);
    let mut d = policy.classify(&call, &c);
    set.apply(&mut d, &call, &c, now);
    d.tier
}

#[test]
fn a_push_learns_its_exact_shape_and_lifts_only_that_shape() {
    let policy = Policy::builtin_default();
    let p = proposal(&policy, "git push origin main").unwrap();
    assert_eq!(
        commands(&p).shapes[0].words,
        ["git", "push", "origin", "main"]
            .map(|w| Slot::Lit(w.into()))
            .to_vec()
    );
    assert!(
        p.to_text().starts_with("git push origin main\n"),
        "{}",
        p.to_text()
    );
    assert_eq!(Pattern::decode(&p.encode()).unwrap(), p);

    let set = LearnedSet::new(7, vec![rule(p, Scope::All, None)]);
    let call = script("git push origin main");
    let mut d = policy.classify(&call, &ctx("s2"));
    assert_eq!(d.tier, Tier::Ask);
    let doc_version = d.policy_version.clone();
    let lifted = set.apply(&mut d, &call, &ctx("s2"), 0).unwrap();
    assert_eq!(lifted.rule_id, "learned.rul_1");
    assert_eq!(d.tier, Tier::Auto);
    assert_eq!(d.deciding_rule().unwrap().rule_id, "learned.rul_1");
    assert!(d.message.contains("alice"), "{}", d.message);
    assert_eq!(d.policy_version, format!("{doc_version}+learned.r7"));

    for other in [
        "git push origin dev",
        "git push upstream main",
        "git push --force origin main",
        "git push origin +main",
        "git push origin main && npm publish",
        "git push origin main; rm -rf ../x",
        "git push origin main $X",
    ] {
        assert_ne!(
            tier_with(&set, &policy, other, "s2", 0),
            Tier::Auto,
            "{other}"
        );
    }
}

#[test]
fn scope_and_expiry_are_enforced_at_match() {
    let policy = Policy::builtin_default();
    let p = proposal(&policy, "npm publish").unwrap();
    let set = LearnedSet::new(1, vec![rule(p.clone(), Scope::Session("s1".into()), None)]);
    assert_eq!(tier_with(&set, &policy, "npm publish", "s1", 0), Tier::Auto);
    assert_eq!(tier_with(&set, &policy, "npm publish", "s2", 0), Tier::Ask);
    let set = LearnedSet::new(1, vec![rule(p, Scope::All, Some(100))]);
    assert_eq!(
        tier_with(&set, &policy, "npm publish", "s2", 99),
        Tier::Auto
    );
    assert_eq!(
        tier_with(&set, &policy, "npm publish", "s2", 100),
        Tier::Ask
    );
}

#[test]
fn workspace_paths_become_placeholders_that_never_leave_the_workspace() {
    let policy = Policy::builtin_default();
    let p = proposal(&policy, "rm -rf build").unwrap();
    assert_eq!(
        commands(&p).shapes[0].words[2],
        Slot::WorkspacePath,
        "{}",
        p.to_text()
    );
    assert!(p.to_text().starts_with("rm -rf <path:workspace>"));
    let set = LearnedSet::new(1, vec![rule(p, Scope::All, None)]);
    assert_eq!(tier_with(&set, &policy, "rm -rf dist", "s", 0), Tier::Auto);
    for outside in [
        "rm -rf ..",
        "rm -rf ../x",
        "rm -rf /tmp/x",
        "rm -rf ~",
        "rm -rf .",
        "rm -rf ./",
        "rm -rf a/../..",
        "rm -rf *",
        "rm -rf .git",
        "rm -rf build dist",
        "rm -rf $HOME",
        "rm -rf ~/x",
    ] {
        assert_ne!(
            tier_with(&set, &policy, outside, "s", 0),
            Tier::Auto,
            "{outside}"
        );
    }
}

#[test]
fn a_deny_is_never_learned_nor_lifted() {
    let policy = Policy::builtin_default();
    assert!(matches!(
        proposal(&policy, "rm -rf /"),
        Err(Refusal::Denied { .. })
    ));
    // A rule over rm does not reach a denied rm.
    let p = proposal(&policy, "rm -rf build").unwrap();
    let set = LearnedSet::new(1, vec![rule(p, Scope::All, None)]);
    assert_eq!(tier_with(&set, &policy, "rm -rf /", "s", 0), Tier::Deny);
}

#[test]
fn banned_prefixes_are_refused() {
    let policy = Policy::builtin_default();
    for s in [
        "python -c 'import os; os.system(\"git push origin main\")'",
        "python3 -Ic 'print(1)' && git push origin main",
        "bash -c 'git push origin main'",
        "sh -c 'npm publish'",
        "env X=1 npm publish",
        "xargs rm -rf < list",
        "find . -name x -exec rm -rf {} +",
        "perl -ne 'print' f && npm publish",
        "node --eval 'x' && npm publish",
        "timeout 10 npm publish",
        "git -c core.pager=less push origin main",
        "npm exec foo && npm publish",
    ] {
        match proposal(&policy, s) {
            Err(Refusal::BannedPrefix { .. }) => {}
            other => panic!("{s}: {other:?}"),
        }
    }
    assert!(matches!(
        proposal(&policy, "sudo npm publish"),
        Err(Refusal::Denied { .. })
    ));
}

#[test]
fn rules_that_flip_an_example_or_an_adversarial_case_are_refused() {
    let policy = Policy::builtin_default();
    let examples = example_cases(DEFAULT_POLICY_TOML).unwrap();
    assert!(examples.len() > 3);
    // `rm -rf build 2>/dev/null` is an example that asks.
    let p = proposal(&policy, "rm -rf build").unwrap();
    match check_cases(&policy, &[], &p, &examples) {
        Err(Refusal::FlipsCase { origin, case, .. }) => {
            assert_eq!(origin, "policy example");
            assert!(case.contains("rm -rf build"), "{case}");
        }
        other => panic!("{other:?}"),
    }
    let corpus = corpus_cases();
    assert!(corpus.len() > 30);
    let p = proposal(&policy, "git push --force origin main").unwrap();
    match check_cases(&policy, &[], &p, &corpus) {
        Err(Refusal::FlipsCase { origin, case, .. }) => {
            assert_eq!(origin, "adversarial case");
            assert_eq!(case, "git push --force origin main");
        }
        other => panic!("{other:?}"),
    }
    // A push to the usual branch flips nothing.
    let p = proposal(&policy, "git push origin main").unwrap();
    check_cases(&policy, &[], &p, &examples).unwrap();
    check_cases(&policy, &[], &p, &corpus).unwrap();
}

#[test]
fn too_broad_and_unanalysed_calls_are_refused() {
    let policy = Policy::builtin_default();
    match proposal(&policy, "./deploy.sh --prod && npm publish") {
        Err(Refusal::TooBroad { .. }) => {}
        other => panic!("{other:?}"),
    }
    match proposal(&policy, "git push origin \"$BRANCH\"") {
        Err(Refusal::NotAnalyzed { .. }) => {}
        other => panic!("{other:?}"),
    }
    match proposal(&policy, "cat ../outside.txt") {
        Err(Refusal::NotLearnable { .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rule_needs_the_same_profile_and_no_new_environment() {
    let policy = Policy::builtin_default();
    let p = proposal(&policy, "npm publish").unwrap();
    let set = LearnedSet::new(1, vec![rule(p, Scope::All, None)]);
    let mut call = script("npm publish");
    call.sandbox_profile = Some("unconfined".into());
    let mut d = policy.classify(&call, &ctx("s"));
    assert!(set.apply(&mut d, &call, &ctx("s"), 0).is_none());
    let mut call = script("npm publish");
    call.env.insert("NODE_OPTIONS".into(), "--require x".into());
    let mut d = policy.classify(&call, &ctx("s"));
    assert!(set.apply(&mut d, &call, &ctx("s"), 0).is_none());
}

#[test]
fn spellings_around_a_learned_shape_still_ask() {
    let policy = Policy::builtin_default();
    let push = proposal(&policy, "git push origin main").unwrap();
    let rm = proposal(&policy, "rm -rf build").unwrap();
    let set = LearnedSet::new(
        1,
        vec![
            rule(push, Scope::All, None),
            LearnedRule {
                id: "rul_2".into(),
                ..rule(rm, Scope::All, None)
            },
        ],
    );
    // The same command, spelled differently by the shell, is the same command.
    for same in [
        "'git' push origin main",
        "\\git push \"origin\" main",
        "git push origin main &",
        "rm -rf build/",
        "rm -rf ./dist",
        "rm -rf node_modules/.cache",
    ] {
        assert_eq!(tier_with(&set, &policy, same, "s", 0), Tier::Auto, "{same}");
    }
    for other in [
        // Other words, other reasons.
        "git push origin main --force",
        "git push -f origin main",
        "git push origin main:refs/heads/release",
        "git push origin ma\u{456}n",
        "git push --mirror origin main",
        // What runs depends on the environment or on expansion.
        "GIT_DIR=/tmp/x git push origin main",
        "GIT_SSH_COMMAND='sh -c id' git push origin main",
        "$(echo git) push origin main",
        "git push origin \"$(cat branch)\"",
        "git push origin main${X}",
        "cd .. && git push origin main",
        "git -C ../other push origin main",
        // Writes and other commands around it still ask on their own.
        "git push origin main > ../log",
        "git push origin main && rm -rf ..",
        "git push origin main; npm publish",
        "command git push origin main",
        "exec git push origin main",
        "env git push origin main",
        // Paths that leave the workspace or are not one plain path.
        "rm -rf build/../..",
        "rm -rf 'build dir'",
        "rm -rf build/*",
        "rm -rf {build,..}",
        "rm -rf ~/build",
        "rm -rf /build",
        "rm -rf -- build",
        "rm -rf build .",
        "rm -rf .git/hooks",
    ] {
        assert_ne!(
            tier_with(&set, &policy, other, "s", 0),
            Tier::Auto,
            "{other}"
        );
    }
}

#[test]
fn a_verb_is_never_a_placeholder() {
    let policy = Policy::builtin_default();
    for s in ["git 42", "cargo 7", "terraform 3", "make 12"] {
        let call = script(s);
        let d = policy.classify(&call, &ctx("s"));
        assert_eq!(d.tier, Tier::Ask, "{s}: {}", d.message);
        match propose(&call, &d) {
            Err(Refusal::TooBroad { why, .. }) => assert!(why.contains("verb"), "{why}"),
            other => panic!("{s}: {other:?}"),
        }
    }
}

fn connect(host: &str, port: u32, profile: &str) -> ToolCall {
    let mut c = ToolCall::new(ToolKind::NetConnect);
    c.host = Some(host.to_owned());
    c.port = Some(port);
    c.protocol = Some("tcp".to_owned());
    c.sandbox_profile = Some(profile.to_owned());
    c
}

/// The decision for `call` in `session` with `set` applied, and its deciding rule.
fn connect_with(
    set: &LearnedSet,
    policy: &Policy,
    call: &ToolCall,
    session: &str,
    now: i64,
) -> (Tier, String) {
    let c = ctx(session);
    let mut d = policy.classify(call, &c);
    set.apply(&mut d, call, &c, now);
    let rule = d
        .deciding_rule()
        .map(|m| m.rule_id.clone())
        .unwrap_or_default();
    (d.tier, rule)
}

const NET_POLICY: &str = r#"
[[network]]
id = "ask-example"
decision = "ask"
reason = "example.com is decided by hand"
hosts = ["example.com", "*.example.com"]
"#;

#[test]
fn an_asked_destination_learns_exactly_its_host_port_protocol_and_profile() {
    let policy = Policy::from_toml(NET_POLICY).unwrap();
    let call = connect("Example.COM.", 443, "network");
    let d = policy.classify(&call, &ctx("s1"));
    assert_eq!(d.tier, Tier::Ask);
    let p = propose(&call, &d).unwrap();
    let Pattern::Destination(dest) = &p else {
        panic!("{p:?}")
    };
    assert_eq!(
        (dest.host.as_str(), dest.port, dest.protocol.as_str()),
        ("example.com", 443, "tcp")
    );
    assert_eq!(dest.profile, "network");
    assert_eq!(dest.lifts, ["ask-example"]);
    assert_eq!(p.profile(), "network");
    assert!(
        p.to_text()
            .starts_with("connect to example.com:443 (tcp)\n"),
        "{}",
        p.to_text()
    );
    assert_eq!(Pattern::decode(&p.encode()).unwrap(), p);

    let set = LearnedSet::new(3, vec![rule(p, Scope::Session("s1".into()), Some(1_000))]);
    let lifted = connect_with(&set, &policy, &call, "s1", 0);
    assert_eq!(lifted, (Tier::Auto, "learned.rul_1".into()));
    let mut d = policy.classify(&call, &ctx("s1"));
    set.apply(&mut d, &call, &ctx("s1"), 0);
    assert!(
        d.policy_version.ends_with("+learned.r3"),
        "{}",
        d.policy_version
    );
    assert!(
        d.message.contains("learned rule learned.rul_1"),
        "{}",
        d.message
    );

    // Nothing else: another session, port, name below it, profile or protocol, nor once
    // the rule expired.
    let ask =
        |c: &ToolCall, session: &str, now: i64| connect_with(&set, &policy, c, session, now).0;
    assert_eq!(ask(&call, "s2", 0), Tier::Ask);
    assert_eq!(ask(&call, "s1", 1_000), Tier::Ask);
    assert_eq!(
        ask(&connect("example.com", 8443, "network"), "s1", 0),
        Tier::Ask
    );
    assert_eq!(
        ask(&connect("www.example.com", 443, "network"), "s1", 0),
        Tier::Ask
    );
    assert_eq!(
        ask(&connect("example.com", 443, "other"), "s1", 0),
        Tier::Ask
    );
    let mut udp = call.clone();
    udp.protocol = Some("udp".into());
    assert_eq!(ask(&udp, "s1", 0), Tier::Ask);
}

#[test]
fn a_learned_destination_never_lifts_a_deny_or_a_new_reason_to_ask() {
    let learned_under = Policy::from_toml(NET_POLICY).unwrap();
    let call = connect("example.com", 443, "network");
    let p = propose(&call, &learned_under.classify(&call, &ctx("s1"))).unwrap();
    let set = LearnedSet::new(1, vec![rule(p, Scope::All, None)]);

    // The document later denies it, or asks about it for another reason.
    let denied = Policy::from_toml(&format!(
        "{NET_POLICY}\n[[network]]\nid = \"no-example\"\ndecision = \"deny\"\nreason = \"r\"\nhosts = [\"example.com\"]\nports = [443]\n"
    ))
    .unwrap();
    assert_eq!(
        connect_with(&set, &denied, &call, "s1", 0),
        (Tier::Deny, "no-example".into())
    );
    let stricter = Policy::from_toml(&format!(
        "{NET_POLICY}\n[[network]]\nid = \"tls-review\"\ndecision = \"ask\"\nreason = \"r\"\nhosts = [\"*\"]\nports = [443]\n"
    ))
    .unwrap();
    assert_eq!(connect_with(&set, &stricter, &call, "s1", 0).0, Tier::Ask);
    // A command rule's set does not lift connections, nor a destination rule commands.
    assert_eq!(
        tier_with(
            &set,
            &Policy::builtin_default(),
            "git push origin main",
            "s1",
            0
        ),
        Tier::Ask
    );
}

#[test]
fn only_an_asked_named_destination_is_learnable() {
    let policy = Policy::builtin_default();
    // A denied address, a metadata name, an allowed registry.
    let refused = |c: &ToolCall| propose(c, &policy.classify(c, &ctx("s1"))).unwrap_err();
    assert!(matches!(
        refused(&connect("169.254.169.254", 80, "network")),
        Refusal::Denied { .. }
    ));
    assert!(matches!(
        refused(&connect("metadata.google.internal", 80, "network")),
        Refusal::Denied { .. }
    ));
    assert!(matches!(
        refused(&connect("pypi.org", 443, "network")),
        Refusal::NotLearnable { .. }
    ));
    // An address the policy asks about is still not learned: rules hold names.
    let asks_ips = Policy::from_toml(
        "[[network]]\nid = \"ask-net\"\ndecision = \"ask\"\nreason = \"r\"\nhosts = [\"192.0.2.0/24\"]\n",
    )
    .unwrap();
    let ip = connect("192.0.2.7", 443, "network");
    let d = asks_ips.classify(&ip, &ctx("s1"));
    assert_eq!(d.tier, Tier::Ask);
    let e = propose(&ip, &d).unwrap_err();
    assert!(e.to_string().contains("not a host name"), "{e}");
    // An unlisted name asks by the network default, and that is what the rule lifts.
    let c = connect("example.org", 443, "network");
    let Pattern::Destination(d) = propose(&c, &policy.classify(&c, &ctx("s1"))).unwrap() else {
        panic!("not a destination")
    };
    assert_eq!(d.lifts, ["default"]);
    // A stored form that is not a name, or lifts nothing, is refused (the rule is ignored).
    let bad = |host: &str, lifts: &str| {
        Pattern::decode(&format!(
            r#"{{"v":1,"kind":"destination","host":"{host}","port":443,"protocol":"tcp","profile":"network","lifts":{lifts}}}"#
        ))
    };
    assert!(bad("example.org", r#"["default"]"#).is_ok());
    assert!(bad("Example.org", r#"["default"]"#).is_err());
    assert!(bad("10.0.0.1", r#"["default"]"#).is_err());
    assert!(bad("example.org", "[]").is_err());
    assert!(Pattern::decode(r#"{"v":1,"kind":"other"}"#).is_err());
}
