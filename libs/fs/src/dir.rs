//! Reading a directory by its handle: the one listing primitive under `list`, the walks and
//! the git state reader.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Dir, FileType};

/// Reads a directory's entry names (without `.` and `..`) with their d_type.
pub(crate) fn read_names(fd: &OwnedFd) -> std::io::Result<Vec<(std::ffi::OsString, FileType)>> {
    let mut dir = Dir::read_from(fd)?;
    let mut out = Vec::new();
    while let Some(e) = dir.read() {
        let e = e?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push((OsStr::from_bytes(name).to_owned(), e.file_type()));
    }
    Ok(out)
}
