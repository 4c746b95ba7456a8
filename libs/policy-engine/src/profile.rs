//! What the policy knows of the sandbox profile a run executes under: its guarantees.
//!
//! The executor resolves a run's profile name before it asks (the name is part of the
//! request digest). The policy decides with the guarantees that name stands for: the shipped
//! ones for `workspace`, `readonly` and `network` (the executor refuses a configuration that
//! redefines those names more weakly), plus any `[profiles.<name>]` the document declares. A
//! name it does not know, or no name at all, gets no guarantee: today's strictness.

use std::collections::BTreeMap;

use crate::baseline::Containment;

/// What the kernel sandbox of one profile guarantees a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guarantees {
    /// The run is confined: it sees the workspace, the system read-only and private `/tmp`,
    /// `HOME`, `/dev` and `/proc`, nothing else of the host; the protected set and the
    /// policy's denied paths are read-only or masked; resources are limited.
    pub confined: bool,
    /// The run can reach the network (`false`: only its own loopback).
    pub network: bool,
    /// The run reaches the network only through the executor's egress gate, which asks the
    /// policy about every destination (`net.connect`, decided by the `[[network]]` rules):
    /// what code does with the network is then decided per destination, so code is
    /// contained as under no network.
    pub egress_gated: bool,
    /// The workspace is read-only too, so nothing in it can be destroyed.
    pub read_only_workspace: bool,
}

impl Guarantees {
    /// No guarantee at all: an unknown or unconfined profile.
    pub const NONE: Guarantees = Guarantees {
        confined: false,
        network: true,
        egress_gated: false,
        read_only_workspace: false,
    };

    /// Whether a rule with this containment class is contained under these guarantees.
    pub fn contains(self, c: Containment) -> bool {
        self.confined
            && match c {
                Containment::Never => false,
                Containment::Filesystem => true,
                Containment::Code => self.network_decided(),
                Containment::Destruction => self.network_decided() && self.read_only_workspace,
            }
    }

    /// Whether every connection the run could make is decided by the policy: no network, or
    /// only through the egress gate.
    fn network_decided(self) -> bool {
        !self.network || self.egress_gated
    }

    /// Whether code nothing else speaks about (an unknown program, a write nothing names)
    /// is contained: its effects stay in the view and cannot leave over the network.
    pub fn contains_code(self) -> bool {
        self.contains(Containment::Code)
    }

    /// Whether these guarantees are at least as strong as `other`'s.
    pub fn at_least(self, other: Guarantees) -> bool {
        (self.confined || !other.confined)
            && (!self.network || other.network)
            && (self.network_decided() || !other.network_decided())
            && (self.read_only_workspace || !other.read_only_workspace)
    }

    /// The guarantees as a phrase for explanations.
    pub fn describe(self) -> String {
        if !self.confined {
            return "not confined".to_owned();
        }
        format!(
            "the host hidden but the system read-only, the protected set read-only, {}, {}",
            if self.read_only_workspace {
                "the workspace read-only"
            } else {
                "writes confined to the workspace and private /tmp and HOME"
            },
            match (self.network, self.egress_gated) {
                (false, _) => "no network",
                (true, true) =>
                    "network only through the egress gate, each destination decided by the policy",
                (true, false) => "network reachable",
            }
        )
    }
}

/// The profiles every policy knows, as the executor ships them.
pub fn builtin() -> BTreeMap<String, Guarantees> {
    let workspace = Guarantees {
        confined: true,
        network: false,
        egress_gated: false,
        read_only_workspace: false,
    };
    BTreeMap::from([
        ("workspace".to_owned(), workspace),
        (
            "readonly".to_owned(),
            Guarantees {
                read_only_workspace: true,
                ..workspace
            },
        ),
        (
            "network".to_owned(),
            Guarantees {
                network: true,
                egress_gated: true,
                ..workspace
            },
        ),
    ])
}

/// The profile a decision was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidedProfile {
    /// The profile name; `None` when the call named none.
    pub name: Option<String>,
    /// Its guarantees ([`Guarantees::NONE`] when the policy does not know the name).
    pub guarantees: Guarantees,
    /// Whether the policy knows the name (shipped or declared in the document).
    pub known: bool,
}

impl DecidedProfile {
    /// The rule id containment is reported under: `sandbox.<name>`.
    pub fn rule_id(&self) -> String {
        format!("sandbox.{}", self.name.as_deref().unwrap_or("none"))
    }

    /// The reason containment is reported with.
    pub fn reason(&self) -> String {
        format!(
            "contained by the {} sandbox ({}): what the run does stays inside it",
            self.name.as_deref().unwrap_or("unnamed"),
            self.guarantees.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_follows_the_guarantees() {
        let b = builtin();
        let ws = b["workspace"];
        let ro = b["readonly"];
        let net = b["network"];
        assert!(ws.contains(Containment::Code) && ws.contains(Containment::Filesystem));
        assert!(!ws.contains(Containment::Destruction) && !ws.contains(Containment::Never));
        assert!(ro.contains(Containment::Destruction));
        // `network` reaches out only through the egress gate: code is contained, every
        // destination is a `net.connect` decision.
        assert!(net.contains(Containment::Code) && net.contains(Containment::Filesystem));
        assert!(!net.contains(Containment::Destruction));
        let open = Guarantees {
            egress_gated: false,
            ..net
        };
        assert!(!open.contains(Containment::Code) && open.contains(Containment::Filesystem));
        assert!(net.at_least(open) && !open.at_least(net));
        assert!(!Guarantees::NONE.contains(Containment::Filesystem));
        assert!(ro.at_least(ws) && !ws.at_least(ro) && ws.at_least(net) && !net.at_least(ws));
        assert!(ws.at_least(Guarantees::NONE) && !Guarantees::NONE.at_least(ws));
    }
}
