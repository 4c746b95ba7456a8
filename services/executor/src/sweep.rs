//! The start-up sweep of temp files left by writes that were interrupted.
//!
//! A write goes to `.<name>.toolgate-<pid>-<n>.tmp` beside its target and is renamed over
//! it (`toolgate_fs`'s `write.rs`); an executor killed between the two leaves that file where
//! the agent and the human see it. At start the executor removes the files whose name has
//! exactly that shape and that nobody has written to for a while: several executors may
//! share one workspace, and another's write in progress is fresh.
//!
//! The walk goes by directory handle (`openat` with `O_NOFOLLOW`, `unlinkat` in the same
//! directory), so a symlink or a concurrent rename never makes it remove anything outside
//! the workspace.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// Directory depth the walk descends to (each level holds one descriptor).
const MAX_DEPTH: usize = 128;

/// Whether `name` is a temp file of an interrupted write: `.<stem>.toolgate-<pid>-<n>.tmp`.
pub(crate) fn is_write_temp(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".") else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(b".tmp") else {
        return false;
    };
    // The stem may itself contain `.toolgate-`: the suffix is what counts.
    let Some(at) = rest.windows(10).rposition(|w| w == b".toolgate-") else {
        return false;
    };
    let mut numbers = rest[at + 10..].split(|b| *b == b'-');
    let digits =
        |s: Option<&[u8]>| s.is_some_and(|s| !s.is_empty() && s.iter().all(u8::is_ascii_digit));
    digits(numbers.next()) && digits(numbers.next()) && numbers.next().is_none()
}

/// Removes the write temp files under `root` untouched for at least `older_than`; returns
/// how many. Errors on single entries are skipped: the sweep is a courtesy, not a check.
pub(crate) fn sweep(root: &Path, older_than: Duration) -> usize {
    let Ok(dir) = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    walk(&dir, cutoff, 0)
}

fn walk(dir: &OwnedFd, cutoff: SystemTime, depth: usize) -> usize {
    let Ok(entries) = Dir::read_from(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        match entry.file_type() {
            FileType::Directory if depth < MAX_DEPTH => {
                if let Ok(sub) = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    removed += walk(&sub, cutoff, depth + 1);
                }
            }
            FileType::RegularFile | FileType::Unknown if is_write_temp(bytes) => {
                let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                let mtime = SystemTime::UNIX_EPOCH
                    + Duration::new(
                        u64::try_from(st.st_mtime).unwrap_or(0),
                        u32::try_from(st.st_mtime_nsec).unwrap_or(0),
                    );
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && mtime <= cutoff
                    && rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_ok()
                {
                    removed += 1;
                }
            }
            _ => {}
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_temp_name_shape_matches() {
        for yes in [
            ".notes.txt.toolgate-12-0.tmp",
            ".a.toolgate-1.toolgate-99-123.tmp",
            "..toolgate-1-2.tmp",
        ] {
            assert!(is_write_temp(yes.as_bytes()), "{yes}");
        }
        for no in [
            "notes.txt.toolgate-12-0.tmp",
            ".notes.txt.toolgate-12-0.tmp.bak",
            ".notes.txt.toolgate-12.tmp",
            ".notes.txt.toolgate-12-0-1.tmp",
            ".notes.txt.toolgate-x-0.tmp",
            ".notes.txt.toolgate--0.tmp",
            ".notes.tmp",
        ] {
            assert!(!is_write_temp(no.as_bytes()), "{no}");
        }
    }
}
