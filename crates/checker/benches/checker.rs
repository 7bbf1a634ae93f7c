//! 10,000 HTTP checks at a 10 s interval against local servers: CPU and memory of the checker,
//! and how evenly probe starts spread over the interval. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p healthroute-checker --bench checker` (about 40 s).
//! The HTTP servers run in a child process (this binary, with HR_BENCH_SERVE set), so the
//! checker's CPU figure is the checker's alone.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use healthroute_api::HealthCheckSpec;
use healthroute_api::ObjectKey;
use healthroute_checker::{Checker, TargetPolicy};

const CHECKS: usize = 10_000;
const PORTS: usize = 10;
const INTERVAL_S: u64 = 10;
const MEASURE_S: u64 = 30;

fn proc_stat() -> (f64, u64) {
    // utime + stime in seconds, and RSS in KiB.
    let ticks = 100.0; // USER_HZ on Linux
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let cpu = fields
        .get(11)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    (cpu / ticks, rss)
}

/// Server mode: PORTS listeners answering 200; counts request arrivals per 100 ms bucket and
/// prints the counts when stdin closes.
fn serve() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let start = Instant::now();
        let buckets = std::sync::Arc::new(std::sync::Mutex::new(vec![0u32; 10 * 120]));
        let mut ports = Vec::new();
        for _ in 0..PORTS {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            ports.push(l.local_addr().expect("addr").port());
            let buckets = buckets.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                while let Ok((mut s, _)) = l.accept().await {
                    let b = (start.elapsed().as_millis() / 100) as usize;
                    if let Some(slot) = buckets.lock().expect("lock").get_mut(b) {
                        *slot += 1;
                    }
                    tokio::spawn(async move {
                        let mut buf = [0u8; 512];
                        let _ = s.read(&mut buf).await;
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                    });
                }
            });
        }
        println!(
            "{}",
            ports
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        })
        .await;
        let counts = buckets.lock().expect("lock").clone();
        println!(
            "{}",
            counts
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    });
}

fn main() {
    if std::env::var_os("HR_BENCH_SERVE").is_some() {
        serve();
        return;
    }
    let exe = std::env::current_exe().expect("exe");
    let mut server = std::process::Command::new(exe)
        .env("HR_BENCH_SERVE", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("server process");
    let mut out = BufReader::new(server.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ports");
    let ports: Vec<u16> = line
        .trim()
        .split(',')
        .filter_map(|p| p.parse().ok())
        .collect();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (cpu, rss) = rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(100_000);
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let mut checker = Checker::new("bench", None, TargetPolicy::standalone_default(), tx);
        let specs: Vec<(ObjectKey, HealthCheckSpec)> = (0..CHECKS)
            .map(|i| {
                let spec: HealthCheckSpec = serde_json::from_value(serde_json::json!({
                    "type": "HTTP",
                    "target": {"address": "127.0.0.1", "port": ports[i % ports.len()], "path": format!("/c{i}")},
                    "requestIntervalSeconds": INTERVAL_S,
                }))
                .expect("spec");
                (ObjectKey::new(format!("ns{}", i % 50), format!("check-{i}")), spec)
            })
            .collect();
        checker.sync(specs.iter().map(|(k, s)| (k, s)));
        // Warm up one interval, then measure.
        tokio::time::sleep(Duration::from_secs(INTERVAL_S)).await;
        let (cpu0, _) = proc_stat();
        tokio::time::sleep(Duration::from_secs(MEASURE_S)).await;
        let (cpu1, rss) = proc_stat();
        let probes = checker.metrics.probes_healthy.load(std::sync::atomic::Ordering::Relaxed);
        drop(checker);
        drain.abort();
        eprintln!("probes answered healthy: {probes}");
        (cpu1 - cpu0, rss)
    });
    let _ = writeln!(server.stdin.as_mut().expect("stdin"));
    line.clear();
    out.read_line(&mut line).expect("counts");
    let _ = server.wait();
    let counts: Vec<u32> = line
        .trim()
        .split(',')
        .filter_map(|c| c.parse().ok())
        .collect();
    // The measured window: seconds INTERVAL_S .. INTERVAL_S + MEASURE_S, in 100 ms buckets.
    let window = &counts[(INTERVAL_S * 10) as usize..((INTERVAL_S + MEASURE_S) * 10) as usize];
    let mean = window.iter().map(|c| f64::from(*c)).sum::<f64>() / window.len() as f64;
    let max = window.iter().copied().max().unwrap_or(0);
    let min = window.iter().copied().min().unwrap_or(0);
    println!(
        "{CHECKS} HTTP checks every {INTERVAL_S} s against {PORTS} local servers, measured over {MEASURE_S} s:"
    );
    println!(
        "  checker CPU: {:.1}% of one core",
        100.0 * cpu / MEASURE_S as f64
    );
    println!("  checker resident memory: {:.1} MiB", rss as f64 / 1024.0);
    println!(
        "  probe starts per 100 ms: mean {mean:.1}, min {min}, max {max} (max/mean {:.2}; all at once would be {CHECKS})",
        f64::from(max) / mean
    );
}
