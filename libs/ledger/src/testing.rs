//! Databases for tests and benchmarks, behind the `testing` feature; nothing in a service
//! links it.
//!
//! - [`FreshPg`]: a fresh, uniquely named database on the machine's Postgres server
//!   ([`admin_url`]), dropped with the value: one per test, for every crate's tests and the
//!   benchmarks.
//! - [`PrivatePg`]: a private, throwaway Postgres cluster for tests that must stop and start
//!   the server (crash safety, health during an outage). The shared server is never touched.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;

/// The machine's Postgres server for tests: `DATABASE_URL`, else the local server with
/// trust authentication.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A fresh database on the [`admin_url`] server, named `<prefix>_<random hex>` so parallel
/// tests and processes never share one, and dropped (`WITH (FORCE)`, open connections and
/// all) when the value is dropped, also while a failing test unwinds.
///
/// Creating and dropping run on a thread of their own with a private runtime, so both work
/// inside and outside a Tokio runtime (a `Drop` cannot await).
#[derive(Debug)]
pub struct FreshPg {
    admin: String,
    name: String,
    url: String,
}

impl FreshPg {
    /// Creates the database; panics when the server cannot be reached (a test cannot run
    /// without it). `prefix` is lowercase letters, digits and `_`.
    pub fn create(prefix: &str) -> FreshPg {
        assert!(
            !prefix.is_empty()
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "a database name prefix is lowercase letters, digits and `_`: {prefix:?}"
        );
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).expect("the OS random source is available");
        let name = format!("{prefix}_{}", hex::encode(random));
        let admin = admin_url();
        let (base, _) = admin
            .rsplit_once('/')
            .expect("DATABASE_URL ends with a database name");
        let url = format!("{base}/{name}");
        admin_sql(&admin, format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("cannot create test database {name} at {admin}: {e}"));
        FreshPg { admin, name, url }
    }

    /// The database's connection URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for FreshPg {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = admin_sql(&self.admin, sql) {
            eprintln!("cannot drop test database {}: {e}", self.name);
        }
    }
}

/// Runs one statement on the admin database, on a thread with its own runtime.
fn admin_sql(admin: &str, sql: String) -> Result<(), String> {
    use sqlx::Connection;
    let admin = admin.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let mut c = sqlx::PgConnection::connect(&admin)
                .await
                .map_err(|e| e.to_string())?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            c.close().await.map_err(|e| e.to_string())
        })
    })
    .join()
    .map_err(|_| "the database thread panicked".to_owned())?
}

/// A Postgres cluster in a temporary directory, stopped when dropped.
pub struct PrivatePg {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
}

impl std::fmt::Debug for PrivatePg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivatePg")
            .field("port", &self.port)
            .finish()
    }
}

/// The newest installed server's binary directory.
fn pg_bin() -> PathBuf {
    let mut versions: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("postgres server binaries under /usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().expect("an initdb binary")
}

fn as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl PrivatePg {
    /// Creates the cluster (durable: fsync and synchronous commit on) and starts it on a free port.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // initdb refuses to run as root; hand the directory to the postgres user then.
        if as_root() {
            let pg = Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .expect("id -u postgres");
            let uid: u32 = String::from_utf8_lossy(&pg.stdout)
                .trim()
                .parse()
                .expect("the postgres user's uid");
            std::os::unix::fs::chown(dir.path(), Some(uid), None).expect("chown to postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let pg = PrivatePg {
            dir,
            port,
            bin: pg_bin(),
        };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                // Only initdb's own files skip fsync; the server below runs durably.
                "--no-sync",
            ],
        );
        pg.start_server();
        pg
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// A server tool, run as the postgres user when the test runs as root.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        }
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self
            .command(tool)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the (stopped) server again.
    pub fn start_server(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=60",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &opts,
            ],
        );
    }

    /// Stops the server the way a crash would: no checkpoint, no goodbye to clients.
    pub fn stop_immediate(&self) {
        self.run(
            "pg_ctl",
            &["stop", "-w", "-m", "immediate", "-D", &self.data()],
        );
    }

    /// The cluster's connection URL.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        if self.dir.path().join("data/postmaster.pid").exists() {
            let data = self.data();
            let _ = self
                .command("pg_ctl")
                .args(["stop", "-w", "-m", "immediate", "-D", &data])
                .output();
        }
    }
}
