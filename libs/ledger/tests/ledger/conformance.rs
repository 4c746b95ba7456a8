//! One conformance suite, instantiated for Postgres and for SQLite.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use toolgate_core::{Reason, ReasonedError, Tier};
use toolgate_ledger::*;

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::common::on_postgres(super::$name).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::common::on_sqlite(super::$name).await;
                }
            )*
        }
    };
}

conformance!(
    ap08_fifty_concurrent_consumers_exactly_one_runs,
    ap01_ap03_ap04_ap06_ap09_binding_covers_only_its_digest_session_and_policy,
    expiry_is_checked_at_use,
    concurrent_double_decide_one_wins_and_cancel_is_final,
    ap15_dedupe_by_digest_and_call_id,
    ap12_ap14_lease_expiry_makes_unknown_and_fences_stale_reports,
    a_report_fenced_by_the_held_lease_completes_in_time_and_is_refused_late,
    env07_canary_never_stored,
    hash_chain_verifies_and_detects_tampering,
    list_filters_and_paginates,
    watch_cursor_resumes_after_reconnect,
    waiter_wakes_on_decision,
    decisions_group_commit_and_replay,
    a_conflicting_decision_in_a_batch_fails_alone,
    the_same_call_in_concurrent_batches_is_recorded_once,
    outcomes_are_idempotent_per_decision,
    concurrent_reports_of_one_outcome_record_it_once,
    session_scope_is_explicit_and_reusable,
    newer_schema_is_refused_and_migrate_is_repeatable,
    self_approval_is_refused,
    head_cursor_and_page_token_after,
    an_outcome_records_the_isolation_its_run_was_given,
    every_allowed_call_carries_a_lease_and_names_its_executor_by_credential,
    a_denial_is_remembered_for_its_binding_until_the_approval_expires,
    a_call_refused_before_it_started_is_released_not_executed,
    verify_of_a_ledger_being_written_is_never_broken,
    a_session_is_claimed_once_and_routed_to_its_holder,
    fifty_executors_claim_one_session_and_exactly_one_holds_it,
    renew_answers_the_sessions_an_executor_lost,
    only_the_holder_updates_or_ends_a_session,
    abandon_ends_the_leases_of_this_executors_unreported_calls_only,
    sessions_are_listed_most_recently_active_first,
);

/// `ledger verify` on a live ledger: before the fix it read the chain and the rows in
/// separate statements, so a write committed in between showed as a row without its event
/// (a false tamper alarm in 131 of 135 runs). It now reads one snapshot.
async fn verify_of_a_ledger_being_written_is_never_broken(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let (l, stop) = (l.clone(), stop.clone());
        writers.spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let call = format!("live-{w}-{n}");
                let r = l
                    .record_decision(new_decision(&call, "s", "make", Tier::Auto))
                    .await
                    .unwrap();
                l.record_outcome(outcome(&r.decision, None)).await.unwrap();
                n += 1;
            }
            n
        });
    }
    let mut last_events = 0;
    for verified in 0..25 {
        let v = l.verify().await.unwrap();
        assert!(
            v.broken.is_none(),
            "a live ledger verified as broken after {verified} clean runs: {:?}",
            v.broken
        );
        assert!(v.events >= last_events);
        last_events = v.events;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut written = 0;
    while let Some(n) = writers.join_next().await {
        written += n.unwrap();
    }
    assert!(written > 0, "the writers wrote while verify ran");
    assert!(l.verify().await.unwrap().broken.is_none());
}

fn not_started(d: &DecisionRecord, lease: Option<LeaseToken>) -> NotStarted {
    NotStarted {
        decision_id: d.id.clone(),
        lease_token: lease,
        lease_held: false,
        executor_principal: Some(Principal::try_from("executor-0").unwrap()),
        reason: "BUSY: all 64 run slots are in use".to_owned(),
    }
}

/// Schema 5: a refusal before start (BUSY at the run-slot limit, sandbox unavailable) is not
/// an execution. Before the fix the executor recorded it as an outcome, so the retry under the
/// same `call_id` was "already executed" forever and the once-approval it consumed was spent.
async fn a_call_refused_before_it_started_is_released_not_executed(ctx: Ctx) {
    let l = ctx.ledger().await;

    // Auto: released, then the retry is allowed again, once, and runs.
    let first = l
        .record_decision(new_decision("r1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    let released = l.release(not_started(&first.decision, None)).await.unwrap();
    assert_eq!(released.allowed_at, None);
    assert_eq!(released.lease_expires_at, None);
    assert!(released.released_at.is_some());
    assert_eq!(
        released.release_reason.as_deref(),
        Some("BUSY: all 64 run slots are in use")
    );
    // The report is retried: the same release, not an error.
    let again = l.release(not_started(&first.decision, None)).await.unwrap();
    assert_eq!(again, released);
    let retry = l
        .record_decision(new_decision("r1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    assert!(!retry.replayed, "the retry of a released call runs");
    assert_eq!(retry.decision.id, first.decision.id);
    assert!(retry.decision.allowed_at.is_some());
    // It is allowed once: the next replay is in flight, not a second run.
    let replay = l
        .record_decision(new_decision("r1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    assert!(replay.replayed);
    l.record_outcome(outcome(&retry.decision, None))
        .await
        .unwrap();
    // A call that ran is never released (nor run) again.
    assert_eq!(
        l.release(not_started(&retry.decision, None))
            .await
            .unwrap_err()
            .reason(),
        Reason::OutcomeConflict
    );

    // Ask: the consumed once-approval is given back and the retry consumes it.
    let id = grant(&l, "q1", "s", "deploy").await;
    let taken = l.ask(ask("q1", "s", "deploy")).await.unwrap();
    let AskVerdict::Allowed { lease: Some(lease) } = taken.verdict else {
        panic!("approved: {:?}", taken.verdict)
    };
    // A stale token does not give it back.
    assert!(
        l.release(not_started(
            &taken.decision,
            Some(LeaseToken::from_raw(lease.token.get() ^ 1))
        ))
        .await
        .is_err()
    );
    l.release(not_started(&taken.decision, Some(lease.token)))
        .await
        .unwrap();
    let a = l.get(id.clone()).await.unwrap();
    assert_eq!(
        a.state,
        ApprovalState::Approved,
        "the approval is not spent"
    );
    assert_eq!(a.consumed_by_call, None);
    let retry = l.ask(ask("q1", "s", "deploy")).await.unwrap();
    assert!(
        matches!(retry.verdict, AskVerdict::Allowed { lease: Some(_) }),
        "{:?}",
        retry.verdict
    );
    assert_eq!(retry.approval.id, id);
    assert_eq!(
        l.ask(ask("q1", "s", "deploy")).await.unwrap().verdict,
        AskVerdict::AlreadyRan
    );
    let v = l.verify().await.unwrap();
    assert!(v.broken.is_none(), "{:?}", v.broken);
}

/// Schema 3: an allowed call, auto or approved, carries a lease. Replayed while it runs, the
/// call is in flight; after it without an outcome, unknown for good (a late report is refused,
/// so "unknown" is never contradicted). Rows name the executor by its credential, with what it
/// reported kept beside it.
async fn every_allowed_call_carries_a_lease_and_names_its_executor_by_credential(ctx: Ctx) {
    let l = ctx.ledger().await;
    let default_lease = Duration::from_secs(15 * 60);
    let first = l
        .record_decision(new_decision("a1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    let d = first.decision.clone();
    assert_eq!(d.executor.as_ref().map(|e| e.as_str()), Some("executor-0"));
    assert_eq!(
        d.executor_reported.as_deref(),
        Some(r#"{"pod":"executor-0-pod"}"#)
    );
    let until = d
        .lease_expires_at
        .expect("an auto decision carries a lease");
    assert_eq!(until, d.allowed_at.unwrap().plus(default_lease));

    // A replay while the lease runs: in flight, not "already executed".
    let replay = l
        .record_decision(new_decision("a1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.outcome, None);
    assert_eq!(
        replay.decision.allowed_state(false, ctx.clock.now()),
        Some(AllowedState::InFlight(until))
    );

    // Denied and parked calls were never allowed: no lease, no allowed state.
    let denied = l
        .record_decision(new_decision("n1", "s", "rm -rf /", Tier::Deny))
        .await
        .unwrap();
    assert_eq!(denied.decision.lease_expires_at, None);
    assert_eq!(denied.decision.allowed_state(false, ctx.clock.now()), None);
    let parked = l.ask(ask("p1", "s", "make deploy")).await.unwrap();
    assert_eq!(parked.verdict, AskVerdict::Pending);
    assert_eq!(parked.decision.lease_expires_at, None);

    // A lease of its own (a run's timeout plus the report time) is honoured.
    let mut nd = new_decision("a3", "s", "make test", Tier::Auto);
    nd.lease = Some(Duration::from_secs(5));
    let short = l.record_decision(nd).await.unwrap().decision;
    assert_eq!(
        short.lease_expires_at,
        Some(short.allowed_at.unwrap().plus(Duration::from_secs(5)))
    );

    // In time: the outcome names the reporting credential.
    let ok = l
        .record_decision(new_decision("a2", "s", "make", Tier::Auto))
        .await
        .unwrap()
        .decision;
    let o = l.record_outcome(outcome(&ok, None)).await.unwrap();
    assert_eq!(
        o.executor_principal.as_ref().map(|p| p.as_str()),
        Some("executor-0")
    );
    assert_eq!(
        ok.allowed_state(true, ctx.clock.now()),
        Some(AllowedState::Ran)
    );

    // An approved call: the consumer is the credential, and the decision's lease is the
    // consumption's.
    grant(&l, "g", "s", "make deploy").await;
    let run = l.ask(ask("r1", "s", "make deploy")).await.unwrap();
    let AskVerdict::Allowed { lease: Some(lease) } = run.verdict else {
        panic!("expected a consumption, got {:?}", run.verdict)
    };
    assert_eq!(
        run.approval.consumed_by_executor.as_deref(),
        Some("executor-0")
    );
    assert_eq!(run.decision.lease_expires_at, Some(lease.expires_at));

    // The lease runs out without an outcome: unknown, and a late report is refused.
    ctx.time.advance(default_lease + Duration::from_secs(1));
    let err = l.record_outcome(outcome(&d, None)).await.unwrap_err();
    assert!(matches!(err, Error::DecisionLeaseExpired { .. }), "{err}");
    assert_eq!(err.reason(), Reason::OutcomeUnknown);
    let rec = l
        .lookup_call(CallId::try_from("a1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.outcome, None);
    assert_eq!(
        rec.decision.allowed_state(false, ctx.clock.now()),
        Some(AllowedState::Unknown(Some(until)))
    );
    assert!(l.verify().await.unwrap().broken.is_none());
}

/// Schema 2: an outcome keeps the isolation its run was given, the chain covers it, and an
/// outcome without one (what schema 1 wrote) still verifies.
async fn an_outcome_records_the_isolation_its_run_was_given(ctx: Ctx) {
    let l = ctx.ledger().await;
    let with = l
        .record_decision(new_decision("c1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    let without = l
        .record_decision(new_decision("c2", "s", "make", Tier::Auto))
        .await
        .unwrap();
    let isolation = r#"{"sandbox_profile":"workspace","sandboxed":true}"#;
    let mut o = outcome(&with.decision, None);
    o.isolation = Some(isolation.to_owned());
    l.record_outcome(o).await.unwrap();
    l.record_outcome(outcome(&without.decision, None))
        .await
        .unwrap();
    let rec = l
        .lookup_call(CallId::try_from("c1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rec.outcome.and_then(|o| o.isolation).as_deref(),
        Some(isolation)
    );
    let report = l.verify().await.unwrap();
    assert!(report.broken.is_none(), "{report:?}");
}

async fn ap08_fifty_concurrent_consumers_exactly_one_runs(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let first = l.ask(ask("c0", "s1", "ls")).await.unwrap();
    assert_eq!(first.verdict, AskVerdict::Pending);
    l.decide(first.approval.id.clone(), approve("bob"))
        .await
        .unwrap();

    let mut tasks = Vec::new();
    for i in 0..50 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            l.ask(ask(&format!("c{}", i + 1), "s1", "ls")).await
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        let out = t.await.unwrap().unwrap();
        match out.verdict {
            AskVerdict::Allowed { lease } => {
                assert!(lease.is_some(), "once-scope consumption carries a lease");
                assert_eq!(out.approval.id, first.approval.id);
                allowed += 1;
            }
            AskVerdict::Pending => assert_ne!(out.approval.id, first.approval.id),
            other => panic!("unexpected verdict {other:?}"),
        }
    }
    assert_eq!(allowed, 1, "exactly one consumer may run");
    let a = l.get(first.approval.id.clone()).await.unwrap();
    assert_eq!(a.state, ApprovalState::Consumed);
    // The 49 losers share one new pending approval.
    let pending = l
        .list(
            ApprovalFilter {
                state: Some(ApprovalState::Pending),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(pending.items.len(), 1);
    assert_eq!(
        l.count_pending().await.unwrap(),
        1,
        "the gauge counts the same row"
    );
    assert!(l.verify().await.unwrap().broken.is_none());
}

async fn grant(l: &SqlLedger, call: &str, session: &str, request: &str) -> ApprovalId {
    let out = l.ask(ask(call, session, request)).await.unwrap();
    assert_eq!(out.verdict, AskVerdict::Pending);
    l.decide(out.approval.id.clone(), approve("bob"))
        .await
        .unwrap();
    out.approval.id
}

async fn ap01_ap03_ap04_ap06_ap09_binding_covers_only_its_digest_session_and_policy(ctx: Ctx) {
    let l = ctx.ledger().await;
    // AP-01: `rm /tmp/a` approved does not cover `rm -rf /tmp/a`.
    let id = grant(&l, "g1", "A", "rm /tmp/a").await;
    let other = l.ask(ask("t1", "A", "rm -rf /tmp/a")).await.unwrap();
    assert_eq!(other.verdict, AskVerdict::Pending);
    assert_ne!(other.approval.id, id);
    // AP-03: session A's approval does not cover session B.
    let id = grant(&l, "g2", "A", "echo ok").await;
    let other = l.ask(ask("t2", "B", "echo ok")).await.unwrap();
    assert_eq!(other.verdict, AskVerdict::Pending);
    assert_ne!(other.approval.id, id);
    // AP-04 / AP-06 / AP-09: env, script content and sandbox are digest inputs.
    for (granted, then) in [
        ("make test|env=local", "make test|env=remote"),
        ("python3 run.py|sha=S1", "python3 run.py|sha=S2"),
        ("ls|sandbox=workspace-write", "ls|sandbox=none"),
    ] {
        let id = grant(
            &l,
            &format!("g-{granted}").replace(['|', ' ', '='], "_"),
            "A",
            granted,
        )
        .await;
        let other = l
            .ask(ask(
                &format!("t-{then}").replace(['|', ' ', '='], "_"),
                "A",
                then,
            ))
            .await
            .unwrap();
        assert_eq!(
            other.verdict,
            AskVerdict::Pending,
            "{then} must not be covered"
        );
        assert_ne!(other.approval.id, id);
    }
    // A new policy version does not inherit approvals either.
    let id = grant(&l, "g9", "A", "make build").await;
    let mut req = ask("t9", "A", "make build");
    req.decision.policy_version = PolicyVersion::try_from("v2").unwrap();
    let out = l.ask(req).await.unwrap();
    assert_eq!(out.verdict, AskVerdict::Pending);
    assert_ne!(out.approval.id, id);
    // The exact request is covered.
    let ok = l.ask(ask("t10", "A", "make build")).await.unwrap();
    assert!(matches!(ok.verdict, AskVerdict::Allowed { .. }));
    assert_eq!(ok.approval.id, id);
}

/// After a human denies, the same request in the same session gets that denial back under any
/// new call id (an MCP client retrying, a gRPC caller with a fresh `call_id`) until the
/// approval's expiry; the human is not asked again. Other arguments or sessions ask anew.
async fn a_denial_is_remembered_for_its_binding_until_the_approval_expires(ctx: Ctx) {
    let l = ctx.ledger().await;
    let first = l.ask(ask("c1", "s", "rm -rf build")).await.unwrap();
    l.decide(first.approval.id.clone(), deny("bob", "keep the build"))
        .await
        .unwrap();
    for call in ["c2", "c3"] {
        let again = l.ask(ask(call, "s", "rm -rf build")).await.unwrap();
        assert_eq!(again.verdict, AskVerdict::Denied, "{call}");
        assert_eq!(again.approval.id, first.approval.id);
        assert_eq!(again.approval.message.as_deref(), Some("keep the build"));
        assert_eq!(again.decision.call_id.as_str(), call);
    }
    let pending = l
        .list(
            ApprovalFilter {
                state: Some(ApprovalState::Pending),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert!(
        pending.items.is_empty(),
        "nobody is asked again: {pending:?}"
    );
    // Other arguments, or another session, ask a human.
    let other = l.ask(ask("c4", "s", "rm -rf dist")).await.unwrap();
    assert_eq!(other.verdict, AskVerdict::Pending);
    let elsewhere = l.ask(ask("c5", "t", "rm -rf build")).await.unwrap();
    assert_eq!(elsewhere.verdict, AskVerdict::Pending);
    // Once the denied approval would have expired, the request asks again.
    ctx.time.advance(Duration::from_secs(25 * 3600));
    let later = l.ask(ask("c6", "s", "rm -rf build")).await.unwrap();
    assert_eq!(later.verdict, AskVerdict::Pending);
    assert_ne!(later.approval.id, first.approval.id);
}

async fn expiry_is_checked_at_use(ctx: Ctx) {
    let l = ctx.ledger().await;
    let id = grant(&l, "g1", "s", "deploy").await;
    let a = l.get(id.clone()).await.unwrap();
    // Past the approval's use-by time; no sweeper has run.
    ctx.time.advance(Duration::from_secs(3601));
    assert!(a.expires_at < ctx.time.now());
    let out = l.ask(ask("t1", "s", "deploy")).await.unwrap();
    assert_eq!(out.verdict, AskVerdict::Pending);
    assert_ne!(out.approval.id, id);
    assert_eq!(l.get(id).await.unwrap().state, ApprovalState::Expired);

    // A pending approval past its decide-by time cannot be approved.
    ctx.time.advance(Duration::from_secs(25 * 3600));
    let err = l
        .decide(out.approval.id.clone(), approve("bob"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    assert_eq!(err.reason(), Reason::ApprovalExpired);
    assert_eq!(
        l.get(out.approval.id).await.unwrap().state,
        ApprovalState::Expired
    );
}

async fn concurrent_double_decide_one_wins_and_cancel_is_final(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    for round in 0..5 {
        let out = l
            .ask(ask(&format!("c{round}"), "s", &format!("cmd {round}")))
            .await
            .unwrap();
        let (a, b) = (l.clone(), l.clone());
        let (ia, ib) = (out.approval.id.clone(), out.approval.id.clone());
        let ra = tokio::spawn(async move { a.decide(ia, approve("alice")).await });
        let rb = tokio::spawn(async move { b.decide(ib, deny("bob", "no")).await });
        let (ra, rb) = (ra.await.unwrap(), rb.await.unwrap());
        assert!(
            ra.is_ok() ^ rb.is_ok(),
            "exactly one decide wins: {ra:?} {rb:?}"
        );
        let err = ra.err().or(rb.err()).unwrap();
        assert!(matches!(err, Error::NotPending { .. }), "{err}");
        assert_eq!(err.reason(), Reason::ApprovalNotPending);
        assert_eq!(err.reason().code(), toolgate_core::Code::FailedPrecondition);
    }
    let out = l.ask(ask("cx", "s", "cancel me")).await.unwrap();
    let c = l
        .cancel(
            out.approval.id.clone(),
            approver("agent"),
            Some("not needed".into()),
        )
        .await
        .unwrap();
    assert_eq!(c.state, ApprovalState::Cancelled);
    let err = l
        .decide(out.approval.id.clone(), approve("bob"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotPending {
                state: ApprovalState::Cancelled,
                ..
            }
        ),
        "{err}"
    );
    let err = l
        .cancel(out.approval.id, approver("x"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotPending { .. }));
    let missing = ApprovalId::try_from("apr_missing").unwrap();
    assert!(matches!(
        l.decide(missing, approve("bob")).await.unwrap_err(),
        Error::ApprovalNotFound { .. }
    ));
}

async fn ap15_dedupe_by_digest_and_call_id(ctx: Ctx) {
    let l = ctx.ledger().await;
    let a = l.ask(ask("c1", "s", "rm -rf build")).await.unwrap();
    let b = l.ask(ask("c2", "s", "rm -rf build")).await.unwrap();
    assert_eq!(
        a.approval.id, b.approval.id,
        "identical pending requests share one approval"
    );
    // AP-15: the same call id across a timeout gets the same approval and one decision row.
    let again = l.ask(ask("c1", "s", "rm -rf build")).await.unwrap();
    assert_eq!(again.approval.id, a.approval.id);
    assert_eq!(again.decision.id, a.decision.id);
    assert_eq!(again.verdict, AskVerdict::Pending);
    // Another session does not share it.
    let c = l.ask(ask("c3", "t", "rm -rf build")).await.unwrap();
    assert_ne!(c.approval.id, a.approval.id);
    // A call id reused for a different request is refused.
    let err = l.ask(ask("c1", "s", "something else")).await.unwrap_err();
    assert!(matches!(err, Error::CallIdReused { .. }), "{err}");
    // Resuming the same call after approval runs it once, and never again.
    l.decide(a.approval.id.clone(), approve("bob"))
        .await
        .unwrap();
    let run = l.ask(ask("c1", "s", "rm -rf build")).await.unwrap();
    assert!(matches!(
        run.verdict,
        AskVerdict::Allowed { lease: Some(_) }
    ));
    let replay = l.ask(ask("c1", "s", "rm -rf build")).await.unwrap();
    assert_eq!(replay.verdict, AskVerdict::AlreadyRan);
    // c2 shared the approval but c1 consumed it: c2 needs a new one.
    let c2 = l.ask(ask("c2", "s", "rm -rf build")).await.unwrap();
    assert_eq!(c2.verdict, AskVerdict::Pending);
    assert_ne!(c2.approval.id, a.approval.id);
    assert_eq!(c2.decision.id, b.decision.id);
    assert!(l.verify().await.unwrap().broken.is_none());
}

async fn ap12_ap14_lease_expiry_makes_unknown_and_fences_stale_reports(ctx: Ctx) {
    let l = ctx.ledger().await;
    grant(&l, "g", "s", "make deploy").await;
    let run = l.ask(ask("run1", "s", "make deploy")).await.unwrap();
    let AskVerdict::Allowed { lease: Some(lease) } = run.verdict else {
        panic!("expected a consumption, got {:?}", run.verdict)
    };
    // AP-12: the executor dies; after the lease the run is unknown, never re-runnable.
    ctx.time.advance(Duration::from_secs(16 * 60));
    let swept = l.sweep().await.unwrap();
    assert_eq!(swept.unknown, 1);
    assert_eq!(
        l.get(run.approval.id.clone()).await.unwrap().state,
        ApprovalState::Unknown
    );
    let replay = l.ask(ask("run1", "s", "make deploy")).await.unwrap();
    assert_eq!(replay.verdict, AskVerdict::AlreadyRan);
    let again = l.ask(ask("run2", "s", "make deploy")).await.unwrap();
    assert_eq!(again.verdict, AskVerdict::Pending, "needs a human again");
    // AP-14: the stale worker's late completion is refused by the fence.
    let err = l
        .record_outcome(outcome(&run.decision, Some(lease.token)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseExpired { .. }), "{err}");

    // A wrong token is refused; the right one completes the approval.
    l.decide(again.approval.id.clone(), approve("bob"))
        .await
        .unwrap();
    let run2 = l.ask(ask("run2", "s", "make deploy")).await.unwrap();
    let AskVerdict::Allowed {
        lease: Some(lease2),
    } = run2.verdict
    else {
        panic!("expected a consumption, got {:?}", run2.verdict)
    };
    let err = l
        .record_outcome(outcome(
            &run2.decision,
            Some(LeaseToken::from_raw(lease2.token.get() ^ 1)),
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StaleLease { .. }), "{err}");
    l.record_outcome(outcome(&run2.decision, Some(lease2.token)))
        .await
        .unwrap();
    assert_eq!(
        l.get(run2.approval.id.clone()).await.unwrap().state,
        ApprovalState::Completed
    );

    // Lease expiry is also enforced at report time without a sweep.
    let g = grant(&l, "g3", "s", "make other").await;
    let run3 = l.ask(ask("run3", "s", "make other")).await.unwrap();
    let AskVerdict::Allowed {
        lease: Some(lease3),
    } = run3.verdict
    else {
        panic!()
    };
    ctx.time.advance(Duration::from_secs(16 * 60));
    let err = l
        .record_outcome(outcome(&run3.decision, Some(lease3.token)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseExpired { .. }), "{err}");
    assert_eq!(l.get(g).await.unwrap().state, ApprovalState::Unknown);
    assert!(l.verify().await.unwrap().broken.is_none());
}

/// The policy service reports for the executor, whose wire carries no lease token: the report
/// is fenced by the lease the decision's own consumption holds, read under the report's lock.
/// In time it completes the approval (and a release gives it back); after the lease it is
/// refused as the token's own report would be.
async fn a_report_fenced_by_the_held_lease_completes_in_time_and_is_refused_late(ctx: Ctx) {
    let l = ctx.ledger().await;
    let held = |d: &DecisionRecord| NewOutcome {
        lease_held: true,
        ..outcome(d, None)
    };
    // In time: completed, as with the right token.
    grant(&l, "g1", "s", "make deploy").await;
    let run = l.ask(ask("run1", "s", "make deploy")).await.unwrap();
    assert!(matches!(
        run.verdict,
        AskVerdict::Allowed { lease: Some(_) }
    ));
    let err = l
        .record_outcome(outcome(&run.decision, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::StaleLease { .. }),
        "without a token: {err}"
    );
    l.record_outcome(held(&run.decision)).await.unwrap();
    assert_eq!(
        l.get(run.approval.id.clone()).await.unwrap().state,
        ApprovalState::Completed
    );
    // Released in time: the approval is given back for the call's retry.
    grant(&l, "g2", "s", "make other").await;
    let run2 = l.ask(ask("run2", "s", "make other")).await.unwrap();
    let released = l
        .release(NotStarted {
            lease_held: true,
            ..not_started(&run2.decision, None)
        })
        .await
        .unwrap();
    assert!(released.released_at.is_some());
    assert_eq!(
        l.get(run2.approval.id.clone()).await.unwrap().state,
        ApprovalState::Approved
    );
    // Late: the lease has lapsed, and the held lease fences nothing back to life.
    grant(&l, "g3", "s", "make third").await;
    let run3 = l.ask(ask("run3", "s", "make third")).await.unwrap();
    ctx.time.advance(Duration::from_secs(16 * 60));
    let err = l.record_outcome(held(&run3.decision)).await.unwrap_err();
    assert!(matches!(err, Error::LeaseExpired { .. }), "{err}");
    assert!(l.verify().await.unwrap().broken.is_none());
}

async fn env07_canary_never_stored(ctx: Ctx) {
    let l = ctx.ledger().await;
    let mut req = ask("c1", "s", "cat token.txt");
    req.decision.request_json =
        format!(r#"{{"argv":["cat","token.txt"],"env":{{"TOKEN":"{CANARY}"}}}}"#);
    req.explanation_json =
        format!(r#"{{"output_preview":"{CANARY}","aws":"AKIAABCDEFGHIJKLMNOP"}}"#);
    let out = l.ask(req).await.unwrap();
    assert!(!out.approval.request_json.contains(CANARY));
    assert!(out.approval.request_json.contains(REDACTED));
    let mut d = approve("bob");
    d.reason = Some(format!("saw {CANARY}"));
    d.message = Some(format!("do not print {CANARY}"));
    l.decide(out.approval.id.clone(), d).await.unwrap();
    let run = l.ask(ask("c2", "s", "cat token.txt")).await;
    // c2's request JSON differs only in free text; the digest is what binds.
    let run = run.unwrap();
    let AskVerdict::Allowed { lease } = run.verdict else {
        panic!("{:?}", run.verdict)
    };
    let mut o = outcome(&run.decision, lease.map(|l| l.token));
    o.error = Some(format!("printed {CANARY}"));
    l.record_outcome(o).await.unwrap();
    let mut auto = new_decision("c3", "s", "echo", Tier::Auto);
    auto.request_json = format!(r#"{{"argv":["echo","{CANARY}"]}}"#);
    l.record_decision(auto).await.unwrap();
    // A secret inside an identifier is refused rather than stored.
    let mut bad = new_decision("c4", "s", "echo", Tier::Auto);
    bad.session_id = SessionId::try_from(CANARY).unwrap();
    assert!(matches!(
        l.record_decision(bad).await.unwrap_err(),
        Error::Invalid { .. }
    ));

    if !ctx.pg {
        // Durability on SQLite comes from WAL mode (with synchronous=FULL).
        let path = ctx.url.trim_start_matches("sqlite://");
        assert!(std::path::Path::new(&format!("{path}-wal")).exists());
    }
    let dump = ctx.dump().await;
    assert!(!dump.contains(CANARY), "canary found in stored rows");
    assert!(!dump.contains("AKIAABCDEFGHIJKLMNOP"));
    assert!(dump.contains(REDACTED));
}

async fn hash_chain_verifies_and_detects_tampering(ctx: Ctx) {
    let l = ctx.ledger().await;
    let id = grant(&l, "g", "s", "ls -la").await;
    let run = l.ask(ask("r", "s", "ls -la")).await.unwrap();
    let AskVerdict::Allowed { lease } = run.verdict else {
        panic!()
    };
    l.record_outcome(outcome(&run.decision, lease.map(|l| l.token)))
        .await
        .unwrap();
    l.record_decision(new_decision("auto1", "s", "pwd", Tier::Auto))
        .await
        .unwrap();
    let ok = l.verify().await.unwrap();
    assert!(ok.broken.is_none(), "{ok:?}");
    assert!(ok.events >= 6);

    // The audit table refuses updates outright.
    let refused = if ctx.pg {
        let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&ctx.url)
            .await
            .unwrap();
        sqlx::query("UPDATE tg_audit SET kind = 'x' WHERE seq = 1")
            .execute(&mut c)
            .await
            .is_err()
    } else {
        let mut c = <sqlx::SqliteConnection as sqlx::Connection>::connect(&ctx.url)
            .await
            .unwrap();
        sqlx::query("UPDATE tg_audit SET kind = 'x' WHERE seq = 1")
            .execute(&mut c)
            .await
            .is_err()
    };
    assert!(refused, "audit events are append-only");

    // Hand-editing a business row breaks verification.
    ctx.raw(&format!(
        "UPDATE tg_approvals SET reason = 'edited' WHERE id = '{id}'"
    ))
    .await;
    let r = l.verify().await.unwrap();
    let b = r.broken.expect("edited approval detected");
    assert!(b.problem.contains(id.as_str()), "{b:?}");
    ctx.raw(&format!(
        "UPDATE tg_approvals SET reason = 'looks fine' WHERE id = '{id}'"
    ))
    .await;
    assert!(l.verify().await.unwrap().broken.is_none());

    ctx.raw("UPDATE tg_decisions SET request_json = '{}' WHERE call_id = 'auto1'")
        .await;
    assert!(l.verify().await.unwrap().broken.is_some());
    ctx.raw(r#"UPDATE tg_decisions SET request_json = '{"argv":"pwd"}' WHERE call_id = 'auto1'"#)
        .await;
    assert!(l.verify().await.unwrap().broken.is_none());

    ctx.raw("UPDATE tg_outcomes SET stdout_bytes = 0").await;
    assert!(l.verify().await.unwrap().broken.is_some());
    ctx.raw("UPDATE tg_outcomes SET stdout_bytes = 10").await;
    assert!(l.verify().await.unwrap().broken.is_none());

    // AP-10: a row inserted by hand (say, an approval granted through psql) has no audit event.
    ctx.raw(&format!(
        "INSERT INTO tg_approvals SELECT 'apr_forged', call_id, session_id, principal, tool, request_digest, \
         policy_version, request_json, explanation_json, 'approved', scope, created_at, expires_at, decided_by, \
         decided_at, reason, message, NULL, NULL, NULL, NULL, NULL, NULL, trace_id FROM tg_approvals WHERE id = '{id}'"
    ))
    .await;
    let b = l
        .verify()
        .await
        .unwrap()
        .broken
        .expect("forged row detected");
    assert!(
        b.problem.contains("apr_forged") && b.problem.contains("no audit event"),
        "{b:?}"
    );
    ctx.raw("DELETE FROM tg_approvals WHERE id = 'apr_forged'")
        .await;
    assert!(l.verify().await.unwrap().broken.is_none());

    // A deleted row is missed by its events.
    ctx.raw("DELETE FROM tg_decisions WHERE call_id = 'auto1'")
        .await;
    let b = l
        .verify()
        .await
        .unwrap()
        .broken
        .expect("deleted row detected");
    assert!(b.problem.contains("deleted"), "{b:?}");

    // Editing an event (by someone able to drop the trigger) breaks the chain at that event.
    if ctx.pg {
        ctx.raw("ALTER TABLE tg_audit DISABLE TRIGGER tg_audit_append_only")
            .await;
        ctx.raw("UPDATE tg_audit SET payload = payload || '\\x00'::bytea WHERE seq = 3")
            .await;
    } else {
        ctx.raw("DROP TRIGGER tg_audit_no_update").await;
        ctx.raw("UPDATE tg_audit SET payload = payload || x'00' WHERE seq = 3")
            .await;
    }
    let b = l
        .verify()
        .await
        .unwrap()
        .broken
        .expect("edited event detected");
    assert_eq!(b.seq, Some(3), "{b:?}");
}

async fn list_filters_and_paginates(ctx: Ctx) {
    let l = ctx.ledger().await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ctx.time.advance(Duration::from_millis(1));
        let out = l
            .ask(ask(
                &format!("c{i}"),
                &format!("s{}", i % 2),
                &format!("cmd {i}"),
            ))
            .await
            .unwrap();
        ids.push(out.approval.id);
    }
    l.decide(ids[0].clone(), approve("bob")).await.unwrap();
    let mut seen = Vec::new();
    let mut page = None;
    loop {
        let p = l.list(ApprovalFilter::default(), page, 3).await.unwrap();
        assert!(p.items.len() <= 3);
        seen.extend(p.items.into_iter().map(|a| a.id));
        match p.next {
            Some(t) => page = Some(PageToken::try_from(t.as_str().to_owned()).unwrap()),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, each exactly once");
    let s0 = l
        .list(
            ApprovalFilter {
                session_id: Some(SessionId::try_from("s0").unwrap()),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(s0.items.len(), 4);
    let approved = l
        .list(
            ApprovalFilter {
                state: Some(ApprovalState::Approved),
                principal: Some(Principal::try_from("agent:a").unwrap()),
                ..Default::default()
            },
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(
        approved.items.iter().map(|a| &a.id).collect::<Vec<_>>(),
        vec![&ids[0]]
    );
    assert!(PageToken::try_from("garbage".to_owned()).is_err());
}

async fn watch_cursor_resumes_after_reconnect(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let a = l.ask(ask("c1", "s", "one")).await.unwrap();
    let (changes, cursor) = l
        .changes(
            Cursor::default(),
            ApprovalFilter::default(),
            100,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].kind, "approval.created");
    // "Reconnect": resume from the cursor, seeing only what happened since.
    l.decide(a.approval.id.clone(), approve("bob"))
        .await
        .unwrap();
    l.record_decision(new_decision("auto", "s", "pwd", Tier::Auto))
        .await
        .unwrap();
    let (changes, cursor2) = l
        .changes(cursor, ApprovalFilter::default(), 100, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        changes.iter().map(|c| c.kind.as_str()).collect::<Vec<_>>(),
        ["approval.approved"]
    );
    assert!(cursor2 > cursor);
    // A long poll wakes when a change lands.
    let w = l.clone();
    let waiter = tokio::spawn(async move {
        w.changes(
            cursor2,
            ApprovalFilter::default(),
            100,
            Duration::from_secs(20),
        )
        .await
    });
    let b = l.ask(ask("c2", "s", "two")).await.unwrap();
    let (changes, _) = waiter.await.unwrap().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].approval.id, b.approval.id);
    // Filters apply, and the cursor still advances past filtered changes.
    let (none, c3) = l
        .changes(
            cursor2,
            ApprovalFilter {
                session_id: Some(SessionId::try_from("other").unwrap()),
                ..Default::default()
            },
            100,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert!(none.is_empty());
    assert!(c3 > cursor2);
}

async fn head_cursor_and_page_token_after(ctx: Ctx) {
    let l = ctx.ledger().await;
    assert_eq!(l.head().await.unwrap(), Cursor::default());
    let a = l.ask(ask("c1", "s", "one")).await.unwrap();
    ctx.time.advance(Duration::from_millis(1));
    let b = l.ask(ask("c2", "s", "two")).await.unwrap();
    let (all, last) = l
        .changes(
            Cursor::default(),
            ApprovalFilter::default(),
            100,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    // The head is the newest event, approval or not; nothing lies beyond it.
    let head = l.head().await.unwrap();
    assert!(head >= last, "{head:?} < {last:?}");
    let (after, _) = l
        .changes(head, ApprovalFilter::default(), 100, Duration::ZERO)
        .await
        .unwrap();
    assert!(after.is_empty());
    l.decide(a.approval.id.clone(), approve("bob"))
        .await
        .unwrap();
    let (after, _) = l
        .changes(head, ApprovalFilter::default(), 100, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].approval.id, a.approval.id);
    // A token made from a listed item continues right after it.
    let first = l.list(ApprovalFilter::default(), None, 1).await.unwrap();
    assert_eq!(first.items[0].id, b.approval.id);
    let rest = l
        .list(
            ApprovalFilter::default(),
            Some(PageToken::after(&first.items[0])),
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        rest.items.iter().map(|x| &x.id).collect::<Vec<_>>(),
        vec![&a.approval.id]
    );
}

async fn waiter_wakes_on_decision(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let a = l.ask(ask("c1", "s", "wait for me")).await.unwrap();
    let w = l.clone();
    let id = a.approval.id.clone();
    let waiter =
        tokio::spawn(async move { w.wait_for_decision(id, Duration::from_secs(30)).await });
    until_parked(&l, 1).await;
    l.decide(a.approval.id.clone(), deny("bob", "use a dry run"))
        .await
        .unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.state, ApprovalState::Denied);
    assert_eq!(got.message.as_deref(), Some("use a dry run"));
    let again = l.ask(ask("c1", "s", "wait for me")).await.unwrap();
    assert_eq!(again.verdict, AskVerdict::Denied);
    // A timeout returns the still-pending approval.
    let b = l.ask(ask("c2", "s", "nobody decides")).await.unwrap();
    let got = l
        .wait_for_decision(b.approval.id, Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(got.state, ApprovalState::Pending);
}

async fn decisions_group_commit_and_replay(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            l.record_decision(new_decision(
                &format!("d{i}"),
                "s",
                &format!("cmd {i}"),
                Tier::Auto,
            ))
            .await
        }));
    }
    for t in tasks {
        let r = t.await.unwrap().unwrap();
        assert!(!r.replayed);
        assert_eq!(r.decision.tier, Tier::Auto);
    }
    // A replayed call id is reported as such, with its outcome once recorded.
    let first = l
        .lookup_call(CallId::try_from("d7").unwrap())
        .await
        .unwrap()
        .unwrap();
    l.record_outcome(outcome(&first.decision, None))
        .await
        .unwrap();
    let replay = l
        .record_decision(new_decision("d7", "s", "cmd 7", Tier::Auto))
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.decision.id, first.decision.id);
    assert!(replay.outcome.is_some());
    // A replay inside a concurrent batch is sorted out row by row.
    let mut tasks = Vec::new();
    for i in 195..205 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            l.record_decision(new_decision(
                &format!("d{i}"),
                "s",
                &format!("cmd {i}"),
                Tier::Auto,
            ))
            .await
        }));
    }
    let replayed = futures_count(tasks).await;
    assert_eq!(replayed, 5);
    let err = l
        .record_decision(new_decision("d8", "s", "different", Tier::Auto))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CallIdReused { .. }));
    let deny = l
        .record_decision(new_decision("x1", "s", "rm -rf /", Tier::Deny))
        .await
        .unwrap();
    let err = l
        .record_outcome(outcome(&deny.decision, None))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotRunnable { .. }), "{err}");
    assert!(
        l.record_decision(new_decision("x2", "s", "y", Tier::Ask))
            .await
            .is_err()
    );
    let v = l.verify().await.unwrap();
    assert!(v.broken.is_none(), "{v:?}");
    assert!(v.events >= 206);
}

/// One decision of a batch that cannot go in (its call id was used for another request)
/// fails alone: the rest of its batch is recorded and answered.
async fn a_conflicting_decision_in_a_batch_fails_alone(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    l.record_decision(new_decision("taken", "s", "make", Tier::Auto))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..60 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            // Every tenth reuses the taken call id for another request.
            let call = if i % 10 == 0 {
                "taken".to_owned()
            } else {
                format!("fresh-{i}")
            };
            l.record_decision(new_decision(&call, "s", &format!("cmd {i}"), Tier::Auto))
                .await
        }));
    }
    let (mut recorded, mut refused) = (0, 0);
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(r) => {
                assert_ne!(i % 10, 0, "a reused call id was accepted: {r:?}");
                assert!(!r.replayed);
                recorded += 1;
            }
            Err(Error::CallIdReused { call_id, .. }) => {
                assert_eq!((i % 10, call_id.as_str()), (0, "taken"));
                refused += 1;
            }
            Err(e) => panic!("decision {i} failed: {e}"),
        }
    }
    assert_eq!((recorded, refused), (54, 6));
    for i in (0..60).filter(|i| i % 10 != 0) {
        let call = CallId::try_from(format!("fresh-{i}").as_str()).unwrap();
        assert!(l.lookup_call(call).await.unwrap().is_some(), "fresh-{i}");
    }
    let v = l.verify().await.unwrap();
    assert!(v.broken.is_none(), "{v:?}");
    assert_eq!(v.events, 55);
}

/// The same call sent three times at once lands in different batches (some committing while
/// others start): it is recorded once, every answer names that one decision, and only one
/// answer is not a replay.
async fn the_same_call_in_concurrent_batches_is_recorded_once(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        for i in 0..40 {
            let l = l.clone();
            tasks.push(tokio::spawn(async move {
                let r = l
                    .record_decision(new_decision(
                        &format!("dup-{i}"),
                        "s",
                        &format!("cmd {i}"),
                        Tier::Auto,
                    ))
                    .await
                    .unwrap();
                (i, r)
            }));
        }
    }
    let mut ids: std::collections::HashMap<i32, (DecisionId, usize)> = Default::default();
    for t in tasks {
        let (i, r) = t.await.unwrap();
        let entry = ids.entry(i).or_insert((r.decision.id.clone(), 0));
        assert_eq!(
            entry.0, r.decision.id,
            "dup-{i} answered with two decisions"
        );
        if !r.replayed {
            entry.1 += 1;
        }
    }
    assert_eq!(ids.len(), 40);
    assert!(ids.values().all(|(_, fresh)| *fresh == 1), "{ids:?}");
    let v = l.verify().await.unwrap();
    assert!(v.broken.is_none(), "{v:?}");
    assert_eq!(v.events, 40);
}

async fn futures_count(tasks: Vec<tokio::task::JoinHandle<Result<Recorded>>>) -> usize {
    let mut n = 0;
    for t in tasks {
        if t.await.unwrap().unwrap().replayed {
            n += 1;
        }
    }
    n
}

async fn outcomes_are_idempotent_per_decision(ctx: Ctx) {
    let l = ctx.ledger().await;
    let r = l
        .record_decision(new_decision("c1", "s", "make", Tier::Auto))
        .await
        .unwrap();
    let o1 = l.record_outcome(outcome(&r.decision, None)).await.unwrap();
    ctx.time.advance(Duration::from_secs(1));
    let o2 = l.record_outcome(outcome(&r.decision, None)).await.unwrap();
    assert_eq!(o1, o2, "the same report twice is one outcome");
    let mut different = outcome(&r.decision, None);
    different.exit = ExitStatus::Exited(1);
    let err = l.record_outcome(different).await.unwrap_err();
    assert!(matches!(err, Error::OutcomeConflict { .. }), "{err}");
    assert_eq!(err.reason(), Reason::OutcomeConflict);
    let rec = l
        .lookup_call(CallId::try_from("c1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.outcome, Some(o1));
    assert!(
        l.lookup_call(CallId::try_from("nope").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let missing = DecisionId::try_from("dec_missing").unwrap();
    let mut o = outcome(&r.decision, None);
    o.decision_id = missing;
    assert!(matches!(
        l.record_outcome(o).await.unwrap_err(),
        Error::DecisionNotFound { .. }
    ));
}

/// A report retried while the first is still in flight (the executor's deadline passed): the
/// copies race for the decision's lock, and every one must get the recorded outcome. The one
/// that waited reads the outcome in a statement after the lock, so it sees what the winner
/// committed meanwhile; read in the locking statement, it would try the INSERT again.
async fn concurrent_reports_of_one_outcome_record_it_once(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    for d in 0..10 {
        let r = l
            .record_decision(new_decision(&format!("c{d}"), "s", "make", Tier::Auto))
            .await
            .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (l, report) = (l.clone(), outcome(&r.decision, None));
                tokio::spawn(async move { l.record_outcome(report).await })
            })
            .collect();
        let mut recorded = Vec::new();
        for t in tasks {
            recorded.push(t.await.unwrap().expect("every copy of the report succeeds"));
        }
        assert!(
            recorded.windows(2).all(|w| w[0] == w[1]),
            "one outcome: {recorded:?}"
        );
    }
    assert!(l.verify().await.unwrap().broken.is_none());
}

async fn session_scope_is_explicit_and_reusable(ctx: Ctx) {
    let l = ctx.ledger().await;
    let out = l.ask(ask("c1", "s", "npm test")).await.unwrap();
    let mut d = approve("bob");
    d.verdict = Verdict::Approve {
        widen_to_session: true,
    };
    let a = l.decide(out.approval.id.clone(), d).await.unwrap();
    assert_eq!(a.scope, Scope::Session);
    for i in 2..5 {
        let r = l.ask(ask(&format!("c{i}"), "s", "npm test")).await.unwrap();
        assert_eq!(r.verdict, AskVerdict::Allowed { lease: None });
        assert_eq!(r.approval.id, a.id);
        l.record_outcome(outcome(&r.decision, None)).await.unwrap();
    }
    let other = l.ask(ask("c9", "t", "npm test")).await.unwrap();
    assert_eq!(other.verdict, AskVerdict::Pending);
    ctx.time.advance(Duration::from_secs(3601));
    let late = l.ask(ask("c10", "s", "npm test")).await.unwrap();
    assert_eq!(late.verdict, AskVerdict::Pending);
    // Default approvals are once-scope.
    let once = grant(&l, "g", "s", "npm publish").await;
    assert_eq!(l.get(once).await.unwrap().scope, Scope::Once);
}

async fn newer_schema_is_refused_and_migrate_is_repeatable(ctx: Ctx) {
    // Concurrent replicas migrating at once.
    let (a, b) = tokio::join!(migrate(&ctx.url), migrate(&ctx.url));
    assert_eq!(a.unwrap(), SCHEMA_VERSION);
    assert_eq!(b.unwrap(), SCHEMA_VERSION);
    let l = ctx.ledger().await;
    l.health().await.unwrap();
    l.close().await;
    ctx.raw("INSERT INTO tg_schema (version, name, applied_at) VALUES (99, 'future', 0)")
        .await;
    let err = SqlLedger::connect(ctx.config()).await.unwrap_err();
    assert!(
        matches!(err, Error::SchemaTooNew { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("newer"));
    assert!(matches!(
        migrate(&ctx.url).await.unwrap_err(),
        Error::SchemaTooNew { .. }
    ));
}

async fn self_approval_is_refused(ctx: Ctx) {
    let l = ctx.ledger().await;
    let out = l.ask(ask("c1", "s", "sudo thing")).await.unwrap();
    let d = Decide {
        approver: Principal::try_from("agent:a").unwrap(),
        ..approve("x")
    };
    let err = l.decide(out.approval.id.clone(), d).await.unwrap_err();
    assert!(matches!(err, Error::SelfDecision { .. }), "{err}");
    assert_eq!(
        l.get(out.approval.id).await.unwrap().state,
        ApprovalState::Pending
    );
}

/// Yields until `n` waiters are parked (bounded, so a bug fails instead of hanging).
async fn until_parked(l: &SqlLedger, n: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while l.waiting() < n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("waiter parked");
}

// ------------------------------------------------------------------ Postgres only

/// Replica A waits; replica B, a separate ledger on the same database, decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wakeup_crosses_replicas() {
    on_postgres(|ctx| async move {
        let a = Arc::new(ctx.ledger().await);
        let b = ctx.ledger().await;
        let out = a.ask(ask("c1", "s", "cross")).await.unwrap();
        let wa = a.clone();
        let id = out.approval.id.clone();
        let waiter =
            tokio::spawn(async move { wa.wait_for_decision(id, Duration::from_secs(30)).await });
        // Decide only once A's waiter has read `pending` and parked, so only a
        // notification from B can wake it.
        until_parked(&a, 1).await;
        b.decide(out.approval.id.clone(), approve("bob"))
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("replica A woke")
            .unwrap()
            .unwrap();
        assert_eq!(got.state, ApprovalState::Approved);
        // B's change also reaches A's watch feed.
        let (changes, _) = a
            .changes(
                Cursor::default(),
                ApprovalFilter::default(),
                10,
                Duration::ZERO,
            )
            .await
            .unwrap();
        assert_eq!(changes.len(), 2);
    })
    .await;
}

/// What a woken waiter holds is the approval as stored, whether the decision reached it as
/// a snapshot in the notification or (too long for one) made it read the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_woken_waiter_holds_the_approval_as_stored() {
    on_postgres(|ctx| async move {
        let a = Arc::new(ctx.ledger().await);
        let b = ctx.ledger().await;
        for (i, reason) in ["short", &"long ".repeat(3_000)].into_iter().enumerate() {
            let out = a
                .ask(ask(&format!("c{i}"), "s", &format!("held {i}")))
                .await
                .unwrap();
            let wa = a.clone();
            let id = out.approval.id.clone();
            let waiter =
                tokio::spawn(
                    async move { wa.wait_for_decision(id, Duration::from_secs(30)).await },
                );
            until_parked(&a, 1).await;
            let mut decide = deny("bob", "use a dry run");
            decide.reason = Some(reason.to_owned());
            b.decide(out.approval.id.clone(), decide).await.unwrap();
            let got = tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("replica A woke")
                .unwrap()
                .unwrap();
            let stored = a.get(out.approval.id.clone()).await.unwrap();
            assert_eq!(got.state, ApprovalState::Denied);
            assert_eq!(got.reason.as_deref(), Some(reason));
            assert_eq!(format!("{got:?}"), format!("{stored:?}"));
        }
    })
    .await;
}

/// A replica of an earlier version announces a change by its bare id only; waiters here
/// still wake and read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_bare_id_notification_still_wakes_waiters() {
    on_postgres(|ctx| async move {
        let a = Arc::new(ctx.ledger().await);
        let out = a.ask(ask("c1", "s", "old writer")).await.unwrap();
        let wa = a.clone();
        let id = out.approval.id.clone();
        let waiter =
            tokio::spawn(async move { wa.wait_for_decision(id, Duration::from_secs(30)).await });
        until_parked(&a, 1).await;
        let id = out.approval.id.as_str();
        ctx.raw(&format!(
            "UPDATE tg_approvals SET state = 'denied', decided_by = 'approver:old', \
             decided_at = created_at, message = 'decided elsewhere' WHERE id = '{id}'; \
             SELECT pg_notify('toolgate_ledger', '{id}');"
        ))
        .await;
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the bare id woke the waiter")
            .unwrap()
            .unwrap();
        assert_eq!(got.state, ApprovalState::Denied);
        assert_eq!(got.message.as_deref(), Some("decided elsewhere"));
    })
    .await;
}

/// A decision committed while the listener's connection is gone (its notification lost)
/// still wakes the waiter: on reconnect every waiter reads its approval again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_decision_lost_with_the_listener_still_wakes_the_waiter() {
    on_postgres(|ctx| async move {
        let a = Arc::new(ctx.ledger().await);
        let b = ctx.ledger().await;
        let out = a.ask(ask("c1", "s", "lost")).await.unwrap();
        let wa = a.clone();
        let id = out.approval.id.clone();
        let waiter =
            tokio::spawn(async move { wa.wait_for_decision(id, Duration::from_secs(30)).await });
        until_parked(&a, 1).await;
        // Every listener of this database (A's and B's) loses its connection.
        ctx.raw(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .await;
        b.decide(out.approval.id.clone(), approve("bob"))
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("replica A woke after its listener reconnected")
            .unwrap()
            .unwrap();
        assert_eq!(got.state, ApprovalState::Approved);
    })
    .await;
}

/// Pending approvals survive the service going away (a new ledger instance sees them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pending_survives_restart() {
    on_postgres(|ctx| async move {
        let l = ctx.ledger().await;
        let out = l.ask(ask("c1", "s", "survive")).await.unwrap();
        drop(l);
        let l2 = ctx.ledger().await;
        l2.decide(out.approval.id.clone(), approve("bob"))
            .await
            .unwrap();
        let run = l2.ask(ask("c1", "s", "survive")).await.unwrap();
        assert!(matches!(run.verdict, AskVerdict::Allowed { .. }));
    })
    .await;
}

/// Two replicas appending at once still produce one linear, verifiable chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_replicas_keep_the_chain_linear() {
    on_postgres(|ctx| async move {
        let replicas = [Arc::new(ctx.ledger().await), Arc::new(ctx.ledger().await)];
        let mut tasks = Vec::new();
        for (r, l) in replicas.iter().enumerate() {
            for i in 0..60 {
                let l = l.clone();
                tasks.push(tokio::spawn(async move {
                    if i % 3 == 0 {
                        l.ask(ask(&format!("a{r}-{i}"), "s", &format!("ask {i}")))
                            .await
                            .map(|_| ())
                    } else {
                        l.record_decision(new_decision(
                            &format!("d{r}-{i}"),
                            "s",
                            &format!("cmd {i}"),
                            Tier::Auto,
                        ))
                        .await
                        .map(|_| ())
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let report = replicas[0].verify().await.unwrap();
        assert!(report.broken.is_none(), "{report:?}");
        // 80 auto decisions + 40 ask decisions + 20 shared pending approvals.
        assert_eq!(report.events, 140);
    })
    .await;
}

fn holder(executor_id: &str, credential: &str) -> SessionHolder {
    SessionHolder {
        executor_id: executor_id.to_owned(),
        executor_principal: Principal::try_from(credential).unwrap(),
        executor_reported: Some(format!(
            r#"{{"executor_id":"{executor_id}","pod":"{executor_id}-pod"}}"#
        )),
    }
}

fn claim(session: &str, principal: &str, h: &SessionHolder, ttl_secs: u64) -> ClaimSession {
    ClaimSession {
        session_id: SessionId::try_from(session).unwrap(),
        principal: Principal::try_from(principal).unwrap(),
        holder: h.clone(),
        ttl: Duration::from_secs(ttl_secs),
    }
}

fn sid(s: &str) -> SessionId {
    SessionId::try_from(s).unwrap()
}

/// Issue 28: a session's sandbox lives on one executor; the ledger says which, refuses
/// another executor while the claim lives, and hands the session over once it lapsed or
/// ended, or to the same executor after a restart.
async fn a_session_is_claimed_once_and_routed_to_its_holder(ctx: Ctx) {
    let l = ctx.ledger().await;
    let a = holder("ex-a", "executor-0");
    let b = holder("ex-b", "executor-0");
    let first = l
        .claim_session(claim("s1", "agent:a", &a, 30))
        .await
        .unwrap();
    assert!(!first.resumed, "a new session resumes nothing");
    assert_eq!(first.session.executor_id, "ex-a");
    assert_eq!(first.session.state, SessionState::default());
    assert!(first.session.claimed(ctx.clock.now()));
    assert_eq!(
        first.session.claim_expires_at,
        ctx.clock.now().plus(Duration::from_secs(30))
    );

    // Another executor is refused and told where the session lives.
    let err = l
        .claim_session(claim("s1", "agent:a", &b, 30))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::SessionElsewhere);
    let md: std::collections::HashMap<_, _> = err.metadata().into_iter().collect();
    assert_eq!(md["executor_id"], "ex-a");
    assert_eq!(md["pod"], "ex-a-pod");
    assert_eq!(md["session_id"], "s1");
    assert!(
        md["claim_expires_at"].starts_with("2023-11-14T22:"),
        "{md:?}"
    );

    // The same executor id under another credential is another executor.
    let impostor = holder("ex-a", "executor-9");
    let err = l
        .claim_session(claim("s1", "agent:a", &impostor, 30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionElsewhere { .. }), "{err}");

    // Another principal never gets the session, held or not.
    let err = l
        .claim_session(claim("s1", "agent:other", &a, 30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionOtherPrincipal { .. }), "{err}");
    assert_eq!(err.reason(), Reason::RoleNotPermitted);

    // The same executor claiming again (it restarted): taken over, resumed.
    let again = l
        .claim_session(claim("s1", "agent:a", &a, 30))
        .await
        .unwrap();
    assert!(again.resumed);
    assert_eq!(again.session.created_at, first.session.created_at);

    // The claim lapses: another executor takes it over.
    ctx.time.advance(Duration::from_secs(31));
    let taken = l
        .claim_session(claim("s1", "agent:a", &b, 30))
        .await
        .unwrap();
    assert!(taken.resumed);
    assert_eq!(taken.session.executor_id, "ex-b");
    assert_eq!(taken.session.executor_pod(), "ex-b-pod");
    // ... and now the first one is the one refused.
    let err = l
        .claim_session(claim("s1", "agent:a", &a, 30))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::SessionElsewhere { ref executor_id, .. } if executor_id == "ex-b"),
        "{err}"
    );

    // An ended session is free at once, and keeps its state.
    l.update_session(
        b.clone(),
        sid("s1"),
        SessionState {
            cwd: "sub".into(),
            env: [("FOO".to_owned(), "1".to_owned())].into(),
        },
    )
    .await
    .unwrap();
    let ended = l
        .end_session(b.clone(), sid("s1"), "idle".into())
        .await
        .unwrap();
    assert_eq!(ended.end_reason.as_deref(), Some("idle"));
    assert!(!ended.claimed(ctx.clock.now()));
    let back = l
        .claim_session(claim("s1", "agent:a", &a, 30))
        .await
        .unwrap();
    assert!(back.resumed);
    assert_eq!(back.session.state.cwd, "sub");
    assert_eq!(back.session.state.env["FOO"], "1");
    assert_eq!(back.session.ended_at, None);
    assert_eq!(back.session.end_reason, None);

    // Unknown and malformed ids.
    let err = l.session(sid("nope")).await.unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err}");
    assert_eq!(err.reason(), Reason::NotFound);
    let empty = holder("", "executor-0");
    let err = l
        .claim_session(claim("s2", "agent:a", &empty, 30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err}");
    // Sessions are outside the audit chain, which still verifies.
    assert!(l.verify().await.unwrap().broken.is_none());
}

/// Issue 28: of fifty executors claiming one session at once, exactly one holds it; the
/// others are told which one.
async fn fifty_executors_claim_one_session_and_exactly_one_holds_it(ctx: Ctx) {
    let l = Arc::new(ctx.ledger().await);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let l = l.clone();
        tasks.spawn(async move {
            let h = holder(&format!("ex-{i}"), "executor-0");
            (i, l.claim_session(claim("race", "agent:a", &h, 60)).await)
        });
    }
    let mut winners = Vec::new();
    let mut told = std::collections::HashSet::new();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            (i, Ok(c)) => {
                assert!(!c.resumed);
                winners.push(format!("ex-{i}"));
            }
            (_, Err(Error::SessionElsewhere { executor_id, .. })) => {
                told.insert(executor_id);
            }
            (_, Err(e)) => panic!("a claim failed otherwise: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(told.len(), 1, "every loser names the one holder: {told:?}");
    assert!(told.contains(&winners[0]));
    assert_eq!(
        l.session(sid("race")).await.unwrap().executor_id,
        winners[0]
    );
}

/// Issue 28: one renewal extends everything an executor holds and names what it lost.
async fn renew_answers_the_sessions_an_executor_lost(ctx: Ctx) {
    let l = ctx.ledger().await;
    let a = holder("ex-a", "executor-0");
    let b = holder("ex-b", "executor-0");
    for s in ["r1", "r2", "r3"] {
        l.claim_session(claim(s, "agent:a", &a, 10)).await.unwrap();
    }
    ctx.time.advance(Duration::from_secs(11));
    // r2 lapsed and was taken over; r3 ended; "r9" was never claimed.
    l.claim_session(claim("r2", "agent:a", &b, 10))
        .await
        .unwrap();
    l.end_session(a.clone(), sid("r3"), "shutdown".into())
        .await
        .unwrap();
    let lost = l
        .renew_sessions(
            a.clone(),
            vec![sid("r1"), sid("r2"), sid("r3"), sid("r9")],
            Duration::from_secs(40),
        )
        .await
        .unwrap();
    assert_eq!(lost, vec![sid("r2"), sid("r3"), sid("r9")]);
    let r1 = l.session(sid("r1")).await.unwrap();
    assert_eq!(
        r1.claim_expires_at,
        ctx.clock.now().plus(Duration::from_secs(40))
    );
    assert!(r1.claimed(ctx.clock.now()));
    // The renewed claim refuses the other executor again.
    let err = l
        .claim_session(claim("r1", "agent:a", &b, 10))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionElsewhere { .. }), "{err}");
    assert!(
        l.renew_sessions(a, Vec::new(), Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Issue 28: a session's state is written only by the executor holding it.
async fn only_the_holder_updates_or_ends_a_session(ctx: Ctx) {
    let l = ctx.ledger().await;
    let a = holder("ex-a", "executor-0");
    let b = holder("ex-b", "executor-0");
    l.claim_session(claim("u1", "agent:a", &a, 30))
        .await
        .unwrap();
    let state = SessionState {
        cwd: "src/app".into(),
        env: [
            ("NODE_ENV".to_owned(), "development".to_owned()),
            ("TOKEN".to_owned(), format!("x{CANARY}y")),
        ]
        .into(),
    };
    let stored = l
        .update_session(a.clone(), sid("u1"), state.clone())
        .await
        .unwrap();
    assert_eq!(stored.state.cwd, "src/app");
    assert_eq!(stored.state.env["NODE_ENV"], "development");
    // A secret the ledger knows is never stored, not even in a session's variables.
    assert!(!stored.state.env["TOKEN"].contains(CANARY));
    assert!(!ctx.dump().await.contains(CANARY));

    for refused in [
        l.update_session(b.clone(), sid("u1"), SessionState::default())
            .await
            .unwrap_err(),
        l.end_session(b.clone(), sid("u1"), "idle".into())
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(&refused, Error::SessionElsewhere { executor_id, .. } if executor_id == "ex-a"),
            "{refused}"
        );
    }
    assert_eq!(l.session(sid("u1")).await.unwrap().state.cwd, "src/app");
    let err = l
        .update_session(a.clone(), sid("never"), SessionState::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionNotFound { .. }), "{err}");
    let err = l
        .end_session(a.clone(), sid("u1"), "bored".into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err}");

    // The holder ends it; the end is repeatable; an update after the end is refused.
    let ended = l
        .end_session(a.clone(), sid("u1"), "idle".into())
        .await
        .unwrap();
    assert_eq!(ended.ended_at, Some(ctx.clock.now()));
    assert_eq!(ended.claim_expires_at, ctx.clock.now());
    let again = l
        .end_session(a.clone(), sid("u1"), "idle".into())
        .await
        .unwrap();
    assert_eq!(again.ended_at, ended.ended_at);
    let err = l
        .update_session(a, sid("u1"), SessionState::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SessionElsewhere { .. }), "{err}");
}

fn reported_by(call: &str, executor_id: &str, credential: &str) -> NewDecision {
    let mut nd = new_decision(call, "s", call, Tier::Auto);
    nd.executor = Some(Principal::try_from(credential).unwrap());
    nd.executor_reported = Some(format!(
        r#"{{"executor_id":"{executor_id}","pod":"{executor_id}-pod"}}"#
    ));
    nd
}

/// Issue 28: when an executor restarts, what it had running is lost: its unreported allowed
/// calls read unknown from then on and a late report is refused, its claims end. Another
/// executor's calls, even under the same credential, are untouched.
async fn abandon_ends_the_leases_of_this_executors_unreported_calls_only(ctx: Ctx) {
    let l = ctx.ledger().await;
    let a = holder("ex-a", "executor-0");
    let running = l
        .record_decision(reported_by("run-1", "ex-a", "executor-0"))
        .await
        .unwrap()
        .decision;
    let reported = l
        .record_decision(reported_by("run-2", "ex-a", "executor-0"))
        .await
        .unwrap()
        .decision;
    l.record_outcome(outcome(&reported, None)).await.unwrap();
    let other_executor = l
        .record_decision(reported_by("run-3", "ex-b", "executor-0"))
        .await
        .unwrap()
        .decision;
    let other_credential = l
        .record_decision(reported_by("run-4", "ex-a", "executor-7"))
        .await
        .unwrap()
        .decision;
    let denied = l
        .record_decision({
            let mut nd = reported_by("run-5", "ex-a", "executor-0");
            nd.tier = Tier::Deny;
            nd
        })
        .await
        .unwrap()
        .decision;
    // An approved (ask-tier) call this executor consumed and never reported.
    grant(&l, "g1", "s", "make deploy").await;
    let mut asked = ask("run-6", "s", "make deploy");
    asked.decision.executor_reported =
        Some(r#"{"executor_id":"ex-a","pod":"ex-a-pod"}"#.to_owned());
    let approved = l.ask(asked).await.unwrap();
    assert!(matches!(approved.verdict, AskVerdict::Allowed { .. }));
    l.claim_session(claim("s-a", "agent:a", &a, 30))
        .await
        .unwrap();
    l.claim_session(claim("s-b", "agent:a", &holder("ex-b", "executor-0"), 30))
        .await
        .unwrap();

    ctx.time.advance(Duration::from_secs(1));
    let gone = l.abandon_executor(a.clone()).await.unwrap();
    let mut expected = vec![running.id.clone(), approved.decision.id.clone()];
    expected.sort();
    let mut got = gone.decision_ids.clone();
    got.sort();
    assert_eq!(got, expected);
    assert_eq!(gone.session_ids, vec![sid("s-a")]);

    let now = ctx.clock.now();
    let rec = l
        .lookup_call(CallId::try_from("run-1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        rec.decision.allowed_state(false, now),
        Some(AllowedState::Unknown(Some(now)))
    );
    let err = l.record_outcome(outcome(&running, None)).await.unwrap_err();
    assert!(matches!(err, Error::DecisionLeaseExpired { .. }), "{err}");
    assert_eq!(err.reason(), Reason::OutcomeUnknown);
    let err = l
        .record_outcome(outcome(&approved.decision, approved.approval.lease_token))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Reason::OutcomeUnknown, "{err}");

    // Untouched: the reported call, another executor's, another credential's, the denied.
    let ran = l.decision(reported.id.clone()).await.unwrap();
    assert_eq!(ran.allowed_state(true, now), Some(AllowedState::Ran));
    for d in [&other_executor, &other_credential] {
        let d = l.decision(d.id.clone()).await.unwrap();
        assert!(
            matches!(d.allowed_state(false, now), Some(AllowedState::InFlight(_))),
            "{d:?}"
        );
    }
    assert_eq!(
        l.decision(denied.id.clone())
            .await
            .unwrap()
            .lease_expires_at,
        None
    );
    l.record_outcome(outcome(&other_executor, None))
        .await
        .unwrap();

    let s = l.session(sid("s-a")).await.unwrap();
    assert_eq!(s.end_reason.as_deref(), Some("abandoned"));
    assert!(!s.claimed(now));
    assert!(l.session(sid("s-b")).await.unwrap().claimed(now));

    // Repeating it finds nothing more, and the chain (which audits the ended leases) verifies.
    let again = l.abandon_executor(a).await.unwrap();
    assert_eq!(again, Abandoned::default());
    let v = l.verify().await.unwrap();
    assert!(v.broken.is_none(), "{:?}", v.broken);
    // The ended lease is audited: rewriting it is caught.
    ctx.raw(&format!(
        "UPDATE tg_decisions SET lease_expires_at = lease_expires_at + 1000000000 WHERE id = '{}'",
        running.id
    ))
    .await;
    assert!(l.verify().await.unwrap().broken.is_some());
}

/// Issue 28: `ListSessions` filters by principal and live claim, newest activity first.
async fn sessions_are_listed_most_recently_active_first(ctx: Ctx) {
    let l = ctx.ledger().await;
    let a = holder("ex-a", "executor-0");
    for (s, p) in [("l1", "agent:a"), ("l2", "agent:b"), ("l3", "agent:a")] {
        l.claim_session(claim(s, p, &a, 30)).await.unwrap();
        ctx.time.advance(Duration::from_secs(1));
    }
    l.end_session(a.clone(), sid("l3"), "idle".into())
        .await
        .unwrap();
    ctx.time.advance(Duration::from_secs(1));
    l.update_session(a, sid("l1"), SessionState::default())
        .await
        .unwrap();
    let ids = |v: Vec<Session>| {
        v.into_iter()
            .map(|s| s.session_id.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let all = l
        .list_sessions(SessionFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(all), ["l1", "l3", "l2"]);
    let mine = l
        .list_sessions(SessionFilter {
            principal: Some(Principal::try_from("agent:a").unwrap()),
            claimed_only: true,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ids(mine), ["l1"]);
    let one = l
        .list_sessions(SessionFilter {
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(one), ["l1"]);
}
