//! Classification latency: a realistic command mix under 500 and 5 000 user rules.
//!
//! Goals (brief): p99 with 500 rules ≤ 10 µs; p99 with 5 000 rules ≤ 1.5 × the 500-rule p99.
//! Both policies are classified interleaved in one run, so noise lands on both sides.

use std::hint::black_box;
use std::time::Duration;

use toolgate_bench::classify_mix::{MIX, generated_policy};
use toolgate_bench::{Goal, heading, interleave, print_side, report_ratio, sample_count};
use toolgate_core::ToolKind;
use toolgate_policy_engine::{CallContext, ToolCall};

fn main() {
    let n = sample_count(20_000);
    // Without the analysis memo: the mix repeats, and every script must be parsed and
    // analysed each time for the figures to say what a first-seen command costs.
    let small = generated_policy(500).without_analysis_memo();
    let large = generated_policy(5_000).without_analysis_memo();
    let ctx = CallContext {
        session_id: "s".to_owned(),
        principal: "agent".to_owned(),
        ..Default::default()
    };
    let mut calls: Vec<ToolCall> = MIX.iter().map(|s| ToolCall::script(*s)).collect();
    calls.push(ToolCall::fs(ToolKind::FsRead, "dir7/src/lib.rs"));
    calls.push(ToolCall::fs(ToolKind::FsWrite, "src/main.rs"));

    heading("classify a realistic command mix: 500 rules vs 5 000 rules");
    let (mut i, mut j) = (0usize, 0usize);
    let (a, b) = interleave(
        n,
        500,
        || {
            i = (i + 1) % calls.len();
            black_box(small.classify(&calls[i], &ctx));
        },
        || {
            j = (j + 1) % calls.len();
            black_box(large.classify(&calls[j], &ctx));
        },
    );
    print_side("500 rules", &a);
    print_side("5 000 rules", &b);
    let goal = Duration::from_micros(10);
    report_ratio(
        "p99(500 rules) / 10 µs",
        a.p99().as_secs_f64() / goal.as_secs_f64(),
        Goal::AtMost(1.0),
    );
    report_ratio(
        "p99(5 000 rules) / p99(500 rules)",
        b.p99().as_secs_f64() / a.p99().as_secs_f64(),
        Goal::AtMost(1.5),
    );
}
