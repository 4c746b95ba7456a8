//! Shared helpers: a runner with test-friendly limits, a workspace directory and an event
//! collector that checks the stream invariants of every run it reads.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use toolgate_process::{Config, Event, Exited, Run, RunRequest, RunSpec, Runner, Started, Stream};

/// Limits small enough that misbehaving tests fail fast.
pub(crate) fn config() -> Config {
    Config {
        default_timeout: Duration::from_secs(20),
        kill_grace: Duration::from_millis(300),
        drain_after_exit: Duration::from_millis(300),
        ..Config::default()
    }
}

pub(crate) fn runner() -> Runner {
    Runner::new(config()).expect("runner starts")
}

/// A fresh workspace directory and an fd of it for `cwd`.
pub(crate) fn workspace() -> (TempDir, OwnedFd) {
    let dir = tempfile::tempdir().unwrap();
    let fd = std::fs::File::open(dir.path()).unwrap().into();
    (dir, fd)
}

pub(crate) fn cwd_of(dir: &TempDir) -> OwnedFd {
    std::fs::File::open(dir.path()).unwrap().into()
}

/// Everything a run produced, after checking event order and offsets.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub started: Option<Started>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exited: Exited,
    pub elapsed: Duration,
}

impl Outcome {
    pub(crate) fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

pub(crate) async fn collect(run: Run) -> Outcome {
    Partial::default().finish(run).await
}

/// The events of a run read so far, checked as they arrive.
#[derive(Debug, Default)]
pub(crate) struct Partial {
    pub started: Option<Started>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    exited: Option<Exited>,
    seen: bool,
    t: Option<Instant>,
}

impl Partial {
    /// Takes one event; false once the run has no more.
    async fn step(&mut self, run: &mut Run) -> bool {
        self.t.get_or_insert_with(Instant::now);
        let Some(event) = run.recv().await else {
            return false;
        };
        assert!(self.exited.is_none(), "event after Exited: {event:?}");
        match event {
            Event::Started(s) => {
                assert!(!self.seen, "Started must be the first event");
                self.started = Some(s);
            }
            Event::Output(o) => {
                assert!(self.started.is_some(), "output before Started");
                assert!(!o.data.is_empty(), "empty output chunk");
                let buf = match o.stream {
                    Stream::Stdout => &mut self.stdout,
                    Stream::Stderr => &mut self.stderr,
                };
                assert_eq!(o.offset, buf.len() as u64, "offsets are contiguous");
                buf.extend_from_slice(&o.data);
            }
            Event::Exited(e) => self.exited = Some(e),
        }
        self.seen = true;
        true
    }

    /// Reads until stdout holds a complete line, and returns it (without its newline);
    /// panics if the run ends first.
    pub(crate) async fn line(&mut self, run: &mut Run) -> String {
        while !self.stdout.contains(&b'\n') {
            assert!(
                self.step(run).await && self.exited.is_none(),
                "the run ended before a line: {self:?}"
            );
        }
        let line: Vec<u8> = self.stdout.split(|b| *b == b'\n').next().unwrap().to_vec();
        String::from_utf8(line).unwrap()
    }

    /// Reads the rest of the run.
    pub(crate) async fn finish(mut self, mut run: Run) -> Outcome {
        while self.step(&mut run).await {}
        let exited = self.exited.expect("exactly one Exited ends every run");
        assert_eq!(exited.stdout.streamed_bytes, self.stdout.len() as u64);
        assert_eq!(exited.stderr.streamed_bytes, self.stderr.len() as u64);
        for s in [&exited.stdout, &exited.stderr] {
            assert_eq!(
                s.total_bytes,
                s.streamed_bytes + s.dropped_bytes + s.tail.len() as u64,
                "exact accounting"
            );
            assert_eq!(s.tail_offset, s.total_bytes - s.tail.len() as u64);
        }
        Outcome {
            started: self.started,
            stdout: self.stdout,
            stderr: self.stderr,
            exited,
            elapsed: self.t.map_or(Duration::ZERO, |t| t.elapsed()),
        }
    }
}

pub(crate) fn spec(req: RunRequest) -> RunSpec {
    RunSpec::try_from(req).expect("valid request")
}

pub(crate) async fn run_script(runner: &Runner, script: &str, cwd: OwnedFd) -> Outcome {
    collect(
        runner
            .try_run(spec(RunRequest::script(script, cwd)))
            .unwrap(),
    )
    .await
}

/// Whether a process with this host pid still exists (zombies included).
pub(crate) fn pid_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
