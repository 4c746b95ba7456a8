//! What listings and stat report about an entry: its kind and modification time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, Stat};

/// The kind of a directory entry, as listings and stat report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed when listing).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    pub(crate) fn from_file_type(t: FileType) -> EntryKind {
        match t {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }

    pub(crate) fn of(stat: &Stat) -> EntryKind {
        EntryKind::from_file_type(FileType::from_raw_mode(stat.st_mode))
    }

    /// A lowercase name for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "special file",
        }
    }
}

pub(crate) fn special_kind(stat: &Stat) -> &'static str {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        _ => "special file",
    }
}

// `stat` field widths differ between architectures, so the casts are not always no-ops.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn mtime_of(stat: &Stat) -> SystemTime {
    let secs = stat.st_mtime as i64;
    let nanos = stat.st_mtime_nsec as u32;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos.into())
    }
}
