//! Helpers shared by the end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The repository root (this package is tests/e2e).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The resolver binary of this source tree, in a command.
pub fn resolver() -> Command {
    Command::new(resolver_binary())
}

/// The path of the resolver binary of this source tree, built by the first call of this run
/// (tests/e2e/Cargo.toml says why): `cargo build -p healthroute-resolver --bins` into the
/// target directory and profile this test binary was built in (`<target>/<profile dir>/deps/
/// e2e-<hash>`), which makes `<target>/<profile dir>/healthroute-resolver`. Panics, with
/// Cargo's errors on stderr, when the build fails.
pub fn resolver_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let test = std::env::current_exe().expect("the test binary's path");
        let profile_dir = test
            .parent()
            .and_then(Path::parent)
            .expect("the test binary in <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("a target directory");
        // The dev profile builds into debug/; every other profile into a folder of its name.
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(name) => name,
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let built = Command::new(cargo)
            .args(["build", "--quiet", "-p", "healthroute-resolver", "--bins"])
            .args(["--profile", profile, "--target-dir"])
            .arg(target_dir)
            .current_dir(repo())
            .status()
            .expect("runs cargo build");
        assert!(
            built.success(),
            "cargo build -p healthroute-resolver failed: {built}"
        );
        profile_dir.join(format!(
            "healthroute-resolver{}",
            std::env::consts::EXE_SUFFIX
        ))
    })
}

/// Runs `healthroute-resolver simulate` on an example directory; returns stdout, or panics
/// with stderr.
pub fn simulate(example: &str, args: &[&str]) -> String {
    let dir = repo().join("examples").join(example);
    let mut all: Vec<&std::ffi::OsStr> =
        vec!["simulate".as_ref(), "--manifests".as_ref(), dir.as_ref()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    run_resolver(&all)
}

/// Runs `healthroute-resolver ARGS` to its end (a command, not the server); returns stdout,
/// or panics with stderr.
pub fn run_resolver<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let out = resolver()
        .args(args)
        .output()
        .expect("runs healthroute-resolver");
    assert!(
        out.status.success(),
        "healthroute-resolver {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The share (in percent) of an answer line in simulate's output, or 0.
pub fn share(output: &str, answer: &str) -> f64 {
    output
        .lines()
        .filter_map(|l| {
            let (pct, rest) = l.trim().split_once("%  ")?;
            (rest == answer)
                .then(|| pct.trim().parse::<f64>().ok())
                .flatten()
        })
        .next()
        .unwrap_or(0.0)
}

/// A free loopback port (UDP and TCP), found by binding and releasing it.
pub fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = udp.local_addr().expect("addr").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Sends `signal` (TERM, INT...) to process `pid`; true when it was delivered.
pub fn resolver_signal(pid: &str, signal: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid)
        .status()
        .is_ok_and(|s| s.success())
}

/// A resolver process on loopback, killed when dropped.
pub struct Resolver {
    pub child: std::process::Child,
    pub dns: std::net::SocketAddr,
    pub admin: std::net::SocketAddr,
}

impl Resolver {
    /// Starts `healthroute-resolver --manifests DIR` with `extra` flags and waits until it is
    /// ready (a table is loaded). Ports come from [`free_port`], which another test may take
    /// between its probe and the resolver's bind: a resolver that exits because its port is
    /// taken is started again on fresh ports (at most three times).
    pub fn start(dir: &std::path::Path, extra: &[&str]) -> Resolver {
        Self::start_with_env(dir, extra, &[])
    }

    /// [`Resolver::start`] with these environment variables set for the process.
    pub fn start_with_env(dir: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Resolver {
        Self::start_with(dir, extra, env, false)
    }

    /// [`Resolver::start`] with stdout kept (piped) as well as stderr, for a test that reads
    /// both.
    pub fn start_keeping_stdout(dir: &std::path::Path, extra: &[&str]) -> Resolver {
        Self::start_with(dir, extra, &[], true)
    }

    fn start_with(
        dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
        keep_stdout: bool,
    ) -> Resolver {
        let mut last = String::new();
        for _ in 0..3 {
            let dns: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let admin: std::net::SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let child = resolver()
                .arg("--manifests")
                .arg(dir)
                .args([
                    "--listen",
                    &dns.to_string(),
                    "--admin-listen",
                    &admin.to_string(),
                    "--udp-sockets",
                    "2",
                ])
                .args(extra)
                .envs(env.iter().copied())
                .stdout(if keep_stdout {
                    std::process::Stdio::piped()
                } else {
                    std::process::Stdio::null()
                })
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("starts the resolver");
            let mut r = Resolver { child, dns, admin };
            match r.wait_ready() {
                Ok(()) => return r,
                Err(log) if log.contains("cannot listen") || log.contains("another server") => {
                    last = log;
                }
                Err(log) => panic!("resolver on {dns} exited before it was ready:\n{log}"),
            }
        }
        panic!("resolver: no free ports in three tries:\n{last}");
    }

    /// Waits until /readyz answers 200. A resolver that exits first gives its log; one that
    /// is still not ready after 20 s fails the test.
    pub fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if http_get(self.admin, "/readyz").is_some_and(|(code, _)| code == 200) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut log = format!("exit status {status}\n");
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut log);
                }
                return Err(log);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("resolver on {} did not become ready", self.dns);
    }

    pub fn metrics(&self) -> String {
        http_get(self.admin, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Kills the process at once (its stderr stays readable).
    pub fn stop_now(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(self) -> std::process::ExitStatus {
        resolver_signal(&self.child.id().to_string(), "TERM");
        self.wait_exit(std::time::Duration::from_secs(10))
    }

    /// Waits for the process to exit on its own, at most `within`.
    pub fn wait_exit(mut self, within: std::time::Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "resolver did not stop within {within:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A bare HTTP/1.1 GET: (status code, body).
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// A fresh temporary directory for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "healthroute-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Polls `f` every 20 ms until it returns true or `within` passes; returns the time taken.
pub fn eventually(
    within: std::time::Duration,
    mut f: impl FnMut() -> bool,
) -> Option<std::time::Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// What `promtool check metrics` (Prometheus's own linter) finds wrong in an exposition, or
/// `None` when promtool is not installed (said on stderr). `.ci/run` installs it.
pub fn promtool_problems(exposition: &str) -> Option<String> {
    use std::io::Write;
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("promtool is not installed: the exposition lint is skipped");
        return None;
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(exposition.as_bytes())
            .expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(if out.status.success() {
        String::new()
    } else {
        said
    })
}

impl Resolver {
    /// Kills the process and returns everything it logged (stderr).
    pub fn stop_and_log(&mut self) -> String {
        use std::io::Read;
        self.stop_now();
        let mut log = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut log);
        }
        log
    }
}

/// The value of one series in a Prometheus exposition: `series` is the name with its labels
/// as exported (`healthroute_x_total{a="b"}`), or `None` when it is not there.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// A local TCP server that answers `200 ok` to whatever it is sent (good for TCP and HTTP
/// health checks), and can be switched off (port closed: "connect refused") and on again on
/// the same port.
pub struct Backend {
    pub addr: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Backend {
    pub fn start() -> Backend {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        Self::serve(listener, up.clone());
        Backend { addr, up }
    }

    fn serve(listener: std::net::TcpListener, up: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        use std::io::{Read, Write};
        std::thread::spawn(move || {
            listener.set_nonblocking(true).expect("nonblocking");
            while up.load(std::sync::atomic::Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(200)));
                        let mut buf = [0u8; 1024];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
            // The listener is dropped here: the port is closed.
        });
    }

    /// Closes the port (the accept loop ends within a few milliseconds).
    pub fn stop(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    /// Listens on the same port again.
    pub fn restart(&self) {
        let listener = std::net::TcpListener::bind(self.addr).expect("rebind the same port");
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
        Self::serve(listener, self.up.clone());
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
