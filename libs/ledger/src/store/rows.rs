//! Rows and their columns: SQL fragments, conversions between rows and the model, and the
//! audit events each change appends. Result rows are read by column name, never by position.

use crate::canon;
use crate::db::{Arg, Event, Row, args};
use crate::error::{Error, Result};
use crate::model::{
    Approval, DecisionRecord, ExecutorRecord, ExitStatus, LearnedRuleRecord, LeaseToken,
    OutcomeRecord, RequestDigest, Timestamp,
};
use toolgate_core::{Tier, ToolKind};

/// Declares the columns of one row type once, next to its decoder, as two constants:
///
/// - `$cols`: the table's columns in the order of the row's bind arguments, for INSERT;
/// - `$select`: the same columns for SELECT and RETURNING, each under its result-row name
///   `<prefix><column>` (`id AS approval_id, call_id AS approval_call_id, ...`).
///
/// Decoders read columns by those names only, never by position, so a query may put a row
/// type's columns anywhere in its result; and because every row type has its own prefix, a
/// query that joins two of them needs no aliases of its own.
macro_rules! columns {
    (
        $(#[doc = $doc:literal])*
        $cols:ident, $select:ident = $prefix:literal: [$first:literal $(, $rest:literal)* $(,)?]
    ) => {
        $(#[doc = $doc])*
        pub(crate) const $cols: &str = concat!($first $(, ", ", $rest)*);
        #[doc = concat!("[`", stringify!($cols), "`] under result-row names: `<column> AS ", $prefix, "<column>`.")]
        pub(crate) const $select: &str =
            concat!($first, " AS ", $prefix, $first $(, ", ", $rest, " AS ", $prefix, $rest)*);
    };
}

columns! {
    /// `tg_decisions`, read by [`decision_from`] and written from [`decision_args`].
    D_COLS, D_SELECT = "decision_": [
        "id", "call_id", "session_id", "principal", "tool", "request_digest", "request_json", "tier",
        "rule_ids", "policy_version", "trace_id", "approval_id", "created_at", "allowed_at", "executor",
        "executor_reported", "lease_expires_at", "released_at", "release_reason",
    ]
}

columns! {
    /// `tg_approvals`, read by [`approval_from`] and written from [`approval_args`].
    A_COLS, A_SELECT = "approval_": [
        "id", "call_id", "session_id", "principal", "tool", "request_digest", "policy_version",
        "request_json", "explanation_json", "state", "scope", "created_at", "expires_at", "decided_by",
        "decided_at", "reason", "message", "consumed_by_call", "consumed_by_executor", "consumed_at",
        "lease_token", "lease_expires_at", "closed_at", "trace_id",
    ]
}

columns! {
    /// `tg_outcomes`, read by [`outcome_from`] and written from [`outcome_args`].
    O_COLS, O_SELECT = "outcome_": [
        "decision_id", "approval_id", "executor_pod", "executor_node", "executor_namespace",
        "executor_image", "started_at", "finished_at", "exit_kind", "exit_value", "stdout_bytes",
        "stderr_bytes", "stdout_truncated", "stderr_truncated", "error", "recorded_at", "isolation",
        "executor_principal", "integrity",
    ]
}

/// `$1, $2, ... $n`: one bind placeholder per column of a `*_COLS` list, for its INSERT, so
/// that a new column changes the count here too.
pub(super) fn placeholders(cols: &str) -> String {
    (1..=cols.split(',').count())
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The binding clause: an approval covers only this session, principal, digest and policy version.
pub(super) const BINDING: &str =
    "session_id = $1 AND principal = $2 AND request_digest = $3 AND policy_version = $4";

pub(super) fn parse_id<T: TryFrom<String, Error = Error>>(s: String) -> Result<T> {
    T::try_from(s).map_err(|e| Error::Corrupt(e.to_string()))
}

pub(super) fn opt_id<T: TryFrom<String, Error = Error>>(s: Option<String>) -> Result<Option<T>> {
    s.map(parse_id).transpose()
}

pub(super) fn ts(v: i64) -> Timestamp {
    Timestamp::from_micros(v)
}

pub(super) fn ots(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp::from_micros)
}

/// Reads a decision from a row that selected [`D_SELECT`], wherever in the row it stands.
pub(crate) fn decision_from(r: &Row) -> Result<DecisionRecord> {
    let rules: String = r.get("decision_rule_ids")?;
    Ok(DecisionRecord {
        id: parse_id(r.get("decision_id")?)?,
        call_id: parse_id(r.get("decision_call_id")?)?,
        session_id: parse_id(r.get("decision_session_id")?)?,
        principal: parse_id(r.get("decision_principal")?)?,
        tool: r
            .get::<String>("decision_tool")?
            .parse::<ToolKind>()
            .map_err(Error::Corrupt)?,
        digest: RequestDigest::try_from(r.get::<String>("decision_request_digest")?.as_str())
            .map_err(|e| Error::Corrupt(e.to_string()))?,
        request_json: r.get("decision_request_json")?,
        tier: r
            .get::<String>("decision_tier")?
            .parse::<Tier>()
            .map_err(Error::Corrupt)?,
        rule_ids: if rules.is_empty() {
            Vec::new()
        } else {
            rules
                .split('\n')
                .map(|s| parse_id(s.to_owned()))
                .collect::<Result<_>>()?
        },
        policy_version: parse_id(r.get("decision_policy_version")?)?,
        trace_id: opt_id(r.get("decision_trace_id")?)?,
        approval_id: opt_id(r.get("decision_approval_id")?)?,
        created_at: ts(r.get("decision_created_at")?),
        allowed_at: ots(r.get("decision_allowed_at")?),
        executor: opt_id(r.get("decision_executor")?)?,
        executor_reported: r.get("decision_executor_reported")?,
        lease_expires_at: ots(r.get("decision_lease_expires_at")?),
        released_at: ots(r.get("decision_released_at")?),
        release_reason: r.get("decision_release_reason")?,
    })
}

pub(super) fn decision_args(d: &DecisionRecord) -> Vec<Arg> {
    args![
        d.id.as_str(),
        d.call_id.as_str(),
        d.session_id.as_str(),
        d.principal.as_str(),
        d.tool.as_str(),
        d.digest.to_hex(),
        d.request_json.as_str(),
        d.tier.as_str(),
        rules_text(d),
        d.policy_version.as_str(),
        d.trace_id.as_ref().map(|t| t.as_str()),
        d.approval_id.as_ref().map(|a| a.as_str()),
        d.created_at.as_micros(),
        d.allowed_at.map(Timestamp::as_micros),
        d.executor.as_ref().map(|e| e.as_str()),
        d.executor_reported.clone(),
        d.lease_expires_at.map(Timestamp::as_micros),
        d.released_at.map(Timestamp::as_micros),
        d.release_reason.clone(),
    ]
}

pub(super) fn rules_text(d: &DecisionRecord) -> String {
    d.rule_ids
        .iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads an approval from a row that selected [`A_SELECT`], wherever in the row it stands.
pub(crate) fn approval_from(r: &Row) -> Result<Approval> {
    Ok(Approval {
        id: parse_id(r.get("approval_id")?)?,
        call_id: parse_id(r.get("approval_call_id")?)?,
        session_id: parse_id(r.get("approval_session_id")?)?,
        principal: parse_id(r.get("approval_principal")?)?,
        tool: r
            .get::<String>("approval_tool")?
            .parse::<ToolKind>()
            .map_err(Error::Corrupt)?,
        digest: RequestDigest::try_from(r.get::<String>("approval_request_digest")?.as_str())
            .map_err(|e| Error::Corrupt(e.to_string()))?,
        policy_version: parse_id(r.get("approval_policy_version")?)?,
        request_json: r.get("approval_request_json")?,
        explanation_json: r.get("approval_explanation_json")?,
        state: r
            .get::<String>("approval_state")?
            .parse()
            .map_err(|e: toolgate_core::UnknownApprovalState| Error::Corrupt(e.to_string()))?,
        scope: r
            .get::<String>("approval_scope")?
            .parse()
            .map_err(|e: Error| Error::Corrupt(e.to_string()))?,
        created_at: ts(r.get("approval_created_at")?),
        expires_at: ts(r.get("approval_expires_at")?),
        decided_by: opt_id(r.get("approval_decided_by")?)?,
        decided_at: ots(r.get("approval_decided_at")?),
        reason: r.get("approval_reason")?,
        message: r.get("approval_message")?,
        consumed_by_call: opt_id(r.get("approval_consumed_by_call")?)?,
        consumed_by_executor: r.get("approval_consumed_by_executor")?,
        consumed_at: ots(r.get("approval_consumed_at")?),
        lease_token: r
            .get::<Option<i64>>("approval_lease_token")?
            .map(LeaseToken),
        lease_expires_at: ots(r.get("approval_lease_expires_at")?),
        closed_at: ots(r.get("approval_closed_at")?),
        trace_id: opt_id(r.get("approval_trace_id")?)?,
    })
}

pub(super) fn approval_args(a: &Approval) -> Vec<Arg> {
    args![
        a.id.as_str(),
        a.call_id.as_str(),
        a.session_id.as_str(),
        a.principal.as_str(),
        a.tool.as_str(),
        a.digest.to_hex(),
        a.policy_version.as_str(),
        a.request_json.as_str(),
        a.explanation_json.as_str(),
        a.state.as_str(),
        a.scope.as_str(),
        a.created_at.as_micros(),
        a.expires_at.as_micros(),
        a.decided_by.as_ref().map(|p| p.as_str()),
        a.decided_at.map(Timestamp::as_micros),
        a.reason.clone(),
        a.message.clone(),
        a.consumed_by_call.as_ref().map(|c| c.as_str()),
        a.consumed_by_executor.clone(),
        a.consumed_at.map(Timestamp::as_micros),
        a.lease_token.map(LeaseToken::get),
        a.lease_expires_at.map(Timestamp::as_micros),
        a.closed_at.map(Timestamp::as_micros),
        a.trace_id.as_ref().map(|t| t.as_str()),
    ]
}

/// Reads an outcome from a row that selected [`O_SELECT`], wherever in the row it stands.
pub(crate) fn outcome_from(r: &Row) -> Result<OutcomeRecord> {
    let exit_kind: String = r.get("outcome_exit_kind")?;
    let count = |column: &str| -> Result<u64> {
        let v: i64 = r.get(column)?;
        u64::try_from(v).map_err(|_| Error::Corrupt(format!("negative byte count {v}")))
    };
    Ok(OutcomeRecord {
        decision_id: parse_id(r.get("outcome_decision_id")?)?,
        approval_id: opt_id(r.get("outcome_approval_id")?)?,
        executor: ExecutorRecord {
            pod: r.get("outcome_executor_pod")?,
            node: r.get("outcome_executor_node")?,
            namespace: r.get("outcome_executor_namespace")?,
            image: r.get("outcome_executor_image")?,
        },
        started_at: ts(r.get("outcome_started_at")?),
        finished_at: ts(r.get("outcome_finished_at")?),
        exit: ExitStatus::from_parts(&exit_kind, r.get("outcome_exit_value")?)?,
        stdout_bytes: count("outcome_stdout_bytes")?,
        stderr_bytes: count("outcome_stderr_bytes")?,
        stdout_truncated: r.get::<i64>("outcome_stdout_truncated")? != 0,
        stderr_truncated: r.get::<i64>("outcome_stderr_truncated")? != 0,
        error: r.get("outcome_error")?,
        recorded_at: ts(r.get("outcome_recorded_at")?),
        isolation: r.get("outcome_isolation")?,
        executor_principal: opt_id(r.get("outcome_executor_principal")?)?,
        integrity: r.get("outcome_integrity")?,
    })
}

pub(super) fn outcome_args(o: &OutcomeRecord) -> Vec<Arg> {
    let (kind, value) = o.exit.to_parts();
    args![
        o.decision_id.as_str(),
        o.approval_id.as_ref().map(|a| a.as_str()),
        o.executor.pod.as_str(),
        o.executor.node.as_str(),
        o.executor.namespace.as_str(),
        o.executor.image.as_str(),
        o.started_at.as_micros(),
        o.finished_at.as_micros(),
        kind,
        value,
        o.stdout_bytes as i64,
        o.stderr_bytes as i64,
        i64::from(o.stdout_truncated),
        i64::from(o.stderr_truncated),
        o.error.clone(),
        o.recorded_at.as_micros(),
        o.isolation.clone(),
        o.executor_principal.as_ref().map(|p| p.as_str()),
        o.integrity.clone(),
    ]
}

pub(super) fn ev_decision(kind: &str, d: &DecisionRecord) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: d.id.as_str().to_owned(),
        payload: canon::decision(kind, d),
    }
}

pub(super) fn ev_approval(kind: &str, a: &Approval) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: a.id.as_str().to_owned(),
        payload: canon::approval(kind, a),
    }
}

pub(super) fn ev_outcome(kind: &str, o: &OutcomeRecord) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: canon::outcome_subject(o),
        payload: canon::outcome(kind, o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const ROW_TYPES: [(&str, &str, &str); 3] = [
        (D_COLS, D_SELECT, "decision_"),
        (A_COLS, A_SELECT, "approval_"),
        (O_COLS, O_SELECT, "outcome_"),
    ];

    #[test]
    fn select_lists_name_every_column_with_its_row_prefix() {
        for (cols, select, prefix) in ROW_TYPES {
            let expected: Vec<String> = cols
                .split(", ")
                .map(|c| format!("{c} AS {prefix}{c}"))
                .collect();
            assert_eq!(select.split(", ").collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn placeholders_follow_the_column_list() {
        assert_eq!(placeholders("id, call_id, tier"), "$1, $2, $3");
    }

    #[test]
    fn row_types_share_no_result_name() {
        // So that a query joining any of them needs no aliases of its own.
        let mut seen = HashSet::new();
        for (_, select, _) in ROW_TYPES {
            for column in select.split(", ") {
                let (_, name) = column.split_once(" AS ").expect("every column is aliased");
                assert!(seen.insert(name), "{name} is used by two row types");
            }
        }
    }
}

columns! {
    /// `tg_learned_rules`, read by [`learned_from`].
    L_COLS, L_SELECT = "learned_": [
        "id", "pattern", "display", "scope", "scope_value", "created_by", "created_at",
        "expires_at", "revoked_at", "revoked_by", "source_approval",
    ]
}

pub(crate) fn learned_from(r: &Row) -> Result<LearnedRuleRecord> {
    Ok(LearnedRuleRecord {
        id: parse_id(r.get("learned_id")?)?,
        pattern: r.get("learned_pattern")?,
        display: r.get("learned_display")?,
        scope: r.get("learned_scope")?,
        scope_value: r.get("learned_scope_value")?,
        created_by: parse_id(r.get("learned_created_by")?)?,
        created_at: ts(r.get("learned_created_at")?),
        expires_at: ots(r.get("learned_expires_at")?),
        revoked_at: ots(r.get("learned_revoked_at")?),
        revoked_by: opt_id(r.get("learned_revoked_by")?)?,
        source_approval: parse_id(r.get("learned_source_approval")?)?,
    })
}

pub(super) fn learned_args(r: &LearnedRuleRecord) -> Vec<Arg> {
    args![
        r.id.as_str(),
        r.pattern.as_str(),
        r.display.as_str(),
        r.scope.as_str(),
        r.scope_value.as_str(),
        r.created_by.as_str(),
        r.created_at.as_micros(),
        r.expires_at.map(|t| t.as_micros()),
        r.revoked_at.map(|t| t.as_micros()),
        r.revoked_by.as_ref().map(|p| p.as_str()),
        r.source_approval.as_str(),
    ]
}

pub(super) fn ev_learned(kind: &str, r: &LearnedRuleRecord) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: r.id.as_str().to_owned(),
        payload: canon::learned_rule(kind, r),
    }
}

columns! {
    /// `tg_sessions`, read by `session_from` (in `sessions`).
    S_COLS, S_SELECT = "session_": [
        "session_id", "principal", "executor_id", "executor_reported", "executor_principal", "cwd",
        "env", "created_at", "updated_at", "claim_expires_at", "ended_at", "end_reason",
    ]
}
