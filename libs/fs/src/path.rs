//! Validated path input and the hashes callers send back to us.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// Longest path string accepted, the Linux `PATH_MAX`.
const MAX_PATH_LEN: usize = 4096;

/// A path exactly as the caller sent it, checked for the things no operation accepts.
///
/// Relative paths are taken against the workspace root; absolute paths must lie under the
/// root's real path or a configured alias. Whether a path stays inside the workspace is
/// decided only when it is resolved, by the kernel, never from this string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkspacePath(String);

impl WorkspacePath {
    /// The path as the caller spelled it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for WorkspacePath {
    type Error = Error;

    fn try_from(raw: String) -> Result<Self, Error> {
        let why = if raw.is_empty() {
            Some("the path is empty; use `.` for the workspace root")
        } else if raw.contains('\0') {
            Some("the path contains a NUL byte")
        } else if raw.len() > MAX_PATH_LEN {
            Some("the path is longer than 4096 bytes")
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::InvalidPath {
                path: raw.replace('\0', "\\0"),
                why,
            }),
            None => Ok(WorkspacePath(raw)),
        }
    }
}

impl TryFrom<&str> for WorkspacePath {
    type Error = Error;

    fn try_from(raw: &str) -> Result<Self, Error> {
        WorkspacePath::try_from(raw.to_owned())
    }
}

impl FromStr for WorkspacePath {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        WorkspacePath::try_from(s)
    }
}

impl fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A sha256 digest, shown and parsed as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256(pub [u8; 32]);

impl Sha256 {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256 {
        use sha2::Digest;
        Sha256(sha2::Sha256::digest(bytes).into())
    }

    /// Lowercase hex form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256({})", self.to_hex())
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for Sha256 {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let mut out = [0u8; 32];
        match hex::decode_to_slice(s.trim(), &mut out) {
            Ok(()) => Ok(Sha256(out)),
            Err(_) => Err(Error::InvalidRequest {
                field: "expected_sha256",
                why: format!("`{s}` is not 64 hex digits"),
            }),
        }
    }
}

impl TryFrom<&str> for Sha256 {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self, Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{Reason, ReasonedError};

    #[test]
    fn empty_and_nul_paths_are_invalid() {
        for bad in ["", "a\0b", "\0"] {
            let err = WorkspacePath::try_from(bad).unwrap_err();
            assert_eq!(err.reason(), Reason::InvalidPath, "{bad:?}");
        }
        assert_eq!(WorkspacePath::try_from("a/b").unwrap().as_str(), "a/b");
    }

    #[test]
    fn sha256_round_trips_through_hex() {
        let h = Sha256::of(b"abc");
        assert_eq!(
            h.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(h.to_hex().parse::<Sha256>().unwrap(), h);
        assert_eq!(
            "xyz".parse::<Sha256>().unwrap_err().reason(),
            Reason::InvalidRequest
        );
    }
}
