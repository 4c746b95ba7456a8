//! Reading the ledger back: one call's whole record, approval filters and keyset pages.

use super::{
    Approval, ApprovalId, ApprovalState, DecisionRecord, OutcomeRecord, Principal, SessionId,
    Timestamp,
};
use crate::error::{Error, Result};

/// Everything known about one call id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// Its decision.
    pub decision: DecisionRecord,
    /// Its approval, for `ask`.
    pub approval: Option<Approval>,
    /// Its outcome, once reported.
    pub outcome: Option<OutcomeRecord>,
}

/// Filters for listing approvals; `None` matches everything.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Only this state.
    pub state: Option<ApprovalState>,
    /// Only this session.
    pub session_id: Option<SessionId>,
    /// Only this requester.
    pub principal: Option<Principal>,
}

impl ApprovalFilter {
    /// Whether an approval passes the filter.
    pub fn matches(&self, a: &Approval) -> bool {
        self.state.is_none_or(|s| s == a.state)
            && self.session_id.as_ref().is_none_or(|s| *s == a.session_id)
            && self.principal.as_ref().is_none_or(|p| *p == a.principal)
    }
}

/// An opaque keyset pagination token (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken(String);

impl PageToken {
    pub(crate) fn new(created_at: Timestamp, id: &ApprovalId) -> Self {
        PageToken(format!("{}.{}", created_at.as_micros(), id.as_str()))
    }

    pub(crate) fn parts(&self) -> Result<(i64, &str)> {
        let bad = || Error::invalid("page_token", "not a token returned by a previous list call");
        let (t, id) = self.0.split_once('.').ok_or_else(bad)?;
        Ok((t.parse().map_err(|_| bad())?, id))
    }

    /// The token that continues a listing right after `last` (newest first), for callers
    /// that filter a page further and stop part-way through it.
    pub fn after(last: &Approval) -> Self {
        PageToken::new(last.created_at, &last.id)
    }

    /// The token as text for the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PageToken {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        let t = PageToken(s);
        t.parts()?;
        Ok(t)
    }
}

/// One page of results.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The items, newest first.
    pub items: Vec<T>,
    /// Pass back to get the next page; `None` at the end.
    pub next: Option<PageToken>,
}
