//! Layered configuration: defaults → TOML file → `TOOLGATE_` environment → flags.
//!
//! Each layer is a TOML table merged over the previous one, then the result is
//! deserialized once into the service's config type. Errors name the offending field
//! with its dotted path. The process environment is read, never written.

use std::path::Path;

use serde::de::DeserializeOwned;
use toml::{Table, Value};

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said, with line and column.
        message: String,
    },
    /// A value has the wrong type or an unknown field was given.
    #[error("invalid config field `{field}`: {message}")]
    Field {
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// The sources to layer, lowest precedence first after the type's `Default`.
#[derive(Debug, Default)]
pub struct Sources<'a> {
    /// An optional TOML file.
    pub file: Option<&'a Path>,
    /// Only this top-level table of `file` is this configuration (`toolgate up`'s one file
    /// holds an `[executor]` and a `[policy]` table); `None`: the whole file.
    pub section: Option<&'a str>,
    /// Environment variables (typically `std::env::vars()`); only `TOOLGATE_*` are used.
    pub env: Vec<(String, String)>,
    /// Flag overrides as dotted key and typed value.
    pub overrides: Vec<(String, Value)>,
}

/// The flags both service binaries take (`toolgate-executor`, `toolgate-policy`); the rest of
/// their configuration comes from the layers: defaults, the `--config` file, `TOOLGATE_*`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServiceFlags {
    /// A TOML config file.
    #[arg(long, env = "TOOLGATE_CONFIG", global = true)]
    pub config: Option<std::path::PathBuf>,
    /// gRPC listen address, `ip:port`; port 0 picks a free one (overrides `listen`).
    #[arg(long)]
    pub listen: Option<String>,
    /// Prometheus `/metrics` listen address, `ip:port` (overrides `metrics_listen`).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Serve without TLS on an address other than loopback, when something else (a service
    /// mesh) encrypts the traffic (sets `transport.insecure_plaintext`).
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// Print the effective configuration with secrets redacted, then exit.
    #[arg(long)]
    pub print_config: bool,
}

impl ServiceFlags {
    /// Loads the configuration from the layers, with these flags and the binary's own
    /// `overrides` (dotted key, typed value) on top.
    pub fn load<T>(&self, mut overrides: Vec<(String, Value)>) -> Result<T, Error>
    where
        T: DeserializeOwned + serde::Serialize + Default,
    {
        if let Some(l) = &self.listen {
            overrides.push(("listen".to_owned(), Value::String(l.clone())));
        }
        if let Some(m) = &self.metrics_listen {
            overrides.push(("metrics_listen".to_owned(), Value::String(m.clone())));
        }
        if self.insecure_plaintext {
            overrides.push((
                "transport.insecure_plaintext".to_owned(),
                Value::Boolean(true),
            ));
        }
        load(&Sources {
            file: self.config.as_deref(),
            section: None,
            env: std::env::vars().collect(),
            overrides,
        })
    }
}

/// The environment prefix.
pub const ENV_PREFIX: &str = "TOOLGATE_";

/// Loads `T` from its serde defaults overlaid with the given sources.
pub fn load<T>(sources: &Sources<'_>) -> Result<T, Error>
where
    T: DeserializeOwned + serde::Serialize + Default,
{
    load_over(&T::default(), sources)
}

/// Loads `T` from `defaults` overlaid with the given sources: for a binary whose defaults
/// differ from the type's own (`toolgate up` on a machine that cannot enforce what a
/// production default requires), so the file, the environment and the flags still win.
pub fn load_over<T>(defaults: &T, sources: &Sources<'_>) -> Result<T, Error>
where
    T: DeserializeOwned + serde::Serialize,
{
    let defaults = Value::try_from(defaults).map_err(|e| Error::Field {
        field: "<defaults>".into(),
        message: e.to_string(),
    })?;
    let mut table = match defaults {
        Value::Table(t) => t,
        _ => Table::new(),
    };
    if let Some(path) = sources.file {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut file: Table = text.parse().map_err(|e: toml::de::Error| Error::Parse {
            path: path.display().to_string(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let layer = match sources.section {
            None => Some(file),
            Some(name) => match file.remove(name) {
                None => None,
                Some(Value::Table(t)) => Some(t),
                Some(_) => {
                    return Err(Error::Field {
                        field: name.to_owned(),
                        message: format!("`{name}` in {} must be a table", path.display()),
                    });
                }
            },
        };
        if let Some(layer) = layer {
            merge(&mut table, layer);
        }
    }
    // Only variables naming a top-level key of this service's config are layers; other
    // `TOOLGATE_*` variables (`TOOLGATE_CONFIG`, a CLI's endpoint) belong to someone else.
    // Typos below the top level still fail, because every section denies unknown fields.
    // A plain value for a whole section is someone else's too: the CLI's `TOOLGATE_LOG`
    // (a filter) and `TOOLGATE_POLICY` (an endpoint) name the `[log]` and `[policy]`
    // sections of the services `toolgate up` hosts.
    for (key, value) in &sources.env {
        let Some(rest) = key.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let dotted = rest.to_ascii_lowercase().replace("__", ".");
        let value = parse_literal(value);
        let ours = match table.get(&dotted) {
            Some(Value::Table(_)) => value.is_table(),
            Some(_) => true,
            None => table.contains_key(dotted.split('.').next().unwrap_or_default()),
        };
        if ours {
            set_dotted(&mut table, &dotted, value);
        }
    }
    for (key, value) in &sources.overrides {
        set_dotted(&mut table, key, value.clone());
    }
    let de = Value::Table(table);
    serde_path_to_error::deserialize(de).map_err(|e| Error::Field {
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Sets `a.b.c = value`.
fn set_dotted(table: &mut Table, dotted: &str, value: Value) {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let last = parts.pop().unwrap_or_default();
    let mut cur = table;
    for p in parts {
        let entry = cur
            .entry(p.to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(t) = entry else {
            return;
        };
        cur = t;
    }
    cur.insert(last.to_owned(), value);
}

/// Parses an environment value as a TOML literal when it is one (numbers, booleans,
/// arrays) and as a plain string otherwise.
fn parse_literal(raw: &str) -> Value {
    let doc = format!("v = {raw}");
    match doc.parse::<Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| Value::String(raw.to_owned())),
        Err(_) => Value::String(raw.to_owned()),
    }
}

fn merge(base: &mut Table, over: Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Prints `text` and a newline on stdout for `--print-config`; a reader that went away
/// (`| head`) is not an error, the rest is simply not wanted.
pub fn print(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Replaces the values of keys that look secret (`token`, `password`, `secret` or `credential`
/// in the name, paths to such files included) and the password of a `scheme://user:pass@`
/// URL, so `--print-config` can show the rest. Key files (`tls.key_file`) are paths and are
/// shown.
pub fn redacted<T: serde::Serialize>(config: &T) -> String {
    let mut v = serde_json::to_value(config).unwrap_or(serde_json::Value::Null);
    redact_value(&mut v, false);
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

fn redact_value(v: &mut serde_json::Value, secret: bool) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                let k = k.to_ascii_lowercase();
                let s = secret
                    || ["token", "password", "secret", "credential"]
                        .iter()
                        .any(|w| k.contains(w));
                redact_value(val, s);
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| redact_value(x, secret)),
        serde_json::Value::String(s) if secret && !s.is_empty() => {
            *s = toolgate_core::REDACTED.into();
        }
        serde_json::Value::String(s) => *s = toolgate_core::redact_url(s),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        max: u64,
        name: String,
    }
    impl Default for Inner {
        fn default() -> Self {
            Inner {
                max: 1,
                name: "d".into(),
            }
        }
    }
    #[derive(Debug, Serialize, Deserialize, PartialEq, Default)]
    #[serde(default, deny_unknown_fields)]
    struct Cfg {
        listen: String,
        inner: Inner,
        token: String,
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "listen = \"file\"\n[inner]\nmax = 5\n").unwrap();
        let cfg: Cfg = load(&Sources {
            file: Some(&f),
            section: None,
            env: vec![
                ("TOOLGATE_INNER__MAX".into(), "7".into()),
                ("TOOLGATE_LISTEN".into(), "env".into()),
                ("TOOLGATE_CONFIG".into(), "/elsewhere.toml".into()),
                ("HOME".into(), "/root".into()),
            ],
            overrides: vec![("listen".into(), Value::String("flag".into()))],
        })
        .unwrap();
        assert_eq!(cfg.listen, "flag");
        assert_eq!(cfg.inner.max, 7);
        assert_eq!(cfg.inner.name, "d");
    }

    #[test]
    fn a_section_of_the_file_is_the_whole_layer() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("up.toml");
        std::fs::write(
            &f,
            "[mine]\nlisten = \"mine\"\n[mine.inner]\nmax = 4\n[theirs]\nlisten = \"theirs\"\nbogus = 1\n",
        )
        .unwrap();
        let from = |section| Sources {
            file: Some(&f),
            section: Some(section),
            env: vec![("TOOLGATE_INNER__MAX".into(), "6".into())],
            ..Sources::default()
        };
        let cfg: Cfg = load(&from("mine")).unwrap();
        // The other table's fields (even unknown ones) are not this configuration's.
        assert_eq!((cfg.listen.as_str(), cfg.inner.max), ("mine", 6));
        // An absent table is an empty layer.
        let cfg: Cfg = load(&from("none")).unwrap();
        assert_eq!((cfg.listen.as_str(), cfg.inner.max), ("", 6));
        std::fs::write(&f, "mine = 3\n").unwrap();
        let err = load::<Cfg>(&from("mine")).unwrap_err();
        assert!(err.to_string().contains("must be a table"), "{err}");
    }

    #[test]
    fn a_plain_value_for_a_whole_section_is_not_a_layer() {
        let env = |v: &str| Sources {
            env: vec![
                ("TOOLGATE_INNER".into(), v.into()),
                ("TOOLGATE_INNER__NAME".into(), "env".into()),
            ],
            ..Sources::default()
        };
        // `TOOLGATE_INNER=warn` belongs to another program (as `TOOLGATE_LOG` does).
        let cfg: Cfg = load(&env("warn")).unwrap();
        assert_eq!((cfg.inner.max, cfg.inner.name.as_str()), (1, "env"));
        // An inline table still sets the section.
        let cfg: Cfg = load(&env("{ max = 9 }")).unwrap();
        assert_eq!(cfg.inner.max, 9);
    }

    #[test]
    fn other_defaults_are_layered_under_the_same_sources() {
        let base = Cfg {
            listen: "base".into(),
            inner: Inner {
                max: 3,
                name: "base".into(),
            },
            ..Cfg::default()
        };
        let cfg = load_over(
            &base,
            &Sources {
                env: vec![("TOOLGATE_INNER__MAX".into(), "8".into())],
                ..Sources::default()
            },
        )
        .unwrap();
        assert_eq!(cfg.listen, "base");
        assert_eq!((cfg.inner.max, cfg.inner.name.as_str()), (8, "base"));
    }

    #[test]
    fn bad_field_is_named() {
        let err = load::<Cfg>(&Sources {
            env: vec![("TOOLGATE_INNER__MAX".into(), "\"many\"".into())],
            ..Sources::default()
        })
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("inner.max"), "{msg}");
    }

    #[test]
    fn unknown_field_is_named() {
        let err = load::<Cfg>(&Sources {
            overrides: vec![("inner.bogus".into(), Value::Integer(1))],
            ..Sources::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn secrets_are_redacted() {
        let cfg = Cfg {
            listen: "postgres://u:pw@h/db".into(),
            token: "abc".into(),
            ..Cfg::default()
        };
        let out = redacted(&cfg);
        assert!(!out.contains("abc") && !out.contains("pw@"), "{out}");
        // One marker everywhere, the ledger's too.
        assert!(out.contains("postgres://u:[REDACTED]@h/db"), "{out}");
        assert!(
            out.contains(&format!("\"token\": \"{}\"", toolgate_core::REDACTED)),
            "{out}"
        );
    }
}
