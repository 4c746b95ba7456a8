//! Sessions: the claim an executor holds on a session's sandbox, the state the session
//! carries, its end, and the abandon of everything an executor held when it restarts.
//!
//! A claim is taken in one transaction with the session's row locked (Postgres: the insert
//! waits on a concurrent insert of the same key, then `FOR UPDATE`; SQLite: the IMMEDIATE
//! transaction excludes every other writer), so of concurrent claims by different executors
//! exactly one holds the session. Session rows are not part of the audit chain; the abandon's
//! changes to decisions are (each ended lease appends a `decision.abandoned` event).

use super::Core;
use super::rows::{
    D_SELECT, S_COLS, S_SELECT, decision_from, ev_decision, ots, parse_id, placeholders, ts,
};
use crate::db::{Arg, Row, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{
    Abandoned, ClaimSession, Claimed, Session, SessionFilter, SessionHolder, SessionId,
    SessionState,
};
use std::collections::HashSet;

use std::collections::BTreeMap;

/// Why a session's sandbox ended because its executor restarted.
const ABANDONED: &str = "abandoned";

fn session_from(r: &Row) -> Result<Session> {
    let env: String = r.get("session_env")?;
    let env: BTreeMap<String, String> = serde_json::from_str(&env)
        .map_err(|e| Error::Corrupt(format!("session env is not a JSON object of strings: {e}")))?;
    Ok(Session {
        session_id: parse_id(r.get("session_session_id")?)?,
        principal: parse_id(r.get("session_principal")?)?,
        executor_id: r.get("session_executor_id")?,
        executor_reported: r.get("session_executor_reported")?,
        executor_principal: parse_id(r.get("session_executor_principal")?)?,
        state: SessionState {
            cwd: r.get("session_cwd")?,
            env,
        },
        created_at: ts(r.get("session_created_at")?),
        updated_at: ts(r.get("session_updated_at")?),
        claim_expires_at: ts(r.get("session_claim_expires_at")?),
        ended_at: ots(r.get("session_ended_at")?),
        end_reason: r.get("session_end_reason")?,
    })
}

fn env_json(env: &BTreeMap<String, String>) -> String {
    serde_json::to_string(env).unwrap_or_else(|_| "{}".to_owned())
}

/// The executor id a decision's `executor_reported` JSON names, if any.
fn reported_executor_id(reported: Option<&str>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(reported?).ok()?;
    v.get("executor_id")?.as_str().map(str::to_owned)
}

fn elsewhere(s: &Session) -> Error {
    Error::SessionElsewhere {
        session_id: s.session_id.as_str().to_owned(),
        executor_id: s.executor_id.clone(),
        pod: s.executor_pod(),
        claim_expires_at_micros: s.claim_expires_at.as_micros(),
    }
}

impl Core {
    fn check_holder(&self, h: &SessionHolder) -> Result<SessionHolder> {
        if h.executor_id.is_empty() {
            return Err(Error::invalid(
                "executor.executor_id",
                "must not be empty; an executor acts on sessions under its stable id",
            ));
        }
        if h.executor_id.len() > 128 {
            return Err(Error::invalid(
                "executor.executor_id",
                format!("is {} bytes; at most 128 allowed", h.executor_id.len()),
            ));
        }
        self.check_identifier("executor.executor_id", &h.executor_id)?;
        Ok(SessionHolder {
            executor_id: h.executor_id.clone(),
            executor_principal: h.executor_principal.clone(),
            executor_reported: h
                .executor_reported
                .as_deref()
                .map(|r| self.redactor.redact(r)),
        })
    }

    fn redact_state(&self, s: &SessionState) -> SessionState {
        SessionState {
            cwd: self.redactor.redact(&s.cwd),
            env: s
                .env
                .iter()
                .map(|(k, v)| (self.redactor.redact(k), self.redactor.redact(v)))
                .collect(),
        }
    }

    async fn session_locked(&self, tx: &mut Tx, id: &SessionId) -> Result<Option<Session>> {
        tx.fetch_opt(
            &format!(
                "SELECT {S_SELECT} FROM tg_sessions WHERE session_id = $1{}",
                self.for_update()
            ),
            args![id.as_str()],
        )
        .await?
        .map(|r| session_from(&r))
        .transpose()
    }

    pub(crate) async fn claim_session(&self, c: &ClaimSession) -> Result<Claimed> {
        self.check_identifier("session_id", c.session_id.as_str())?;
        self.check_identifier("principal", c.principal.as_str())?;
        let holder = self.check_holder(&c.holder)?;
        self.retry(|| async {
            let now = self.clock.now();
            let until = now.plus(c.ttl);
            let mut tx = self.pool.begin().await?;
            let created = tx
                .fetch_opt(
                    &format!(
                        "INSERT INTO tg_sessions ({S_COLS}) VALUES ({}) \
                         ON CONFLICT (session_id) DO NOTHING RETURNING {S_SELECT}",
                        placeholders(S_COLS)
                    ),
                    args![
                        c.session_id.as_str(),
                        c.principal.as_str(),
                        holder.executor_id.as_str(),
                        holder.executor_reported.clone(),
                        holder.executor_principal.as_str(),
                        "",
                        "{}",
                        now.as_micros(),
                        now.as_micros(),
                        until.as_micros(),
                        None::<i64>,
                        None::<String>
                    ],
                )
                .await?;
            if let Some(r) = created {
                let session = session_from(&r)?;
                tx.commit(Vec::new()).await?;
                return Ok(Claimed {
                    session,
                    resumed: false,
                });
            }
            let s = self
                .session_locked(&mut tx, &c.session_id)
                .await?
                .ok_or_else(|| Error::Database("a conflicting session row vanished".into()))?;
            if s.principal != c.principal {
                tx.rollback().await?;
                return Err(Error::SessionOtherPrincipal {
                    session_id: s.session_id.as_str().to_owned(),
                });
            }
            if s.claimed(now) && !s.held_by(&holder) {
                tx.rollback().await?;
                return Err(elsewhere(&s));
            }
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_sessions SET executor_id = $2, executor_reported = $3, \
                         executor_principal = $4, updated_at = $5, claim_expires_at = $6, \
                         ended_at = NULL, end_reason = NULL WHERE session_id = $1 RETURNING {S_SELECT}"
                    ),
                    args![
                        c.session_id.as_str(),
                        holder.executor_id.as_str(),
                        holder.executor_reported.clone(),
                        holder.executor_principal.as_str(),
                        now.as_micros(),
                        until.as_micros()
                    ],
                )
                .await?;
            let session = session_from(&expect_row(row, "claiming a session")?)?;
            tx.commit(Vec::new()).await?;
            Ok(Claimed {
                session,
                resumed: true,
            })
        })
        .await
    }

    /// Extends `holder`'s claims on `ids` in one statement; answers the ids it no longer
    /// holds (never claimed, taken over, or ended).
    pub(crate) async fn renew_sessions(
        &self,
        holder: &SessionHolder,
        ids: &[SessionId],
        ttl: std::time::Duration,
    ) -> Result<Vec<SessionId>> {
        let holder = self.check_holder(holder)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = (0..ids.len())
            .map(|i| format!("${}", i + 5))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "UPDATE tg_sessions SET claim_expires_at = $1, updated_at = $2 \
             WHERE executor_id = $3 AND executor_principal = $4 AND ended_at IS NULL \
             AND session_id IN ({list}) RETURNING session_id AS renewed_id"
        );
        let renewed = self
            .retry(|| async {
                let now = self.clock.now();
                let mut args = args![
                    now.plus(ttl).as_micros(),
                    now.as_micros(),
                    holder.executor_id.as_str(),
                    holder.executor_principal.as_str()
                ];
                args.extend(ids.iter().map(|i| Arg::from(i.as_str())));
                let mut tx = self.pool.begin().await?;
                let rows = tx.fetch_all(&sql, args).await?;
                tx.commit(Vec::new()).await?;
                rows.iter()
                    .map(|r| r.get::<String>("renewed_id"))
                    .collect::<Result<HashSet<_>>>()
            })
            .await?;
        Ok(ids
            .iter()
            .filter(|i| !renewed.contains(i.as_str()))
            .cloned()
            .collect())
    }

    /// The holder's write to its session (`SET` clause over `$2`…): refused with
    /// `SessionElsewhere` when `holder` does not hold it, `SessionNotFound` when there is none.
    async fn holder_write(
        &self,
        holder: &SessionHolder,
        id: &SessionId,
        set: &str,
        values: Vec<Arg>,
    ) -> Result<Session> {
        let sql = format!(
            "UPDATE tg_sessions SET {set} WHERE session_id = $1 AND ended_at IS NULL \
             AND executor_id = ${} AND executor_principal = ${} RETURNING {S_SELECT}",
            values.len() + 2,
            values.len() + 3,
        );
        self.retry(|| async {
            let mut tx = self.pool.begin().await?;
            let mut a = args![id.as_str()];
            a.extend(values.iter().cloned());
            a.extend(args![
                holder.executor_id.as_str(),
                holder.executor_principal.as_str()
            ]);
            if let Some(r) = tx.fetch_opt(&sql, a).await? {
                let s = session_from(&r)?;
                tx.commit(Vec::new()).await?;
                return Ok(s);
            }
            let s = self.session_locked(&mut tx, id).await?;
            tx.rollback().await?;
            match s {
                None => Err(Error::SessionNotFound {
                    id: id.as_str().to_owned(),
                }),
                Some(s) => Err(elsewhere(&s)),
            }
        })
        .await
    }

    pub(crate) async fn update_session(
        &self,
        holder: &SessionHolder,
        id: &SessionId,
        state: &SessionState,
    ) -> Result<Session> {
        let holder = self.check_holder(holder)?;
        let state = self.redact_state(state);
        let now = self.clock.now();
        self.holder_write(
            &holder,
            id,
            "cwd = $2, env = $3, updated_at = $4",
            args![state.cwd.as_str(), env_json(&state.env), now.as_micros()],
        )
        .await
    }

    pub(crate) async fn end_session(
        &self,
        holder: &SessionHolder,
        id: &SessionId,
        reason: &str,
    ) -> Result<Session> {
        let holder = self.check_holder(holder)?;
        if !matches!(reason, "idle" | "shutdown") {
            return Err(Error::invalid(
                "reason",
                format!("`{reason}`: expected idle or shutdown"),
            ));
        }
        let now = self.clock.now();
        match self
            .holder_write(
                &holder,
                id,
                "ended_at = $2, end_reason = $3, claim_expires_at = $2, updated_at = $2",
                args![now.as_micros(), reason],
            )
            .await
        {
            // A retried end finds its own: the session ended under this holder.
            Err(Error::SessionElsewhere { .. }) => {
                let s = self.session(id).await?;
                if s.ended_at.is_some() && s.held_by(&holder) {
                    Ok(s)
                } else {
                    Err(elsewhere(&s))
                }
            }
            other => other,
        }
    }

    /// Ends the lease of every allowed decision `holder` made (by its credential and reported
    /// executor id) that has no outcome and whose lease still runs, and ends every claim it
    /// holds, in one transaction.
    pub(crate) async fn abandon(&self, holder: &SessionHolder) -> Result<Abandoned> {
        let holder = self.check_holder(holder)?;
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let candidates = tx
                .fetch_all(
                    &format!(
                        "SELECT {D_SELECT} FROM tg_decisions WHERE executor = $1 \
                         AND allowed_at IS NOT NULL AND lease_expires_at > $2 \
                         AND NOT EXISTS (SELECT 1 FROM tg_outcomes o WHERE o.decision_id = tg_decisions.id) \
                         ORDER BY created_at, id{}",
                        self.for_update()
                    ),
                    args![holder.executor_principal.as_str(), now.as_micros()],
                )
                .await?;
            let mut events = Vec::new();
            let mut decision_ids = Vec::new();
            for r in &candidates {
                let d = decision_from(r)?;
                if reported_executor_id(d.executor_reported.as_deref()).as_deref()
                    != Some(holder.executor_id.as_str())
                {
                    continue;
                }
                let row = tx
                    .fetch_opt(
                        &format!(
                            "UPDATE tg_decisions SET lease_expires_at = $2 \
                             WHERE id = $1 AND lease_expires_at > $2 RETURNING {D_SELECT}"
                        ),
                        args![d.id.as_str(), now.as_micros()],
                    )
                    .await?;
                let ended = decision_from(&expect_row(row, "ending a decision's lease")?)?;
                events.push(ev_decision("decision.abandoned", &ended));
                decision_ids.push(ended.id);
            }
            let sessions = tx
                .fetch_all(
                    "UPDATE tg_sessions SET ended_at = $3, end_reason = $4, claim_expires_at = $3, \
                     updated_at = $3 WHERE executor_id = $1 AND executor_principal = $2 \
                     AND ended_at IS NULL RETURNING session_id AS abandoned_id",
                    args![
                        holder.executor_id.as_str(),
                        holder.executor_principal.as_str(),
                        now.as_micros(),
                        ABANDONED
                    ],
                )
                .await?;
            let mut session_ids = sessions
                .iter()
                .map(|r| parse_id(r.get("abandoned_id")?))
                .collect::<Result<Vec<SessionId>>>()?;
            session_ids.sort();
            self.finish(tx, events).await?;
            Ok(Abandoned {
                decision_ids,
                session_ids,
            })
        })
        .await
    }

    pub(crate) async fn session(&self, id: &SessionId) -> Result<Session> {
        self.retry(|| async {
            self.pool
                .fetch_opt(
                    &format!("SELECT {S_SELECT} FROM tg_sessions WHERE session_id = $1"),
                    args![id.as_str()],
                )
                .await?
                .map(|r| session_from(&r))
                .transpose()?
                .ok_or_else(|| Error::SessionNotFound {
                    id: id.as_str().to_owned(),
                })
        })
        .await
    }

    pub(crate) async fn list_sessions(&self, f: &SessionFilter) -> Result<Vec<Session>> {
        let limit = i64::from(f.limit.clamp(1, 1000));
        let sql = format!(
            "SELECT {S_SELECT} FROM tg_sessions WHERE ($1 IS NULL OR principal = $1) \
             AND ($2 IS NULL OR (ended_at IS NULL AND claim_expires_at > $2)) \
             ORDER BY updated_at DESC, session_id DESC LIMIT $3"
        );
        let rows = self
            .retry(|| async {
                let now = self.clock.now();
                self.pool
                    .fetch_all(
                        &sql,
                        args![
                            f.principal.as_ref().map(|p| p.as_str()),
                            f.claimed_only.then_some(now.as_micros()),
                            limit
                        ],
                    )
                    .await
            })
            .await?;
        rows.iter().map(session_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reported_executor_id_is_read_from_the_identity_json() {
        assert_eq!(
            reported_executor_id(Some(r#"{"executor_id":"ex-1","pod":"p"}"#)).as_deref(),
            Some("ex-1")
        );
        assert_eq!(reported_executor_id(Some(r#"{"pod":"p"}"#)), None);
        assert_eq!(reported_executor_id(Some("not json")), None);
        assert_eq!(reported_executor_id(None), None);
    }
}
