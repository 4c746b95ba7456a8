//! Structured `tracing` logs to stderr.

use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. `filter` uses `RUST_LOG` syntax (for example `info,toolgate=debug`).
pub fn init(format: Format, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour())
        .with_writer(std::io::stderr);
    let _ = match format {
        Format::Text => builder.try_init(),
        Format::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Colour codes only for a person at a terminal: a file, a pipe or a log collector gets
/// plain text.
pub(crate) fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The `[log]` section both services share.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: Format,
    /// A `RUST_LOG`-style filter.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: Format::Text,
            filter: "info".into(),
        }
    }
}

/// A service binary's `main`: runs `run` on a multi-threaded runtime and exits 0, or prints
/// the error once (`name: ...`, causes as [`said_once`]) and exits 1.
pub fn run_main<E>(
    name: &str,
    run: impl std::future::Future<Output = Result<(), E>>,
) -> std::process::ExitCode
where
    E: AsRef<dyn std::error::Error + Send + Sync + 'static>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {}", said_once(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes joined with `: `, each said once: a cause whose text its wrapper
/// already printed (hyper's "tcp connect error" inside tonic's, a parse error that repeats
/// its source) is left out. What every binary prints when it exits on an error.
pub fn said_once(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !out.ends_with(&text) && !out.contains(&format!("{text}: ")) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}
