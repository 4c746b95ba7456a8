//! Reading one output pipe: the head streams live under backpressure, the rest is drained into a
//! fixed-size tail ring so the child never blocks and memory never grows with the output.

use std::future::Future;
use std::io;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc};

use crate::event::{Event, Output, Stream, StreamSummary};

/// Largest chunk one read forwards; a read returns whatever the pipe holds, so small writes
/// coalesce without any added delay.
pub(crate) const CHUNK: usize = 256 * 1024;

/// Below this size a chunk is copied into an exact-size buffer so a queued event does not pin a
/// whole `CHUNK` allocation.
const SMALL: usize = 4 * 1024;

/// Reads after a stop never exceed this many chunks, so a writer that outlives the run cannot keep
/// the final drain going.
const FINAL_DRAIN_CHUNKS: usize = 64;

/// A ring holding the last `capacity` bytes pushed into it.
#[derive(Debug)]
pub(crate) struct Ring {
    buf: Vec<u8>,
    capacity: usize,
    /// Where the next byte goes once the buffer is full.
    pos: usize,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            buf: Vec::new(),
            capacity,
            pos: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        if self.capacity == 0 || data.is_empty() {
            return;
        }
        if data.len() >= self.capacity {
            data = &data[data.len() - self.capacity..];
            self.buf.clear();
            self.buf.extend_from_slice(data);
            self.pos = 0;
            return;
        }
        // Fill up first (allocating only once something was actually dropped), then overwrite.
        let room = self.capacity - self.buf.len();
        if room > 0 {
            let take = room.min(data.len());
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(self.capacity);
            }
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        while !data.is_empty() {
            let take = (self.capacity - self.pos).min(data.len());
            self.buf[self.pos..self.pos + take].copy_from_slice(&data[..take]);
            self.pos = (self.pos + take) % self.capacity;
            data = &data[take..];
        }
    }

    /// The content, oldest byte first.
    pub(crate) fn into_bytes(self) -> Bytes {
        if self.buf.len() < self.capacity || self.pos == 0 {
            return Bytes::from(self.buf);
        }
        let mut out = Vec::with_capacity(self.buf.len());
        out.extend_from_slice(&self.buf[self.pos..]);
        out.extend_from_slice(&self.buf[..self.pos]);
        Bytes::from(out)
    }
}

/// Limits of one stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamLimits {
    pub cap: u64,
    pub tail: usize,
}

struct Tally {
    cap: u64,
    total: u64,
    streamed: u64,
    ring: Ring,
}

impl Tally {
    fn discard(&mut self, data: &[u8], cap_hit: &Notify) {
        if data.is_empty() {
            return;
        }
        self.total += data.len() as u64;
        self.ring.push(data);
        if self.total > self.cap {
            cap_hit.notify_one();
        }
    }

    fn summary(self) -> StreamSummary {
        let tail_len = self.ring.len() as u64;
        StreamSummary {
            total_bytes: self.total,
            streamed_bytes: self.streamed,
            dropped_bytes: self.total - self.streamed - tail_len,
            truncated: self.streamed < self.total,
            tail_offset: self.total - tail_len,
            tail: self.ring.into_bytes(),
        }
    }
}

/// Reads `pipe` to its end and returns the exact accounting.
///
/// Until the cap, each read becomes one `Output` event sent with backpressure (a full channel stops
/// the reading, so the child blocks on its pipe). After the cap (or once the receiver is gone) the
/// pump keeps reading and discarding into the tail ring. When `stop` completes the pump takes only
/// what the pipe already holds and returns, so an escaped writer cannot keep the run alive.
pub(crate) async fn pump(
    stream: Stream,
    mut pipe: pipe::Receiver,
    limits: StreamLimits,
    tx: mpsc::Sender<Event>,
    cap_hit: &Notify,
    stop: impl Future<Output = ()>,
) -> StreamSummary {
    tokio::pin!(stop);
    let mut tally = Tally {
        cap: limits.cap,
        total: 0,
        streamed: 0,
        ring: Ring::new(limits.tail),
    };
    let mut live = limits.cap > 0;
    let mut buf = BytesMut::new();
    let mut scratch = Vec::new();
    let mut stopped = false;
    loop {
        if live {
            if buf.capacity() < CHUNK {
                buf.reserve(CHUNK);
            }
            let read = tokio::select! {
                biased;
                r = pipe.read_buf(&mut buf) => r,
                () = &mut stop => { stopped = true; break; }
            };
            let mut n = match read {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            // Coalesce without waiting: take whatever else is already in the pipe, up to a chunk.
            let mut eof = false;
            while n < CHUNK {
                match pipe.try_read_buf(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(m) => n += m,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let offset = tally.total;
            tally.total += n as u64;
            let head_len = n.min((tally.cap - tally.streamed) as usize);
            let data = if head_len <= SMALL {
                let d = Bytes::copy_from_slice(&buf[..head_len]);
                let _ = buf.split_to(head_len);
                d
            } else {
                buf.split_to(head_len).freeze()
            };
            // `buf` now holds only bytes past the cap (if any).
            let sent = tokio::select! {
                biased;
                r = tx.send(Event::Output(Output { stream, offset, data: data.clone() })) => r.is_ok(),
                () = &mut stop => { stopped = true; false }
            };
            if sent {
                tally.streamed += head_len as u64;
            } else {
                // Never delivered: it becomes part of the (contiguous) undelivered end.
                tally.ring.push(&data);
                live = false;
            }
            if !buf.is_empty() {
                tally.ring.push(&buf);
                live = false;
            }
            buf.clear();
            if tally.total > tally.cap {
                cap_hit.notify_one();
            }
            if tally.streamed >= tally.cap {
                live = false;
            }
            if stopped || eof {
                break;
            }
        } else {
            if scratch.is_empty() {
                scratch = vec![0; CHUNK];
                // The live buffer is no longer needed.
                buf = BytesMut::new();
            }
            let read = tokio::select! {
                biased;
                r = pipe.read(&mut scratch) => r,
                () = &mut stop => { stopped = true; break; }
            };
            match read {
                Ok(0) => break,
                Ok(n) => tally.discard(&scratch[..n], cap_hit),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    if stopped {
        // Count what the pipe already holds so totals stay exact, without waiting for more.
        if scratch.is_empty() {
            scratch = vec![0; CHUNK];
        }
        for _ in 0..FINAL_DRAIN_CHUNKS {
            match pipe.try_read(&mut scratch) {
                Ok(0) => break,
                Ok(n) => tally.discard(&scratch[..n], cap_hit),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    tally.summary()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_bytes_in_order() {
        let mut r = Ring::new(5);
        r.push(b"ab");
        r.push(b"cd");
        assert_eq!(&r.into_bytes()[..], b"abcd");
        let mut r = Ring::new(5);
        r.push(b"abc");
        r.push(b"defg");
        assert_eq!(&r.into_bytes()[..], b"cdefg");
        let mut r = Ring::new(5);
        r.push(b"0123456789");
        r.push(b"x");
        assert_eq!(&r.into_bytes()[..], b"6789x");
        let mut r = Ring::new(3);
        for b in b"abcdefgh" {
            r.push(&[*b]);
        }
        assert_eq!(&r.into_bytes()[..], b"fgh");
    }

    #[test]
    fn ring_of_zero_keeps_nothing() {
        let mut r = Ring::new(0);
        r.push(b"abc");
        assert_eq!(r.len(), 0);
        assert!(r.into_bytes().is_empty());
    }
}
