//! A fake internet for the egress gate's end-to-end tests: a network namespace the test creates,
//! public-looking addresses on its loopback, and real servers in it (DNS, HTTP, HTTPS, a git
//! repository over dumb HTTP, sshd when installed, UDP and TCP listeners). Nothing leaves the
//! machine: the namespace has no link but its loopback.
//!
//! `toolgate up` and the CLI run inside the namespace (`ip netns exec`), so for the executor
//! these hosts are the internet, and `/etc/netns/<ns>/resolv.conf` names the fake DNS server as
//! the resolver every process in the namespace sees.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// allowed.test: the policy allows it (80, 443, 22).
pub(crate) const ALLOWED_IP: &str = "93.184.216.34";
/// unlisted.test: no rule names it, so the policy asks.
pub(crate) const UNLISTED_IP: &str = "93.184.216.35";
/// denied.test: a rule denies it.
pub(crate) const DENIED_IP: &str = "93.184.216.36";
/// The fake DNS server.
pub(crate) const DNS_IP: &str = "93.184.216.53";
/// private.test resolves here (a private range, with a server that would answer).
pub(crate) const PRIVATE_IP: &str = "10.0.0.5";
/// metadata.test resolves here (the cloud metadata address, with a server that would answer).
pub(crate) const METADATA_IP: &str = "169.254.169.254";
/// The UDP port a listener on allowed.test's address logs datagrams on.
pub(crate) const UDP_PORT: u16 = 9999;
/// A plain TCP banner port on allowed.test's address.
pub(crate) const TCP_PORT: u16 = 7000;

/// Every name the fake DNS server answers for, and its address.
const RECORDS: &[(&str, &str)] = &[
    ("allowed.test", ALLOWED_IP),
    ("unlisted.test", UNLISTED_IP),
    ("denied.test", DENIED_IP),
    ("evil.test", UNLISTED_IP),
    ("private.test", PRIVATE_IP),
    ("metadata.test", METADATA_IP),
    ("loopback.test", "127.0.0.1"),
];

/// rebind.test answers allowed.test's address once, then the private one.
pub(crate) const REBIND: (&str, &str, &str) = ("rebind.test", ALLOWED_IP, PRIVATE_IP);

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A running fake internet; the namespace, its servers and its resolver file go with it.
pub(crate) struct Internet {
    /// The network namespace's name.
    pub(crate) ns: String,
    dir: tempfile::TempDir,
    servers: Option<Child>,
    sshd: Option<Child>,
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs `program` with `args` and asserts it succeeded.
fn must(program: &str, args: &[&str], cwd: &Path) {
    let o = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        o.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Internet {
    /// Creates the namespace, its addresses and certificates, and starts every server.
    pub(crate) fn start() -> Internet {
        let ns = format!(
            "tg-inet-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &ns]);
        // From here on Drop removes the namespace, whatever fails next.
        let mut inet = Internet {
            ns,
            dir: tempfile::tempdir().expect("tempdir"),
            servers: None,
            sshd: None,
        };
        for addr in [
            ALLOWED_IP,
            UNLISTED_IP,
            DENIED_IP,
            DNS_IP,
            PRIVATE_IP,
            METADATA_IP,
        ] {
            ip(&[
                "-n",
                &inet.ns,
                "addr",
                "add",
                &format!("{addr}/32"),
                "dev",
                "lo",
            ]);
        }
        ip(&["-n", &inet.ns, "link", "set", "lo", "up"]);
        let etc = inet.etc();
        std::fs::create_dir_all(&etc).expect("create /etc/netns/<ns>");
        std::fs::write(etc.join("resolv.conf"), format!("nameserver {DNS_IP}\n"))
            .expect("write the namespace's resolv.conf");
        inet.make_certificates();
        inet.make_git_repository();
        inet.servers = Some(inet.start_servers());
        inet.sshd = inet.start_sshd();
        inet
    }

    fn etc(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.ns)
    }

    /// Where the test's own files live (certificates, keys, the server root, the log).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate every fake HTTPS server's certificate chains to.
    pub(crate) fn ca(&self) -> PathBuf {
        self.dir().join("ca.pem")
    }

    /// The private key sshd accepts for root (`root@allowed.test`), when sshd runs.
    pub(crate) fn ssh_key(&self) -> Option<PathBuf> {
        self.sshd.as_ref().map(|_| self.dir().join("client_key"))
    }

    /// The process id of the servers (one Python process serves every name).
    #[allow(dead_code, reason = "the egress benchmark's, not the CLI tests'")]
    pub(crate) fn servers_pid(&self) -> Option<u32> {
        self.servers.as_ref().map(Child::id)
    }

    /// The bare repository the servers publish, as `/repo.git` over HTTPS and by path over ssh.
    pub(crate) fn repository(&self) -> PathBuf {
        self.dir().join("www/repo.git")
    }

    /// Everything the servers saw: one line per DNS query (`dns NAME TYPE`), HTTP request
    /// (`http ADDR:PORT HOST PATH`), UDP datagram (`udp ADDR:PORT FROM HEX`) and TCP
    /// connection (`tcp ADDR:PORT FROM`).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("servers.log")).unwrap_or_default()
    }

    /// `program` inside the namespace.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        c
    }

    fn make_certificates(&self) {
        let d = self.dir();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=toolgate fake internet CA",
        ]);
        must("openssl", &ca, d);
        let mut csr = vec!["req", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=allowed.test",
        ]);
        must("openssl", &csr, d);
        let names: Vec<String> = RECORDS
            .iter()
            .map(|(n, _)| *n)
            .chain([REBIND.0])
            .map(|n| format!("DNS:{n}"))
            .collect();
        std::fs::write(
            d.join("san.cnf"),
            format!(
                "subjectAltName={}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
                names.join(",")
            ),
        )
        .unwrap();
        must(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.cnf",
                "-out",
                "server.pem",
            ],
            d,
        );
    }

    fn make_git_repository(&self) {
        let d = self.dir();
        let work = d.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(d.join("www")).unwrap();
        std::fs::write(work.join("README"), "served by the fake internet\n").unwrap();
        let id = ["-c", "user.name=fake", "-c", "user.email=fake@allowed.test"];
        must("git", &["init", "-q", "-b", "main"], &work);
        must("git", &["add", "README"], &work);
        let mut commit = id.to_vec();
        commit.extend(["commit", "-q", "-m", "the fake internet's repository"]);
        must("git", &commit, &work);
        must("git", &["clone", "-q", "--bare", "work", "www/repo.git"], d);
        // Dumb HTTP: the info/refs and objects/info/packs files a plain file server serves.
        must("git", &["update-server-info"], &self.repository());
    }

    fn start_servers(&self) -> Child {
        let d = self.dir();
        std::fs::write(d.join("internet.py"), include_str!("internet.py")).unwrap();
        let web: Vec<serde_json::Value> = [
            ALLOWED_IP,
            UNLISTED_IP,
            DENIED_IP,
            PRIVATE_IP,
            METADATA_IP,
            "127.0.0.1",
        ]
        .iter()
        .map(|a| serde_json::json!({"addr": a, "port": 80}))
        .collect();
        let tls: Vec<serde_json::Value> = [ALLOWED_IP, UNLISTED_IP, DENIED_IP, PRIVATE_IP]
            .iter()
            .map(|a| serde_json::json!({"addr": a, "port": 443}))
            .collect();
        let records: serde_json::Map<String, serde_json::Value> = RECORDS
            .iter()
            .map(|(n, a)| ((*n).to_owned(), serde_json::json!([a])))
            .collect();
        let config = serde_json::json!({
            "log": d.join("servers.log"),
            "root": d.join("www").canonicalize().unwrap(),
            "cert": d.join("server.pem"),
            "key": d.join("server.key"),
            "dns": {"addr": DNS_IP, "records": records,
                    "rebind": {REBIND.0: [REBIND.1, REBIND.2]}},
            "http": web,
            "https": tls,
            "udp": [{"addr": ALLOWED_IP, "port": UDP_PORT}],
            "tcp": [{"addr": ALLOWED_IP, "port": TCP_PORT}],
        });
        std::fs::write(d.join("internet.json"), config.to_string()).unwrap();
        let mut child = self
            .command("/usr/bin/python3")
            .arg(d.join("internet.py"))
            .arg(d.join("internet.json"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the fake internet's servers");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "the fake internet's servers did not start");
        child
    }

    /// sshd on allowed.test:22 with a fresh host key and one authorized client key, or None
    /// (and a loud message) when openssh-server is not installed.
    fn start_sshd(&self) -> Option<Child> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() {
            eprintln!(
                "NOTE: /usr/sbin/sshd is missing (apt-get install -y openssh-server): git over ssh is not tested"
            );
            return None;
        }
        let d = self.dir();
        for key in ["host_key", "client_key"] {
            must(
                "ssh-keygen",
                &["-q", "-t", "ed25519", "-N", "", "-f", key],
                d,
            );
        }
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        // Privilege separation needs this directory; it is the same on every host.
        std::fs::create_dir_all("/run/sshd").unwrap();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "ListenAddress {ALLOWED_IP}:22\nHostKey {}\nAuthorizedKeysFile {}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\nPidFile none\n",
                d.join("host_key").display(),
                d.join("authorized_keys").display()
            ),
        )
        .unwrap();
        let mut child = self
            .command(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sshd");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("sshd exited before listening: {seen}");
            }
            seen.push_str(&line);
            if line.contains("Server listening") {
                break;
            }
        }
        // Drain the rest so sshd never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        Some(child)
    }
}

impl Drop for Internet {
    fn drop(&mut self) {
        for child in [self.servers.take(), self.sshd.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(self.etc());
    }
}
