//! Reaping a child with `wait4`, which also reports its resource usage.

use std::io;
use std::time::Duration;

use super::os_err;

/// The result of reaping a child with `wait4`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaped {
    /// The raw wait status.
    pub status: i32,
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub system: Duration,
    /// Peak RSS in bytes.
    pub max_rss: u64,
}

impl Reaped {
    /// `Some(code)` when the child exited normally.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status))
    }

    /// `Some((signal, core_dumped))` when a signal killed the child.
    pub(crate) fn signal(&self) -> Option<(i32, bool)> {
        libc::WIFSIGNALED(self.status)
            .then(|| (libc::WTERMSIG(self.status), libc::WCOREDUMP(self.status)))
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
}

/// Reaps `pid` with `wait4`; `Ok(None)` when `block` is false and it has not exited yet.
pub(crate) fn wait4(pid: i32, block: bool) -> io::Result<Option<Reaped>> {
    let mut status = 0;
    // SAFETY: rusage is plain old data, fully written by the kernel on success.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let options = if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: both out-pointers point to live, properly aligned locals.
        let r = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
        if r < 0 {
            let err = os_err();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if r == 0 {
            return Ok(None);
        }
        return Ok(Some(Reaped {
            status,
            user: timeval(usage.ru_utime),
            system: timeval(usage.ru_stime),
            max_rss: (usage.ru_maxrss.max(0) as u64) * 1024,
        }));
    }
}
