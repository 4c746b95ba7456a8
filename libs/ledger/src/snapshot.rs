//! What a transaction that changes an approval announces on [`crate::db::STATES`]: the
//! columns that change after creation, so a woken waiter applies them to the row it already
//! read instead of reading it again.

use crate::model::{Approval, ApprovalState, CallId, LeaseToken, Principal, Scope, Timestamp};

/// Postgres refuses a NOTIFY payload of 8 000 bytes or more; a larger snapshot is not sent
/// and its waiters read the row instead.
pub(crate) const MAX_PAYLOAD: usize = 7_900;

/// The columns of an approval that change after it is created, as committed by one
/// transaction: with the row a waiter read while it was pending, the approval as it is now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    state: ApprovalState,
    scope: Scope,
    expires_at: Timestamp,
    decided_by: Option<Principal>,
    decided_at: Option<Timestamp>,
    reason: Option<String>,
    message: Option<String>,
    consumed_by_call: Option<CallId>,
    consumed_by_executor: Option<String>,
    consumed_at: Option<Timestamp>,
    lease_token: Option<LeaseToken>,
    lease_expires_at: Option<Timestamp>,
    closed_at: Option<Timestamp>,
}

/// The wire form of a snapshot: a JSON array led by the approval id.
type Wire = (
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

impl Snapshot {
    /// The approval's state after the transaction.
    pub(crate) fn state(&self) -> ApprovalState {
        self.state
    }

    pub(crate) fn of(a: &Approval) -> Self {
        Snapshot {
            state: a.state,
            scope: a.scope,
            expires_at: a.expires_at,
            decided_by: a.decided_by.clone(),
            decided_at: a.decided_at,
            reason: a.reason.clone(),
            message: a.message.clone(),
            consumed_by_call: a.consumed_by_call.clone(),
            consumed_by_executor: a.consumed_by_executor.clone(),
            consumed_at: a.consumed_at,
            lease_token: a.lease_token,
            lease_expires_at: a.lease_expires_at,
            closed_at: a.closed_at,
        }
    }

    /// The NOTIFY payload for approval `id`, or `None` when it would be too long to send.
    pub(crate) fn encode(&self, id: &str) -> Option<String> {
        let wire: Wire = (
            id.to_owned(),
            self.state.as_str().to_owned(),
            self.scope.as_str().to_owned(),
            self.expires_at.as_micros(),
            self.decided_by.as_ref().map(|p| p.as_str().to_owned()),
            self.decided_at.map(Timestamp::as_micros),
            self.reason.clone(),
            self.message.clone(),
            self.consumed_by_call
                .as_ref()
                .map(|c| c.as_str().to_owned()),
            self.consumed_by_executor.clone(),
            self.consumed_at.map(Timestamp::as_micros),
            self.lease_token.map(LeaseToken::get),
            self.lease_expires_at.map(Timestamp::as_micros),
            self.closed_at.map(Timestamp::as_micros),
        );
        serde_json::to_string(&wire)
            .ok()
            .filter(|p| p.len() < MAX_PAYLOAD)
    }

    /// The approval id and snapshot a payload of [`Snapshot::encode`] carries; `None` for
    /// anything else (its waiters then read the row).
    pub(crate) fn decode(payload: &str) -> Option<(String, Self)> {
        let w: Wire = serde_json::from_str(payload).ok()?;
        let snapshot = Snapshot {
            state: w.1.parse().ok()?,
            scope: w.2.parse().ok()?,
            expires_at: Timestamp::from_micros(w.3),
            decided_by: w.4.map(Principal::try_from).transpose().ok()?,
            decided_at: w.5.map(Timestamp::from_micros),
            reason: w.6,
            message: w.7,
            consumed_by_call: w.8.map(CallId::try_from).transpose().ok()?,
            consumed_by_executor: w.9,
            consumed_at: w.10.map(Timestamp::from_micros),
            lease_token: w.11.map(LeaseToken),
            lease_expires_at: w.12.map(Timestamp::from_micros),
            closed_at: w.13.map(Timestamp::from_micros),
        };
        Some((w.0, snapshot))
    }

    /// `a` (read earlier, same id) as this snapshot says it is now.
    pub(crate) fn apply(&self, a: &mut Approval) {
        let s = self.clone();
        a.state = s.state;
        a.scope = s.scope;
        a.expires_at = s.expires_at;
        a.decided_by = s.decided_by;
        a.decided_at = s.decided_at;
        a.reason = s.reason;
        a.message = s.message;
        a.consumed_by_call = s.consumed_by_call;
        a.consumed_by_executor = s.consumed_by_executor;
        a.consumed_at = s.consumed_at;
        a.lease_token = s.lease_token;
        a.lease_expires_at = s.lease_expires_at;
        a.closed_at = s.closed_at;
    }
}
