//! Whether a call reads or writes a path: the vocabulary the baseline rules and the path
//! resolution share, kept apart so neither depends on the other for it.

/// Whether a path is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// The call only reads the path.
    Read,
    /// The call creates, changes or removes the path.
    Write,
}

impl Access {
    /// The lowercase name used in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}
