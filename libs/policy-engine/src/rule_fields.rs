//! What every kind of rule has (an id, a decision and a reason; the context selectors; list
//! fields that must not be empty), parsed the same way for `[[rule]]` and `[[network]]`.

use std::collections::{BTreeMap, HashSet};

use toml::Spanned;
use toolgate_core::Tier;

use crate::error::Error;

/// A list field of a rule, with the spans of the list and of each value.
pub(crate) type List = Option<Spanned<Vec<Spanned<String>>>>;

/// The context selectors every kind of rule has: `sessions`, `principals`, `labels`. An
/// absent selector accepts every context.
#[derive(Debug, Default)]
pub(crate) struct Selectors {
    pub sessions: Option<HashSet<String>>,
    pub principals: Option<HashSet<String>>,
    pub labels: BTreeMap<String, String>,
}

impl Selectors {
    /// Whether `ctx` is accepted by every selector.
    pub(crate) fn matches(&self, ctx: &crate::CallContext) -> bool {
        self.sessions
            .as_ref()
            .is_none_or(|s| s.contains(&ctx.session_id))
            && self
                .principals
                .as_ref()
                .is_none_or(|p| p.contains(&ctx.principal))
            && self
                .labels
                .iter()
                .all(|(k, v)| ctx.labels.get(k) == Some(v))
    }

    /// Parses the selectors of a rule; `err` builds the error for a field's span.
    pub(crate) fn parse(
        sessions: &List,
        principals: &List,
        labels: Option<Spanned<BTreeMap<String, String>>>,
        err: &dyn Fn(std::ops::Range<usize>, String) -> Error,
    ) -> Result<Selectors, Error> {
        let set = |l: &List, field: &str| -> Result<Option<HashSet<String>>, Error> {
            Ok(nonempty(l, field, err)?.map(|v| v.into_iter().map(Spanned::into_inner).collect()))
        };
        let labels = match labels {
            None => BTreeMap::new(),
            Some(l) if l.get_ref().is_empty() => {
                return Err(err(
                    l.span(),
                    "`labels` is empty, so the rule could never match; remove it or add labels"
                        .to_owned(),
                ));
            }
            Some(l) => l.into_inner(),
        };
        Ok(Selectors {
            sessions: set(sessions, "sessions")?,
            principals: set(principals, "principals")?,
            labels,
        })
    }
}

/// What every kind of rule must have, checked the same way: an id that is not empty,
/// reserved (`baseline.*`, `sandbox.*`, `default`: the ids the engine reports itself) or
/// already taken by any rule, since the ledger names a rule by its id alone; a known
/// decision; and a reason. Answers the decision.
pub(crate) fn rule_head(
    id: &Spanned<String>,
    decision: &Spanned<String>,
    reason: &Spanned<String>,
    seen: &mut HashSet<String>,
    err: &dyn Fn(std::ops::Range<usize>, String) -> Error,
) -> Result<Tier, Error> {
    let name = id.get_ref().trim();
    if name.is_empty() {
        return Err(err(id.span(), "`id` must not be empty".to_owned()));
    }
    if name.starts_with("baseline.") || name.starts_with("sandbox.") || name == "default" {
        return Err(err(
            id.span(),
            "ids starting with `baseline.` or `sandbox.` and the id `default` are reserved"
                .to_owned(),
        ));
    }
    if !seen.insert(name.to_owned()) {
        return Err(err(id.span(), "duplicate rule id".to_owned()));
    }
    let tier = decision
        .get_ref()
        .parse()
        .map_err(|m: String| err(decision.span(), m))?;
    if reason.get_ref().trim().is_empty() {
        return Err(err(
            reason.span(),
            "`reason` must say why, for the model and the approver".to_owned(),
        ));
    }
    Ok(tier)
}

/// The values of a list field; an empty list is an error, since the rule could never match.
pub(crate) fn nonempty(
    l: &List,
    field: &str,
    err: &dyn Fn(std::ops::Range<usize>, String) -> Error,
) -> Result<Option<Vec<Spanned<String>>>, Error> {
    match l {
        None => Ok(None),
        Some(v) if v.get_ref().is_empty() => Err(err(
            v.span(),
            format!("`{field}` is empty, so the rule could never match; remove it or list values"),
        )),
        Some(v) => Ok(Some(v.get_ref().clone())),
    }
}
