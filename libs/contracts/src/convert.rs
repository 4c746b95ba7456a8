//! Conversions between wire enums and domain enums.

use toolgate_core::{Tier, ToolKind};

use crate::common::v1 as pb;

/// Domain tool kind to wire.
pub fn tool_to_wire(k: ToolKind) -> pb::ToolKind {
    match k {
        ToolKind::FsRead => pb::ToolKind::FsRead,
        ToolKind::FsWrite => pb::ToolKind::FsWrite,
        ToolKind::FsEdit => pb::ToolKind::FsEdit,
        ToolKind::FsList => pb::ToolKind::FsList,
        ToolKind::FsSearch => pb::ToolKind::FsSearch,
        ToolKind::FsFind => pb::ToolKind::FsFind,
        ToolKind::FsMkdir => pb::ToolKind::FsMkdir,
        ToolKind::FsStat => pb::ToolKind::FsStat,
        ToolKind::ProcessRun => pb::ToolKind::ProcessRun,
    }
}

/// Wire tool kind to domain; `None` for unspecified or unknown values.
pub fn tool_from_wire(v: i32) -> Option<ToolKind> {
    Some(match pb::ToolKind::try_from(v).ok()? {
        pb::ToolKind::Unspecified => return None,
        pb::ToolKind::FsRead => ToolKind::FsRead,
        pb::ToolKind::FsWrite => ToolKind::FsWrite,
        pb::ToolKind::FsEdit => ToolKind::FsEdit,
        pb::ToolKind::FsList => ToolKind::FsList,
        pb::ToolKind::FsSearch => ToolKind::FsSearch,
        pb::ToolKind::FsFind => ToolKind::FsFind,
        pb::ToolKind::FsMkdir => ToolKind::FsMkdir,
        pb::ToolKind::FsStat => ToolKind::FsStat,
        pb::ToolKind::ProcessRun => ToolKind::ProcessRun,
    })
}

/// Domain tier to wire.
pub fn tier_to_wire(t: Tier) -> pb::Tier {
    match t {
        Tier::Auto => pb::Tier::Auto,
        Tier::Ask => pb::Tier::Ask,
        Tier::Deny => pb::Tier::Deny,
    }
}

/// Wire tier to domain; `None` for unspecified or unknown values.
pub fn tier_from_wire(v: i32) -> Option<Tier> {
    Some(match pb::Tier::try_from(v).ok()? {
        pb::Tier::Unspecified => return None,
        pb::Tier::Auto => Tier::Auto,
        pb::Tier::Ask => Tier::Ask,
        pb::Tier::Deny => Tier::Deny,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_kinds_round_trip() {
        for k in ToolKind::ALL {
            assert_eq!(tool_from_wire(tool_to_wire(*k) as i32), Some(*k));
        }
        assert_eq!(tool_from_wire(0), None);
        assert_eq!(tool_from_wire(999), None);
    }

    #[test]
    fn tiers_round_trip() {
        for t in [Tier::Auto, Tier::Ask, Tier::Deny] {
            assert_eq!(tier_from_wire(tier_to_wire(t) as i32), Some(t));
        }
    }
}
