//! The ledger's logic, written once against the backend seam in `db`.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::AssertSqlSafe;
use toolgate_core::backoff::Backoff;
use toolgate_core::{Tier, ToolKind};

use crate::canon;
use crate::clock::Clock;
use crate::db::{Arg, Event, Pool, Row, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::*;
use crate::notify::Hub;
use crate::redact::Redactor;

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
fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn prefixed(prefix: &str, cols: &str) -> String {
    cols.split(',')
        .map(|c| format!("{prefix}{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The binding clause: an approval covers only this session, principal, digest and policy version.
const BINDING: &str =
    "session_id = $1 AND principal = $2 AND request_digest = $3 AND policy_version = $4";

fn parse_id<T: TryFrom<String, Error = Error>>(s: String) -> Result<T> {
    T::try_from(s).map_err(|e| Error::Corrupt(e.to_string()))
}

fn opt_id<T: TryFrom<String, Error = Error>>(s: Option<String>) -> Result<Option<T>> {
    s.map(parse_id).transpose()
}

fn ts(v: i64) -> Timestamp {
    Timestamp::from_micros(v)
}

fn ots(v: Option<i64>) -> Option<Timestamp> {
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

fn decision_args(d: &Decision) -> Vec<Arg> {
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

fn rules_text(d: &Decision) -> String {
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

fn approval_args(a: &Approval) -> Vec<Arg> {
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

fn outcome_args(o: &Outcome) -> Vec<Arg> {
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

fn ev_decision(kind: &str, d: &Decision) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: d.id.as_str().to_owned(),
        payload: canon::decision(kind, d),
    }
}

fn ev_approval(kind: &str, a: &Approval) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: a.id.as_str().to_owned(),
        payload: canon::approval(kind, a),
    }
}

fn ev_outcome(kind: &str, o: &Outcome) -> Event {
    Event {
        kind: kind.to_owned(),
        subject: canon::outcome_subject(o),
        payload: canon::outcome(kind, o),
    }
}

/// Ledger-wide durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) pending_ttl: Duration,
    pub(crate) approval_ttl: Duration,
    pub(crate) lease: Duration,
    pub(crate) retry_budget: Duration,
}

/// Everything the operations need; shared by the API handle and the writer task.
pub(crate) struct Core {
    pub(crate) pool: Pool,
    pub(crate) redactor: Redactor,
    pub(crate) settings: Settings,
    pub(crate) clock: Clock,
    pub(crate) hub: Arc<Hub>,
}

impl Core {
    fn is_pg(&self) -> bool {
        matches!(self.pool, Pool::Pg(_))
    }

    /// Row locks exist only on Postgres; SQLite's IMMEDIATE transaction already excludes writers.
    fn for_update(&self) -> &'static str {
        if self.is_pg() { " FOR UPDATE" } else { "" }
    }

    /// Retries an operation while the database is unreachable, with exponential backoff.
    ///
    /// Every operation is safe to repeat: writes are keyed by call id or guarded by
    /// compare-and-set, so a retry after an unacknowledged commit finds its own work.
    pub(crate) async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match op().await {
                Err(e) if e.is_transient() => {
                    let delay = backoff.next_delay();
                    if start.elapsed() + delay >= self.settings.retry_budget {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, ?delay, "ledger operation failed transiently; retrying");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    async fn finish(&self, tx: Tx, events: Vec<Event>) -> Result<()> {
        let touched = tx.commit(events).await?;
        // Postgres waiters hear about it through LISTEN (on every replica, this one
        // included); SQLite lives in this process only.
        if !self.is_pg() {
            for id in touched {
                self.hub.deliver(&id);
            }
        }
        Ok(())
    }

    fn check_identifier(&self, field: &'static str, value: &str) -> Result<()> {
        // Identifiers are lookup keys and cannot be rewritten, so a secret in one is refused.
        if self.redactor.contains_secret(value) {
            return Err(Error::invalid(
                field,
                "contains a secret; identifiers are stored verbatim, use an opaque id",
            ));
        }
        Ok(())
    }

    pub(crate) fn prepare_decision(&self, nd: NewDecision, now: Timestamp) -> Result<Decision> {
        self.check_identifier("call_id", nd.call_id.as_str())?;
        self.check_identifier("session_id", nd.session_id.as_str())?;
        self.check_identifier("principal", nd.principal.as_str())?;
        self.check_identifier("policy_version", nd.policy_version.as_str())?;
        if let Some(t) = &nd.trace_id {
            self.check_identifier("trace_id", t.as_str())?;
        }
        for r in &nd.rule_ids {
            self.check_identifier("rule_id", r.as_str())?;
        }
        Ok(Decision {
            id: DecisionId::generate(),
            call_id: nd.call_id,
            session_id: nd.session_id,
            principal: nd.principal,
            tool: nd.tool,
            digest: nd.digest,
            request_json: self.redactor.redact(&nd.request_json),
            tier: nd.tier,
            rule_ids: nd.rule_ids,
            policy_version: nd.policy_version,
            trace_id: nd.trace_id,
            approval_id: None,
            created_at: now,
            allowed_at: (nd.tier == Tier::Auto).then_some(now),
            executor: nd.executor,
            executor_reported: nd.executor_reported.map(|r| self.redactor.redact(&r)),
            // An ask-tier call gets its lease when an approval covers it.
            lease_expires_at: (nd.tier == Tier::Auto)
                .then(|| now.plus(nd.lease.unwrap_or(self.settings.lease))),
        })
    }

    // ---------------------------------------------------------------- decisions

    /// Writes a batch of auto/deny decisions; one result per input, in order.
    pub(crate) async fn write_decisions(&self, ds: &[Decision]) -> Vec<Result<Recorded>> {
        let mut seen = HashSet::new();
        let unique = ds.iter().all(|d| seen.insert(d.call_id.as_str()));
        if unique {
            match self.retry(|| self.insert_batch(ds)).await {
                Ok(()) => {
                    return ds
                        .iter()
                        .map(|d| {
                            Ok(Recorded {
                                decision: d.clone(),
                                replayed: false,
                                outcome: None,
                            })
                        })
                        .collect();
                }
                Err(e) if e.is_transient() => {
                    return ds
                        .iter()
                        .map(|_| Err(Error::Unavailable(e.to_string())))
                        .collect();
                }
                // A replayed call id (or another row-level problem) in the batch: sort it out row by row.
                Err(_) => {}
            }
        }
        let mut out = Vec::with_capacity(ds.len());
        for d in ds {
            out.push(self.retry(|| self.write_one(d)).await);
        }
        out
    }

    async fn insert_batch(&self, ds: &[Decision]) -> Result<()> {
        match &self.pool {
            Pool::Pg(pool) => {
                // One statement, one round trip, one commit: the data-modifying CTE and the
                // chain append run in the same implicit transaction.
                // Columns in D_COLS order, each bound as one array: text columns as text[],
                // integer columns as int8[].
                let width = decision_args(&ds[0]).len();
                let mut text: Vec<Vec<Option<String>>> = vec![Vec::with_capacity(ds.len()); width];
                let mut ints: Vec<Vec<Option<i64>>> = vec![Vec::with_capacity(ds.len()); width];
                let mut kinds = Vec::with_capacity(ds.len());
                let mut payloads = Vec::with_capacity(ds.len());
                for d in ds {
                    for (i, v) in decision_args(d).into_iter().enumerate() {
                        match v {
                            Arg::Text(t) => text[i].push(t),
                            Arg::Int(n) => ints[i].push(n),
                        }
                    }
                    kinds.push("decision.recorded".to_owned());
                    payloads.push(canon::decision("decision.recorded", d));
                }
                // A column is integer when the first row's value was one (the types are fixed
                // per column by decision_args).
                let is_int: Vec<bool> = (0..width).map(|i| !ints[i].is_empty()).collect();
                let arrays = (0..width)
                    .map(|i| format!("${}::{}[]", i + 1, if is_int[i] { "int8" } else { "text" }))
                    .collect::<Vec<_>>()
                    .join(", ");
                let sql = format!(
                    "WITH ins AS (
                    INSERT INTO tg_decisions ({D_COLS})
                    SELECT * FROM unnest({arrays})
                    RETURNING 1)
                SELECT (SELECT count(*) FROM ins), tg_append(${}::text[], $1::text[], ${}::bytea[])",
                    width + 1,
                    width + 2
                );
                let mut q = sqlx::query(AssertSqlSafe(sql));
                for i in 0..width {
                    q = if is_int[i] {
                        q.bind(std::mem::take(&mut ints[i]))
                    } else {
                        q.bind(std::mem::take(&mut text[i]))
                    };
                }
                q.bind(kinds).bind(payloads).execute(pool).await?;
                Ok(())
            }
            Pool::Lite(_) => {
                let mut tx = self.pool.begin().await?;
                let sql = format!(
                    "INSERT INTO tg_decisions ({D_COLS}) VALUES ({})",
                    placeholders(1, 17)
                );
                let mut events = Vec::with_capacity(ds.len());
                for d in ds {
                    tx.exec(&sql, decision_args(d)).await?;
                    events.push(ev_decision("decision.recorded", d));
                }
                self.finish(tx, events).await
            }
        }
    }

    async fn write_one(&self, d: &Decision) -> Result<Recorded> {
        let mut tx = self.pool.begin().await?;
        let existing = tx
            .fetch_opt(
                &format!("SELECT {D_COLS} FROM tg_decisions WHERE call_id = $1"),
                args![d.call_id.as_str()],
            )
            .await?;
        if let Some(row) = existing {
            tx.rollback().await?;
            let e = decision_from(&row, 0)?;
            if e.id == d.id {
                // Our own earlier attempt committed before its acknowledgement was lost.
                return Ok(Recorded {
                    decision: e,
                    replayed: false,
                    outcome: None,
                });
            }
            same_request(&e, d)?;
            let outcome = self.outcome_of(&e.id).await?;
            return Ok(Recorded {
                decision: e,
                replayed: true,
                outcome,
            });
        }
        tx.exec(
            &format!(
                "INSERT INTO tg_decisions ({D_COLS}) VALUES ({})",
                placeholders(1, 17)
            ),
            decision_args(d),
        )
        .await?;
        self.finish(tx, vec![ev_decision("decision.recorded", d)])
            .await?;
        Ok(Recorded {
            decision: d.clone(),
            replayed: false,
            outcome: None,
        })
    }

    async fn outcome_of(&self, id: &DecisionId) -> Result<Option<Outcome>> {
        self.pool
            .fetch_opt(
                &format!("SELECT {O_COLS} FROM tg_outcomes WHERE decision_id = $1"),
                args![id.as_str()],
            )
            .await?
            .map(|r| outcome_from(&r, 0))
            .transpose()
    }

    // ---------------------------------------------------------------- ask

    pub(crate) async fn ask(&self, req: AskRequest) -> Result<AskOutcome> {
        if req.decision.tier != Tier::Ask {
            return Err(Error::invalid(
                "tier",
                format!(
                    "ask records ask-tier decisions only, got {}",
                    req.decision.tier
                ),
            ));
        }
        let lease = req.decision.lease.unwrap_or(self.settings.lease);
        let d = self.prepare_decision(req.decision, self.clock.now())?;
        let p = AskParams {
            explanation: self.redactor.redact(&req.explanation_json),
            executor: d.executor.as_ref().map(|e| e.as_str().to_owned()),
            pending_ttl: req.pending_ttl.unwrap_or(self.settings.pending_ttl),
            lease,
        };
        let mut conflicts = 0;
        loop {
            match self.retry(|| self.ask_once(&d, &p)).await {
                // Lost a race on a unique key (same call id, or a pending approval created
                // concurrently): the next attempt sees the winner's row.
                Err(Error::AlreadyExists { .. }) if conflicts < 3 => conflicts += 1,
                other => return other,
            }
        }
    }

    async fn ask_once(&self, d: &Decision, p: &AskParams) -> Result<AskOutcome> {
        let now = self.clock.now();
        let mut tx = self.pool.begin().await?;
        let mut events = Vec::new();
        let existing = tx
            .fetch_opt(
                &format!(
                    "SELECT {D_COLS} FROM tg_decisions WHERE call_id = $1{}",
                    self.for_update()
                ),
                args![d.call_id.as_str()],
            )
            .await?;
        let Some(row) = existing else {
            let (approval, verdict) = self.resolve(&mut tx, d, p, now, &mut events).await?;
            let mut d = d.clone();
            d.approval_id = Some(approval.id.clone());
            d.allowed_at = matches!(verdict, AskVerdict::Allowed { .. }).then_some(now);
            d.lease_expires_at = d.allowed_at.map(|t| t.plus(p.lease));
            tx.exec(
                &format!(
                    "INSERT INTO tg_decisions ({D_COLS}) VALUES ({})",
                    placeholders(1, 17)
                ),
                decision_args(&d),
            )
            .await?;
            events.push(ev_decision("decision.recorded", &d));
            self.finish(tx, events).await?;
            return Ok(AskOutcome {
                decision: d,
                approval,
                verdict,
            });
        };

        // A repeated call id: the orchestrator resuming, or a retry.
        let ed = decision_from(&row, 0)?;
        same_request(&ed, d)?;
        if ed.tier != Tier::Ask {
            return Err(Error::AlreadyExists {
                what: format!("a {} decision for call_id {}", ed.tier, ed.call_id),
            });
        }
        let current = match &ed.approval_id {
            Some(id) => self.approval_locked(&mut tx, id).await?,
            None => None,
        };
        if ed.allowed_at.is_some() {
            tx.rollback().await?;
            let approval = current
                .ok_or_else(|| Error::Corrupt(format!("decision {} lost its approval", ed.id)))?;
            return Ok(AskOutcome {
                decision: ed,
                approval,
                verdict: AskVerdict::AlreadyRan,
            });
        }
        let mut resolved = None;
        if let Some(a) = current {
            let live = a.expires_at > now;
            match a.state {
                ApprovalState::Pending if live => resolved = Some((a, AskVerdict::Pending)),
                ApprovalState::Denied => resolved = Some((a, AskVerdict::Denied)),
                ApprovalState::Approved if live => {
                    resolved = self
                        .take(&mut tx, &a, &ed.call_id, p, now, &mut events)
                        .await?;
                }
                // Expired, cancelled, or used by another call: look for another approval.
                _ => {}
            }
        }
        let (approval, verdict) = match resolved {
            Some((a, AskVerdict::Pending | AskVerdict::Denied)) if events.is_empty() => {
                tx.rollback().await?;
                let v = if a.state == ApprovalState::Denied {
                    AskVerdict::Denied
                } else {
                    AskVerdict::Pending
                };
                return Ok(AskOutcome {
                    decision: ed,
                    approval: a,
                    verdict: v,
                });
            }
            Some(r) => r,
            None => self.resolve(&mut tx, &ed, p, now, &mut events).await?,
        };
        let allowed = matches!(verdict, AskVerdict::Allowed { .. }).then_some(now);
        // The resuming executor's credential is the one that will run it; its lease starts now.
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_decisions SET approval_id = $2, allowed_at = $3, lease_expires_at = $4, \
                     executor = coalesce($5, executor), executor_reported = coalesce($6, executor_reported) \
                     WHERE id = $1 RETURNING {D_COLS}"
                ),
                args![
                    ed.id.as_str(),
                    approval.id.as_str(),
                    allowed.map(Timestamp::as_micros),
                    allowed.map(|t| t.plus(p.lease).as_micros()),
                    d.executor.as_ref().map(|e| e.as_str()),
                    d.executor_reported.clone()
                ],
            )
            .await?;
        let ed = decision_from(&expect_row(row, "relinking a decision")?, 0)?;
        events.push(ev_decision("decision.relinked", &ed));
        self.finish(tx, events).await?;
        Ok(AskOutcome {
            decision: ed,
            approval,
            verdict,
        })
    }

    async fn approval_locked(&self, tx: &mut Tx, id: &ApprovalId) -> Result<Option<Approval>> {
        tx.fetch_opt(
            &format!(
                "SELECT {A_COLS} FROM tg_approvals WHERE id = $1{}",
                self.for_update()
            ),
            args![id.as_str()],
        )
        .await?
        .map(|r| approval_from(&r, 0))
        .transpose()
    }

    /// Uses an approved approval for `call`: consume it (once) or note its use (session).
    async fn take(
        &self,
        tx: &mut Tx,
        a: &Approval,
        call: &CallId,
        p: &AskParams,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Option<(Approval, AskVerdict)>> {
        if a.scope == Scope::Session {
            events.push(ev_approval("approval.used", a));
            return Ok(Some((a.clone(), AskVerdict::Allowed { lease: None })));
        }
        let lease = Lease {
            token: LeaseToken(random_token()),
            expires_at: now.plus(p.lease),
        };
        // Compare-and-set: of any number of concurrent consumers exactly one sees the row
        // still `approved`; the others update nothing.
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_approvals SET state = 'consumed', consumed_by_call = $2, consumed_by_executor = $3, \
                     consumed_at = $4, lease_token = $5, lease_expires_at = $6 \
                     WHERE id = $1 AND state = 'approved' AND scope = 'once' AND expires_at > $4 RETURNING {A_COLS}"
                ),
                args![
                    a.id.as_str(),
                    call.as_str(),
                    p.executor.as_deref(),
                    now.as_micros(),
                    lease.token.get(),
                    lease.expires_at.as_micros()
                ],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let a = approval_from(&row, 0)?;
        tx.touch(a.id.as_str());
        events.push(ev_approval("approval.consumed", &a));
        Ok(Some((a, AskVerdict::Allowed { lease: Some(lease) })))
    }

    /// Finds or creates the approval covering `d`'s binding.
    async fn resolve(
        &self,
        tx: &mut Tx,
        d: &Decision,
        p: &AskParams,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<(Approval, AskVerdict)> {
        let binding = || {
            args![
                d.session_id.as_str(),
                d.principal.as_str(),
                d.digest.to_hex(),
                d.policy_version.as_str()
            ]
        };
        // Expiry is enforced at use: stale matches are closed before anything can use them.
        let mut a5 = binding();
        a5.push(now.as_micros().into());
        let expired = tx
            .fetch_all(
                &format!(
                    "UPDATE tg_approvals SET state = 'expired', closed_at = $5 \
                     WHERE {BINDING} AND state IN ('pending', 'approved') AND expires_at <= $5 RETURNING {A_COLS}"
                ),
                a5.clone(),
            )
            .await?;
        for r in &expired {
            let a = approval_from(r, 0)?;
            tx.touch(a.id.as_str());
            events.push(ev_approval("approval.expired", &a));
        }

        let session = tx
            .fetch_opt(
                &format!(
                    "SELECT {A_COLS} FROM tg_approvals WHERE {BINDING} AND state = 'approved' \
                     AND scope = 'session' AND expires_at > $5 ORDER BY created_at, id LIMIT 1"
                ),
                a5.clone(),
            )
            .await?;
        if let Some(r) = session {
            let a = approval_from(&r, 0)?;
            events.push(ev_approval("approval.used", &a));
            return Ok((a, AskVerdict::Allowed { lease: None }));
        }

        let candidates = tx
            .fetch_all(
                &format!(
                    "SELECT {A_COLS} FROM tg_approvals WHERE {BINDING} AND state = 'approved' \
                     AND scope = 'once' AND expires_at > $5 ORDER BY created_at, id LIMIT 4"
                ),
                a5.clone(),
            )
            .await?;
        for r in &candidates {
            let a = approval_from(r, 0)?;
            if let Some(taken) = self.take(tx, &a, &d.call_id, p, now, events).await? {
                return Ok(taken);
            }
        }

        // A human's denial stands for its binding until the approval would have expired:
        // repeating the same request, under any call id, gets the approver's answer again
        // instead of putting the same question to a human a second time.
        let denied = tx
            .fetch_opt(
                &format!(
                    "SELECT {A_COLS} FROM tg_approvals WHERE {BINDING} AND state = 'denied' \
                     AND expires_at > $5 ORDER BY decided_at DESC, id LIMIT 1"
                ),
                a5.clone(),
            )
            .await?;
        if let Some(r) = denied {
            return Ok((approval_from(&r, 0)?, AskVerdict::Denied));
        }

        let pending_sql = format!(
            "SELECT {A_COLS} FROM tg_approvals WHERE {BINDING} AND state = 'pending' AND expires_at > $5 LIMIT 1"
        );
        if let Some(r) = tx.fetch_opt(&pending_sql, a5.clone()).await? {
            return Ok((approval_from(&r, 0)?, AskVerdict::Pending));
        }

        let a = Approval {
            id: ApprovalId::generate(),
            call_id: d.call_id.clone(),
            session_id: d.session_id.clone(),
            principal: d.principal.clone(),
            tool: d.tool,
            digest: d.digest,
            policy_version: d.policy_version.clone(),
            request_json: d.request_json.clone(),
            explanation_json: p.explanation.clone(),
            state: ApprovalState::Pending,
            scope: Scope::Once,
            created_at: now,
            expires_at: now.plus(p.pending_ttl),
            decided_by: None,
            decided_at: None,
            reason: None,
            message: None,
            consumed_by_call: None,
            consumed_by_executor: None,
            consumed_at: None,
            lease_token: None,
            lease_expires_at: None,
            closed_at: None,
            trace_id: d.trace_id.clone(),
        };
        // The partial unique index makes identical pending requests share one approval,
        // across replicas too; losing that race means adopting the winner's row.
        let inserted = tx
            .fetch_opt(
                &format!(
                    "INSERT INTO tg_approvals ({A_COLS}) VALUES ({}) \
                     ON CONFLICT (session_id, principal, request_digest, policy_version) WHERE state = 'pending' \
                     DO NOTHING RETURNING {A_COLS}",
                    placeholders(1, 24)
                ),
                approval_args(&a),
            )
            .await?;
        if let Some(r) = inserted {
            let a = approval_from(&r, 0)?;
            tx.touch(a.id.as_str());
            events.push(ev_approval("approval.created", &a));
            return Ok((a, AskVerdict::Pending));
        }
        match tx.fetch_opt(&pending_sql, a5).await? {
            Some(r) => Ok((approval_from(&r, 0)?, AskVerdict::Pending)),
            None => Err(Error::AlreadyExists {
                what: "a concurrently changed pending approval".to_owned(),
            }),
        }
    }

    // ---------------------------------------------------------------- decide / cancel

    pub(crate) async fn decide(&self, id: &ApprovalId, dc: &Decide) -> Result<Approval> {
        self.check_identifier("approver", dc.approver.as_str())?;
        let reason = self.redactor.opt(dc.reason.as_deref());
        let message = self.redactor.opt(dc.message.as_deref());
        let (state, scope, action) = match dc.verdict {
            Verdict::Approve { widen_to_session } => (
                ApprovalState::Approved,
                if widen_to_session {
                    Scope::Session
                } else {
                    Scope::Once
                },
                "approved",
            ),
            Verdict::Deny => (ApprovalState::Denied, Scope::Once, "denied"),
        };
        let ttl = dc.ttl.unwrap_or(self.settings.approval_ttl);
        self.retry(|| async {
            let now = self.clock.now();
            // Approval starts the use-by clock; a denial keeps the original expiry.
            let expires = match state {
                ApprovalState::Approved => Some(now.plus(ttl).as_micros()),
                _ => None,
            };
            let mut tx = self.pool.begin().await?;
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = $2, scope = $3, decided_by = $4, decided_at = $5, \
                         reason = $6, message = $7, expires_at = coalesce($8, expires_at) \
                         WHERE id = $1 AND state = 'pending' AND expires_at > $5 AND principal <> $4 \
                         RETURNING {A_COLS}"
                    ),
                    args![
                        id.as_str(),
                        state.as_str(),
                        scope.as_str(),
                        dc.approver.as_str(),
                        now.as_micros(),
                        reason.clone(),
                        message.clone(),
                        expires
                    ],
                )
                .await?;
            match row {
                Some(r) => {
                    let a = approval_from(&r, 0)?;
                    tx.touch(a.id.as_str());
                    self.finish(tx, vec![ev_approval(&format!("approval.{action}"), &a)])
                        .await?;
                    Ok(a)
                }
                None => Err(self.refuse(tx, id, &dc.approver, action, now).await?),
            }
        })
        .await
    }

    pub(crate) async fn cancel(
        &self,
        id: &ApprovalId,
        by: &Principal,
        reason: Option<&str>,
    ) -> Result<Approval> {
        let reason = self.redactor.opt(reason);
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = 'cancelled', decided_by = $2, decided_at = $3, reason = $4, \
                         closed_at = $3 WHERE id = $1 AND state = 'pending' RETURNING {A_COLS}"
                    ),
                    args![id.as_str(), by.as_str(), now.as_micros(), reason.clone()],
                )
                .await?;
            match row {
                Some(r) => {
                    let a = approval_from(&r, 0)?;
                    tx.touch(a.id.as_str());
                    self.finish(tx, vec![ev_approval("approval.cancelled", &a)]).await?;
                    Ok(a)
                }
                None => Err(self.refuse(tx, id, by, "cancelled", now).await?),
            }
        })
        .await
    }

    /// Explains why a compare-and-set on a pending approval matched nothing.
    async fn refuse(
        &self,
        mut tx: Tx,
        id: &ApprovalId,
        by: &Principal,
        action: &'static str,
        now: Timestamp,
    ) -> Result<Error> {
        let Some(a) = self.approval_locked(&mut tx, id).await? else {
            tx.rollback().await?;
            return Ok(Error::ApprovalNotFound {
                id: id.as_str().to_owned(),
            });
        };
        if a.state == ApprovalState::Pending && a.expires_at <= now {
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = 'expired', closed_at = $2 WHERE id = $1 AND state = 'pending' \
                         RETURNING {A_COLS}"
                    ),
                    args![id.as_str(), now.as_micros()],
                )
                .await?;
            let a = approval_from(&expect_row(row, "expiring an approval")?, 0)?;
            tx.touch(a.id.as_str());
            self.finish(tx, vec![ev_approval("approval.expired", &a)])
                .await?;
            return Ok(Error::Expired {
                id: id.as_str().to_owned(),
            });
        }
        tx.rollback().await?;
        if a.state == ApprovalState::Pending && a.principal == *by && action != "cancelled" {
            return Ok(Error::SelfDecision {
                id: id.as_str().to_owned(),
                principal: by.as_str().to_owned(),
            });
        }
        Ok(Error::NotPending {
            id: id.as_str().to_owned(),
            state: a.state,
            action,
        })
    }

    // ---------------------------------------------------------------- outcomes

    pub(crate) async fn record_outcome(&self, no: &NewOutcome) -> Result<Outcome> {
        let error = self.redactor.opt(no.error.as_deref());
        let executor = ExecutorIdentity {
            pod: self.redactor.redact(&no.executor.pod),
            node: self.redactor.redact(&no.executor.node),
            namespace: self.redactor.redact(&no.executor.namespace),
            image: self.redactor.redact(&no.executor.image),
        };
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let d = tx
                .fetch_opt(
                    &format!(
                        "SELECT {D_COLS} FROM tg_decisions WHERE id = $1{}",
                        self.for_update()
                    ),
                    args![no.decision_id.as_str()],
                )
                .await?
                .map(|r| decision_from(&r, 0))
                .transpose()?
                .ok_or_else(|| Error::DecisionNotFound {
                    id: no.decision_id.as_str().to_owned(),
                })?;
            let o = Outcome {
                decision_id: d.id.clone(),
                approval_id: d.approval_id.clone(),
                executor_principal: no.executor_principal.clone(),
                executor: executor.clone(),
                started_at: no.started_at,
                finished_at: no.finished_at,
                exit: no.exit,
                stdout_bytes: no.stdout_bytes,
                stderr_bytes: no.stderr_bytes,
                stdout_truncated: no.stdout_truncated,
                stderr_truncated: no.stderr_truncated,
                error: error.clone(),
                recorded_at: now,
                isolation: no.isolation.clone(),
            };
            let prior = tx
                .fetch_opt(
                    &format!("SELECT {O_COLS} FROM tg_outcomes WHERE decision_id = $1"),
                    args![d.id.as_str()],
                )
                .await?;
            if let Some(r) = prior {
                tx.rollback().await?;
                let prior = outcome_from(&r, 0)?;
                let same = Outcome {
                    recorded_at: prior.recorded_at,
                    ..o.clone()
                };
                return if same == prior {
                    Ok(prior)
                } else {
                    Err(Error::OutcomeConflict {
                        decision_id: d.id.as_str().to_owned(),
                    })
                };
            }
            if d.allowed_at.is_none() {
                tx.rollback().await?;
                return Err(Error::NotRunnable {
                    decision_id: d.id.as_str().to_owned(),
                    why: match d.tier {
                        Tier::Deny => "it was denied".to_owned(),
                        _ => "no approval covered it".to_owned(),
                    },
                });
            }
            let mut events = Vec::new();
            if let Some(aid) = &d.approval_id {
                let a = self.approval_locked(&mut tx, aid).await?.ok_or_else(|| {
                    Error::Corrupt(format!("approval {aid} of decision {} is missing", d.id))
                })?;
                let fenced =
                    a.scope == Scope::Once && a.consumed_by_call.as_ref() == Some(&d.call_id);
                if fenced
                    && let Some(err) = self
                        .fence(&mut tx, &a, no.lease_token, now, &mut events)
                        .await?
                {
                    if events.is_empty() {
                        tx.rollback().await?;
                    } else {
                        self.finish(tx, events).await?;
                    }
                    return Err(err);
                }
            }
            // Every allowed call since schema 3 carries a lease: past it, the call is unknown
            // for good, so a replay that was told "unknown" is never contradicted.
            if let Some(expired) = d.lease_expires_at.filter(|t| *t <= now) {
                if events.is_empty() {
                    tx.rollback().await?;
                } else {
                    self.finish(tx, events).await?;
                }
                return Err(Error::DecisionLeaseExpired {
                    decision_id: d.id.as_str().to_owned(),
                    expired_at_micros: expired.as_micros(),
                });
            }
            tx.exec(
                &format!(
                    "INSERT INTO tg_outcomes ({O_COLS}) VALUES ({})",
                    placeholders(1, 18)
                ),
                outcome_args(&o),
            )
            .await?;
            events.push(ev_outcome("outcome.recorded", &o));
            self.finish(tx, events).await?;
            Ok(o)
        })
        .await
    }

    /// Checks the consumption lease; completes the approval when the holder reports in time.
    async fn fence(
        &self,
        tx: &mut Tx,
        a: &Approval,
        token: Option<LeaseToken>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Option<Error>> {
        let id = a.id.as_str().to_owned();
        match a.state {
            ApprovalState::Consumed => {}
            ApprovalState::Unknown => return Ok(Some(Error::LeaseExpired { id })),
            _ => return Ok(Some(Error::StaleLease { id })),
        }
        if a.lease_expires_at.is_some_and(|t| t <= now) {
            // Checked at use, not only by the sweeper: a late report turns the run unknown.
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = 'unknown', closed_at = $2 WHERE id = $1 AND state = 'consumed' \
                         RETURNING {A_COLS}"
                    ),
                    args![id.as_str(), now.as_micros()],
                )
                .await?;
            let a = approval_from(&expect_row(row, "closing an expired lease")?, 0)?;
            tx.touch(&id);
            events.push(ev_approval("approval.unknown", &a));
            return Ok(Some(Error::LeaseExpired { id }));
        }
        if token != a.lease_token {
            return Ok(Some(Error::StaleLease { id }));
        }
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_approvals SET state = 'completed', closed_at = $2 \
                     WHERE id = $1 AND state = 'consumed' AND lease_token = $3 RETURNING {A_COLS}"
                ),
                args![
                    id.as_str(),
                    now.as_micros(),
                    a.lease_token.map(LeaseToken::get)
                ],
            )
            .await?;
        let a = approval_from(&expect_row(row, "completing an approval")?, 0)?;
        tx.touch(&id);
        events.push(ev_approval("approval.completed", &a));
        Ok(None)
    }

    // ---------------------------------------------------------------- reads

    pub(crate) async fn get(&self, id: &ApprovalId) -> Result<Approval> {
        self.retry(|| async {
            self.pool
                .fetch_opt(
                    &format!("SELECT {A_COLS} FROM tg_approvals WHERE id = $1"),
                    args![id.as_str()],
                )
                .await?
                .map(|r| approval_from(&r, 0))
                .transpose()?
                .ok_or_else(|| Error::ApprovalNotFound {
                    id: id.as_str().to_owned(),
                })
        })
        .await
    }

    pub(crate) async fn list(
        &self,
        filter: &ApprovalFilter,
        page: Option<&PageToken>,
        limit: u32,
    ) -> Result<Page<Approval>> {
        let limit = limit.clamp(1, 500) as usize;
        let (after_t, after_id) = match page {
            Some(p) => {
                let (t, id) = p.parts()?;
                (Some(t), Some(id.to_owned()))
            }
            None => (None, None),
        };
        let sql = format!(
            "SELECT {A_COLS} FROM tg_approvals WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR session_id = $2) \
             AND ($3 IS NULL OR principal = $3) AND ($4 IS NULL OR created_at < $4 OR (created_at = $4 AND id < $5)) \
             ORDER BY created_at DESC, id DESC LIMIT $6"
        );
        let rows = self
            .retry(|| {
                self.pool.fetch_all(
                    &sql,
                    args![
                        filter.state.map(ApprovalState::as_str),
                        filter.session_id.as_ref().map(|s| s.as_str()),
                        filter.principal.as_ref().map(|p| p.as_str()),
                        after_t,
                        after_id.clone(),
                        (limit + 1) as i64
                    ],
                )
            })
            .await?;
        let mut items = rows
            .iter()
            .map(|r| approval_from(r, 0))
            .collect::<Result<Vec<_>>>()?;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|a| PageToken::new(a.created_at, &a.id))
        } else {
            None
        };
        Ok(Page { items, next })
    }

    pub(crate) async fn lookup_call(&self, call_id: &CallId) -> Result<Option<CallRecord>> {
        self.retry(|| async {
            let Some(row) = self
                .pool
                .fetch_opt(
                    &format!("SELECT {D_COLS} FROM tg_decisions WHERE call_id = $1"),
                    args![call_id.as_str()],
                )
                .await?
            else {
                return Ok(None);
            };
            let decision = decision_from(&row, 0)?;
            let approval = match &decision.approval_id {
                Some(id) => Some(self.get(id).await?),
                None => None,
            };
            let outcome = self.outcome_of(&decision.id).await?;
            Ok(Some(CallRecord {
                decision,
                approval,
                outcome,
            }))
        })
        .await
    }

    pub(crate) async fn decision(&self, id: &DecisionId) -> Result<Decision> {
        self.retry(|| async {
            self.pool
                .fetch_opt(
                    &format!("SELECT {D_COLS} FROM tg_decisions WHERE id = $1"),
                    args![id.as_str()],
                )
                .await?
                .map(|r| decision_from(&r, 0))
                .transpose()?
                .ok_or_else(|| Error::DecisionNotFound {
                    id: id.as_str().to_owned(),
                })
        })
        .await
    }

    // ---------------------------------------------------------------- sweep

    pub(crate) async fn sweep(&self) -> Result<SweepReport> {
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let expired = tx
                .fetch_all(
                    &format!(
                        "UPDATE tg_approvals SET state = 'expired', closed_at = $1 \
                         WHERE state IN ('pending', 'approved') AND expires_at <= $1 RETURNING {A_COLS}"
                    ),
                    args![now.as_micros()],
                )
                .await?;
            let unknown = tx
                .fetch_all(
                    &format!(
                        "UPDATE tg_approvals SET state = 'unknown', closed_at = $1 \
                         WHERE state = 'consumed' AND lease_expires_at <= $1 RETURNING {A_COLS}"
                    ),
                    args![now.as_micros()],
                )
                .await?;
            let mut events = Vec::new();
            for (rows, kind) in [(&expired, "approval.expired"), (&unknown, "approval.unknown")] {
                for r in rows {
                    let a = approval_from(r, 0)?;
                    tx.touch(a.id.as_str());
                    events.push(ev_approval(kind, &a));
                }
            }
            self.finish(tx, events).await?;
            Ok(SweepReport {
                expired: expired.len() as u64,
                unknown: unknown.len() as u64,
            })
        })
        .await
    }

    // ---------------------------------------------------------------- watch / wait

    pub(crate) async fn changes(
        &self,
        after: Cursor,
        filter: &ApprovalFilter,
        limit: u32,
        wait: Duration,
    ) -> Result<(Vec<Change>, Cursor)> {
        let deadline = tokio::time::Instant::now() + wait;
        let limit = limit.clamp(1, 1000);
        let sql = format!(
            "SELECT e.seq, e.kind, {} FROM tg_audit e JOIN tg_approvals a ON a.id = e.subject \
             WHERE e.seq > $1 AND e.kind LIKE 'approval.%' ORDER BY e.seq LIMIT $2",
            prefixed("a.", A_COLS)
        );
        loop {
            // Subscribe before reading so a change committed in between still wakes us.
            let mut rx = self.hub.changes();
            rx.borrow_and_update();
            let rows = self
                .retry(|| {
                    self.pool.fetch_all(
                        &sql,
                        args![i64::try_from(after.0).unwrap_or(i64::MAX), i64::from(limit)],
                    )
                })
                .await?;
            let mut cursor = after;
            let mut out = Vec::new();
            for r in &rows {
                let seq: i64 = r.get(0)?;
                cursor = Cursor(seq as u64);
                let approval = approval_from(r, 2)?;
                if filter.matches(&approval) {
                    out.push(Change {
                        cursor,
                        kind: r.get(1)?,
                        approval,
                    });
                }
            }
            if !rows.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok((out, cursor));
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return Ok((out, cursor));
            }
        }
    }

    pub(crate) async fn wait_for_decision(
        &self,
        id: &ApprovalId,
        timeout: Duration,
    ) -> Result<Approval> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let guard = self.hub.register(id.as_str());
            let notified = guard.notify.notified();
            tokio::pin!(notified);
            // Registered before the read: a decision committed after it wakes this waiter.
            notified.as_mut().enable();
            let a = self.get(id).await?;
            if a.state != ApprovalState::Pending || a.expires_at <= self.clock.now() {
                return Ok(a);
            }
            let parked = self.hub.park();
            let woke = tokio::time::timeout_at(deadline, notified).await.is_ok();
            drop(parked);
            if !woke {
                return Ok(a);
            }
        }
    }

    // ---------------------------------------------------------------- verify / health

    pub(crate) async fn verify(&self) -> Result<VerifyReport> {
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
            let rows = self
                .retry(|| {
                    self.pool.fetch_all(
                        "SELECT seq, kind, subject, payload, prev_hash, hash FROM tg_audit \
                         WHERE seq >= $1 ORDER BY seq LIMIT 1000",
                        args![expected as i64],
                    )
                })
                .await?;
            if rows.is_empty() {
                break;
            }
            for r in &rows {
                let seq = r.get::<i64>(0)? as u64;
                let kind: String = r.get(1)?;
                let subject: String = r.get(2)?;
                let payload: Vec<u8> = r.get(3)?;
                let prev_hash: Vec<u8> = r.get(4)?;
                let hash: Vec<u8> = r.get(5)?;
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
        let head_row = self
            .pool
            .fetch_opt("SELECT seq, hash FROM tg_audit_head WHERE id = 1", vec![])
            .await?;
        if let Some(h) = head_row {
            let (hs, hh): (i64, Vec<u8>) = (h.get(0)?, h.get(1)?);
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
        for r in self
            .pool
            .fetch_all(&format!("SELECT {D_COLS} FROM tg_decisions"), vec![])
            .await?
        {
            let d = decision_from(&r, 0)?;
            check(
                d.id.as_str().to_owned(),
                &|k| canon::decision(k, &d),
                "decision",
            );
        }
        for r in self
            .pool
            .fetch_all(&format!("SELECT {A_COLS} FROM tg_approvals"), vec![])
            .await?
        {
            let a = approval_from(&r, 0)?;
            check(
                a.id.as_str().to_owned(),
                &|k| canon::approval(k, &a),
                "approval",
            );
        }
        for r in self
            .pool
            .fetch_all(&format!("SELECT {O_COLS} FROM tg_outcomes"), vec![])
            .await?
        {
            let o = outcome_from(&r, 0)?;
            check(
                canon::outcome_subject(&o),
                &|k| canon::outcome(k, &o),
                "outcome",
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
                .fetch_opt("SELECT coalesce(max(seq), 0) FROM tg_audit", vec![])
                .await?;
            let seq: i64 = expect_row(row, "reading the newest event")?.get(0)?;
            Ok(Cursor(u64::try_from(seq).unwrap_or_default()))
        })
        .await
    }

    pub(crate) async fn count_pending(&self) -> Result<u64> {
        self.retry(|| async {
            let row = self
                .pool
                .fetch_opt(
                    "SELECT count(*) FROM tg_approvals WHERE state = 'pending'",
                    vec![],
                )
                .await?;
            let n: i64 = expect_row(row, "counting pending approvals")?.get(0)?;
            Ok(u64::try_from(n).unwrap_or_default())
        })
        .await
    }

    pub(crate) async fn health(&self) -> Result<()> {
        match tokio::time::timeout(
            Duration::from_secs(2),
            self.pool.fetch_opt("SELECT 1", vec![]),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Error::Unavailable(e.to_string())),
            Err(_) => Err(Error::Unavailable("health check timed out after 2s".into())),
        }
    }
}

fn same_request(existing: &Decision, new: &Decision) -> Result<()> {
    if existing.digest != new.digest
        || existing.session_id != new.session_id
        || existing.principal != new.principal
    {
        return Err(Error::CallIdReused {
            call_id: existing.call_id.as_str().to_owned(),
            existing: existing.digest.to_hex(),
        });
    }
    Ok(())
}

/// Per-ask values computed once, outside the retry loop.
pub(crate) struct AskParams {
    explanation: String,
    /// The asking executor's credential name, recorded as the consumer.
    executor: Option<String>,
    pending_ttl: Duration,
    lease: Duration,
}
