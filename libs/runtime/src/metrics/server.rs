//! The `/metrics` HTTP endpoint.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::shutdown::Shutdown;

/// The content type of a scrape that asked for OpenMetrics text 1.0.0.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of every other scrape: the Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `GET /metrics` from `registry` on `listener` until `shutdown` fires; every other
/// path is 404. Logs the bound address.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving metrics on /metrics");
    let app = axum::Router::new()
        .route("/metrics", get(scrape))
        .with_state(registry);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.wait())
        .await
}

async fn scrape(State(registry): State<Arc<Registry>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let classic = !wants_open_metrics(&accept);
    match render(&registry, classic) {
        Ok(body) => {
            let content_type = if classic {
                TEXT_CONTENT_TYPE
            } else {
                CONTENT_TYPE
            };
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}

/// True when `accept` asks for OpenMetrics (Prometheus does) at least as much as for any
/// other type it names; anything else (no `Accept`, `*/*`, `text/plain`: `curl`, `promtool
/// check metrics`, older scrapers) gets the Prometheus text format 0.0.4.
pub(super) fn wants_open_metrics(accept: &str) -> bool {
    let mut open_metrics = 0.0_f32;
    let mut other = 0.0_f32;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let kind = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if kind.eq_ignore_ascii_case("application/openmetrics-text") {
            open_metrics = open_metrics.max(q);
        } else if !kind.is_empty() {
            other = other.max(q);
        }
    }
    open_metrics > 0.0 && open_metrics >= other
}

/// The registry plus the process metrics, in OpenMetrics or, when `classic`, in the
/// Prometheus text format 0.0.4.
pub(super) fn render(registry: &Registry, classic: bool) -> Result<String, std::fmt::Error> {
    let mut body = String::with_capacity(8192);
    prometheus_client::encoding::text::encode_registry(&mut body, registry)?;
    prometheus_client::encoding::text::encode_registry(&mut body, super::grpc::registry())?;
    prometheus_client::encoding::text::encode_registry(&mut body, super::semconv::registry())?;
    process_metrics(&mut body);
    if classic {
        Ok(to_classic(&body))
    } else {
        prometheus_client::encoding::text::encode_eof(&mut body)?;
        Ok(body)
    }
}

/// Rewrites OpenMetrics text (without `# EOF`) into the Prometheus text format 0.0.4: a
/// counter family's `# HELP` and `# TYPE` take its sample name (`x_total`), an info family
/// becomes a gauge named `x_info`, `unknown` becomes `untyped`, `# UNIT` lines go.
pub(super) fn to_classic(open_metrics: &str) -> String {
    let mut renamed: std::collections::HashMap<&str, (String, &str)> = Default::default();
    for line in open_metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.splitn(2, ' ');
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            match kind {
                "counter" => {
                    renamed.insert(name, (format!("{name}_total"), "counter"));
                }
                "info" => {
                    renamed.insert(name, (format!("{name}_info"), "gauge"));
                }
                "unknown" => {
                    renamed.insert(name, (name.to_owned(), "untyped"));
                }
                _ => {}
            }
        }
    }
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let (new_name, kind) = renamed.get(name)?;
            Some(if *prefix == "# TYPE " {
                format!("{prefix}{new_name} {kind}")
            } else {
                format!("{prefix}{new_name} {tail}")
            })
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// Appends the standard `process_*` metrics of this process, read from `/proc/self`. A value
/// that cannot be read is left out; off Linux nothing is added.
fn process_metrics(out: &mut String) {
    // USER_HZ is 100 in the Linux ABI on every architecture toolgate builds for.
    const TICKS: f64 = 100.0;
    let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{}{} {value}\n",
            name,
            if kind == "counter" { "_total" } else { "" },
        );
    };
    if let Some(stat) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command, which is in parentheses and may hold spaces.
            let after = s.rsplit_once(')')?.1.to_owned();
            Some(
                after
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            )
        })
    {
        // `after` starts at field 3 (state): utime is field 14, stime 15, starttime 22,
        // vsize 23.
        let field = |n: usize| stat.get(n - 3).and_then(|v| v.parse::<f64>().ok());
        if let (Some(utime), Some(stime)) = (field(14), field(15)) {
            metric(
                "process_cpu_seconds",
                "counter",
                "Total user and system CPU time spent in seconds.",
                (utime + stime) / TICKS,
            );
        }
        if let Some(vsize) = field(23) {
            metric(
                "process_virtual_memory_bytes",
                "gauge",
                "Virtual memory size in bytes.",
                vsize,
            );
        }
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        if let (Some(start), Some(boot)) = (field(22), boot) {
            metric(
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                boot + start / TICKS,
            );
        }
    }
    if let Some(rss_kib) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
    {
        metric(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            rss_kib * 1024.0,
        );
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        metric(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            dir.count() as f64,
        );
    }
    if let Some(max) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Max open files"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
    {
        metric(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        );
    }
}
