//! The background-run tools: `list_runs`, `read_run_output` and `stop_run`, each one unary
//! `ProcessService` call. None is a policy decision (the run was one when it started), so
//! their results carry no decision in `_meta`.

use serde_json::Value;
use toolgate_contracts::executor::v1 as pb;

use super::Cx;
use super::output::{run_info, run_line};
use crate::outcome::{Outcome, Receipt};
use crate::tools::{
    ListRunsArgs, ListRunsOutput, ReadRunOutputArgs, ReadRunOutputOutput, StopRunArgs,
    StopRunOutput, StreamName,
};

/// Bytes `read_run_output` returns unless `max_bytes` says otherwise: as much as
/// `run_command` shows of a stream's head.
const READ_BYTES: u64 = 48 << 10;

impl Cx<'_> {
    pub(super) async fn list_runs(&self, args: Value) -> Outcome {
        let a: ListRunsArgs = match self.parse(args) {
            Ok(a) => a,
            Err(o) => return *o,
        };
        let message = pb::ListRunsRequest {
            session_id: if a.all_sessions {
                String::new()
            } else {
                self.caller.session_id.clone()
            },
            include_finished: a.include_finished,
        };
        let result = self
            .traced(
                "toolgate.executor.v1.ProcessService/ListRuns",
                message,
                |r| async move { self.shared.process().list_runs(r).await },
            )
            .await;
        match result {
            Ok(r) => {
                let runs: Vec<_> = r.into_inner().runs.into_iter().map(run_info).collect();
                let text = if runs.is_empty() {
                    "no runs".to_owned()
                } else {
                    runs.iter().map(run_line).collect::<Vec<_>>().join("\n")
                };
                Outcome::ran(&ListRunsOutput { runs }, text, Receipt::default(), None)
            }
            Err(s) => Outcome::refused(&s),
        }
    }

    pub(super) async fn read_run_output(&self, args: Value) -> Outcome {
        let a: ReadRunOutputArgs = match self.parse(args) {
            Ok(a) => a,
            Err(o) => return *o,
        };
        let message = pb::ReadRunOutputRequest {
            run_id: a.run_id.clone(),
            stream: match a.stream {
                StreamName::Stdout => pb::Stream::Stdout,
                StreamName::Stderr => pb::Stream::Stderr,
            } as i32,
            offset: a.offset,
            max_bytes: a.max_bytes.unwrap_or(READ_BYTES),
        };
        let result = self
            .traced(
                "toolgate.executor.v1.ProcessService/ReadRunOutput",
                message,
                |r| async move { self.shared.process().read_run_output(r).await },
            )
            .await;
        match result {
            Ok(r) => {
                let out = read_output(a.run_id, a.stream, r.into_inner());
                let text = read_text(&out);
                Outcome::ran(&out, text, Receipt::default(), None)
            }
            Err(s) => Outcome::refused(&s),
        }
    }

    pub(super) async fn stop_run(&self, args: Value) -> Outcome {
        let a: StopRunArgs = match self.parse(args) {
            Ok(a) => a,
            Err(o) => return *o,
        };
        let message = pb::SignalRunRequest {
            run_id: a.run_id,
            signal: if a.kill {
                pb::RunSignal::Kill
            } else {
                pb::RunSignal::Term
            } as i32,
        };
        let result = self
            .traced(
                "toolgate.executor.v1.ProcessService/SignalRun",
                message,
                |r| async move { self.shared.process().signal_run(r).await },
            )
            .await;
        match result {
            Ok(r) => {
                let run = run_info(r.into_inner().run.unwrap_or_default());
                let text = if run.state == "running" {
                    format!(
                        "{} sent to run {}; it has not ended yet (SIGKILL follows after the executor's grace period): list_runs shows when it did",
                        if a.kill { "SIGKILL" } else { "SIGTERM" },
                        run.run_id
                    )
                } else {
                    run_line(&run)
                };
                Outcome::ran(&StopRunOutput { run }, text, Receipt::default(), None)
            }
            Err(s) => Outcome::refused(&s),
        }
    }
}

/// A read as the model gets it: text up to the last whole character, so a character the
/// read's end cut in two is read whole next time instead of replaced.
fn read_output(
    run_id: String,
    stream: StreamName,
    r: pb::ReadRunOutputResponse,
) -> ReadRunOutputOutput {
    let end = r.offset + r.data.len() as u64;
    let (data, next_offset) = match std::str::from_utf8(&r.data) {
        // Cut inside a character at the end (`error_len` None), with more to come from
        // right there: keep the partial character for the next read.
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 && r.next_offset == end => {
            let keep = e.valid_up_to();
            (&r.data[..keep], r.offset + keep as u64)
        }
        _ => (&r.data[..], r.next_offset),
    };
    let exact = std::str::from_utf8(data).is_ok();
    let shown_end = r.offset + data.len() as u64;
    ReadRunOutputOutput {
        run_id,
        stream,
        text: String::from_utf8_lossy(data).into_owned(),
        exact,
        offset: r.offset,
        next_offset,
        skipped_bytes: next_offset.saturating_sub(shown_end),
        total_bytes: r.total_bytes,
        eof: r.eof && next_offset == r.next_offset,
        run: run_info(r.run.unwrap_or_default()),
    }
}

fn read_text(o: &ReadRunOutputOutput) -> String {
    let mut text = o.text.clone();
    if o.skipped_bytes > 0 {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[… bytes {}..{} were not kept by the executor; reading on from {} …]\n",
            o.next_offset - o.skipped_bytes,
            o.next_offset,
            o.next_offset
        ));
    }
    let state = if o.eof {
        format!(
            "[end of the run's output; the run {}]",
            match o.run.exit_code {
                Some(c) => format!("exited with {c}"),
                None => o.run.status.clone(),
            }
        )
    } else if o.next_offset >= o.total_bytes {
        format!(
            "[nothing more written yet ({} bytes so far; the run is {}): read again from offset {} later]",
            o.total_bytes, o.run.state, o.next_offset
        )
    } else {
        format!(
            "[{} more bytes written: read on from offset {}]",
            o.total_bytes - o.next_offset,
            o.next_offset
        )
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&state);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(
        offset: u64,
        data: &[u8],
        next: u64,
        total: u64,
        eof: bool,
    ) -> pb::ReadRunOutputResponse {
        pb::ReadRunOutputResponse {
            data: data.to_vec().into(),
            offset,
            next_offset: next,
            total_bytes: total,
            eof,
            ..Default::default()
        }
    }

    #[test]
    fn a_character_cut_by_the_reads_end_is_left_for_the_next_read() {
        // "é" is 0xc3 0xa9; the read ended between the two bytes.
        let r = response(10, b"ab\xc3", 13, 20, false);
        let o = read_output("run_1".into(), StreamName::Stdout, r);
        assert_eq!(o.text, "ab");
        assert!(o.exact);
        assert_eq!(o.next_offset, 12);
        assert_eq!(o.skipped_bytes, 0);
        // Invalid bytes in the middle are replaced, and said so.
        let r = response(0, b"a\xffb", 3, 3, true);
        let o = read_output("run_1".into(), StreamName::Stdout, r);
        assert_eq!(o.text, "a\u{fffd}b");
        assert!(!o.exact && o.eof);
    }

    #[test]
    fn a_gap_is_reported_with_its_bytes() {
        // The head ended at 100; the tail window starts at 900.
        let r = response(96, b"head", 900, 1000, false);
        let o = read_output("run_1".into(), StreamName::Stderr, r);
        assert_eq!((o.next_offset, o.skipped_bytes), (900, 800));
        let text = read_text(&o);
        assert!(text.contains("bytes 100..900 were not kept"), "{text}");
        assert!(text.contains("100 more bytes written"), "{text}");
    }
}
