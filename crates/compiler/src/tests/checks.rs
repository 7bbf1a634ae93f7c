//! Check health as the compiler sees it (SEMANTICS H1, H7–H14): checkers that go stale
//! drop out by time alone, heartbeats re-evaluate only on reachability changes, and Metric
//! checks follow their one evaluator.

use super::*;

// SEM-H7 SEM-H1: a checker that stops reporting drops out by time alone: the next compile
// after its heartbeat is 3 intervals old changes the answer, and next_deadline says when.
#[test]
fn stale_checker_drops_out_without_new_input() {
    let mut c = mk_compiler();
    mk_failover(&mut c, false);
    let mut check = CheckInput::new(mk_check("hc-main"));
    check.views = vec![
        mk_view("zone-a", true),
        mk_view("zone-b", false),
        mk_view("zone-c", false),
    ];
    c.upsert_check(key("hc-main"), check);
    c.set_heartbeat("zone-a", t0());
    c.set_heartbeat("zone-b", at(25));
    c.set_heartbeat("zone-c", at(25));
    c.compile(at(25));
    assert_eq!(
        answer(&c, "www"),
        "192.0.2.1",
        "1/3 healthy is more than 18%"
    );
    let deadline = c.next_deadline().expect("a heartbeat goes stale");
    assert_eq!(deadline, at(30) + jiff::SignedDuration::from_millis(1));
    c.compile(deadline);
    assert_eq!(
        answer(&c, "www"),
        "198.51.100.1",
        "zone-a dropped out: 0/2 healthy"
    );
}

// SEM-H7: heartbeats alone re-evaluate nothing; a checker that goes stale re-evaluates the
// checks that read it, once, and so does its return.
#[test]
fn heartbeats_re_evaluate_only_on_reachability_changes() {
    let mut c = mk_compiler();
    for i in 0..500 {
        let mut check = CheckInput::new(mk_check(&format!("hc-{i}")));
        let reader = if i % 2 == 0 { "zone-a" } else { "zone-b" };
        check.views = vec![mk_view(reader, true)];
        c.upsert_check(key(&format!("hc-{i}")), check);
    }
    c.set_heartbeat("zone-a", t0());
    c.set_heartbeat("zone-b", t0());
    assert_eq!(c.compile(t0()).evaluated_checks, 500, "first evaluation");
    // A heartbeat a second from both checkers, for 20 s: nothing to evaluate.
    for s in 1..=20 {
        c.set_heartbeat("zone-a", at(s));
        c.set_heartbeat("zone-b", at(s));
        let report = c.compile(at(s));
        assert_eq!(report.evaluated_checks, 0, "at {s} s");
    }
    // zone-b stops. Its checks (interval 10 s) lose it when its last heartbeat is 30 s old.
    let deadline = c.next_deadline().expect("zone-b goes stale");
    assert_eq!(deadline, at(50) + jiff::SignedDuration::from_millis(1));
    c.set_heartbeat("zone-a", at(49));
    assert_eq!(c.compile(at(49)).evaluated_checks, 0);
    let report = c.compile(deadline);
    assert_eq!(
        report.evaluated_checks, 250,
        "the checks zone-b reads, once"
    );
    assert_eq!(c.compile(at(51)).evaluated_checks, 0);
    // It comes back: the same checks, once.
    c.set_heartbeat("zone-b", at(52));
    assert_eq!(c.compile(at(52)).evaluated_checks, 250);
    assert_eq!(c.compile(at(53)).evaluated_checks, 0);
}

fn metric_spec() -> healthroute_api::HealthCheckSpec {
    let mut spec = mk_check("m");
    spec.check_type = healthroute_api::CheckType::Metric;
    spec.target = None;
    spec.metric = Some(healthroute_api::MetricCheck {
        prometheus: healthroute_api::PrometheusSource {
            url: "http://prometheus.monitoring:9090".into(),
            bearer_token_secret_ref: None,
            ca_secret_ref: None,
            bearer_token_file: None,
            ca_file: None,
        },
        query: "errors > 0.05".into(),
        insufficient_data_health_status: None,
    });
    spec
}

// SEM-H13 SEM-H14 SEM-H10 SEM-H8: a Metric check's one evaluator decides it (its evaluation is
// the reason); it can be a Calculated check's child, and inverted like any check.
#[test]
fn metric_checks_count_their_one_evaluator_and_nest_in_calculated_checks() {
    let mut c = mk_compiler();
    let evaluate = |c: &mut Compiler, inverted: bool, alarm: bool| {
        let mut spec = metric_spec();
        spec.inverted = inverted;
        let mut input = CheckInput::new(spec);
        input.views = vec![CheckerView {
            checker: healthroute_api::METRIC_EVALUATOR.into(),
            zone: None,
            healthy: !alarm,
            message: Some(
                if alarm {
                    "ALARM: 1 sample, 0.2"
                } else {
                    "OK: no samples"
                }
                .into(),
            ),
            values: Vec::new(),
        }];
        c.upsert_check(key("m"), input);
        c.set_heartbeat(healthroute_api::METRIC_EVALUATOR, t0());
    };
    set_check(&mut c, "up", true);
    let mut calc = mk_check("calc");
    calc.check_type = healthroute_api::CheckType::Calculated;
    calc.target = None;
    calc.calculated = Some(healthroute_api::CalculatedCheck {
        children: vec!["m".into(), "up".into()],
        health_threshold: 2,
    });
    c.upsert_check(key("calc"), CheckInput::new(calc));

    evaluate(&mut c, false, true);
    c.compile(t0());
    let m = c.check_health(&key("m")).expect("m");
    assert!(!m.healthy);
    assert_eq!(m.reason, "metric ALARM: 1 sample, 0.2");
    assert!(
        !c.check_health(&key("calc")).expect("calc").healthy,
        "a child in ALARM"
    );

    evaluate(&mut c, false, false);
    c.compile(t0());
    assert!(c.check_health(&key("m")).expect("m").healthy);
    assert!(c.check_health(&key("calc")).expect("calc").healthy);

    evaluate(&mut c, true, true);
    c.compile(t0());
    assert!(
        c.check_health(&key("m")).expect("m").healthy,
        "inverted ALARM"
    );
}
