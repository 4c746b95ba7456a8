//! Shared helpers: a runner with test-friendly limits, a workspace directory and an event
//! collector that checks the stream invariants of every run it reads.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use toolgate_process::{Config, Event, Exited, Run, RunRequest, RunSpec, Runner, Started, Stream};

/// Limits small enough that misbehaving tests fail fast.
pub fn config() -> Config {
    Config {
        default_timeout: Duration::from_secs(20),
        kill_grace: Duration::from_millis(300),
        drain_after_exit: Duration::from_millis(300),
        ..Config::default()
    }
}

pub fn runner() -> Runner {
    Runner::new(config()).expect("runner starts")
}

/// A fresh workspace directory and an fd of it for `cwd`.
pub fn workspace() -> (TempDir, OwnedFd) {
    let dir = tempfile::tempdir().unwrap();
    let fd = std::fs::File::open(dir.path()).unwrap().into();
    (dir, fd)
}

pub fn cwd_of(dir: &TempDir) -> OwnedFd {
    std::fs::File::open(dir.path()).unwrap().into()
}

/// Everything a run produced, after checking event order and offsets.
#[derive(Debug)]
pub struct Outcome {
    pub started: Option<Started>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exited: Exited,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

pub async fn collect(mut run: Run) -> Outcome {
    let t = Instant::now();
    let mut started = None;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut exited = None;
    let mut first = true;
    while let Some(event) = run.recv().await {
        assert!(exited.is_none(), "event after Exited: {event:?}");
        match event {
            Event::Started(s) => {
                assert!(first, "Started must be the first event");
                started = Some(s);
            }
            Event::Output(o) => {
                assert!(started.is_some(), "output before Started");
                assert!(!o.data.is_empty(), "empty output chunk");
                let buf = match o.stream {
                    Stream::Stdout => &mut stdout,
                    Stream::Stderr => &mut stderr,
                };
                assert_eq!(o.offset, buf.len() as u64, "offsets are contiguous");
                buf.extend_from_slice(&o.data);
            }
            Event::Exited(e) => exited = Some(e),
        }
        first = false;
    }
    let exited = exited.expect("exactly one Exited ends every run");
    assert_eq!(exited.stdout.streamed_bytes, stdout.len() as u64);
    assert_eq!(exited.stderr.streamed_bytes, stderr.len() as u64);
    for s in [&exited.stdout, &exited.stderr] {
        assert_eq!(
            s.total_bytes,
            s.streamed_bytes + s.dropped_bytes + s.tail.len() as u64,
            "exact accounting"
        );
        assert_eq!(s.tail_offset, s.total_bytes - s.tail.len() as u64);
    }
    Outcome {
        started,
        stdout,
        stderr,
        exited,
        elapsed: t.elapsed(),
    }
}

pub fn spec(req: RunRequest) -> RunSpec {
    RunSpec::try_from(req).expect("valid request")
}

pub async fn run_script(runner: &Runner, script: &str, cwd: OwnedFd) -> Outcome {
    collect(
        runner
            .try_run(spec(RunRequest::script(script, cwd)))
            .unwrap(),
    )
    .await
}

/// Whether a process with this host pid still exists (zombies included).
pub fn pid_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
