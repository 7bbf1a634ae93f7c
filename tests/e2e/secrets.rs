//! Secrets stay secret (SEM-X10), end to end: the real binaries are given a distinctive secret
//! (a peer's TSIG key, a key file, a push key) and every way they can go wrong with it, and
//! everything they print is searched for it, in base64 and decoded.
//!
//! ```text
//!   healthroute.yaml with the secret ──▶ resolver start-up error   stdout, stderr
//!                                   ──▶ running resolver           stdout, stderr, /metrics,
//!                                       (then edited into a bad one while it runs)
//!                                   ──▶ simulate --explain         stdout, stderr
//!   push key file with the secret   ──▶ resolver, operator start-up stdout, stderr
//! ```
//!
//! Each start-up error is also said exactly once: one `error:` line, no log line besides.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{
    Resolver, eventually, free_port, http_get, repo, resolver, resolver_binary, temp_dir,
};

/// The secret, decoded: no output may hold it.
const DECODED: &str = "healthroute-test-secret-do-not-print";
/// [`DECODED`] in base64, as `secret:` holds it.
const SECRET: &str = "aGVhbHRocm91dGUtdGVzdC1zZWNyZXQtZG8tbm90LXByaW50";
/// A second key, read from a `secretFile` ("healthroute-second-key-do-not-print").
const SECOND: &str = "aGVhbHRocm91dGUtc2Vjb25kLWtleS1kby1ub3QtcHJpbnQ=";
const SECOND_DECODED: &str = "healthroute-second-key-do-not-print";
/// Another secret under the first key's name ("healthroute-wrong-key-do-not-print").
const WRONG: &str = "aGVhbHRocm91dGUtd3Jvbmcta2V5LWRvLW5vdC1wcmludA==";
const WRONG_DECODED: &str = "healthroute-wrong-key-do-not-print";
/// A secret too short for a TSIG key (15 bytes: "do-not-print-me").
const SHORT: &str = "ZG8tbm90LXByaW50LW1l";
const SHORT_DECODED: &str = "do-not-print-me";

/// Every form of every secret these tests hand over.
const FORBIDDEN: [&str; 8] = [
    SECRET,
    DECODED,
    SECOND,
    SECOND_DECODED,
    WRONG,
    WRONG_DECODED,
    SHORT,
    SHORT_DECODED,
];

/// Panics when `text` (what `channel` printed) holds a secret, or a 16-character piece of one.
fn assert_no_secret(channel: &str, text: &str) {
    for secret in FORBIDDEN {
        assert!(
            !text.contains(secret) && !text.contains(&secret[..secret.len().min(16)]),
            "{channel} holds the secret {secret:?}:\n{text}"
        );
    }
}

/// `healthroute.yaml` with one peer, west, whose first key is `key` (YAML lines under
/// `keys:`, indented by 8).
fn config_with_key(key: &str) -> String {
    format!(
        "zones: [example.com]\npeers:\n  - name: west\n    addresses: [\"127.0.0.1:5312\"]\n    keys:\n      - name: east-west.\n{key}"
    )
}

/// A directory with `config` as healthroute.yaml, the multi-cluster example's east records,
/// and the `secretFile`s `files` (name, content).
fn directory(tag: &str, config: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("healthroute.yaml"), config).expect("write");
    std::fs::copy(
        repo().join("examples/multi-cluster/east/shop.yaml"),
        dir.join("shop.yaml"),
    )
    .expect("copy the example");
    for (name, content) in files {
        std::fs::write(dir.join(name), content).expect("write");
    }
    dir
}

/// stdout and stderr of a finished run, checked: exit status 2, no secret on either, and
/// the error said once (one `error:` line, no log line at level ERROR) holding `expected`.
fn refused_once(what: &str, out: &Output, expected: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_no_secret(&format!("{what}: stdout"), &stdout);
    assert_no_secret(&format!("{what}: stderr"), &stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: one error line:\n{stderr}");
    assert!(
        !stderr.contains(" ERROR "),
        "{what}: also a log line:\n{stderr}"
    );
    assert_eq!(
        stderr.matches(expected).count(),
        1,
        "{what}: {expected:?} said once:\n{stderr}"
    );
    stderr
}

/// `resolver --manifests DIR` on ports nobody uses, until it exits.
fn standalone_output(dir: &Path) -> Output {
    resolver()
        .arg("--manifests")
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .output()
        .expect("runs the resolver")
}

// SEM-X10: every start-up mistake around a secret in healthroute.yaml (a YAML syntax error on
// its line, before it or after it; not base64; too short; another algorithm; a list, a map,
// a key where a string belongs; a secretFile that is not base64) stops the resolver with one
// line that names the file, the line, the column and the field, and never the secret.
#[test]
fn start_up_errors_never_show_the_secret() {
    let cases: [(&str, String, &str); 11] = [
        (
            "a syntax error on the secret's line",
            format!("        secret: \"{SECRET}\n"),
            "healthroute.yaml:7:17: not valid YAML",
        ),
        (
            "a syntax error after it",
            format!("        secret: {SECRET}\n       oops: [\n"),
            "healthroute.yaml:8:",
        ),
        (
            "a syntax error before it",
            format!("        algorithm: \"hmac-sha256\n        secret: {SECRET}\n"),
            "healthroute.yaml:7:20: not valid YAML",
        ),
        (
            "not base64",
            format!("        secret: \"{SECRET}!\"\n"),
            "healthroute.yaml:7:17: peers[0].keys[0].secret: TSIG key east-west.: the secret is not base64",
        ),
        (
            "the decoded secret, which is not base64",
            format!("        secret: {DECODED}\n"),
            "healthroute.yaml:7:17: peers[0].keys[0].secret: TSIG key east-west.: the secret is not base64",
        ),
        (
            "too short",
            format!("        secret: {SHORT}\n"),
            "healthroute.yaml:7:17: peers[0].keys[0].secret: TSIG key east-west.: the secret has 15 bytes",
        ),
        (
            "another algorithm",
            format!("        algorithm: hmac-sha512\n        secret: {SECRET}\n"),
            "healthroute.yaml:7:20: peers[0].keys[0].algorithm: ",
        ),
        (
            "a list",
            format!("        secret: [{SECRET}, {DECODED}]\n"),
            "healthroute.yaml:7:17: peers[0].keys[0].secret: ",
        ),
        (
            "a map",
            format!("        secret: {{{SECRET}: {DECODED}}}\n"),
            "healthroute.yaml:7:17: peers[0].keys[0].secret: ",
        ),
        (
            "the secret as a field's name",
            format!("        {SECRET}: {DECODED}\n"),
            "healthroute.yaml:7:9: peers[0].keys[0]: unknown field",
        ),
        (
            "a secretFile that is not base64",
            "        secretFile: key\n".to_owned(),
            "healthroute.yaml:7:21: peers[0].keys[0].secretFile: TSIG key east-west.: the secret is not base64",
        ),
    ];
    for (what, key, expected) in cases {
        let dir = directory("secrets-start", &config_with_key(&key), &[("key", DECODED)]);
        refused_once(what, &standalone_output(&dir), expected);
        let _ = std::fs::remove_dir_all(&dir);
    }

    // The same file through `--config`, in a cluster (the file is read before any client).
    let dir = directory(
        "secrets-config",
        &config_with_key(&format!("        secret: \"{SECRET}!\"\n")),
        &[],
    );
    let out = resolver()
        .arg("--config")
        .arg(dir.join("healthroute.yaml"))
        .args(["--listen", "127.0.0.1:0"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("runs");
    refused_once("--config", &out, "peers[0].keys[0].secret: ");
    let _ = std::fs::remove_dir_all(&dir);
}

// SEM-X10: the push key file (P12) is a secret too: too short, or good but with no cluster to
// go on with, the resolver says so once, without the key.
#[test]
fn push_key_errors_never_show_the_key() {
    let dir = temp_dir("secrets-push");
    let short = dir.join("short.key");
    std::fs::write(&short, format!("{SHORT_DECODED}\n")).expect("write");
    let good = dir.join("good.key");
    std::fs::write(&good, format!("{DECODED}\n")).expect("write");
    for (key, expected) in [(&short, "--push-key-file"), (&good, "no Kubernetes client")] {
        let out = resolver()
            .args(["--zone", "example.com", "--listen", "127.0.0.1:0"])
            .args([
                "--push-listen",
                "127.0.0.1:0",
                "--push-advertise",
                "127.0.0.1",
            ])
            .arg("--push-key-file")
            .arg(key)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("runs");
        refused_once(&format!("push key {}", key.display()), &out, expected);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// SEM-X10 SEM-X9: a resolver that runs with peer keys (one inline, one from a secretFile)
// never shows them: not in its log, not on stdout, not in /metrics (while its peer checks
// fail against a listener that is not there), and not when healthroute.yaml is then edited
// into a bad one and a manifest holding the secret breaks while it runs (the reload's error
// is logged, without the file's text).
#[test]
fn a_running_resolver_never_shows_the_secret() {
    let exchange = free_port();
    let nobody = free_port();
    let config = format!(
        "zones: [example.com]\nexchange: {{listen: \"127.0.0.1:{exchange}\"}}\npeers:\n  - name: west\n    addresses: [\"127.0.0.1:{nobody}\"]\n    keys:\n      - {{name: east-west., secret: {SECRET}}}\n      - {{name: east-west-old., secretFile: old.key}}\n"
    );
    let dir = directory("secrets-running", &config, &[("old.key", SECOND)]);
    let mut r = Resolver::start_keeping_stdout(&dir, &[]);
    let metrics = |r: &Resolver| {
        http_get(r.admin, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    eventually(Duration::from_secs(30), || {
        metrics(&r)
            .contains("healthroute_peer_exchanges_total{checker=\"standalone\",peer=\"west\"")
    })
    .unwrap_or_else(|| panic!("the peer checks ran:\n{}", metrics(&r)));
    // What a peer's checker makes of this cluster's answers is a peer check's status, and
    // what `kubectl healthroute explain` shows (X9): asked with the key, with another secret
    // under its name, and with a key it does not know.
    for (what, key, secret, expected) in [
        ("the key", "east-west.", SECRET, "127.0.0.1:"),
        ("another secret", "east-west.", WRONG, "BADSIG"),
        ("an unknown key", "stranger.", WRONG, "BADKEY"),
    ] {
        let said = ask_exchange(exchange, key, secret);
        assert_no_secret(&format!("an observation with {what}"), &said);
        assert!(said.contains(expected), "{what}: {said}");
    }
    assert_no_secret("/metrics", &metrics(&r));
    for path in ["/livez", "/readyz", "/nowhere"] {
        let (_, body) = http_get(r.admin, path).unwrap_or_default();
        assert_no_secret(path, &body);
    }

    // Edited into a bad file: standalone mode reads healthroute.yaml at start only, so the
    // running resolver goes on; and a Secret manifest that is not valid YAML fails the
    // directory's reload, which is logged.
    std::fs::write(
        dir.join("healthroute.yaml"),
        config.replace(
            &format!("secret: {SECRET}}}"),
            &format!("secret: \"{SECRET}}}"),
        ),
    )
    .expect("edit");
    std::fs::write(
        dir.join("tsig-secret.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tsig, namespace: shop}}\ndata:\n  secret: {SECRET}\n  second: {SECOND}\n   broken: [\n"
        ),
    )
    .expect("write");
    std::thread::sleep(Duration::from_secs(2));
    assert_no_secret("/metrics after the edit", &metrics(&r));
    assert!(r.child.try_wait().ok().flatten().is_none(), "still running");
    let log = r.stop_and_log();
    let mut stdout = String::new();
    if let Some(mut out) = r.child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
    }
    assert_no_secret("stdout", &stdout);
    assert_no_secret("the log", &log);
    assert!(
        log.contains("keeping the last good configuration")
            && log.contains("tsig-secret.yaml (document 1): not valid YAML: line 7, column"),
        "the reload's error is logged:\n{log}"
    );

    // Started again on the edited file: refused, once, without the secret.
    refused_once(
        "restart on the edited file",
        &standalone_output(&dir),
        "healthroute.yaml:7:",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One observation of shop/www by a checker of another cluster that asks the exchange
/// listener on `port` with `key` (name, base64 secret): the observation and the peer it
/// asked as the checker shows them (`Debug`), its message first.
fn ask_exchange(port: u16, key: &str, secret: &str) -> String {
    use healthroute_checker::peer::{PeerConfig, Peers, observe};
    let key: healthroute_exchange::KeyConfig =
        serde_saphyr::from_str(&format!("{{name: {key}, secret: {secret}}}")).expect("a key");
    let peers = Peers::from_config(&[PeerConfig {
        name: "east".into(),
        addresses: vec![format!("127.0.0.1:{port}")],
        keys: vec![key],
    }])
    .expect("the peer");
    let peer = peers.get("east").expect("east");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let seen = runtime.block_on(observe(peer, "shop", "www", Duration::from_secs(2)));
    format!("{}\n{seen:?}\n{peer:?}\n{peers:?}", seen.message)
}

// SEM-X10: the simulator reads healthroute.yaml too: its answers and explanations, and its
// error when the file is broken next to the secret, hold no secret.
#[test]
fn simulate_never_shows_the_secret() {
    let simulate = |dir: &Path, args: &[&str]| {
        resolver()
            .arg("simulate")
            .arg("--manifests")
            .arg(dir)
            .args(args)
            .output()
            .expect("runs simulate")
    };
    let good = directory(
        "secrets-simulate",
        &config_with_key(&format!("        secret: {SECRET}\n")),
        &[],
    );
    for args in [
        &["--explain", "www.example.com"][..],
        &[
            "--unhealthy",
            "east-web",
            "--peer",
            "west/shop/www=198.51.100.10",
            "--explain",
            "www.example.com",
        ],
        &["--peer-down", "west", "--explain", "api.example.com"],
    ] {
        let out = simulate(&good, args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(stdout.contains("www.example.com") || stdout.contains("api.example.com"));
        assert_no_secret("simulate stdout", &stdout);
        assert_no_secret("simulate stderr", &stderr);
    }
    let bad = directory(
        "secrets-simulate-bad",
        &config_with_key(&format!(
            "        secret: {SECRET}\n       oops: [{DECODED}\n"
        )),
        &[],
    );
    refused_once(
        "simulate on a broken file",
        &simulate(&bad, &["--explain", "www.example.com"]),
        "healthroute.yaml:8:8: not valid YAML",
    );
    let _ = std::fs::remove_dir_all(&good);
    let _ = std::fs::remove_dir_all(&bad);
}

/// The operator binary of this build, next to the resolver's (`cargo build -p
/// healthroute-operator`, or `cargo test --workspace`, puts it there); `None`, said on
/// stderr, when it is missing or older than a file of operator/src.
fn operator() -> Option<Command> {
    let path = resolver_binary().with_file_name(format!(
        "healthroute-operator{}",
        std::env::consts::EXE_SUFFIX
    ));
    let built = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    let stale = built.is_some_and(|built| newest(&repo().join("operator/src")) > Some(built));
    if built.is_none() || stale {
        eprintln!(
            "{} is not built from this source: the operator's part is skipped (cargo build -p healthroute-operator)",
            path.display()
        );
        return None;
    }
    Some(Command::new(path))
}

/// The newest modification time of the files below `dir`.
fn newest(dir: &Path) -> Option<std::time::SystemTime> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            if meta.is_dir() {
                newest(&entry.path())
            } else {
                meta.modified().ok()
            }
        })
        .max()
}

// SEM-X10: the operator's push key file: too short, or good with no cluster to go on with,
// the operator stops with one line that names the file and never the key.
#[test]
fn the_operator_never_shows_the_push_key() {
    let Some(_) = operator() else { return };
    let dir = temp_dir("secrets-operator");
    let short = dir.join("short.key");
    std::fs::write(&short, SHORT_DECODED).expect("write");
    let good = dir.join("good.key");
    std::fs::write(&good, format!("{DECODED}\n")).expect("write");
    for (key, expected) in [
        (&short, "--push-key-file"),
        (&good, "no Kubernetes client configuration"),
    ] {
        let out = operator()
            .expect("built")
            .args(["--zone", "example.com", "--admin-listen", "127.0.0.1:0"])
            .arg("--push-key-file")
            .arg(key)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("runs the operator");
        refused_once(&format!("operator, {}", key.display()), &out, expected);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
