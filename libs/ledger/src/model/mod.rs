//! Domain types the ledger stores and returns: validated at construction, never wire types.

mod approval;
mod audit;
mod decision;
mod ids;
mod learned;
mod outcome;
mod query;
mod session;
#[cfg(test)]
mod tests;
mod timestamp;

pub use approval::{Approval, ApprovalState, Decide, Lease, LeaseToken, Scope, Verdict};
pub use audit::{BrokenLink, Change, Cursor, SweepReport, VerifyReport};
pub use decision::{
    AllowedState, AskOutcome, AskRequest, AskVerdict, DecisionRecord, NewDecision, NotStarted,
    Recorded,
};
pub use ids::{
    ApprovalId, CallId, DecisionId, LearnedRuleId, PolicyVersion, Principal, RequestDigest, RuleId,
    SessionId, TraceId,
};
pub use learned::{LearnedRuleRecord, LearnedRules, NewLearnedRule};
pub use outcome::{ExecutorRecord, ExitStatus, NewOutcome, OutcomeRecord};
pub use query::{ApprovalFilter, CallRecord, Page, PageToken};
pub use session::{
    Abandoned, ClaimSession, Claimed, Session, SessionFilter, SessionHolder, SessionState,
};
pub use timestamp::Timestamp;

pub(crate) use ids::random_token;
