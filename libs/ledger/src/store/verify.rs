//! Verification of the hash chain, the head, counts and health.

use super::Core;
use super::rows::{
    A_SELECT, D_SELECT, L_SELECT, O_SELECT, approval_from, decision_from, learned_from,
    outcome_from,
};
use crate::canon;
use crate::db::{HEAD, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{BrokenLink, Cursor, VerifyReport};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

impl Core {
    /// Verifies one consistent snapshot, so a ledger being written verifies too: the chain
    /// and the rows it describes are read as of the same moment.
    pub(crate) async fn verify(&self) -> Result<VerifyReport> {
        let mut tx = self.retry(|| self.pool.snapshot()).await?;
        let report = self.verify_in(&mut tx).await;
        tx.rollback().await?;
        report
    }

    async fn verify_in(&self, tx: &mut Tx) -> Result<VerifyReport> {
        let mut prev = canon::GENESIS.to_vec();
        let mut expected: u64 = 1;
        let mut latest: HashMap<String, (u64, String, Vec<u8>)> = HashMap::new();
        let broken =
            |seq: Option<u64>, problem: String, events: u64, head: Option<String>| VerifyReport {
                events,
                head,
                broken: Some(BrokenLink { seq, problem }),
            };
        loop {
            let rows = tx
                .fetch_all(
                    "SELECT seq AS event_seq, kind AS event_kind, subject AS event_subject, \
                     payload AS event_payload, prev_hash AS event_prev_hash, hash AS event_hash \
                     FROM tg_audit WHERE seq >= $1 ORDER BY seq LIMIT 1000",
                    args![expected as i64],
                )
                .await?;
            if rows.is_empty() {
                break;
            }
            for r in &rows {
                let seq = r.get::<i64>("event_seq")? as u64;
                let kind: String = r.get("event_kind")?;
                let subject: String = r.get("event_subject")?;
                let payload: Vec<u8> = r.get("event_payload")?;
                let prev_hash: Vec<u8> = r.get("event_prev_hash")?;
                let hash: Vec<u8> = r.get("event_hash")?;
                let head = Some(hex::encode(&prev));
                if seq != expected {
                    return Ok(broken(
                        Some(expected),
                        format!("event {expected} is missing (next is {seq})"),
                        expected - 1,
                        head,
                    ));
                }
                if prev_hash != prev {
                    return Ok(broken(
                        Some(seq),
                        "prev_hash does not match the previous event's hash".into(),
                        seq - 1,
                        head,
                    ));
                }
                if hash.as_slice() != canon::link(&prev, seq, &payload) {
                    return Ok(broken(
                        Some(seq),
                        "hash does not match sha256(prev_hash || seq || payload)".into(),
                        seq - 1,
                        head,
                    ));
                }
                if !payload.starts_with(&canon::encode(&kind, &subject, &[])) {
                    return Ok(broken(
                        Some(seq),
                        "kind or subject column differs from the hashed payload".into(),
                        seq - 1,
                        head,
                    ));
                }
                latest.insert(subject, (seq, kind, payload));
                prev = hash;
                expected += 1;
            }
        }
        let events = expected - 1;
        let head_hex = (events > 0).then(|| hex::encode(&prev));
        let head_row = tx.fetch_opt(HEAD, vec![]).await?;
        if let Some(h) = head_row {
            let (hs, hh): (i64, Vec<u8>) = (h.get("head_seq")?, h.get("head_hash")?);
            if hs as u64 != events || hh != prev {
                return Ok(broken(
                    Some(events + 1),
                    format!(
                        "chain head is at event {hs} but the chain ends at event {events}; events were removed"
                    ),
                    events,
                    head_hex,
                ));
            }
        }

        // Every business row must equal the state its latest event hashed.
        let mut rows_seen = HashSet::new();
        let mut problems: Vec<(u64, String)> = Vec::new();
        let mut check =
            |id: String, canonical: &dyn Fn(&str) -> Vec<u8>, table: &str| match latest.get(&id) {
                None => problems.push((u64::MAX, format!("{table} row {id} has no audit event"))),
                Some((seq, kind, payload)) => {
                    if canonical(kind) != *payload {
                        problems.push((
                            *seq,
                            format!("{table} row {id} differs from its audited state"),
                        ));
                    }
                    rows_seen.insert(id);
                }
            };
        for r in tx
            .fetch_all(&format!("SELECT {D_SELECT} FROM tg_decisions"), vec![])
            .await?
        {
            let d = decision_from(&r)?;
            check(
                d.id.as_str().to_owned(),
                &|k| canon::decision(k, &d),
                "decision",
            );
        }
        for r in tx
            .fetch_all(&format!("SELECT {A_SELECT} FROM tg_approvals"), vec![])
            .await?
        {
            let a = approval_from(&r)?;
            check(
                a.id.as_str().to_owned(),
                &|k| canon::approval(k, &a),
                "approval",
            );
        }
        for r in tx
            .fetch_all(&format!("SELECT {O_SELECT} FROM tg_outcomes"), vec![])
            .await?
        {
            let o = outcome_from(&r)?;
            check(
                canon::outcome_subject(&o),
                &|k| canon::outcome(k, &o),
                "outcome",
            );
        }
        for r in tx
            .fetch_all(&format!("SELECT {L_SELECT} FROM tg_learned_rules"), vec![])
            .await?
        {
            let l = learned_from(&r)?;
            check(
                l.id.as_str().to_owned(),
                &|k| canon::learned_rule(k, &l),
                "learned rule",
            );
        }
        for (subject, (seq, _, _)) in &latest {
            if !rows_seen.contains(subject) {
                problems.push((
                    *seq,
                    format!("row {subject} described by event {seq} was deleted"),
                ));
            }
        }
        problems.sort();
        Ok(VerifyReport {
            events,
            head: head_hex,
            broken: problems
                .into_iter()
                .next()
                .map(|(seq, problem)| BrokenLink {
                    seq: (seq != u64::MAX).then_some(seq),
                    problem,
                }),
        })
    }

    pub(crate) async fn head(&self) -> Result<Cursor> {
        self.retry(|| async {
            let row = self
                .pool
                .fetch_opt(
                    "SELECT coalesce(max(seq), 0) AS last_seq FROM tg_audit",
                    vec![],
                )
                .await?;
            let seq: i64 = expect_row(row, "reading the newest event")?.get("last_seq")?;
            Ok(Cursor(u64::try_from(seq).unwrap_or_default()))
        })
        .await
    }

    pub(crate) async fn count_pending(&self) -> Result<u64> {
        self.retry(|| async {
            let row = self
                .pool
                .fetch_opt(
                    "SELECT count(*) AS pending FROM tg_approvals WHERE state = 'pending'",
                    vec![],
                )
                .await?;
            let n: i64 = expect_row(row, "counting pending approvals")?.get("pending")?;
            Ok(u64::try_from(n).unwrap_or_default())
        })
        .await
    }

    pub(crate) async fn health(&self) -> Result<()> {
        let fault = self
            .storage_fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        // After a write failed for want of storage, only a write shows it is back.
        let probe = async {
            if let Some(why) = fault {
                return match self.pool.probe_write().await {
                    Ok(()) => {
                        tracing::info!(was = %why, "the ledger database stores again");
                        *self
                            .storage_fault
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                        Ok(None)
                    }
                    Err(e @ Error::Storage(_)) => Err(e),
                    Err(_) => Err(Error::Storage(why)),
                };
            }
            self.pool.fetch_opt("SELECT 1", vec![]).await
        };
        match tokio::time::timeout(Duration::from_secs(2), probe).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e @ Error::Storage(_))) => Err(e),
            // Already `Unavailable` for an unreachable database: wrapping it again would say
            // "unavailable" twice.
            Ok(Err(e @ Error::Unavailable(_))) => Err(e),
            Ok(Err(e)) => Err(Error::Unavailable(e.to_string())),
            Err(_) => Err(Error::Unavailable("health check timed out after 2s".into())),
        }
    }
}
