//! Metric checks end to end (SEMANTICS H13-H15): a real Prometheus server on loopback scrapes
//! a small exporter whose metric the test sets; the real resolver in standalone mode follows
//! the alarm; Prometheus is stopped to see each insufficient-data setting. Every wait is
//! bounded; nothing waits a fixed time where a condition can be polled.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{UDP, query};
use crate::support::{Resolver, eventually, free_port, http_get, temp_dir};

/// A `/metrics` endpoint serving `hr_test_errors <value>`.
struct Exporter {
    addr: SocketAddr,
    value: Arc<AtomicU64>,
}

impl Exporter {
    fn start() -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let value = Arc::new(AtomicU64::new(0));
        let v = value.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let body = format!(
                    "# TYPE hr_test_errors gauge\nhr_test_errors {}\n",
                    v.load(Ordering::SeqCst)
                );
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Exporter { addr, value }
    }
    fn set(&self, v: u64) {
        self.value.store(v, Ordering::SeqCst);
    }
}

/// Prometheus on loopback, scraping `target` every second.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Option<Prometheus> {
        if Command::new("prometheus")
            .arg("--version")
            .output()
            .is_err()
        {
            return None;
        }
        let dir = temp_dir("prometheus");
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: hr-test\n    static_configs: [{{targets: [\"{target}\"]}}]\n"
            ),
        )
        .expect("write config");
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starts prometheus");
        Some(Prometheus { child, addr })
    }
    /// The number of samples an instant query returns, if Prometheus answers.
    fn samples(&self, query: &str) -> Option<usize> {
        let (_, body) = http_get(self.addr, &format!("/api/v1/query?query={query}"))?;
        let json: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
        json.pointer("/data/result")?.as_array().map(Vec::len)
    }
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
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

/// A failover group `NAME` whose primary (192.0.2.1) follows Metric check `NAME`, with the
/// given insufficient-data setting; the standby is 192.0.2.2.
fn group_and_check(name: &str, prometheus: SocketAddr, nodata: &str) -> String {
    format!(
        r#"---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: {name}, namespace: t}}
spec:
  name: {name}.example.com.
  type: A
  routingPolicy: Failover
  records:
    - {{setIdentifier: primary, failover: {{role: Primary}}, values: ["192.0.2.1"], healthCheckRef: {{name: {name}}}}}
    - {{setIdentifier: standby, failover: {{role: Secondary}}, values: ["192.0.2.2"]}}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: {name}, namespace: t}}
spec:
  type: Metric
  requestIntervalSeconds: 1
  failureThreshold: 1
  connectTimeoutSeconds: 1
  responseTimeoutSeconds: 1
  metric:
    prometheus: {{url: "http://{prometheus}"}}
    query: 'hr_test_errors{{job="hr-test"}} > 0'
    insufficientDataHealthStatus: {nodata}
"#
    )
}

// SEM-H13 SEM-H14 SEM-H5: OK answers the primary; samples (ALARM) the standby; back to OK,
// the primary again; with Prometheus gone, each insufficient-data setting does what it says.
#[test]
fn metric_checks_follow_a_real_prometheus() {
    let exporter = Exporter::start();
    let Some(mut prometheus) = Prometheus::start(exporter.addr) else {
        eprintln!(
            "SKIPPED metric_checks_follow_a_real_prometheus: prometheus is not installed (.ci/run installs it)"
        );
        return;
    };
    assert!(
        eventually(Duration::from_secs(60), || prometheus
            .samples("hr_test_errors")
            .is_some_and(|n| n > 0))
        .is_some(),
        "Prometheus never scraped the exporter"
    );

    let dir = temp_dir("metric");
    std::fs::write(dir.join("healthroute.yaml"), "zones: [example.com]\n").expect("write");
    let mut text = String::new();
    for (name, nodata) in [
        ("lk", "LastKnownStatus"),
        ("ok", "Healthy"),
        ("bad", "Unhealthy"),
    ] {
        text.push_str(&group_and_check(name, prometheus.addr, nodata));
    }
    std::fs::write(dir.join("routing.yaml"), text).expect("write");
    let r = Resolver::start(&dir, &[]);
    let all_answer = |want: &str| {
        eventually(Duration::from_secs(20), || {
            ["lk", "ok", "bad"]
                .iter()
                .all(|n| answer(r.dns, &format!("{n}.example.com")).as_deref() == Some(want))
        })
        .is_some()
    };

    assert!(all_answer("192.0.2.1"), "OK: every primary answers");
    exporter.set(3);
    assert!(all_answer("192.0.2.2"), "ALARM: every standby answers");
    exporter.set(0);
    assert!(all_answer("192.0.2.1"), "OK again: every primary answers");
    exporter.set(5);
    assert!(all_answer("192.0.2.2"), "ALARM again");

    // Insufficient data: LastKnownStatus keeps the alarm, Healthy counts as healthy,
    // Unhealthy as unhealthy.
    prometheus.stop();
    let settled = eventually(Duration::from_secs(20), || {
        answer(r.dns, "ok.example.com").as_deref() == Some("192.0.2.1")
    });
    assert!(settled.is_some(), "Healthy on no data: the primary answers");
    assert_eq!(
        answer(r.dns, "bad.example.com").as_deref(),
        Some("192.0.2.2")
    );
    assert_eq!(
        answer(r.dns, "lk.example.com").as_deref(),
        Some("192.0.2.2"),
        "LastKnownStatus keeps the alarm"
    );
    // A few more evaluations without data change nothing.
    let metrics_before = r.metrics();
    assert!(
        eventually(Duration::from_secs(10), || r.metrics() != metrics_before).is_some(),
        "the evaluations go on"
    );
    assert_eq!(
        answer(r.dns, "lk.example.com").as_deref(),
        Some("192.0.2.2")
    );
    assert_eq!(
        answer(r.dns, "ok.example.com").as_deref(),
        Some("192.0.2.1")
    );
    assert_eq!(
        answer(r.dns, "bad.example.com").as_deref(),
        Some("192.0.2.2")
    );
}
