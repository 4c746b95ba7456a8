//! Recording decisions: one at a time, or batched into one transaction by the writer task.

use super::rows::{
    D_COLS, D_SELECT, O_SELECT, decision_args, decision_from, ev_decision, outcome_from,
    placeholders,
};
use super::{Core, same_request};
use crate::canon;
use crate::db::{Arg, Event, Pool, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{DecisionId, DecisionRecord, OutcomeRecord, Recorded};
use sqlx::AssertSqlSafe;
use std::collections::HashSet;
use toolgate_core::Tier;

use sqlx::postgres::PgPool;

/// A decision ready for the group commit: its row's values and its audit payload, computed
/// by the caller (in parallel with other callers) so the writer only gathers them.
pub(crate) struct Pending {
    pub(crate) decision: DecisionRecord,
    args: Vec<Arg>,
    payload: Vec<u8>,
}

impl Pending {
    pub(crate) fn new(decision: DecisionRecord) -> Self {
        Pending {
            args: decision_args(&decision),
            payload: canon::decision(RECORDED, &decision),
            decision,
        }
    }
}

const RECORDED: &str = "decision.recorded";

/// The batch statement on Postgres: every column bound as one array (text[] or int8[], by the
/// type `decision_args` gives it), the rows inserted by a data-modifying CTE and the chain
/// extended in the same statement, so a batch is one round trip and one commit.
fn pg_batch_sql(is_int: &[bool]) -> String {
    let arrays = is_int
        .iter()
        .enumerate()
        .map(|(i, int)| format!("${}::{}[]", i + 1, if *int { "int8" } else { "text" }))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "WITH ins AS (
            INSERT INTO tg_decisions ({D_COLS})
            SELECT * FROM unnest({arrays})
            RETURNING 1)
        SELECT (SELECT count(*) FROM ins), tg_append(${}::text[], $1::text[], ${}::bytea[])",
        is_int.len() + 1,
        is_int.len() + 2
    )
}

/// One column of a batch, as Postgres binds it.
enum Column {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
}

impl Core {
    /// Writes a batch of auto/deny decisions; one result per input, in order.
    ///
    /// The batch is one transaction when every row goes in; when one cannot (a replayed call
    /// id, a row-level conflict), each decision is written on its own, so one row never fails
    /// the others. A result is sent only after the transaction holding its row committed.
    pub(crate) async fn write_decisions(&self, batch: Vec<Pending>) -> Vec<Result<Recorded>> {
        let mut seen = HashSet::new();
        let unique = batch
            .iter()
            .all(|p| seen.insert(p.decision.call_id.as_str()));
        let decisions = if unique {
            let (decisions, written) = match &self.pool {
                Pool::Pg(pool) => {
                    let (decisions, columns, payloads) = pg_columns(batch);
                    let written = match &columns {
                        Ok(columns) => {
                            self.retry(|| insert_batch_pg(pool, columns, &payloads))
                                .await
                        }
                        Err(e) => Err(Error::Database(e.to_string())),
                    };
                    (decisions, written)
                }
                Pool::Lite(_) => {
                    let written = self.retry(|| self.insert_batch_lite(&batch)).await;
                    (batch.into_iter().map(|p| p.decision).collect(), written)
                }
            };
            match written {
                Ok(()) => {
                    return decisions
                        .into_iter()
                        .map(|decision| {
                            Ok(Recorded {
                                decision,
                                replayed: false,
                                outcome: None,
                            })
                        })
                        .collect();
                }
                // Every row of the batch fails the same way; the message is said once.
                Err(Error::Unavailable(why)) => {
                    return decisions
                        .iter()
                        .map(|_| Err(Error::Unavailable(why.clone())))
                        .collect();
                }
                // A replayed call id (or another row-level problem) in the batch: sort it out
                // row by row.
                Err(_) => decisions,
            }
        } else {
            batch.into_iter().map(|p| p.decision).collect()
        };
        let mut out = Vec::with_capacity(decisions.len());
        for d in &decisions {
            out.push(self.retry(|| self.write_one(d)).await);
        }
        out
    }

    async fn insert_batch_lite(&self, batch: &[Pending]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "INSERT INTO tg_decisions ({D_COLS}) VALUES ({})",
            placeholders(D_COLS)
        );
        let mut events = Vec::with_capacity(batch.len());
        for p in batch {
            tx.exec(&sql, p.args.clone()).await?;
            events.push(Event {
                kind: RECORDED.to_owned(),
                subject: p.decision.id.as_str().to_owned(),
                payload: p.payload.clone(),
            });
        }
        self.finish(tx, events).await
    }

    pub(super) async fn write_one(&self, d: &DecisionRecord) -> Result<Recorded> {
        let mut tx = self.pool.begin().await?;
        let existing = tx
            .fetch_opt(
                &format!("SELECT {D_SELECT} FROM tg_decisions WHERE call_id = $1"),
                args![d.call_id.as_str()],
            )
            .await?;
        if let Some(row) = existing {
            let mut e = decision_from(&row)?;
            if e.id == d.id {
                tx.rollback().await?;
                // Our own earlier attempt committed before its acknowledgement was lost.
                return Ok(Recorded {
                    decision: e,
                    replayed: false,
                    outcome: None,
                });
            }
            same_request(&e, d)?;
            // Refused before it started, so never executed: its retry may run.
            if e.released_at.is_some() && e.allowed_at.is_none() && d.tier == Tier::Auto {
                if let Some(again) = self.reallow(&mut tx, &e, d).await? {
                    self.finish(tx, vec![ev_decision("decision.reallowed", &again)])
                        .await?;
                    return Ok(Recorded {
                        decision: again,
                        replayed: false,
                        outcome: None,
                    });
                }
                // A concurrent retry was allowed first: this one is its replay.
                let row = tx
                    .fetch_opt(
                        &format!("SELECT {D_SELECT} FROM tg_decisions WHERE id = $1"),
                        args![e.id.as_str()],
                    )
                    .await?;
                e = decision_from(&expect_row(row, "rereading a reallowed decision")?)?;
            }
            tx.rollback().await?;
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
                placeholders(D_COLS)
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

    pub(super) async fn outcome_of(&self, id: &DecisionId) -> Result<Option<OutcomeRecord>> {
        self.pool
            .fetch_opt(
                &format!("SELECT {O_SELECT} FROM tg_outcomes WHERE decision_id = $1"),
                args![id.as_str()],
            )
            .await?
            .map(|r| outcome_from(&r))
            .transpose()
    }
}

/// The batch as Postgres binds it: the decisions, one array per column (in `D_COLS` order) and
/// the audit payloads. Built once, outside the retry loop.
fn pg_columns(batch: Vec<Pending>) -> (Vec<DecisionRecord>, Result<Vec<Column>>, Vec<Vec<u8>>) {
    let n = batch.len();
    let mut decisions = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut columns: Vec<Column> = Vec::new();
    let mut mismatch = false;
    for p in batch {
        if columns.is_empty() {
            // The types are fixed per column by decision_args.
            columns = p
                .args
                .iter()
                .map(|a| match a {
                    Arg::Text(_) => Column::Text(Vec::with_capacity(n)),
                    Arg::Int(_) => Column::Int(Vec::with_capacity(n)),
                })
                .collect();
        }
        for (column, arg) in columns.iter_mut().zip(p.args) {
            match (column, arg) {
                (Column::Text(c), Arg::Text(v)) => c.push(v),
                (Column::Int(c), Arg::Int(v)) => c.push(v),
                // decision_args gives every row the same types; if it ever did not, the
                // batch is refused rather than stored with a column shifted.
                _ => mismatch = true,
            }
        }
        payloads.push(p.payload);
        decisions.push(p.decision);
    }
    let columns = if mismatch {
        Err(Error::Database(
            "decision columns of one batch differ in type".into(),
        ))
    } else {
        Ok(columns)
    };
    (decisions, columns, payloads)
}

async fn insert_batch_pg(pool: &PgPool, columns: &[Column], payloads: &[Vec<u8>]) -> Result<()> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let is_int: Vec<bool> = columns
        .iter()
        .map(|c| matches!(c, Column::Int(_)))
        .collect();
    let sql = SQL.get_or_init(|| pg_batch_sql(&is_int));
    let kinds = vec![RECORDED; payloads.len()];
    let mut q = sqlx::query(AssertSqlSafe(sql.as_str()));
    for c in columns {
        q = match c {
            Column::Text(v) => q.bind(v.as_slice()),
            Column::Int(v) => q.bind(v.as_slice()),
        };
    }
    q.bind(kinds).bind(payloads).execute(pool).await?;
    Ok(())
}
