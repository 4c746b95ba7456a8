//! Secret redaction applied to every string before it is stored.

use regex::Regex;

use crate::error::{Error, Result};

/// What replaces a secret in stored text (the marker every toolgate redaction uses).
pub use toolgate_core::REDACTED;

/// Which secrets to scrub.
#[derive(Clone)]
pub struct RedactionConfig {
    /// Regular expressions whose matches are secrets.
    pub patterns: Vec<String>,
    /// Exact secret values known to the service (tokens, passwords).
    pub secrets: Vec<String>,
}

impl Default for RedactionConfig {
    /// Common credential shapes; deployments add their own.
    fn default() -> Self {
        RedactionConfig {
            patterns: [
                r"AKIA[0-9A-Z]{16}",
                r"gh[pousr]_[A-Za-z0-9]{36,}",
                r"xox[abprs]-[A-Za-z0-9-]{10,}",
                r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{16,}",
                r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
                // The value stops at quotes and backslashes too: stored texts are JSON, and a
                // match running past the end of its string literal would shred the document.
                r#"(?i)(password|passwd|secret|token|api[_-]?key)=[^\s&"'\\]{6,}"#,
            ]
            .map(str::to_owned)
            .to_vec(),
            secrets: Vec::new(),
        }
    }
}

// Debug output ends up in logs and `--print-config`: never show the secrets themselves.
impl std::fmt::Debug for RedactionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedactionConfig")
            .field("patterns", &self.patterns)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .finish()
    }
}

/// A compiled redaction configuration.
#[derive(Clone)]
pub struct Redactor {
    patterns: Vec<Regex>,
    // Each secret as written and as it appears inside a JSON string literal,
    // longest first so that a secret containing another is scrubbed whole.
    exact: Vec<String>,
}

impl Redactor {
    /// Compiles the configuration; an invalid pattern names itself in the error.
    pub fn new(config: &RedactionConfig) -> Result<Self> {
        let patterns = config
            .patterns
            .iter()
            .map(|p| {
                Regex::new(p).map_err(|e| Error::InvalidPattern {
                    pattern: p.clone(),
                    problem: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut exact = Vec::new();
        for s in &config.secrets {
            // Very short values would shred unrelated text and are not credentials anyway.
            if s.len() < 4 {
                return Err(Error::invalid(
                    "redaction.secrets",
                    "a known secret is shorter than 4 bytes",
                ));
            }
            exact.push(s.clone());
            let escaped = json_escape(s);
            if escaped != *s {
                exact.push(escaped);
            }
        }
        exact.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Ok(Redactor { patterns, exact })
    }

    /// Returns `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.exact {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        for p in &self.patterns {
            if p.is_match(&out) {
                out = p.replace_all(&out, REDACTED).into_owned();
            }
        }
        out
    }

    /// Whether `text` contains anything that would be redacted.
    pub fn contains_secret(&self, text: &str) -> bool {
        self.exact.iter().any(|s| text.contains(s.as_str()))
            || self.patterns.iter().any(|p| p.is_match(text))
    }

    pub(crate) fn opt(&self, text: Option<&str>) -> Option<String> {
        text.map(|t| self.redact(t))
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("patterns", &self.patterns.len())
            .field("secrets", &format_args!("<{} redacted>", self.exact.len()))
            .finish()
    }
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(secrets: &[&str]) -> Redactor {
        Redactor::new(&RedactionConfig {
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            ..RedactionConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn exact_secrets_are_scrubbed_raw_and_json_escaped() {
        let r = redactor(&["CANARY\"x\\y"]);
        assert_eq!(r.redact("a CANARY\"x\\y b"), "a [REDACTED] b");
        assert_eq!(r.redact(r#"{"v":"CANARY\"x\\y"}"#), r#"{"v":"[REDACTED]"}"#);
    }

    #[test]
    fn patterns_are_scrubbed() {
        let r = redactor(&[]);
        let out = r.redact("key AKIAABCDEFGHIJKLMNOP and password=hunter22");
        assert!(!out.contains("AKIA"));
        assert!(!out.contains("hunter22"));
        assert!(r.contains_secret("ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    }

    #[test]
    fn patterns_stay_inside_their_json_string() {
        let r = redactor(&[]);
        let json = r#"{"script":"deploy --x token=s3cr3tvalue","tool":"process.run","v":1}"#;
        assert_eq!(
            r.redact(json),
            r#"{"script":"deploy --x [REDACTED]","tool":"process.run","v":1}"#
        );
        // Already redacted text is stable.
        assert_eq!(r.redact(&r.redact(json)), r.redact(json));
    }

    #[test]
    fn bad_pattern_names_itself() {
        let err = Redactor::new(&RedactionConfig {
            patterns: vec!["(".into()],
            secrets: vec![],
        })
        .unwrap_err();
        assert!(err.to_string().contains("`(`"));
    }

    #[test]
    fn debug_never_shows_secrets() {
        let c = RedactionConfig {
            patterns: vec![],
            secrets: vec!["hunter2hunter2".into()],
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(!format!("{:?}", Redactor::new(&c).unwrap()).contains("hunter2"));
    }

    #[test]
    fn tiny_secrets_are_refused() {
        assert!(
            Redactor::new(&RedactionConfig {
                patterns: vec![],
                secrets: vec!["ab".into()],
            })
            .is_err()
        );
    }
}
