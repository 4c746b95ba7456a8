//! Recording decisions: one at a time, or batched into one transaction by the writer task.

use super::*;

impl Core {
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
                // Every row of the batch fails the same way; the message is said once.
                Err(Error::Unavailable(why)) => {
                    return ds
                        .iter()
                        .map(|_| Err(Error::Unavailable(why.clone())))
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

    pub(super) async fn insert_batch(&self, ds: &[Decision]) -> Result<()> {
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
                    placeholders(D_COLS)
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

    pub(super) async fn write_one(&self, d: &Decision) -> Result<Recorded> {
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

    pub(super) async fn outcome_of(&self, id: &DecisionId) -> Result<Option<Outcome>> {
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
