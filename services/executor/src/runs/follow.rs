//! `AttachRun`: one follower of a background run.
//!
//! A follower holds only its two offsets: it reads what the spool published past them (one
//! `pread` of at most [`CHUNK`] per event), and when there is nothing new it waits for the
//! run's change signal. A slow follower just reads later; none is ever buffered for, and one
//! going away changes nothing for the run.

use std::sync::Arc;

use tonic::Status;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_process::Stream;

use super::{Entry, State, stream_index};

/// Largest output chunk one event carries.
const CHUNK: u64 = 64 << 10;

/// The stream `AttachRun` answers.
pub(crate) type AttachStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::AttachRunResponse, Status>> + Send>>;

struct Follower {
    entry: Arc<Entry>,
    changes: tokio::sync::watch::Receiver<()>,
    started_sent: bool,
    offsets: [u64; 2],
    done: bool,
}

/// Follows `entry` from `offsets` (stdout, stderr).
pub(crate) fn follow(entry: Arc<Entry>, offsets: [u64; 2]) -> AttachStream {
    let changes = entry.changed.subscribe();
    let follower = Follower {
        entry,
        changes,
        started_sent: false,
        offsets,
        done: false,
    };
    Box::pin(futures::stream::unfold(follower, |mut f| async move {
        if f.done {
            return None;
        }
        let item = f.next().await?;
        Some((item, f))
    }))
}

fn event(e: pb::run_response::Event) -> Result<pb::AttachRunResponse, Status> {
    Ok(pb::AttachRunResponse {
        event: Some(pb::RunResponse { event: Some(e) }),
    })
}

impl Follower {
    /// The next event, waiting for one; `None` when the run is over for this follower.
    async fn next(&mut self) -> Option<Result<pb::AttachRunResponse, Status>> {
        use pb::run_response::Event as E;
        loop {
            // Marks what this look saw: a change after it wakes the wait below.
            self.changes.borrow_and_update();
            let (state, started, exited) = {
                let l = self.entry.live();
                let started = (!self.started_sent).then(|| l.started.clone()).flatten();
                (l.state, started, l.exited.clone())
            };
            if let Some(s) = started {
                self.started_sent = true;
                return Some(event(E::Started(s)));
            }
            if !self.started_sent && state == State::Running {
                // Registered but not started yet.
                if self.changes.changed().await.is_err() {
                    return None;
                }
                continue;
            }
            self.started_sent = true;
            // Output first, `exited` once every published byte went out (the tail is
            // published before `exited` is set).
            for stream in [Stream::Stdout, Stream::Stderr] {
                match self.read(stream).await {
                    Ok(Some(chunk)) => return Some(event(E::Output(chunk))),
                    Ok(None) => {}
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            match (state, exited) {
                (State::Running, _) => {
                    if self.changes.changed().await.is_err() {
                        return None;
                    }
                }
                (_, Some(x)) => {
                    self.done = true;
                    return Some(event(E::Exited(x)));
                }
                // Lost with the executor: nothing more will come.
                (_, None) => return None,
            }
        }
    }

    /// The next chunk of `stream` past this follower's offset, skipping to the next
    /// retained byte.
    async fn read(&mut self, stream: Stream) -> Result<Option<pb::OutputChunk>, Status> {
        let Some(spool) = self.entry.spool.as_ref() else {
            return Ok(None);
        };
        let s = spool.stream(stream).clone();
        let i = stream_index(stream);
        let Some(at) = s.extent().locate(self.offsets[i]) else {
            return Ok(None);
        };
        let data = tokio::task::spawn_blocking(move || s.read(at, CHUNK))
            .await
            .map_err(|e| read_failed(&e))?
            .map_err(|e| read_failed(&e))?;
        if data.is_empty() {
            return Ok(None);
        }
        self.offsets[i] = at.offset + data.len() as u64;
        Ok(Some(pb::OutputChunk {
            stream: match stream {
                Stream::Stdout => pb::Stream::Stdout,
                Stream::Stderr => pb::Stream::Stderr,
            } as i32,
            offset: at.offset,
            data,
        }))
    }
}

fn read_failed(e: &dyn std::fmt::Display) -> Status {
    status::status(
        Reason::Internal,
        format!("cannot read the run's spooled output: {e}"),
        [],
    )
}
