//! Shared test helpers: the real `toolgate` binary, fresh Postgres databases, raw SQL, and a
//! fake internet in a network namespace ([`internet`]).

pub(crate) mod internet;

use std::process::{Command, Output};

use sqlx::{AssertSqlSafe, Connection};

/// Runs `toolgate` with `args` and extra environment, and waits for it.
pub(crate) fn toolgate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("TOOLGATE_TOKEN")
        .env_remove("TOOLGATE_TOKEN_FILE")
        .env_remove("TOOLGATE_POLICY")
        .env_remove("TOOLGATE_EXECUTOR")
        .env_remove("TOOLGATE_SESSION");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run toolgate")
}

/// stdout and stderr as text, for assertion messages.
pub(crate) fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs raw SQL against a Postgres or SQLite url, as someone with database access would.
pub(crate) async fn raw(url: &str, sql: &str) {
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await.expect("connect");
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .expect("raw sql");
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.expect("connect");
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .expect("raw sql");
    }
}

/// A running `toolgate up`, stopped (SIGTERM) on drop.
pub(crate) struct Up {
    child: std::process::Child,
    // Kept open: `up` must never write into a closed pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
    /// What `up --json` printed.
    pub info: serde_json::Value,
    /// The data directory.
    pub data_dir: std::path::PathBuf,
    /// The network namespace `up` and every command of [`Up::command`] run in, if not ours.
    netns: Option<String>,
}

/// Where and as whom [`Up::launch`] starts `toolgate up`, beyond [`Up::start_policy`]'s
/// arguments.
#[derive(Default)]
pub(crate) struct Placement<'a> {
    /// Run `up` (and the CLI commands of [`Up::command`]) under `ip netns exec NS`.
    pub netns: Option<&'a str>,
    /// Run `up` as this user and group (no supplementary groups) through `setpriv`, as an
    /// unprivileged executor runs; the workspace and data directory are given to it.
    pub uid: Option<u32>,
}

/// The test policy shipped next to these tests.
pub(crate) fn test_policy() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/policy.toml")
}

impl Up {
    /// Starts `toolgate up --json` on free ports with the test policy.
    pub(crate) fn start(workspace: &std::path::Path, data_dir: &std::path::Path) -> Up {
        Up::start_with(workspace, data_dir, &[])
    }

    /// [`Up::start`] with more arguments for `up`.
    pub(crate) fn start_with(
        workspace: &std::path::Path,
        data_dir: &std::path::Path,
        extra: &[&str],
    ) -> Up {
        Up::start_env(workspace, data_dir, extra, &[])
    }

    /// [`Up::start_with`] with more environment for `up`.
    pub(crate) fn start_env(
        workspace: &std::path::Path,
        data_dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Up {
        Up::start_policy(workspace, data_dir, extra, env, &test_policy())
    }

    /// [`Up::start_env`] under the policy document at `policy`.
    pub(crate) fn start_policy(
        workspace: &std::path::Path,
        data_dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
        policy: &std::path::Path,
    ) -> Up {
        Up::launch(
            workspace,
            data_dir,
            extra,
            env,
            policy,
            &Placement::default(),
        )
    }

    /// [`Up::start_policy`] in another network namespace or as another user.
    pub(crate) fn launch(
        workspace: &std::path::Path,
        data_dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
        policy: &std::path::Path,
        placement: &Placement<'_>,
    ) -> Up {
        use std::io::BufRead;
        let mut cmd = placed(placement.netns, placement.uid);
        if let Some(uid) = placement.uid {
            std::fs::create_dir_all(data_dir).expect("create the data directory");
            for dir in [workspace, data_dir] {
                std::os::unix::fs::chown(dir, Some(uid), Some(uid)).expect("chown to the executor");
            }
        }
        let mut child = cmd
            .args(["up", "--json", "--executor-listen", "127.0.0.1:0"])
            .args(["--mcp-listen", "127.0.0.1:0"])
            .args(extra)
            .envs(env.iter().copied())
            .args(["--policy-listen", "127.0.0.1:0", "--workspace"])
            .arg(workspace)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--policy")
            .arg(policy)
            .env("TOOLGATE_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn toolgate up");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let info = loop {
            let mut line = String::new();
            let n = stdout.read_line(&mut line).expect("read up's stdout");
            assert!(
                n > 0,
                "toolgate up exited before listening: {:?}",
                child.wait()
            );
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["service"] == "toolgate"
            {
                break v;
            }
        };
        Up {
            child,
            _stdout: stdout,
            info,
            data_dir: data_dir.to_owned(),
            netns: placement.netns.map(str::to_owned),
        }
    }

    /// A token by role.
    pub(crate) fn token(&self, role: &str) -> String {
        self.info["tokens"][role]
            .as_str()
            .expect("token for role")
            .to_owned()
    }

    /// The executor url.
    pub(crate) fn executor(&self) -> String {
        format!("http://{}", self.info["executor"].as_str().unwrap())
    }

    /// The policy service url.
    pub(crate) fn policy(&self) -> String {
        format!("http://{}", self.info["policy"].as_str().unwrap())
    }

    /// The environment a client of this `up` needs, as `role`.
    pub(crate) fn env(&self, role: &str) -> Vec<(&'static str, String)> {
        vec![
            ("TOOLGATE_EXECUTOR", self.executor()),
            ("TOOLGATE_POLICY", self.policy()),
            ("TOOLGATE_TOKEN", self.token(role)),
            ("TOOLGATE_SESSION", "cli-test".to_owned()),
        ]
    }

    /// A `toolgate` command preconfigured for this `up` as `role`.
    pub(crate) fn command(&self, role: &str, args: &[&str]) -> Command {
        let mut cmd = placed(self.netns.as_deref(), None);
        cmd.args(args)
            .env_remove("TOOLGATE_TOKEN_FILE")
            .env_remove("DATABASE_URL");
        for (k, v) in self.env(role) {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `toolgate` as `role` and waits.
    pub(crate) fn run(&self, role: &str, args: &[&str]) -> Output {
        self.command(role, args).output().expect("run toolgate")
    }

    /// Kills it with SIGKILL (no shutdown of any kind) and reaps it.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn stop(mut self) -> std::process::ExitStatus {
        self.terminate()
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        self.child.wait().expect("wait for up")
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
        }
    }
}

/// The `toolgate` binary, under `ip netns exec NS` and `setpriv` as asked.
fn placed(netns: Option<&str>, uid: Option<u32>) -> Command {
    let exe = env!("CARGO_BIN_EXE_toolgate");
    let mut argv: Vec<String> = Vec::new();
    if let Some(ns) = netns {
        argv.extend(["ip", "netns", "exec", ns].map(str::to_owned));
    }
    if let Some(uid) = uid {
        argv.extend([
            "setpriv".to_owned(),
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".to_owned(),
        ]);
    }
    let mut cmd = Command::new(argv.first().map_or(exe, String::as_str));
    if !argv.is_empty() {
        cmd.args(&argv[1..]).arg(exe);
    }
    cmd
}

/// The approval id `toolgate run` printed as `toolgate: awaiting approval ID`.
pub(crate) fn awaited_approval(o: &Output) -> String {
    approval_in(&String::from_utf8_lossy(&o.stderr))
        .unwrap_or_else(|| panic!("no awaited approval in\n{}", text(o)))
}

/// The id in a `toolgate: awaiting approval ID` line.
pub(crate) fn approval_in(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("toolgate: awaiting approval "))
        .map(|id| id.trim().to_owned())
}
