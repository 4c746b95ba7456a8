//! Directory handles for a child process's working directory.

use std::os::fd::OwnedFd;

use crate::error::Result;
use crate::path::WorkspacePath;
use crate::workspace::{Access, Workspace};

/// An open, confined directory: the handle a child `fchdir`s into, and its canonical path.
#[derive(Debug)]
pub struct OpenDirectory {
    /// The directory handle (`O_RDONLY | O_DIRECTORY | O_CLOEXEC`).
    pub fd: OwnedFd,
    /// The canonical workspace-relative path (`.` for the root).
    pub canonical: String,
}

impl Workspace {
    /// Opens an existing directory beneath the root for use as a working directory.
    ///
    /// The same confinement as every other operation applies: the kernel resolves each
    /// component beneath the root handle, and deny globs are checked on the canonical path.
    /// Handing the child this handle (instead of a path) means a later symlink swap cannot
    /// move it elsewhere.
    pub fn open_directory(&self, path: &WorkspacePath) -> Result<OpenDirectory> {
        let req = self.request(path)?;
        self.precheck(&req, Access::Read)?;
        let (fd, canon) = self.open_dir(req.shown, &req.rel, false)?;
        self.check(req.shown, &canon, Access::Read)?;
        let canonical = if canon.as_os_str().is_empty() {
            ".".to_owned()
        } else {
            canon.to_string_lossy().into_owned()
        };
        Ok(OpenDirectory { fd, canonical })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::WorkspaceConfig;
    use toolgate_core::{Reason, ReasonedError};

    #[test]
    fn opens_inside_and_refuses_escapes_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        let ws = Workspace::open(WorkspaceConfig::new(&root)).unwrap();
        let p = |s: &str| WorkspacePath::try_from(s).unwrap();

        assert_eq!(ws.open_directory(&p(".")).unwrap().canonical, ".");
        assert_eq!(
            ws.open_directory(&p("sub/../sub")).unwrap().canonical,
            "sub"
        );
        for bad in ["..", "up", "--bind / /", "/etc"] {
            let err = ws.open_directory(&p(bad)).unwrap_err();
            assert!(
                matches!(
                    err.reason(),
                    Reason::PathOutsideWorkspace | Reason::NotFound
                ),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            ws.open_directory(&p("file")).unwrap_err().reason(),
            Reason::NotADirectory
        );
    }
}
