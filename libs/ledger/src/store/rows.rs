//! Rows and their columns: SQL fragments, conversions between rows and the model, and the
//! audit events each change appends.

use super::*;

pub(crate) const D_COLS: &str = "id, call_id, session_id, principal, tool, request_digest, request_json, tier, \
     rule_ids, policy_version, trace_id, approval_id, created_at, allowed_at, executor, executor_reported, \
     lease_expires_at";
pub(crate) const A_COLS: &str = "id, call_id, session_id, principal, tool, request_digest, policy_version, \
     request_json, explanation_json, state, scope, created_at, expires_at, decided_by, decided_at, reason, message, \
     consumed_by_call, consumed_by_executor, consumed_at, lease_token, lease_expires_at, closed_at, trace_id";
pub(crate) const O_COLS: &str = "decision_id, approval_id, executor_pod, executor_node, executor_namespace, \
     executor_image, started_at, finished_at, exit_kind, exit_value, stdout_bytes, stderr_bytes, stdout_truncated, \
     stderr_truncated, error, recorded_at, isolation, executor_principal";

/// `$1, $2, ... $n`.
pub(super) fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn prefixed(prefix: &str, cols: &str) -> String {
    cols.split(',')
        .map(|c| format!("{prefix}{}", c.trim()))
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

pub(crate) fn decision_from(r: &Row, o: usize) -> Result<Decision> {
    let rules: String = r.get(o + 8)?;
    Ok(Decision {
        id: parse_id(r.get(o)?)?,
        call_id: parse_id(r.get(o + 1)?)?,
        session_id: parse_id(r.get(o + 2)?)?,
        principal: parse_id(r.get(o + 3)?)?,
        tool: r
            .get::<String>(o + 4)?
            .parse::<ToolKind>()
            .map_err(Error::Corrupt)?,
        digest: RequestDigest::try_from(r.get::<String>(o + 5)?.as_str())
            .map_err(|e| Error::Corrupt(e.to_string()))?,
        request_json: r.get(o + 6)?,
        tier: r
            .get::<String>(o + 7)?
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
        policy_version: parse_id(r.get(o + 9)?)?,
        trace_id: opt_id(r.get(o + 10)?)?,
        approval_id: opt_id(r.get(o + 11)?)?,
        created_at: ts(r.get(o + 12)?),
        allowed_at: ots(r.get(o + 13)?),
        executor: opt_id(r.get(o + 14)?)?,
        executor_reported: r.get(o + 15)?,
        lease_expires_at: ots(r.get(o + 16)?),
    })
}

pub(super) fn decision_args(d: &Decision) -> Vec<Arg> {
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
    ]
}

pub(super) fn rules_text(d: &Decision) -> String {
    d.rule_ids
        .iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn approval_from(r: &Row, o: usize) -> Result<Approval> {
    Ok(Approval {
        id: parse_id(r.get(o)?)?,
        call_id: parse_id(r.get(o + 1)?)?,
        session_id: parse_id(r.get(o + 2)?)?,
        principal: parse_id(r.get(o + 3)?)?,
        tool: r
            .get::<String>(o + 4)?
            .parse::<ToolKind>()
            .map_err(Error::Corrupt)?,
        digest: RequestDigest::try_from(r.get::<String>(o + 5)?.as_str())
            .map_err(|e| Error::Corrupt(e.to_string()))?,
        policy_version: parse_id(r.get(o + 6)?)?,
        request_json: r.get(o + 7)?,
        explanation_json: r.get(o + 8)?,
        state: r
            .get::<String>(o + 9)?
            .parse()
            .map_err(|e: Error| Error::Corrupt(e.to_string()))?,
        scope: r
            .get::<String>(o + 10)?
            .parse()
            .map_err(|e: Error| Error::Corrupt(e.to_string()))?,
        created_at: ts(r.get(o + 11)?),
        expires_at: ts(r.get(o + 12)?),
        decided_by: opt_id(r.get(o + 13)?)?,
        decided_at: ots(r.get(o + 14)?),
        reason: r.get(o + 15)?,
        message: r.get(o + 16)?,
        consumed_by_call: opt_id(r.get(o + 17)?)?,
        consumed_by_executor: r.get(o + 18)?,
        consumed_at: ots(r.get(o + 19)?),
        lease_token: r.get::<Option<i64>>(o + 20)?.map(LeaseToken),
        lease_expires_at: ots(r.get(o + 21)?),
        closed_at: ots(r.get(o + 22)?),
        trace_id: opt_id(r.get(o + 23)?)?,
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

pub(crate) fn outcome_from(r: &Row, o: usize) -> Result<Outcome> {
    let exit_kind: String = r.get(o + 8)?;
    let count = |i: usize| -> Result<u64> {
        let v: i64 = r.get(i)?;
        u64::try_from(v).map_err(|_| Error::Corrupt(format!("negative byte count {v}")))
    };
    Ok(Outcome {
        decision_id: parse_id(r.get(o)?)?,
        approval_id: opt_id(r.get(o + 1)?)?,
        executor: ExecutorIdentity {
            pod: r.get(o + 2)?,
            node: r.get(o + 3)?,
            namespace: r.get(o + 4)?,
            image: r.get(o + 5)?,
        },
        started_at: ts(r.get(o + 6)?),
        finished_at: ts(r.get(o + 7)?),
        exit: ExitStatus::from_parts(&exit_kind, r.get(o + 9)?)?,
        stdout_bytes: count(o + 10)?,
        stderr_bytes: count(o + 11)?,
        stdout_truncated: r.get::<i64>(o + 12)? != 0,
        stderr_truncated: r.get::<i64>(o + 13)? != 0,
        error: r.get(o + 14)?,
        recorded_at: ts(r.get(o + 15)?),
        isolation: r.get(o + 16)?,
        executor_principal: opt_id(r.get(o + 17)?)?,
    })
}

pub(super) fn outcome_args(o: &Outcome) -> Vec<Arg> {
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
    ]
}

pub(super) fn ev_decision(kind: &str, d: &Decision) -> Event {
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

pub(super) fn ev_outcome(kind: &str, o: &Outcome) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: canon::outcome_subject(o),
        payload: canon::outcome(kind, o),
    }
}
