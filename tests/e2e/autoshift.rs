//! Zonal autoshift end to end (SEMANTICS AS1–AS12): a standalone resolver in zone-a
//! (`--zone-name zone-a`) on a directory of four frontend groups whose zone-a records are
//! probed on loopback, and a ZonalAutoshift over them with a seconds-short hold time. The
//! backends stop and start, the files change, and the answers, the metrics and the log say
//! what the engine decided; the simulator is asked about examples/autoshift.

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{UDP, query};
use crate::support::{Backend, Resolver, eventually, simulate, temp_dir};

const CHECKED: [&str; 3] = ["api", "web", "search"];

/// The loopback backends: one per checked group's zone-a record, and the outcome alarm's.
struct Backends {
    zone_a: Vec<Backend>,
    outcome: Backend,
}

/// A group over three zones, preferring its resolver's zone; `n` numbers its addresses
/// (10.0.n.1 in zone-a, .2 in zone-b, .3 in zone-c) and `check` probes its zone-a record.
fn group(name: &str, n: usize, check: Option<SocketAddr>) -> String {
    let checked = if check.is_some() {
        format!(", healthCheckRef: {{name: {name}-a}}")
    } else {
        String::new()
    };
    let mut text = format!(
        "---\napiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: t, labels: {{tier: frontend}}}}\n\
         spec:\n  name: {name}.example.com.\n  type: A\n  routingPolicy: Weighted\n  zoneAffinity: PreferSameZone\n  records:\n\
         \x20   - {{setIdentifier: a, weight: 1, zone: zone-a, values: [\"10.0.{n}.1\"]{checked}}}\n\
         \x20   - {{setIdentifier: b, weight: 1, zone: zone-b, values: [\"10.0.{n}.2\"]}}\n\
         \x20   - {{setIdentifier: c, weight: 1, zone: zone-c, values: [\"10.0.{n}.3\"]}}\n"
    );
    if let Some(addr) = check {
        text.push_str(&http_check(&format!("{name}-a"), addr));
    }
    text
}

fn http_check(name: &str, addr: SocketAddr) -> String {
    format!(
        "---\napiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: {name}, namespace: t}}\n\
         spec: {{type: HTTP, target: {{address: 127.0.0.1, port: {}, path: /}}, requestIntervalSeconds: 1, failureThreshold: 1, connectTimeoutSeconds: 1, responseTimeoutSeconds: 1}}\n",
        addr.port()
    )
}

/// The ZonalAutoshift: every frontend group, autoshift on, a 2 s hold time, practice runs
/// judged by the `outcome` check; `extra` goes into `practiceRun`, `annotations` into its
/// metadata.
fn autoshift(extra: &str, annotations: &str) -> String {
    format!(
        "apiVersion: healthroute.io/v1alpha1\nkind: ZonalAutoshift\nmetadata: {{name: fleet, namespace: t, annotations: {{{annotations}}}}}\n\
         spec:\n  target: {{selector: {{matchLabels: {{tier: frontend}}}}}}\n  autoshift: Enabled\n  detection: {{holdTime: 2s}}\n\
         \x20 practiceRun:\n    outcomeAlarms: [{{name: outcome}}]\n    duration: 10m\n{extra}"
    )
}

/// The directory: healthroute.yaml, the four groups (api, web and search checked in zone-a,
/// `extra` not checked), the outcome alarm, and the ZonalAutoshift.
fn setup(tag: &str) -> (std::path::PathBuf, Backends) {
    let dir = temp_dir(tag);
    let backends = Backends {
        zone_a: CHECKED.iter().map(|_| Backend::start()).collect(),
        outcome: Backend::start(),
    };
    std::fs::write(dir.join("healthroute.yaml"), "zones: [example.com]\n").expect("write");
    let mut groups = String::new();
    for (i, name) in CHECKED.iter().enumerate() {
        groups.push_str(&group(name, i + 1, Some(backends.zone_a[i].addr)));
    }
    groups.push_str(&group("extra", 4, None));
    groups.push_str(&http_check("outcome", backends.outcome.addr));
    std::fs::write(dir.join("groups.yaml"), groups).expect("write");
    std::fs::write(dir.join("autoshift.yaml"), autoshift("", "")).expect("write");
    (dir, backends)
}

/// The A values of one answer.
fn answer(dns: SocketAddr, name: &str) -> Vec<String> {
    let (m, _) = query(dns, name, RecordType::A, UDP);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{name}");
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether ten answers for `extra` in a row all come from zone-a (`true`) or none does.
fn extra_from_zone_a(r: &Resolver) -> Option<bool> {
    let zone_a: Vec<bool> = (0..10)
        .map(|_| answer(r.dns, "extra.example.com.") == ["10.0.4.1"])
        .collect();
    if zone_a.iter().all(|x| *x) {
        Some(true)
    } else if zone_a.iter().all(|x| !*x) {
        Some(false)
    } else {
        None
    }
}

/// A sample's value in the exposition, when it is there.
fn sample(metrics: &str, line: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
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

const ACTIVE_A: &str = "healthroute_autoshift_active{zone=\"zone-a\"}";

// SEM-AS3 SEM-AS4 SEM-AS5 SEM-AS11 SEM-A2: zone-a's endpoints fail in three groups: within a
// check interval and a propagation, the autoshift moves every targeted group away from
// zone-a, `extra` (healthy in zone-a) included, and the resolver in zone-a answers from the
// other zones. A customer shift during the autoshift wins on its group. zone-a recovers:
// after the hold time, traffic returns.
#[test]
fn autoshift_moves_away_from_an_impaired_zone_and_back() {
    let (dir, backends) = setup("as-impaired");
    let r = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("extra answers from zone-a");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(extra_from_zone_a(&r), Some(true), "nothing impaired yet");

    for b in &backends.zone_a {
        b.stop();
    }
    let took = eventually(Duration::from_secs(10), || {
        extra_from_zone_a(&r) == Some(false)
    })
    .expect("extra moves away from zone-a");
    // One failed probe (1 s interval, threshold 1, 1 s connect timeout at most), then a
    // compile and a table: well under 4 s.
    assert!(took < Duration::from_secs(4), "took {took:?}");
    for (i, name) in CHECKED.iter().enumerate() {
        let zone_a = format!("10.0.{}.1", i + 1);
        assert!(
            !answer(r.dns, &format!("{name}.example.com.")).contains(&zone_a),
            "{name}"
        );
    }
    assert_eq!(sample(&r.metrics(), ACTIVE_A), Some(1.0));

    // AS5: a customer shift away from zone-b on `extra` wins over the autoshift there: zone-a
    // holds candidates for it again.
    std::fs::write(
        dir.join("shift.yaml"),
        "apiVersion: healthroute.io/v1alpha1\nkind: ZonalShift\nmetadata: {name: drain-b, namespace: t}\n\
         spec: {awayFrom: zone-b, target: {recordGroup: extra}, expiresIn: 10m}\n",
    )
    .expect("write");
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("the customer shift wins on extra");
    assert!(
        !answer(r.dns, "web.example.com.").contains(&"10.0.2.1".to_string()),
        "the autoshift still holds the other groups"
    );
    std::fs::remove_file(dir.join("shift.yaml")).expect("rm");
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(false)
    })
    .expect("the autoshift applies to extra again");

    // Recovery, then the 2 s hold time.
    for b in &backends.zone_a {
        b.restart();
    }
    let took = eventually(Duration::from_secs(10), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("traffic returns to zone-a");
    assert!(
        took >= Duration::from_secs(2),
        "the hold time held: {took:?}"
    );
    assert_eq!(sample(&r.metrics(), ACTIVE_A), Some(0.0));

    let log = log_of(r);
    assert!(
        log.contains("t/fleet: autoshift away from zone-a started")
            && log.contains("t/fleet: autoshift away from zone-a ended"),
        "{log}"
    );
}

// SEM-AS3: one group failing alone in zone-a is not an impaired zone: its own record leaves
// the answers (health), and nothing else moves.
#[test]
fn one_group_failing_alone_shifts_nothing() {
    let (dir, backends) = setup("as-alone");
    let r = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("extra answers from zone-a");
    backends.zone_a[0].stop();
    eventually(Duration::from_secs(10), || {
        answer(r.dns, "api.example.com.") != ["10.0.1.1"]
    })
    .expect("api's zone-a record is unhealthy");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(extra_from_zone_a(&r), Some(true), "no autoshift");
    assert_eq!(answer(r.dns, "web.example.com."), ["10.0.2.1"]);
    assert_ne!(sample(&r.metrics(), ACTIVE_A), Some(1.0));
    let log = log_of(r);
    assert!(!log.contains("autoshift away from zone-a started"), "{log}");
}

// SEM-AS9 SEM-AS10 SEM-AS11: a practice run asked for in the file shifts zone-a away; its
// outcome alarm goes into ALARM: Failed, and traffic is back at once. A request already in the
// file at start counts as answered.
#[test]
fn a_practice_run_on_demand_fails_on_its_outcome_alarm() {
    let (dir, backends) = setup("as-practice");
    let ask = |value: &str| {
        std::fs::write(
            dir.join("autoshift.yaml"),
            autoshift(
                "",
                &format!(
                    "healthroute.io/practice-run: \"{value}\", healthroute.io/practice-run-zone: zone-a"
                ),
            ),
        )
        .expect("write");
    };
    ask("start:0");
    let r = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("extra answers from zone-a");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        extra_from_zone_a(&r),
        Some(true),
        "start:0 was in the file at start"
    );

    ask("start:1");
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(false)
    })
    .expect("the practice run shifts zone-a away");
    backends.outcome.stop();
    let took = eventually(Duration::from_secs(10), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("traffic back when the outcome alarm fires");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    let metrics = r.metrics();
    assert_eq!(
        sample(
            &metrics,
            "healthroute_practice_runs_total{outcome=\"Failed\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    let log = log_of(r);
    assert!(
        log.contains("counts as answered")
            && log.contains("t/fleet: practice run away from zone-a started (requested)")
            && log.contains(
                "t/fleet: practice run away from zone-a: Failed: outcome alarm outcome is in ALARM"
            ),
        "{log}"
    );
}

/// `Ddd:HH:MM` of a time in UTC.
fn weekly(t: jiff::Timestamp) -> String {
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    let day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        [usize::try_from(z.weekday().to_monday_zero_offset()).unwrap_or(0)];
    format!("{day}:{:02}:{:02}", z.hour(), z.minute())
}

// SEM-AS7 SEM-AS10 SEM-AS11: a practice run asked for inside a blocked window does not start;
// the log line and a metric say why.
#[test]
fn a_practice_run_in_a_blocked_window_does_not_start() {
    let (dir, _backends) = setup("as-blocked");
    let now = jiff::Timestamp::now();
    let hour = jiff::SignedDuration::from_hours(1);
    let window = format!(
        "    blockedWindows: [\"{}-{}\"]\n",
        weekly(now - hour),
        weekly(now + hour)
    );
    std::fs::write(dir.join("autoshift.yaml"), autoshift(&window, "")).expect("write");
    let r = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    eventually(Duration::from_secs(5), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("extra answers from zone-a");
    std::fs::write(
        dir.join("autoshift.yaml"),
        autoshift(&window, "healthroute.io/practice-run: start"),
    )
    .expect("write");
    let line = "healthroute_practice_runs_not_started_total{reason=\"BlockedWindow\"}";
    eventually(Duration::from_secs(5), || {
        sample(&r.metrics(), line) == Some(1.0)
    })
    .expect("counted as not started, blocked window");
    assert_eq!(extra_from_zone_a(&r), Some(true), "no practice run");
    let log = log_of(r);
    assert!(
        log.contains("t/fleet: practice run (start) not started (BlockedWindow): the run would overlap blocked window"),
        "{log}"
    );
}

// SEM-AS11: the simulator takes a zone as impaired, and shows what a practice run would leave
// serving, or why it would not start.
#[test]
fn the_simulator_shows_autoshifts_and_practice_runs() {
    let at = ["--now", "2026-12-01T10:00:00Z", "--queries", "200"];
    let out = simulate(
        "autoshift",
        &[
            &at[..],
            &[
                "--zone-impaired",
                "zone-a",
                "--from-zone",
                "zone-a",
                "api.example.com",
            ],
        ]
        .concat(),
    );
    assert!(
        out.contains("zonal autoshift shop/frontend: autoshift Active away from zone-a")
            && out.contains("autoshift shop/frontend:autoshift (away from zone-a): Applied")
            && !out.contains("192.0.2.11"),
        "{out}"
    );
    let out = simulate(
        "autoshift",
        &[&at[..], &["--practice-run", "zone-b", "web.example.com"]].concat(),
    );
    assert!(
        out.contains("100.00%  192.0.2.21 192.0.2.23")
            && out.contains("practice run shop/frontend:practice-run (away from zone-b): Applied, ends 2026-12-01T10:30:00Z"),
        "{out}"
    );
    let out = simulate(
        "autoshift",
        &[
            &at[..],
            &[
                "--unhealthy",
                "search-c",
                "--practice-run",
                "zone-a",
                "search.example.com",
            ],
        ]
        .concat(),
    );
    assert!(
        out.contains("last practice run away from zone-a: CapacityCheckFailed: RecordGroup shop/search: healthy capacity outside zone-a is 1 of 3 (33%), under 50%"),
        "{out}"
    );
    let out = simulate(
        "autoshift",
        &[
            "--now",
            "2026-12-01T12:15:00Z",
            "--practice-run",
            "next",
            "api.example.com",
        ],
    );
    assert!(
        out.contains("practice run not started (BlockedWindow): the run would overlap blocked window Tue:12:00-Tue:13:30"),
        "{out}"
    );
}

/// The fleet's ZonalAutoshift with a 6 s hold time, practice runs of `duration` every
/// `cadence`, and `extra` in `practiceRun`.
fn fleet_with(duration: &str, cadence: &str, extra: &str) -> String {
    format!(
        "apiVersion: healthroute.io/v1alpha1\nkind: ZonalAutoshift\nmetadata: {{name: fleet, namespace: t}}\n\
         spec:\n  target: {{selector: {{matchLabels: {{tier: frontend}}}}}}\n  autoshift: Enabled\n  detection: {{holdTime: 6s}}\n\
         \x20 practiceRun:\n    outcomeAlarms: [{{name: outcome}}]\n    duration: {duration}\n    cadence: {cadence}\n{extra}"
    )
}

const INVALID: &str = "healthroute_autoshift_configuration_invalid";

// SEM-AS1 SEM-AS11: standalone mode says why a configuration cannot be used: one log line
// with the reason when it becomes so and one when the reason changes (not one per compile),
// the gauge with the reason while it lasts, and the simulator's answer. Usable again, it
// shifts, and its 6s hold time is shown as 6s (not PT6S).
#[test]
fn an_unusable_configuration_says_why() {
    let (dir, backends) = setup("as-unusable");
    let write = |text: String| std::fs::write(dir.join("autoshift.yaml"), text).expect("write");
    write(fleet_with("1h", "1h", ""));
    let r = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    let cadence =
        format!("{INVALID}{{zonal_autoshift=\"t/fleet\",reason=\"CadenceNotLongerThanDuration\"}}");
    eventually(Duration::from_secs(5), || {
        sample(&r.metrics(), &cadence) == Some(1.0)
    })
    .unwrap_or_else(|| panic!("{cadence} 1:\n{}", r.metrics()));
    let why = "t/fleet: the configuration cannot be used: practiceRun.cadence 1h must be longer than its duration 1h";

    // The simulator, on the same files, says why as the status would.
    let out = crate::support::resolver()
        .args(["simulate", "--manifests"])
        .arg(&dir)
        .args(["--queries", "10", "api.example.com"])
        .output()
        .expect("runs simulate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains(
                "zonal autoshift t/fleet: the configuration cannot be used (CadenceNotLongerThanDuration): practiceRun.cadence 1h must be longer than its duration 1h"
            ),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Compiles go on (probes every second); another reason is told once more.
    std::thread::sleep(Duration::from_millis(1500));
    write(fleet_with(
        "1h",
        "2h",
        "    blockedDates: [\"2026-02-30\"]\n",
    ));
    let date = format!("{INVALID}{{zonal_autoshift=\"t/fleet\",reason=\"BadDate\"}}");
    eventually(Duration::from_secs(5), || {
        let m = r.metrics();
        sample(&m, &date) == Some(1.0) && sample(&m, &cadence).is_none()
    })
    .unwrap_or_else(|| panic!("{date} 1 alone:\n{}", r.metrics()));

    // Usable: the series ends, and the autoshift works, its hold time as written.
    write(fleet_with("1h", "2h", ""));
    eventually(Duration::from_secs(5), || {
        !r.metrics().contains(&format!("{INVALID}{{"))
    })
    .unwrap_or_else(|| panic!("no {INVALID} sample:\n{}", r.metrics()));
    for b in &backends.zone_a {
        b.stop();
    }
    eventually(Duration::from_secs(10), || {
        extra_from_zone_a(&r) == Some(false)
    })
    .expect("extra moves away from zone-a");
    for b in &backends.zone_a {
        b.restart();
    }
    eventually(Duration::from_secs(15), || {
        extra_from_zone_a(&r) == Some(true)
    })
    .expect("traffic returns to zone-a after the hold time");

    let log = log_of(r);
    let lines = |text: &str| log.lines().filter(|l| l.contains(text)).count();
    assert_eq!(lines(why), 1, "once, not per compile:\n{log}");
    assert_eq!(
        lines(
            "t/fleet: the configuration cannot be used: practiceRun: blocked date \"2026-02-30\""
        ),
        1,
        "{log}"
    );
    assert!(
        log.contains("reason=\"CadenceNotLongerThanDuration\"")
            && log.contains("t/fleet: the configuration is in use")
            && log.contains("(6s hold time)")
            && !log.contains("PT6S"),
        "{log}"
    );
}
