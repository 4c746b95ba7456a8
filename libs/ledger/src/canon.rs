//! Canonical bytes of audit events and the sha256 chain over them.
//!
//! The encoding is a private, length-prefixed format rather than JSON so that it
//! stays byte-for-byte stable whatever serde features other crates enable.

use sha2::{Digest as _, Sha256};

use crate::model::{Approval, DecisionRecord, LearnedRuleRecord, OutcomeRecord};

/// The hash that precedes the first event.
pub(crate) const GENESIS: [u8; 32] = [0; 32];

/// One field value.
pub(crate) enum F<'a> {
    S(&'a str),
    I(i64),
    N,
}

impl<'a> From<&'a str> for F<'a> {
    fn from(s: &'a str) -> Self {
        F::S(s)
    }
}

impl<'a> From<Option<&'a str>> for F<'a> {
    fn from(s: Option<&'a str>) -> Self {
        s.map_or(F::N, F::S)
    }
}

impl From<i64> for F<'_> {
    fn from(v: i64) -> Self {
        F::I(v)
    }
}

impl From<Option<i64>> for F<'_> {
    fn from(v: Option<i64>) -> Self {
        v.map_or(F::N, F::I)
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// Encodes an event: its kind, its subject id and the full row it describes.
pub(crate) fn encode(kind: &str, subject: &str, fields: &[(&str, F<'_>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"TGE1");
    put_bytes(&mut out, kind.as_bytes());
    put_bytes(&mut out, subject.as_bytes());
    for (k, v) in fields {
        put_bytes(&mut out, k.as_bytes());
        match v {
            F::S(s) => {
                out.push(b's');
                put_bytes(&mut out, s.as_bytes());
            }
            F::I(i) => {
                out.push(b'i');
                out.extend_from_slice(&i.to_be_bytes());
            }
            F::N => out.push(b'n'),
        }
    }
    out
}

/// The chain link: sha256(prev || seq as 8 big-endian bytes || payload).
///
/// The Postgres backend computes the same in SQL (`sha256(prev || int8send(seq) || payload)`).
pub(crate) fn link(prev: &[u8], seq: u64, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(seq.to_be_bytes());
    h.update(payload);
    h.finalize().into()
}

fn ts(t: Option<crate::model::Timestamp>) -> F<'static> {
    t.map_or(F::N, |t| F::I(t.as_micros()))
}

/// Large texts that never change after insert enter events as their sha256: the
/// event still pins them (any edit changes the digest) without doubling the write volume.
fn text_digest(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// The canonical event for a decision row.
pub(crate) fn decision(kind: &str, d: &DecisionRecord) -> Vec<u8> {
    let rules = d
        .rule_ids
        .iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let digest = d.digest.to_hex();
    let request = text_digest(&d.request_json);
    let mut fields = vec![
        ("call_id", d.call_id.as_str().into()),
        ("session_id", d.session_id.as_str().into()),
        ("principal", d.principal.as_str().into()),
        ("tool", d.tool.as_str().into()),
        ("request_digest", digest.as_str().into()),
        ("request_json_sha256", request.as_str().into()),
        ("tier", d.tier.as_str().into()),
        ("rule_ids", rules.as_str().into()),
        ("policy_version", d.policy_version.as_str().into()),
        ("trace_id", d.trace_id.as_ref().map(|t| t.as_str()).into()),
        (
            "approval_id",
            d.approval_id.as_ref().map(|a| a.as_str()).into(),
        ),
        ("created_at", d.created_at.as_micros().into()),
        ("allowed_at", ts(d.allowed_at)),
    ];
    // Schema 3 added these; a decision without them hashes exactly as before, so chains
    // written by older schemas still verify.
    if let Some(e) = &d.executor {
        fields.push(("executor", e.as_str().into()));
    }
    if let Some(r) = &d.executor_reported {
        fields.push(("executor_reported", r.as_str().into()));
    }
    if let Some(t) = d.lease_expires_at {
        fields.push(("lease_expires_at", t.as_micros().into()));
    }
    // Schema 5, under the same rule.
    if let Some(t) = d.released_at {
        fields.push(("released_at", t.as_micros().into()));
    }
    if let Some(r) = &d.release_reason {
        fields.push(("release_reason", r.as_str().into()));
    }
    encode(kind, d.id.as_str(), &fields)
}

/// The canonical event for an approval row (its full current state).
pub(crate) fn approval(kind: &str, a: &Approval) -> Vec<u8> {
    let digest = a.digest.to_hex();
    let request = text_digest(&a.request_json);
    let explanation = text_digest(&a.explanation_json);
    encode(
        kind,
        a.id.as_str(),
        &[
            ("call_id", a.call_id.as_str().into()),
            ("session_id", a.session_id.as_str().into()),
            ("principal", a.principal.as_str().into()),
            ("tool", a.tool.as_str().into()),
            ("request_digest", digest.as_str().into()),
            ("policy_version", a.policy_version.as_str().into()),
            ("request_json_sha256", request.as_str().into()),
            ("explanation_json_sha256", explanation.as_str().into()),
            ("state", a.state.as_str().into()),
            ("scope", a.scope.as_str().into()),
            ("created_at", a.created_at.as_micros().into()),
            ("expires_at", a.expires_at.as_micros().into()),
            (
                "decided_by",
                a.decided_by.as_ref().map(|p| p.as_str()).into(),
            ),
            ("decided_at", ts(a.decided_at)),
            ("reason", a.reason.as_deref().into()),
            ("message", a.message.as_deref().into()),
            (
                "consumed_by_call",
                a.consumed_by_call.as_ref().map(|c| c.as_str()).into(),
            ),
            (
                "consumed_by_executor",
                a.consumed_by_executor.as_deref().into(),
            ),
            ("consumed_at", ts(a.consumed_at)),
            ("lease_token", a.lease_token.map(|t| t.get()).into()),
            ("lease_expires_at", ts(a.lease_expires_at)),
            ("closed_at", ts(a.closed_at)),
            ("trace_id", a.trace_id.as_ref().map(|t| t.as_str()).into()),
        ],
    )
}

/// The canonical event for a learned rule row (its full current state). The subject is the
/// rule's id (`rul_...`), distinct from approval and decision ids.
pub(crate) fn learned_rule(kind: &str, r: &LearnedRuleRecord) -> Vec<u8> {
    let pattern = text_digest(&r.pattern);
    encode(
        kind,
        r.id.as_str(),
        &[
            ("pattern_sha256", pattern.as_str().into()),
            ("display", r.display.as_str().into()),
            ("scope", r.scope.as_str().into()),
            ("scope_value", r.scope_value.as_str().into()),
            ("created_by", r.created_by.as_str().into()),
            ("created_at", r.created_at.as_micros().into()),
            ("expires_at", ts(r.expires_at)),
            ("revoked_at", ts(r.revoked_at)),
            (
                "revoked_by",
                r.revoked_by.as_ref().map(|p| p.as_str()).into(),
            ),
            ("source_approval", r.source_approval.as_str().into()),
        ],
    )
}

/// Outcome events need a subject distinct from their decision's.
pub(crate) fn outcome_subject(o: &OutcomeRecord) -> String {
    format!("outcome/{}", o.decision_id)
}

/// The canonical event for an outcome row.
pub(crate) fn outcome(kind: &str, o: &OutcomeRecord) -> Vec<u8> {
    let (exit_kind, exit_value) = o.exit.to_parts();
    let mut fields = vec![
        (
            "approval_id",
            o.approval_id.as_ref().map(|a| a.as_str()).into(),
        ),
        ("executor_pod", o.executor.pod.as_str().into()),
        ("executor_node", o.executor.node.as_str().into()),
        ("executor_namespace", o.executor.namespace.as_str().into()),
        ("executor_image", o.executor.image.as_str().into()),
        ("started_at", o.started_at.as_micros().into()),
        ("finished_at", o.finished_at.as_micros().into()),
        ("exit_kind", exit_kind.into()),
        ("exit_value", exit_value.into()),
        ("stdout_bytes", (o.stdout_bytes as i64).into()),
        ("stderr_bytes", (o.stderr_bytes as i64).into()),
        ("stdout_truncated", i64::from(o.stdout_truncated).into()),
        ("stderr_truncated", i64::from(o.stderr_truncated).into()),
        ("error", o.error.as_deref().into()),
        ("recorded_at", o.recorded_at.as_micros().into()),
    ];
    // Schema 2 added the applied isolation; an outcome without one hashes exactly as before,
    // so chains written by schema 1 still verify.
    if let Some(isolation) = &o.isolation {
        fields.push(("isolation", isolation.as_str().into()));
    }
    // Schema 4 added the after-run audit, under the same rule.
    if let Some(integrity) = &o.integrity {
        fields.push(("integrity", integrity.as_str().into()));
    }
    // Schema 3 added the reporting executor's credential, under the same rule.
    if let Some(p) = &o.executor_principal {
        fields.push(("executor_principal", p.as_str().into()));
    }
    encode(kind, &outcome_subject(o), &fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_unambiguous() {
        // Moving a byte between adjacent fields must change the encoding.
        let a = encode("k", "s", &[("a", F::S("xy")), ("b", F::S("z"))]);
        let b = encode("k", "s", &[("a", F::S("x")), ("b", F::S("yz"))]);
        assert_ne!(a, b);
        let n = encode("k", "s", &[("a", F::N)]);
        let e = encode("k", "s", &[("a", F::S(""))]);
        assert_ne!(n, e);
    }

    #[test]
    fn link_depends_on_every_input() {
        let base = link(&GENESIS, 1, b"p");
        assert_ne!(base, link(&GENESIS, 2, b"p"));
        assert_ne!(base, link(&GENESIS, 1, b"q"));
        assert_ne!(base, link(&[1; 32], 1, b"p"));
    }
}
