//! Pidfds: one of the executor itself, and one per run that the Tokio reactor watches for its exit.

use std::io;
use std::os::fd::OwnedFd;

/// A pidfd of the executor itself (close-on-exec), which turns readable once it has exited.
pub(crate) fn own_pidfd() -> io::Result<OwnedFd> {
    let me = rustix::process::getpid();
    Ok(rustix::process::pidfd_open(
        me,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Opens a pidfd for `pid` and registers it with the Tokio reactor; it turns readable when the
/// process exits. Must be called inside a runtime.
pub(crate) fn watch_exit(pid: i32) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| io::Error::other("child pid is not positive"))?;
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK)?;
    // SAFETY: an `OwnedFd` is a valid open descriptor that keeps returning the same number until
    // it is dropped, which is exactly the registration contract.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
            .map_err(io::Error::from)
    }
}

/// Registers a readable descriptor the runner owns (an inotify instance) with the Tokio
/// reactor. Must be called inside a runtime.
pub(crate) fn watch_readable(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: as in `watch_exit`: the `OwnedFd` stays the same open descriptor until dropped.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
            .map_err(io::Error::from)
    }
}

/// A pidfd of `pid` (close-on-exec), or `None` when it is gone (or never was).
pub(crate) fn open_pidfd(pid: i32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Whether the process behind `pidfd` has exited (its pidfd is readable from then on).
pub(crate) fn has_exited(pidfd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(pidfd),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one live pollfd with a zero timeout.
    unsafe { libc::poll(&mut pfd, 1, 0) != 0 }
}
