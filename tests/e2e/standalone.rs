//! Standalone mode end to end: the real binary on a temporary directory, edited while it
//! runs, stopped and restarted; health checks against real local servers.

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{TCP, UDP, query};
use crate::support::{Backend, Resolver, eventually, temp_dir};

fn group(name: &str, ip: &str) -> String {
    format!(
        "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: t}}\nspec:\n  name: {name}.example.com.\n  type: A\n  routingPolicy: Simple\n  records: [{{setIdentifier: x, values: [\"{ip}\"]}}]\n"
    )
}

fn answer(dns: SocketAddr, name: &str) -> Option<String> {
    let (m, _) = query(dns, name, RecordType::A, UDP);
    if m.metadata.response_code != ResponseCode::NoError {
        return None;
    }
    m.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(a.0.to_string()),
        _ => None,
    })
}

fn setup(tag: &str) -> std::path::PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("healthroute.yaml"), "zones: [example.com]\n").expect("write");
    std::fs::write(dir.join("api.yaml"), group("api", "192.0.2.1")).expect("write");
    dir
}

/// A stopped resolver's whole log.
fn log_of(mut r: Resolver) -> String {
    r.stop_now();
    let mut log = String::new();
    if let Some(mut e) = r.child.stderr.take() {
        let _ = e.read_to_string(&mut log);
    }
    log
}

// A log that is not a terminal holds no colour codes; `--log-format json` gives one JSON
// object per line.
#[test]
fn logs_are_plain_off_a_terminal_and_json_on_request() {
    let dir = setup("sa-logs");
    let text = log_of(Resolver::start(&dir, &[]));
    assert!(text.contains("answering DNS"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "escape codes in a log file:\n{text:?}"
    );
    let json = log_of(Resolver::start(&dir, &["--log-format", "json"]));
    let lines: Vec<&str> = json.lines().filter(|l| !l.is_empty()).collect();
    assert!(!lines.is_empty());
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
}

// Five seconds after its first table the resolver hands its start-up code back to the kernel
// (docs/design.md, "Code after start-up"); the code it runs after that is read back from the
// binary: it answers over UDP and TCP, serves an edit and its metrics as before.
#[test]
fn the_code_handed_back_after_start_up_runs_again() {
    let dir = setup("sa-code");
    let mut r = Resolver::start_with_env(
        &dir,
        &[],
        &[("RUST_LOG", "info,healthroute_admin::memory=debug")],
    );
    assert_eq!(
        answer(r.dns, "api.example.com.").as_deref(),
        Some("192.0.2.1")
    );
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(
        answer(r.dns, "api.example.com.").as_deref(),
        Some("192.0.2.1")
    );
    let (m, _) = query(r.dns, "api.example.com.", RecordType::A, TCP);
    assert_eq!(m.answers.len(), 1, "over TCP: {m:?}");
    std::fs::write(dir.join("api.yaml"), group("api", "192.0.2.2")).expect("write");
    eventually(Duration::from_secs(5), || {
        answer(r.dns, "api.example.com.").as_deref() == Some("192.0.2.2")
    })
    .expect("the edit is served");
    assert!(r.metrics().contains("healthroute_answers_total"));
    let log = r.stop_and_log();
    assert!(
        log.contains("start-up code paged out"),
        "the hand-back is logged (debug):\n{log}"
    );
}

// SEM-P1 SEM-S8: an edit reaches the answers within a second; a bad edit keeps the last good
// configuration and is reported with the file, object and field.
#[test]
fn edits_change_answers_and_bad_edits_keep_the_last_good() {
    let dir = setup("sa-edit");
    let mut r = Resolver::start(&dir, &[]);
    assert_eq!(
        answer(r.dns, "api.example.com.").as_deref(),
        Some("192.0.2.1")
    );

    std::fs::write(dir.join("api.yaml"), group("api", "192.0.2.2")).expect("write");
    let took = eventually(Duration::from_secs(5), || {
        answer(r.dns, "api.example.com.").as_deref() == Some("192.0.2.2")
    })
    .expect("the edit is served");
    assert!(took < Duration::from_secs(2), "took {took:?}");

    std::fs::write(dir.join("new.yaml"), group("new", "192.0.2.3")).expect("write");
    eventually(Duration::from_secs(5), || {
        answer(r.dns, "new.example.com.").is_some()
    })
    .expect("a new file is served");

    // A bad edit: the weight is out of range. Everything keeps answering as before.
    std::fs::write(
        dir.join("api.yaml"),
        group("api", "192.0.2.9").replace("routingPolicy: Simple", "routingPolicy: Sideways"),
    )
    .expect("write");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        answer(r.dns, "api.example.com.").as_deref(),
        Some("192.0.2.2")
    );
    assert_eq!(
        answer(r.dns, "new.example.com.").as_deref(),
        Some("192.0.2.3")
    );

    // Removing a file removes its names.
    std::fs::write(dir.join("api.yaml"), group("api", "192.0.2.2")).expect("write");
    std::fs::remove_file(dir.join("new.yaml")).expect("rm");
    eventually(Duration::from_secs(5), || {
        answer(r.dns, "new.example.com.").is_none()
    })
    .expect("removed");

    r.stop_now();
    let mut stderr = String::new();
    if let Some(mut e) = r.child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(
        stderr.contains("keeping the last good configuration")
            && stderr.contains("t/api")
            && stderr.contains("spec.routingPolicy"),
        "the bad edit is logged with its object and field:\n{stderr}"
    );
}

// SEM-P2: after a restart the last table is served from disk even when the directory no
// longer compiles; SIGTERM stops the server cleanly.
#[test]
fn restart_serves_the_last_table() {
    let dir = setup("sa-restart");
    let table = dir.join("last-table.json");
    let table_arg = table.to_string_lossy().into_owned();
    let r = Resolver::start(&dir, &["--table-file", &table_arg]);
    assert_eq!(
        answer(r.dns, "api.example.com.").as_deref(),
        Some("192.0.2.1")
    );
    eventually(Duration::from_secs(5), || table.exists()).expect("the table is written");
    let status = r.terminate();
    assert!(status.success(), "SIGTERM is a clean exit: {status:?}");

    std::fs::write(dir.join("api.yaml"), "this: [is not a manifest").expect("write");
    let r = Resolver::start(&dir, &["--table-file", &table_arg]);
    assert_eq!(
        answer(r.dns, "api.example.com.").as_deref(),
        Some("192.0.2.1")
    );
    // Without the table file, a broken directory is an error at start.
    let out = crate::support::resolver()
        .args(["--manifests"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid YAML"));
}

// SEM-P9: on SIGTERM the resolver turns /readyz unready at once, answers every query while it
// drains, and only then exits, cleanly.
#[test]
fn sigterm_drains_before_the_sockets_close() {
    let dir = setup("sa-drain");
    let r = Resolver::start(&dir, &["--shutdown-drain", "1.5"]);
    let (dns, admin) = (r.dns, r.admin);
    let pid = r.child.id().to_string();
    let sent = std::time::Instant::now();
    let kill = crate::support::resolver_signal(&pid, "TERM");
    assert!(kill, "SIGTERM sent");
    eventually(Duration::from_secs(2), || {
        crate::support::http_get(admin, "/readyz").is_some_and(|(code, _)| code == 503)
    })
    .expect("/readyz turns unready at once");
    // Queries keep being answered through the drain (bounded: at most 200, 10 ms apart).
    let mut answered = 0;
    while sent.elapsed() < Duration::from_millis(1200) && answered < 200 {
        assert_eq!(
            answer(dns, "api.example.com.").as_deref(),
            Some("192.0.2.1"),
            "answered {:?} after SIGTERM",
            sent.elapsed()
        );
        answered += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(answered > 10, "{answered} queries answered while draining");
    let status = r.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "a clean exit after the drain: {status:?}");
    assert!(
        sent.elapsed() >= Duration::from_millis(1500),
        "exited {:?} after SIGTERM, before the drain ended",
        sent.elapsed()
    );
}

/// A second resolver on a port already served is refused at start, instead of quietly
/// joining the first one's sockets (SO_REUSEPORT) and taking part of its queries.
#[test]
fn a_port_in_use_is_an_error() {
    let dir = setup("port-in-use");
    let r = Resolver::start(&dir, &[]);
    let out = crate::support::resolver()
        .arg("--manifests")
        .arg(&dir)
        .args([
            "--listen",
            &r.dns.to_string(),
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("another server"), "{stderr}");
    // The first one still answers every query.
    for _ in 0..20 {
        assert_eq!(
            answer(r.dns, "api.example.com.").as_deref(),
            Some("192.0.2.1")
        );
    }
}

// SEM-H1 SEM-H2 SEM-H5 SEM-S4 SEM-P1: a HealthCheck against a local HTTP server; when the
// server stops, the answer moves to the secondary after interval × threshold; when it comes
// back, so does the primary.
/// A failover group whose primary's HTTP check probes `backend` every second.
fn failover_dir(tag: &str, backend: &Backend) -> std::path::PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("healthroute.yaml"), "zones: [example.com]\n").expect("write");
    std::fs::write(
        dir.join("www.yaml"),
        format!(
            r#"apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: t}}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Failover
  records:
    - {{setIdentifier: main, failover: {{role: Primary}}, values: ["192.0.2.1"], healthCheckRef: {{name: main}}}}
    - {{setIdentifier: dr, failover: {{role: Secondary}}, values: ["198.51.100.1"]}}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: main, namespace: t}}
spec:
  type: HTTP
  target: {{address: 127.0.0.1, port: {port}, path: /healthz}}
  requestIntervalSeconds: 1
  failureThreshold: 2
  connectTimeoutSeconds: 1
  responseTimeoutSeconds: 1
"#,
            port = backend.addr.port()
        ),
    )
    .expect("write");
    dir
}

#[test]
fn health_check_moves_the_answer() {
    let backend = Backend::start();
    let dir = failover_dir("sa-health", &backend);
    let r = Resolver::start(&dir, &[]);
    assert_eq!(
        answer(r.dns, "www.example.com.").as_deref(),
        Some("192.0.2.1")
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        answer(r.dns, "www.example.com.").as_deref(),
        Some("192.0.2.1"),
        "healthy"
    );

    backend.stop();
    let took = eventually(Duration::from_secs(10), || {
        answer(r.dns, "www.example.com.").as_deref() == Some("198.51.100.1")
    })
    .expect("fails over");
    // Two failed probes one second apart, plus the probe phase: about 2 s, never instant.
    assert!(
        took > Duration::from_millis(500) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    let metrics = r.metrics();
    assert!(
        metrics.contains(
            "healthroute_checker_probes_total{checker=\"standalone\",result=\"unhealthy\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("healthroute_checker_check_probes_total{checker=\"standalone\",check=\"t/main\",result=\"unhealthy\"}"),
        "per-check results: {metrics}"
    );
    // The whole exposition (the resolver's families and its checker's) as Prometheus reads it:
    // names, types (the probe latency is one histogram), help, escaping.
    if let Some(problems) = crate::support::promtool_problems(&metrics) {
        assert!(problems.is_empty(), "promtool: {problems}\n{metrics}");
    }

    backend.restart();
    eventually(Duration::from_secs(10), || {
        answer(r.dns, "www.example.com.").as_deref() == Some("192.0.2.1")
    })
    .expect("fails back");
}

// SEM-M1: answer counters only go up and follow every answer: asked 50 times, failed over,
// asked 50 times, failed back, asked 50 more, each record's count is exactly the answers it
// gave (the waits' queries included), across every table the health changes built.
#[test]
fn answer_counters_follow_failover_and_back() {
    let backend = Backend::start();
    let dir = failover_dir("sa-counters", &backend);
    let r = Resolver::start(&dir, &[]);
    let mut given = std::collections::BTreeMap::<String, u64>::new();
    let mut ask = |r: &Resolver| {
        let a = answer(r.dns, "www.example.com.").unwrap_or_default();
        *given.entry(a.clone()).or_default() += 1;
        a
    };
    for _ in 0..50 {
        ask(&r);
    }
    backend.stop();
    eventually(Duration::from_secs(10), || ask(&r) == "198.51.100.1").expect("fails over");
    for _ in 0..50 {
        ask(&r);
    }
    backend.restart();
    eventually(Duration::from_secs(10), || ask(&r) == "192.0.2.1").expect("fails back");
    for _ in 0..50 {
        ask(&r);
    }
    let metrics = r.metrics();
    let count = |id: &str| -> u64 {
        let line =
            format!("healthroute_answers_total{{record_group=\"t/www\",set_identifier=\"{id}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line)?.parse().ok())
            .unwrap_or(0)
    };
    assert!(given["192.0.2.1"] >= 100, "{given:?}");
    assert_eq!(count("main"), given["192.0.2.1"], "{metrics}");
    assert_eq!(count("dr"), given["198.51.100.1"], "{metrics}");
}

/// The resolver's stderr and whether it exited at once with an error, for `args`, with no
/// Kubernetes configuration to be found (a push flag error comes before any connection).
fn refused(args: &[&str]) -> String {
    let out = crate::support::resolver()
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    stderr
}

// SEM-P12: the push flags are checked at start: a listener without a key, a key without a
// listener, a short key, a listener on every address with nothing to advertise, and push
// flags in standalone mode are each refused with a message naming the flag; a listener
// without a checker is taken.
#[test]
fn push_flags_are_checked_at_start() {
    let dir = setup("push-flags");
    let key = dir.join("push.key");
    std::fs::write(&key, "too short\n").expect("key");
    let key = key.to_str().expect("utf-8");
    let zone = ["--zone", "example.com", "--listen", "127.0.0.1:0"];
    fn with<'a>(zone: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
        [zone, more].concat()
    }

    let e = refused(&with(&zone, &["--push-listen", "127.0.0.1:0"]));
    assert!(e.contains("--push-listen needs --push-key-file"), "{e}");
    let e = refused(&with(&zone, &["--push-key-file", key]));
    assert!(e.contains("without --push-listen"), "{e}");
    let e = refused(&with(
        &zone,
        &["--push-listen", "127.0.0.1:0", "--push-key-file", key],
    ));
    assert!(
        e.contains("--push-key-file") && e.contains("32 or more"),
        "{e}"
    );

    let good = dir.join("good.key");
    std::fs::write(&good, "0123456789abcdef0123456789abcdef\n").expect("key");
    let good = good.to_str().expect("utf-8");
    let e = refused(&with(
        &zone,
        &["--push-listen", "0.0.0.0:0", "--push-key-file", good],
    ));
    assert!(e.contains("--push-advertise"), "{e}");
    // With good flags the push listener starts, and only then is Kubernetes asked; without a
    // checker too (the resolver registers on a Lease of its own).
    let e = refused(&with(
        &zone,
        &[
            "--push-listen",
            "127.0.0.1:0",
            "--push-key-file",
            good,
            "--no-checker",
        ],
    ));
    assert!(e.contains("no Kubernetes client"), "{e}");
    let e = refused(&with(
        &zone,
        &["--push-listen", "127.0.0.1:0", "--push-key-file", good],
    ));
    assert!(e.contains("no Kubernetes client"), "{e}");

    let e = refused(&[
        "--manifests",
        dir.to_str().expect("utf-8"),
        "--push-listen",
        "127.0.0.1:0",
        "--push-key-file",
        good,
    ]);
    assert!(e.contains("for a cluster"), "{e}");
}
