//! `[[network]]` rules deciding `net.connect` calls: host globs, ports, protocols, selectors,
//! the most restrictive match, the network default, `denied_hosts`, and the shipped defaults.

use std::collections::BTreeMap;
use std::time::Instant;

use toolgate_core::{Tier, ToolKind};
use toolgate_policy_engine::{CallContext, Decision, Policy, ToolCall};

fn connect(host: &str, port: u32, profile: Option<&str>) -> ToolCall {
    ToolCall {
        host: Some(host.to_owned()),
        port: Some(port),
        protocol: Some("tcp".to_owned()),
        sandbox_profile: profile.map(str::to_owned),
        ..ToolCall::new(ToolKind::NetConnect)
    }
}

fn ctx(principal: &str) -> CallContext {
    CallContext {
        session_id: "s1".to_owned(),
        principal: principal.to_owned(),
        labels: BTreeMap::from([("env".to_owned(), "dev".to_owned())]),
    }
}

fn decide(p: &Policy, host: &str, port: u32) -> Decision {
    p.classify(&connect(host, port, Some("network")), &ctx("agent"))
}

fn ids(d: &Decision) -> Vec<&str> {
    d.matches.iter().map(|m| m.rule_id.as_str()).collect()
}

const DOC: &str = r#"
[[network]]
id = "corp"
decision = "auto"
reason = "the company's services"
hosts = ["*.corp.example", "corp.example"]
ports = [443, "8000-8099"]

[[network]]
id = "corp-admin"
decision = "deny"
reason = "the admin plane is off limits"
hosts = ["admin.corp.example"]

[[network]]
id = "dns-over-udp"
decision = "auto"
reason = "resolvers"
hosts = ["dns.corp.example"]
protocol = "udp"

[[network]]
id = "lab"
decision = "auto"
reason = "only the lab's runs reach the lab"
hosts = ["lab.example"]
profiles = ["lab"]
principals = ["agent"]
labels = { env = "dev" }

[[network]]
id = "private"
decision = "deny"
reason = "private networks"
hosts = ["10.0.0.0/8", "fd00::/8"]
"#;

#[test]
fn the_most_restrictive_matching_rule_decides() {
    let p = Policy::from_toml(DOC).unwrap();
    let d = decide(&p, "api.corp.example", 443);
    assert_eq!((d.tier, ids(&d)), (Tier::Auto, vec!["corp"]));
    assert!(d.message.contains("(corp)"), "{}", d.message);
    // Overlapping rules: the subdomain glob allows, the exact deny wins.
    let d = decide(&p, "admin.corp.example", 443);
    assert_eq!(d.tier, Tier::Deny);
    assert_eq!(ids(&d), vec!["corp", "corp-admin"]);
    assert!(
        d.message
            .contains("connection to admin.corp.example:443 (tcp)"),
        "{}",
        d.message
    );
    // Ports: a range, its ends, outside it.
    for (port, tier) in [
        (8000, Tier::Auto),
        (8099, Tier::Auto),
        (8100, Tier::Ask),
        (80, Tier::Ask),
    ] {
        assert_eq!(decide(&p, "corp.example", port).tier, tier, "port {port}");
    }
    // Nothing matches: the network default (ask), named in the explanation.
    let d = decide(&p, "example.org", 443);
    assert_eq!((d.tier, ids(&d)), (Tier::Ask, vec!["default"]));
}

#[test]
fn hostile_spellings_of_a_host_do_not_slip_past_the_rules() {
    let p = Policy::from_toml(DOC).unwrap();
    // Case and one trailing dot are how DNS spells the same name.
    for h in [
        "ADMIN.corp.example",
        "admin.corp.example.",
        "Admin.Corp.Example.",
    ] {
        assert_eq!(decide(&p, h, 443).tier, Tier::Deny, "{h}");
    }
    // A name that only looks like it belongs is not below the domain.
    for h in [
        "corp.example.evil.org",
        "evilcorp.example",
        "corp.example..",
        "xn--crp-8na.example",
        "cörp.example",
    ] {
        assert_eq!(decide(&p, h, 443).tier, Tier::Ask, "{h}");
    }
    // IP literals match address blocks, however spelled.
    for h in ["10.1.2.3", "::ffff:10.1.2.3", "[fd12::1]", "FD12::1"] {
        assert_eq!(decide(&p, h, 443).tier, Tier::Deny, "{h}");
    }
    assert_eq!(decide(&p, "11.1.2.3", 443).tier, Tier::Ask);
}

#[test]
fn protocol_profile_and_context_selectors_narrow_a_rule() {
    let p = Policy::from_toml(DOC).unwrap();
    // `protocol = "udp"` is not about TCP connections.
    assert_eq!(decide(&p, "dns.corp.example", 53).tier, Tier::Ask);
    let mut udp = connect("dns.corp.example", 53, Some("network"));
    udp.protocol = Some("udp".to_owned());
    assert_eq!(p.classify(&udp, &ctx("agent")).tier, Tier::Auto);
    // `profiles`, `principals`, `labels` all have to match.
    let lab = connect("lab.example", 443, Some("lab"));
    assert_eq!(p.classify(&lab, &ctx("agent")).tier, Tier::Auto);
    assert_eq!(p.classify(&lab, &ctx("other")).tier, Tier::Ask);
    assert_eq!(decide(&p, "lab.example", 443).tier, Tier::Ask);
    let mut prod = ctx("agent");
    prod.labels.insert("env".to_owned(), "prod".to_owned());
    assert_eq!(p.classify(&lab, &prod).tier, Tier::Ask);
}

#[test]
fn generic_rules_about_net_connect_still_apply() {
    let doc = format!(
        "{DOC}\n[[rule]]\nid = \"no-net-for-intern\"\ndecision = \"deny\"\nreason = \"interns stay offline\"\ntools = [\"net.connect\"]\nprincipals = [\"intern\"]\n"
    );
    let p = Policy::from_toml(&doc).unwrap();
    let call = connect("api.corp.example", 443, Some("network"));
    let d = p.classify(&call, &ctx("intern"));
    assert_eq!(d.tier, Tier::Deny);
    assert!(ids(&d).contains(&"no-net-for-intern"), "{:?}", ids(&d));
    assert_eq!(p.classify(&call, &ctx("agent")).tier, Tier::Auto);
    // Every host is denied to the intern's runs: the gate's DNS may refuse all names.
    assert_eq!(p.denied_hosts(Some("network"), &ctx("intern")), vec!["*"]);
    // A rule naming no tools makes connections stricter, never looser: a blanket `auto`
    // written for commands and files does not open the network, a blanket `ask` does ask.
    let blanket = |tier: &str| {
        Policy::from_toml(&format!(
            "[[rule]]\nid = \"all\"\ndecision = \"{tier}\"\nreason = \"r\"\nprincipals = [\"agent\"]\n"
        ))
        .unwrap()
        .classify(&connect("example.org", 443, Some("network")), &ctx("agent"))
    };
    let d = blanket("auto");
    assert_eq!((d.tier, ids(&d)), (Tier::Ask, vec!["default"]));
    let d = blanket("deny");
    assert_eq!((d.tier, ids(&d)), (Tier::Deny, vec!["all"]));
}

#[test]
fn the_network_default_asks_unless_configured() {
    let call = connect("example.org", 443, None);
    let tier = |doc: &str| {
        Policy::from_toml(doc)
            .unwrap()
            .classify(&call, &ctx("a"))
            .tier
    };
    assert_eq!(tier(""), Tier::Ask);
    // `default = "auto"` is about commands and files, not a licence to reach any host.
    assert_eq!(tier("default = \"auto\"\n"), Tier::Ask);
    assert_eq!(tier("default = \"deny\"\n"), Tier::Deny);
    assert_eq!(tier("network_default = \"auto\"\n"), Tier::Auto);
    assert_eq!(tier("network_default = \"deny\"\n"), Tier::Deny);
    let e = Policy::from_toml("network_default = \"maybe\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("network_default"), "{e}");
}

#[test]
fn denied_hosts_are_the_names_denied_on_every_port() {
    let doc = format!(
        "{DOC}\n[[network]]\nid = \"no-smtp\"\ndecision = \"deny\"\nreason = \"mail\"\nhosts = [\"*.mail.example\"]\nports = [25]\n\n[[network]]\nid = \"lab-only-deny\"\ndecision = \"deny\"\nreason = \"lab\"\nhosts = [\"secret.example\"]\nprofiles = [\"lab\"]\n"
    );
    let p = Policy::from_toml(&doc).unwrap();
    // Address blocks are not names; a port-limited deny is not every port; a deny for
    // another profile is not this run's.
    assert_eq!(
        p.denied_hosts(Some("network"), &ctx("agent")),
        vec!["admin.corp.example"]
    );
    assert_eq!(
        p.denied_hosts(Some("lab"), &ctx("agent")),
        vec!["admin.corp.example", "secret.example"]
    );
}

#[test]
fn bad_network_rules_are_rejected_naming_the_field() {
    let rule = |body: &str| {
        Policy::from_toml(&format!(
            "[[network]]\nid = \"n\"\ndecision = \"ask\"\nreason = \"r\"\n{body}"
        ))
        .map(|_| ())
        .unwrap_err()
        .to_string()
    };
    for (body, want) in [
        ("hosts = [\"Example.com\"]\n", "hosts: host `Example.com`"),
        ("hosts = [\"example.com.\"]\n", "trailing dot"),
        ("hosts = [\"*.*.com\"]\n", "first label"),
        ("hosts = []\n", "`hosts` is empty"),
        ("", "needs `hosts`"),
        ("hosts = [\"a.com\"]\nports = []\n", "`ports` is empty"),
        (
            "hosts = [\"a.com\"]\nports = [0]\n",
            "ports: `0` is not a port",
        ),
        (
            "hosts = [\"a.com\"]\nports = [\"90-80\"]\n",
            "ports: `90-80`",
        ),
        (
            "hosts = [\"a.com\"]\nprotocol = \"icmp\"\n",
            "`protocol` must be",
        ),
        (
            "hosts = [\"a.com\"]\nprofiles = []\n",
            "`profiles` is empty",
        ),
        ("hosts = [\"a.com\"]\nsandbox = \"x\"\n", "unknown field"),
    ] {
        let e = rule(body);
        assert!(e.contains(want), "{body:?}: {e}");
    }
    // Ids are shared with `[[rule]]`s: the ledger names a rule by its id alone.
    let e = Policy::from_toml(
        "[[rule]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\n[[network]]\nid = \"x\"\ndecision = \"ask\"\nreason = \"r\"\nhosts = [\"*\"]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("duplicate rule id"), "{e}");
    // The ids the engine reports itself cannot be taken by either kind of rule.
    for (table, extra) in [("network", "hosts = [\"*\"]\n"), ("rule", "")] {
        for id in ["sandbox.network", "baseline.x", "default"] {
            let e = Policy::from_toml(&format!(
                "[[{table}]]\nid = \"{id}\"\ndecision = \"auto\"\nreason = \"r\"\n{extra}"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains("reserved"), "{table} {id}: {e}");
        }
    }
}

#[test]
fn shipped_defaults_allow_registries_and_ask_for_the_rest() {
    let p = Policy::builtin_default();
    for h in [
        "registry.npmjs.org",
        "registry.yarnpkg.com",
        "pypi.org",
        "files.pythonhosted.org",
        "crates.io",
        "index.crates.io",
        "static.crates.io",
        "proxy.golang.org",
        "sum.golang.org",
        "repo.maven.apache.org",
        "repo1.maven.org",
        "rubygems.org",
        "index.rubygems.org",
        "api.nuget.org",
    ] {
        assert_eq!(decide(&p, h, 443).tier, Tier::Auto, "{h}");
        // Only on 443, and only for runs under the network profile.
        assert_eq!(decide(&p, h, 80).tier, Tier::Ask, "{h}:80");
        let other = p.classify(&connect(h, 443, Some("workspace")), &ctx("agent"));
        assert_eq!(other.tier, Tier::Ask, "{h} under workspace");
    }
    for h in [
        "example.com",
        "github.com",
        "evil.registry.npmjs.org.attacker.io",
    ] {
        assert_eq!(decide(&p, h, 443).tier, Tier::Ask, "{h}");
    }
    for h in [
        "metadata.google.internal",
        "metadata",
        "instance-data",
        "169.254.169.254",
        "93.184.216.34",
        "::1",
    ] {
        assert_eq!(decide(&p, h, 80).tier, Tier::Deny, "{h}");
    }
    let denied = p.denied_hosts(Some("network"), &ctx("agent"));
    assert!(
        denied.iter().any(|h| h == "metadata.google.internal")
            && !denied.iter().any(|h| h.contains('/')),
        "{denied:?}"
    );
}

/// A policy of `n` network rules, each for one name and one domain.
fn many_rules(n: usize) -> Policy {
    let mut doc = String::new();
    for i in 0..n {
        doc.push_str(&format!(
            "[[network]]\nid = \"r{i}\"\ndecision = \"auto\"\nreason = \"r\"\nhosts = [\"h{i}.example.com\", \"*.d{i}.example.net\"]\nports = [443]\n"
        ));
    }
    Policy::from_toml(&doc).unwrap()
}

/// Time per classification of connections matched by the rules of `p` (best of 5 rounds).
fn per_call(p: &Policy, n: usize) -> std::time::Duration {
    let calls: Vec<ToolCall> = (0..200)
        .map(|i| connect(&format!("x.y.d{}.example.net", i * n / 200), 443, None))
        .collect();
    let c = ctx("agent");
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for call in &calls {
                assert_eq!(p.classify(call, &c).tier, Tier::Auto);
            }
            start.elapsed() / 200
        })
        .min()
        .unwrap()
}

#[test]
fn five_thousand_rules_are_not_scanned_per_call() {
    let small = per_call(&many_rules(50), 50);
    let large = per_call(&many_rules(5_000), 5_000);
    println!("net.connect classification: {small:?} over 50 network rules, {large:?} over 5000");
    // Indexed by name and suffix, a hundred times the rules costs about the same; a scan of
    // every rule would cost about a hundred times more.
    assert!(large < small * 10, "{small:?} vs {large:?}");
}
