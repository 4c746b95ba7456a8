//! Rules learned from approvals: proposing one for an approval, deciding with `remember`,
//! listing and revoking, and the compiled set every Authorize of an asking run consults.
//!
//! The set is compiled once per change: the ledger's generation moves when any replica
//! learns or revokes a rule (a notification; a lost listener connection counts as one), and
//! this core's own changes move a local counter, so the hot path costs an atomic load and a
//! mutex held for a pointer copy. Expiry is checked at match, so an expired rule stops
//! applying without any change being announced.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use toolgate_core::{Tier, ToolKind};
use toolgate_ledger::{self as ledger, ApprovalId, Decide, LearnedRuleId, NewLearnedRule};
use toolgate_policy_engine::learned::{self, LearnedSet, Lifted, Pattern, Scope};
use toolgate_policy_engine::{CallContext, DEFAULT_POLICY_TOML, Decision, ToolCall};
use toolgate_runtime::auth::Principal;

use super::api::{DecideRequest, Decided, RulePage, RuleProposal, RuleScope};
use super::{APPROVERS, PolicyCore, PolicyError, parse_id, require};
use crate::source::PolicySource;
use crate::stored;

/// The ledger's generation and this core's own change count a set was built at.
type Generations = (u64, u64);

/// The compiled set and the generations it was built at.
#[derive(Debug, Default)]
pub(crate) struct LearnedCache {
    set: std::sync::Mutex<Option<(Generations, Arc<LearnedSet>)>>,
    /// Bumped by this core's own changes, which it must see before the notification arrives.
    local: std::sync::atomic::AtomicU64,
}

impl PolicyCore {
    /// The learned rules in force, rebuilt when a replica changed them.
    pub(crate) async fn learned_set(&self) -> Result<Arc<LearnedSet>, PolicyError> {
        let cache = &self.inner.learned;
        // Read the generations before the rules: a change committed during the read moves
        // them again, and the next call rebuilds.
        let key = (
            self.inner.ledger.learned_generation(),
            cache.local.load(Ordering::SeqCst),
        );
        if let Some((k, set)) = &*cache.set.lock().unwrap_or_else(PoisonError::into_inner)
            && *k == key
        {
            return Ok(set.clone());
        }
        let stored = self
            .read("learned_rules", self.inner.ledger.learned_rules())
            .await?;
        let now = ledger::Timestamp::now();
        let mut rules = Vec::new();
        for r in stored.rules.into_iter().filter(|r| r.active(now)) {
            match compile(&r) {
                Ok(rule) => rules.push(rule),
                // Fail closed: a rule this binary cannot read lifts nothing.
                Err(e) => tracing::error!(rule_id = %r.id, error = %e, "learned rule ignored"),
            }
        }
        let set = Arc::new(LearnedSet::new(stored.revision, rules));
        *cache.set.lock().unwrap_or_else(PoisonError::into_inner) = Some((key, set.clone()));
        Ok(set)
    }

    /// Lifts an asking run, or a connection of one, covered by learned rules to auto. `call`
    /// carries the sandbox profile in force. A set that cannot be read lifts nothing (the call still asks).
    pub(crate) async fn apply_learned(
        &self,
        decision: &mut Decision,
        call: &ToolCall,
        ctx: &CallContext,
    ) -> Option<Lifted> {
        if decision.tier != Tier::Ask
            || !matches!(call.tool, ToolKind::ProcessRun | ToolKind::NetConnect)
        {
            return None;
        }
        let set = match self.learned_set().await {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %e, "learned rules unavailable; the call asks");
                return None;
            }
        };
        let now = ledger::Timestamp::now().as_micros();
        set.apply(decision, call, ctx, now)
    }

    /// The rule `remember` would learn from an approval (approvers and admins).
    pub async fn propose_rule(
        &self,
        caller: &Principal,
        approval_id: ApprovalId,
        scope: RuleScope,
    ) -> Result<RuleProposal, PolicyError> {
        require(caller, "ProposeRule", APPROVERS)?;
        let a = self
            .read("get", self.inner.ledger.get(approval_id.clone()))
            .await?;
        self.proposal_for(&a, scope).await
    }

    async fn proposal_for(
        &self,
        a: &ledger::Approval,
        scope: RuleScope,
    ) -> Result<RuleProposal, PolicyError> {
        let (call, ctx) = stored_call(a)?;
        let workspace = learned::workspace_key(&ctx);
        let policy = self.policy();
        let decision = self.classify_call(&policy, &call, &ctx);
        let mut call = call;
        if let Some(p) = &decision.sandbox_profile {
            call.sandbox_profile = Some(p.clone());
        }
        let pattern = learned::propose(&call, &decision)?;
        // Simulate before anything is saved: the policy's examples and the adversarial
        // corpus, with every rule in force plus this one.
        let mut cases = learned::corpus_cases();
        cases.extend(self.example_cases()?);
        let existing = self.learned_set().await?;
        learned::check_cases(&policy, existing.rules(), &pattern, &cases)?;
        let scope = match scope {
            RuleScope::Session => Scope::Session(a.session_id.as_str().to_owned()),
            RuleScope::Workspace => Scope::Workspace(workspace),
            RuleScope::All => Scope::All,
        };
        Ok(RuleProposal { pattern, scope })
    }

    /// The `[[example]]`s of the policy document in force.
    fn example_cases(&self) -> Result<Vec<learned::Case>, PolicyError> {
        let text = match self.source() {
            PolicySource::Builtin(_) => DEFAULT_POLICY_TOML.to_owned(),
            PolicySource::File(f) => std::fs::read_to_string(f.path()).map_err(|e| {
                PolicyError::Rule(learned::Refusal::NotLearnable {
                    why: format!(
                        "the policy document {} cannot be read to check the rule against its examples: {e}",
                        f.path().display()
                    ),
                })
            })?,
        };
        learned::example_cases(&text).map_err(|e| {
            PolicyError::Rule(learned::Refusal::NotLearnable {
                why: format!(
                    "the policy document does not parse, so the rule cannot be checked against its examples: {e}"
                ),
            })
        })
    }

    /// Approves with `remember`: the rule is proposed and simulated, then stored in the same
    /// transaction as the approval. A refusal decides nothing.
    pub(crate) async fn decide_remembering(
        &self,
        caller: &Principal,
        approver: ledger::Principal,
        req: DecideRequest,
    ) -> Result<Decided, PolicyError> {
        let Some(remember) = req.remember else {
            return Err(PolicyError::Internal(
                "decide_remembering without remember".into(),
            ));
        };
        if req.verdict == ledger::Verdict::Deny {
            return Err(PolicyError::invalid(
                "remember",
                "remember is only for approvals; a denial is never learned",
            ));
        }
        let a = self
            .read("get", self.inner.ledger.get(req.approval_id.clone()))
            .await?;
        let proposal = self.proposal_for(&a, remember.scope).await?;
        let rule = NewLearnedRule {
            pattern: proposal.pattern.encode(),
            display: proposal.pattern.to_text(),
            scope: proposal.scope.kind().to_owned(),
            scope_value: proposal.scope.value().to_owned(),
            ttl: remember.ttl,
        };
        let (a, rule) = self
            .write(
                "ledger.write",
                "decide_and_learn",
                self.inner.ledger.decide_and_learn(
                    req.approval_id,
                    Decide {
                        approver,
                        verdict: req.verdict,
                        reason: req.reason,
                        message: req.message,
                        ttl: req.ttl,
                    },
                    rule,
                ),
            )
            .await?;
        self.inner.learned.local.fetch_add(1, Ordering::SeqCst);
        tracing::info!(approval_id = %a.id, rule_id = %rule.id, by = %caller.name, "rule learned");
        Ok(Decided {
            view: self.view(a).await?,
            rule: Some(rule),
        })
    }

    /// Every learned rule (approvers and admins); revoked and expired ones only when asked.
    pub async fn list_rules(
        &self,
        caller: &Principal,
        include_inactive: bool,
    ) -> Result<RulePage, PolicyError> {
        require(caller, "ListRules", APPROVERS)?;
        let stored = self
            .read("learned_rules", self.inner.ledger.learned_rules())
            .await?;
        let now = ledger::Timestamp::now();
        Ok(RulePage {
            rules: stored
                .rules
                .into_iter()
                .filter(|r| include_inactive || r.active(now))
                .collect(),
            revision: stored.revision,
            now,
        })
    }

    /// Revokes a learned rule (approvers and admins); `learned.` before the id is accepted.
    pub async fn revoke_rule(
        &self,
        caller: &Principal,
        rule_id: String,
    ) -> Result<ledger::LearnedRuleRecord, PolicyError> {
        require(caller, "RevokeRule", APPROVERS)?;
        let id: LearnedRuleId = parse_id(
            "rule_id",
            rule_id
                .strip_prefix("learned.")
                .map(str::to_owned)
                .unwrap_or(rule_id),
        )?;
        let by: ledger::Principal = parse_id("principal", caller.name.clone())?;
        let rule = self
            .write(
                "ledger.write",
                "revoke_rule",
                self.inner.ledger.revoke_rule(id, by),
            )
            .await?;
        self.inner.learned.local.fetch_add(1, Ordering::SeqCst);
        tracing::info!(rule_id = %rule.id, by = %caller.name, "learned rule revoked");
        Ok(rule)
    }
}

/// A stored rule as the engine matches it.
fn compile(r: &ledger::LearnedRuleRecord) -> Result<learned::LearnedRule, String> {
    Ok(learned::LearnedRule {
        id: r.id.as_str().to_owned(),
        pattern: Pattern::decode(&r.pattern)?,
        scope: Scope::from_parts(&r.scope, &r.scope_value)?,
        created_by: r.created_by.as_str().to_owned(),
        source_approval: r.source_approval.as_str().to_owned(),
        expires_at_micros: r.expires_at.map(|t| t.as_micros()),
    })
}

/// The call an approval was asked for, and its context, from what the ledger stored.
fn stored_call(a: &ledger::Approval) -> Result<(ToolCall, CallContext), PolicyError> {
    let not_learnable = |why: String| PolicyError::Rule(learned::Refusal::NotLearnable { why });
    let call = stored::call_from_json(&a.request_json)
        .ok_or_else(|| {
            not_learnable(format!(
                "approval {} stores no call this service can read",
                a.id
            ))
        })?
        .map_err(|e| not_learnable(format!("approval {}: {e}", a.id)))?;
    let ctx = CallContext {
        session_id: a.session_id.as_str().to_owned(),
        principal: a.principal.as_str().to_owned(),
        labels: stored::labels_from_json(&a.explanation_json),
    };
    Ok((call, ctx))
}
