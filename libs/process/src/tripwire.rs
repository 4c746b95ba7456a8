//! Stops a run when the host replaces a path its view masks, binds or pins.
//!
//! A mask is a mount on the path's dentry. When a process outside the run's mount namespace
//! (the human's editor saving `.env` by rename, `git config` rewriting `.git/config`) renames
//! a new file over it or removes it, the kernel detaches the run's mount, and the new file
//! would be visible, or writable, for the rest of the run. No mount can follow a name, so the
//! runner watches the names instead: an inotify watch on every directory holding a masked,
//! bound or pinned entry, armed before the run's view is built, and the first event that
//! touches one of those names (or moves or removes a watched directory) kills the run with
//! [`CancelCause::MaskedPathReplaced`](crate::CancelCause::MaskedPathReplaced).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::unix::AsyncFd;

/// One directory to watch and the entry names in it whose replacement stops the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// The directory, as a host path.
    pub dir: PathBuf,
    /// Entry names in it that the run's view masks, binds or pins.
    pub names: Vec<OsString>,
}

/// The armed watches of one run, before the runtime owns them.
#[derive(Debug)]
pub(crate) struct Armed {
    fd: OwnedFd,
    names: HashMap<i32, Vec<OsString>>,
}

const EVENTS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW);

impl Armed {
    /// Watches every directory of `watches`; `None` when there is nothing to watch. A
    /// directory that cannot be watched (gone since the walk, or the user's inotify watch limit
    /// reached) refuses the run: it would run without the guard its view relies on.
    pub(crate) fn arm(watches: &[Watch]) -> io::Result<Option<Armed>> {
        if watches.is_empty() {
            return Ok(None);
        }
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        let mut names: HashMap<i32, Vec<OsString>> = HashMap::new();
        for w in watches {
            let wd = inotify::add_watch(&fd, &w.dir, EVENTS).map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("inotify_add_watch {}: {e}", w.dir.display()),
                )
            })?;
            names.entry(wd).or_default().extend(w.names.iter().cloned());
        }
        Ok(Some(Armed { fd, names }))
    }

    /// Hands the watches to the runtime (call inside it).
    pub(crate) fn into_tripwire(self) -> io::Result<Tripwire> {
        Ok(Tripwire {
            fd: crate::sys::watch_readable(self.fd)?,
            names: self.names,
        })
    }
}

/// Armed watches a supervisor waits on.
#[derive(Debug)]
pub(crate) struct Tripwire {
    fd: AsyncFd<OwnedFd>,
    names: HashMap<i32, Vec<OsString>>,
}

impl Tripwire {
    /// Returns when a watched name was created, renamed or removed, or a watched directory
    /// itself moved or vanished; events about other names in those directories are ignored.
    pub(crate) async fn tripped(&self) {
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        loop {
            let Ok(mut ready) = self.fd.readable().await else {
                return;
            };
            let mut reader = inotify::Reader::new(self.fd.get_ref(), &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => {
                        let flags = event.events();
                        if flags.intersects(
                            ReadFlags::DELETE_SELF
                                | ReadFlags::MOVE_SELF
                                | ReadFlags::QUEUE_OVERFLOW,
                        ) {
                            return;
                        }
                        let named = event.file_name().is_some_and(|n| {
                            self.names.get(&event.wd()).is_some_and(|names| {
                                names.iter().any(|m| m.as_bytes() == n.to_bytes())
                            })
                        });
                        if named {
                            return;
                        }
                    }
                    Err(rustix::io::Errno::AGAIN) => {
                        ready.clear_ready();
                        break;
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return,
                }
            }
        }
    }
}
