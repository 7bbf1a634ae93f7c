//! The simulator reproduces every seed example of docs/semantics.md from the files in `examples/`.

use crate::support::{share, simulate};

fn near(got: f64, want: f64) -> bool {
    (got - want).abs() < 1.0
}

// SEM-S1 SEM-S3 SEM-S9: 10/20/20 gives 20%; with the third unhealthy, 33%.
#[test]
fn weighted_example() {
    let out = simulate("weighted", &["--queries", "100000", "api.example.com"]);
    assert!(near(share(&out, "192.0.2.10"), 20.0), "{out}");
    assert!(near(share(&out, "192.0.2.20"), 40.0), "{out}");
    let out = simulate(
        "weighted",
        &[
            "--queries",
            "100000",
            "--unhealthy",
            "hc-c",
            "api.example.com",
        ],
    );
    assert!(near(share(&out, "192.0.2.10"), 33.33), "{out}");
    assert_eq!(share(&out, "192.0.2.30"), 0.0, "{out}");
}

// SEM-S3: zero-weight records only when every non-zero record is unhealthy.
#[test]
fn zero_weight_example() {
    let out = simulate(
        "weighted",
        &[
            "--unhealthy",
            "hc-a",
            "--unhealthy",
            "hc-b",
            "api.example.com",
        ],
    );
    assert_eq!(share(&out, "192.0.2.99"), 0.0, "{out}");
    let all = [
        "--unhealthy",
        "hc-a",
        "--unhealthy",
        "hc-b",
        "--unhealthy",
        "hc-c",
        "api.example.com",
    ];
    let out = simulate("weighted", &all);
    assert_eq!(share(&out, "192.0.2.99"), 100.0, "{out}");
    assert!(out.contains("last resort: no"), "{out}");
}

// SEM-S4 SEM-S6: both unhealthy → the primary (last resort); a secondary without a check.
#[test]
fn failover_example() {
    let out = simulate("failover", &["www.example.com"]);
    assert_eq!(share(&out, "192.0.2.10 192.0.2.11"), 100.0, "{out}");
    let out = simulate(
        "failover",
        &["--unhealthy", "hc-primary", "www.example.com"],
    );
    assert_eq!(share(&out, "198.51.100.10"), 100.0, "{out}");
    let out = simulate(
        "failover",
        &[
            "--unhealthy",
            "hc-primary",
            "--unhealthy",
            "hc-secondary",
            "www.example.com",
        ],
    );
    assert_eq!(share(&out, "192.0.2.10 192.0.2.11"), 100.0, "{out}");
    assert!(out.contains("last resort: yes"), "{out}");
    let out = simulate(
        "failover",
        &["--unhealthy", "hc-primary", "app.example.com"],
    );
    assert_eq!(share(&out, "198.51.100.200"), 100.0, "{out}");
    assert!(out.contains("last resort: no"), "{out}");
}

// SEM-R4 SEM-S7: alias to a weighted group with evaluateTargetHealth.
#[test]
fn alias_example() {
    let out = simulate("alias", &["api.example.com"]);
    assert_eq!(share(&out, "192.0.2.10"), 100.0, "{out}");
    let out = simulate(
        "alias",
        &[
            "--queries",
            "100000",
            "--unhealthy",
            "hc-main",
            "api.example.com",
        ],
    );
    assert!(near(share(&out, "203.0.113.2"), 75.0), "{out}");
    let out = simulate(
        "alias",
        &[
            "--unhealthy",
            "hc-main",
            "--unhealthy",
            "hc-x",
            "--unhealthy",
            "hc-y",
            "--explain",
            "api.example.com",
        ],
    );
    assert_eq!(
        share(&out, "192.0.2.10"),
        100.0,
        "the alias branch is out: {out}"
    );
    assert!(
        out.contains("alias target api-dr has no healthy record"),
        "{out}"
    );
}

// SEM-H10 SEM-H8 SEM-H9: calculated thresholds 0 and above the children, inverted, and
// disabled winning over inverted. The failover answer shows the check's status.
#[test]
fn calculated_inverted_disabled_example() {
    let all_down = ["--unhealthy", "a", "--unhealthy", "b", "--unhealthy", "c"];
    let status = |host: &str, extra: &[&str]| {
        let mut args: Vec<&str> = all_down.to_vec();
        args.extend_from_slice(extra);
        let name = format!("{host}.example.com");
        args.push(&name);
        let out = simulate("calculated", &args);
        share(&out, "192.0.2.1") == 100.0
    };
    assert!(status("zero", &[]), "threshold 0 is always healthy");
    assert!(
        !status("over", &[]),
        "threshold above the children is never healthy"
    );
    assert!(!simulate("calculated", &["over.example.com"]).contains("192.0.2.1\n"));
    assert!(!status("two-of-three", &[]));
    assert!(
        status("inverted", &["--unhealthy", "inv-a"]),
        "inverted unhealthy is healthy"
    );
    assert!(
        status("disabled", &["--unhealthy", "dis-inv-a"]),
        "disabled wins over inverted"
    );
}

// SEM-S5: multivalue answers at most 8; with none healthy, 8 of the 12.
#[test]
fn multivalue_example() {
    let out = simulate("multivalue", &["fleet.example.com"]);
    assert!(out.contains("(8 values in 10000)"), "{out}");
    let out = simulate(
        "multivalue",
        &["--unhealthy", "fleet-a", "fleet.example.com"],
    );
    assert_eq!(
        share(
            &out,
            "192.0.2.7 192.0.2.8 192.0.2.9 192.0.2.10 192.0.2.11 192.0.2.12"
        ),
        100.0,
        "{out}"
    );
    let out = simulate(
        "multivalue",
        &[
            "--unhealthy",
            "fleet-a",
            "--unhealthy",
            "fleet-b",
            "fleet.example.com",
        ],
    );
    assert!(
        out.contains("(8 values in 10000)") && out.contains("last resort: yes"),
        "{out}"
    );
}

// SEM-Z2 SEM-Z3 SEM-Z5 SEM-Z6: applied, conflict, expired, cancelled, fail-open.
#[test]
fn zonal_shift_example() {
    let at = ["--now", "2026-11-29T11:00:00Z"];
    let out = simulate("zonal-shift", &[at[0], at[1], "api.example.com"]);
    assert_eq!(share(&out, "192.0.2.2"), 0.0, "zone-b drained: {out}");
    assert!(near(share(&out, "192.0.2.1"), 50.0), "{out}");
    assert!(
        out.contains("shop/drain-b (away from zone-b): Active, Applied"),
        "{out}"
    );
    assert!(
        out.contains("shop/drain-c (away from zone-c): Active, NotApplied (Conflict)"),
        "{out}"
    );
    assert!(
        out.contains("shop/yesterday (away from zone-a): Expired"),
        "{out}"
    );
    assert!(
        out.contains("shop/rollback (away from zone-a): Canceled"),
        "{out}"
    );
    let out = simulate(
        "zonal-shift",
        &[
            at[0],
            at[1],
            "--unhealthy",
            "search-a",
            "search.example.com",
        ],
    );
    assert_eq!(share(&out, "192.0.2.12"), 100.0, "fail open: {out}");
    assert!(
        out.contains("NotApplied (NoHealthyCapacityElsewhere)"),
        "{out}"
    );
    // After drain-b expires at 12:00, drain-c (zone-c) is the oldest active shift.
    let out = simulate(
        "zonal-shift",
        &["--now", "2026-11-29T12:00:00Z", "api.example.com"],
    );
    assert!(near(share(&out, "192.0.2.2"), 50.0), "{out}");
    assert_eq!(share(&out, "192.0.2.3"), 0.0, "{out}");
}

// SEM-H11 SEM-R3 SEM-D2: readiness from EndpointSlices; NODATA and NXDOMAIN.
#[test]
fn simple_service_example() {
    let out = simulate("simple", &["web.example.com"]);
    assert_eq!(share(&out, "10.0.1.1 10.0.2.1"), 100.0, "{out}");
    let out = simulate(
        "simple",
        &[
            "--not-ready",
            "10.0.1.1",
            "--not-ready",
            "10.0.2.1",
            "web.example.com",
        ],
    );
    assert_eq!(
        share(&out, "10.0.3.1"),
        100.0,
        "serving, terminating fallback: {out}"
    );
    assert!(simulate("simple", &["web.example.com", "AAAA"]).contains("NODATA"));
    assert!(simulate("simple", &["nope.example.com"]).contains("NXDOMAIN"));
    assert!(simulate("simple", &["www.other.org"]).contains("REFUSED"));
}

#[test]
fn bad_manifests_are_reported_with_file_object_and_field() {
    let dir = std::env::temp_dir().join(format!("hr-sim-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::write(dir.join("healthroute.yaml"), "zones: [example.com]\n").expect("write");
    std::fs::write(
        dir.join("bad.yaml"),
        "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {name: api}\nspec:\n  name: api.example.com.\n  type: A\n  routingPolicy: Weighted\n  records: [{setIdentifier: a, weight: 256, values: [\"192.0.2.1\"]}]\n",
    )
    .expect("write");
    let out = crate::support::resolver()
        .args(["simulate", "--manifests"])
        .arg(&dir)
        .arg("api.example.com")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("bad.yaml (document 1), RecordGroup default/api: spec.records[0].weight"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// SEM-D8: a CNAME to a name in the served zones is followed, by the resolver (UDP and TCP)
// and by the simulator alike: the CNAME and the target's A, chosen by the target's own
// policy; a chain to a missing name ends NXDOMAIN, one to another zone ends at the CNAME.
#[test]
fn simulator_and_resolver_follow_a_cname_chain() {
    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::{RData, RecordType};

    let dir = crate::support::temp_dir("sim-cname");
    std::fs::write(dir.join("healthroute.yaml"), "zones: [b.test]\n").expect("write");
    let group = |name: &str, dns: &str, rtype: &str, value: &str| {
        format!(
            "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: t}}\nspec:\n  name: {dns}\n  type: {rtype}\n  routingPolicy: Simple\n  records: [{{setIdentifier: x, values: [\"{value}\"]}}]\n---\n"
        )
    };
    let manifests = [
        group("www", "www.b.test.", "CNAME", "api.b.test."),
        group("api", "api.b.test.", "A", "192.0.2.80"),
        group("gone", "gone.b.test.", "CNAME", "nothing.b.test."),
        group("away", "away.b.test.", "CNAME", "elsewhere.example.org."),
    ]
    .concat();
    std::fs::write(dir.join("groups.yaml"), manifests).expect("write");
    let sim = |name: &str| {
        let dir = dir.to_str().expect("a UTF-8 temp dir");
        crate::support::run_resolver(&["simulate", "--manifests", dir, "--queries", "10", name])
    };
    let out = sim("www.b.test");
    assert_eq!(share(&out, "api.b.test. → 192.0.2.80"), 100.0, "{out}");
    assert!(
        out.contains("then api.b.test. A  (RecordGroup t/api"),
        "{out}"
    );
    assert!(sim("gone.b.test").contains("NXDOMAIN (the target does not exist)"));
    assert!(sim("away.b.test").contains("outside the served zones"));

    let r = crate::support::Resolver::start(&dir, &[]);
    for q in [crate::dns::UDP, crate::dns::TCP] {
        let (m, _) = crate::dns::query(r.dns, "WWW.b.test.", RecordType::A, q);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        let got: Vec<String> = m
            .answers
            .iter()
            .map(|a| match &a.data {
                RData::CNAME(c) => format!("{} CNAME {}", a.name, c.0),
                RData::A(ip) => format!("{} A {}", a.name, ip.0),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            got,
            ["WWW.b.test. CNAME api.b.test.", "api.b.test. A 192.0.2.80"]
        );
        let (m, _) = crate::dns::query(r.dns, "gone.b.test.", RecordType::A, q);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "RFC 6604");
        assert_eq!(m.answers.len(), 1, "the CNAME");
        assert_eq!(m.authorities.len(), 1, "the SOA");
        let (m, _) = crate::dns::query(r.dns, "away.b.test.", RecordType::A, q);
        assert_eq!(
            (m.metadata.response_code, m.answers.len()),
            (ResponseCode::NoError, 1)
        );
    }
}

// SEM-H13 SEM-H14: the simulator's --alarm: ALARM moves every answer to blue, OK keeps the
// 50/50 split, no data with LastKnownStatus keeps the last status (healthy, H6); a name
// that is not a Metric check is an error.
#[test]
fn metric_check_example() {
    let ok = simulate(
        "metric-check",
        &["--alarm", "green-errors=ok", "api.example.com"],
    );
    assert!((share(&ok, "192.0.2.20") - 50.0).abs() < 3.0, "{ok}");
    let alarm = simulate(
        "metric-check",
        &[
            "--alarm",
            "green-errors=alarm",
            "--explain",
            "api.example.com",
        ],
    );
    assert_eq!(share(&alarm, "192.0.2.10"), 100.0, "{alarm}");
    assert!(alarm.contains("metric ALARM"), "{alarm}");
    let nodata = simulate(
        "metric-check",
        &["--alarm", "green-errors=nodata", "api.example.com"],
    );
    assert!(
        (share(&nodata, "192.0.2.20") - 50.0).abs() < 3.0,
        "{nodata}"
    );
    let out = crate::support::resolver()
        .args(["simulate", "--manifests"])
        .arg(crate::support::repo().join("examples/metric-check"))
        .args(["--alarm", "green-errors=maybe", "api.example.com"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not ok, alarm or nodata"));
}

// SEM-X9 SEM-X2 SEM-X3: the simulator asks "what if the peer said ..." (`--peer`) and "what if
// the peer were lost" (`--peer-down`) of the multi-cluster example, and explains a peer record.
#[test]
fn peer_sources_in_the_simulator() {
    let east = "multi-cluster/east";
    // Nothing heard from west: its record has no value, and the failover stays home.
    let out = simulate(
        east,
        &["--unhealthy", "east-web", "--explain", "www.example.com"],
    );
    assert!(out.contains("no value heard from the peer yet"), "{out}");
    let out = simulate(
        east,
        &[
            "--unhealthy",
            "east-web",
            "--peer",
            "west/shop/www=198.51.100.10",
            "www.example.com",
        ],
    );
    assert_eq!(share(&out, "198.51.100.10"), 100.0, "{out}");
    // Weighted 3:1 across the clusters; the peer's values share its weight.
    let out = simulate(
        east,
        &[
            "--queries",
            "100000",
            "--peer",
            "west/shop/api=198.51.100.11,198.51.100.12",
            "api.example.com",
        ],
    );
    assert!(
        near(share(&out, "198.51.100.11 198.51.100.12"), 25.0),
        "{out}"
    );
    // The peer lost: only the local record, and the explanation says why.
    let out = simulate(
        east,
        &[
            "--peer",
            "west/shop/api=198.51.100.11",
            "--peer-down",
            "west",
            "--explain",
            "api.example.com",
        ],
    );
    assert_eq!(share(&out, "192.0.2.11"), 100.0, "{out}");
    assert!(out.contains("west: unhealthy (peer west shop/api"), "{out}");
}
