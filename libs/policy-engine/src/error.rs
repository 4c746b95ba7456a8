//! Why a policy document was rejected: one error type for every part of a document (commands,
//! paths, network rules, profiles, examples), each pointing at its line.

use toolgate_core::{Reason, ReasonedError, Tier};

/// Why a policy document was rejected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read policy file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The text is not valid TOML or has fields of the wrong shape.
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A rule is invalid or can never match anything.
    #[error("line {line}: rule `{rule}`: {message}")]
    Rule {
        /// 1-based line of the rule or the offending field.
        line: usize,
        /// The rule id (empty if it has none).
        rule: String,
        /// What is wrong.
        message: String,
    },
    /// A document-level setting or example is invalid.
    #[error("line {line}: {message}")]
    Invalid {
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An `[[example]]` got a different decision than it expects.
    #[error(
        "line {line}: example {index} expects {expected} but the policy decides {got}: {message}"
    )]
    Example {
        /// 1-based line of the example.
        line: usize,
        /// 1-based position among the examples.
        index: usize,
        /// The decision the example states.
        expected: Tier,
        /// The decision the policy made.
        got: Tier,
        /// The decision's explanation.
        message: String,
    },
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        Reason::InvalidPolicy
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::Read { path, .. } => vec![("path", path.clone())],
            Error::Syntax { line, .. }
            | Error::Invalid { line, .. }
            | Error::Rule { line, .. }
            | Error::Example { line, .. } => {
                vec![("line", line.to_string())]
            }
        }
    }
}
