//! A bounded memo of shell analyses.
//!
//! [`crate::shell::analyze_script`] is a pure function of the script and the working
//! directory, and parsing bash is most of what classifying a script costs. Agents repeat
//! commands (`git status`, `cargo test`), and one enforced call is analysed more than once
//! (a dry-run `Classify`, then `Authorize`, then the resumed call after an approval), so the
//! policy remembers recent analyses. The memo holds only values computed from its key, so it
//! can never change a decision: the rules are applied afresh to every call.
//!
//! Two generations bound it: lookups check the current one, then the previous one (promoting a
//! hit); when the current generation is full it becomes the previous one and the old previous
//! one is dropped. Memory is at most `2 × GENERATION` entries of scripts up to
//! [`MAX_SCRIPT`] bytes, and no entry outlives two generations without being used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::shell::Analysis;

/// Entries per generation.
const GENERATION: usize = 2048;
/// Longer scripts are analysed every time: they are rare and would dominate the memory bound.
pub(crate) const MAX_SCRIPT: usize = 4096;

#[derive(Default)]
struct Generations {
    current: HashMap<String, Arc<Analysis>>,
    previous: HashMap<String, Arc<Analysis>>,
}

/// Recent script analyses, shared by every classification of one policy.
#[derive(Default)]
pub(crate) struct AnalysisMemo {
    inner: Mutex<Generations>,
}

impl std::fmt::Debug for AnalysisMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("AnalysisMemo")
            .field("entries", &(g.current.len() + g.previous.len()))
            .finish()
    }
}

/// The key of `(cwd, script)`: the cwd's length first, so no two pairs share a key.
fn key(cwd: &str, script: &str) -> String {
    let mut k = String::with_capacity(cwd.len() + script.len() + 8);
    k.push_str(&cwd.len().to_string());
    k.push(':');
    k.push_str(cwd);
    k.push_str(script);
    k
}

impl AnalysisMemo {
    /// The analysis of `script` in `cwd`, computed by `analyze` unless remembered.
    pub(crate) fn get_or_analyze(
        &self,
        cwd: &str,
        script: &str,
        analyze: impl FnOnce() -> Analysis,
    ) -> Arc<Analysis> {
        if script.len() > MAX_SCRIPT {
            return Arc::new(analyze());
        }
        let k = key(cwd, script);
        {
            let mut g = self.lock();
            if let Some(a) = g.current.get(&k) {
                return Arc::clone(a);
            }
            if let Some(a) = g.previous.remove(&k) {
                g.insert(k, Arc::clone(&a));
                return a;
            }
        }
        // Analyse without the lock: two threads may both analyse a new script, and both get
        // the same answer.
        let a = Arc::new(analyze());
        self.lock().insert(k, Arc::clone(&a));
        a
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters: every entry is a complete analysis of its key.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        let g = self.lock();
        g.current.len() + g.previous.len()
    }
}

impl Generations {
    fn insert(&mut self, k: String, a: Arc<Analysis>) {
        if self.current.len() >= GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(k, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::analyze_script;

    #[test]
    fn a_remembered_analysis_is_the_same_analysis() {
        let memo = AnalysisMemo::default();
        let first = memo.get_or_analyze(".", "ls -la", || analyze_script("ls -la", "."));
        let again = memo.get_or_analyze(".", "ls -la", || panic!("analysed twice"));
        assert!(Arc::ptr_eq(&first, &again));
    }

    #[test]
    fn the_working_directory_is_part_of_the_key() {
        let memo = AnalysisMemo::default();
        let root = memo.get_or_analyze(".", "cat x", || analyze_script("cat x", "."));
        let sub = memo.get_or_analyze("src", "cat x", || analyze_script("cat x", "src"));
        assert_eq!(root.commands[0].paths[0].path, "x");
        assert_eq!(sub.commands[0].paths[0].path, "src/x");
        // A cwd ending where a script begins does not collide with a shorter cwd.
        assert_ne!(key("ab", "c"), key("a", "bc"));
    }

    #[test]
    fn memory_is_bounded_by_two_generations() {
        let memo = AnalysisMemo::default();
        for i in 0..(3 * GENERATION) {
            let s = format!("echo {i}");
            memo.get_or_analyze(".", &s, || analyze_script(&s, "."));
        }
        assert!(memo.len() <= 2 * GENERATION, "{}", memo.len());
        let long = "x".repeat(MAX_SCRIPT + 1);
        let a = memo.get_or_analyze(".", &long, || analyze_script(&long, "."));
        let b = memo.get_or_analyze(".", &long, || analyze_script(&long, "."));
        assert!(!Arc::ptr_eq(&a, &b), "long scripts are not remembered");
    }
}
