//! The operator's metrics, one set per component, each its own collector in the process's
//! prometheus-client registry: the control loop ([`ControlMetrics`]), the table publisher
//! ([`PublisherMetrics`]), the statuses and the one writer ([`StatusMetrics`]; the writer
//! counts the Peer checks' and the mirrors' writes in their components' families,
//! [`WriteMetrics`]), the Peer checks ([`PeerMetrics`]), zonal autoshift
//! ([`AutoshiftMetrics`]) and the leader's Metric-check evaluator (the checker crate's
//! `CheckerMetrics`, exported as the checker `metric-evaluator`). The numbers are atomics
//! updated where the work happens and read at each scrape. Whether the replica is ready is not
//! a number: see [`crate::readiness`].

mod autoshift;
mod control;
mod peers;
mod publisher;
mod status;

pub use autoshift::AutoshiftMetrics;
pub use control::{ControlMetrics, ShiftExpiry};
pub use peers::PeerMetrics;
pub use publisher::PublisherMetrics;
pub use status::{StatusMetrics, WriteCounters, WriteMetrics};

use std::sync::Arc;

use healthroute_admin::metrics::Registry;
use healthroute_api::METRIC_EVALUATOR;
use healthroute_checker::{CheckerCollector, CheckerMetrics};

/// Every component's metrics, as handed to the components and registered once per process.
#[derive(Debug, Default, Clone)]
pub struct OperatorMetrics {
    pub control: Arc<ControlMetrics>,
    pub publisher: Arc<PublisherMetrics>,
    pub status: Arc<StatusMetrics>,
    /// The Peer checks the leader creates (X4).
    pub peers: Arc<PeerMetrics>,
    /// What the ZonalAutoshift engines did, as the leader saw it (AS11).
    pub autoshift: Arc<AutoshiftMetrics>,
    /// The leader's Metric-check evaluator (H14).
    pub metric_evaluator: Arc<CheckerMetrics>,
    /// Deltas pushed to the resolvers (P12).
    pub pushes: Arc<crate::push::PushMetrics>,
}

impl OperatorMetrics {
    /// What the one writer counts: statuses, Peer checks, mirrors.
    pub fn writes(&self) -> WriteMetrics {
        WriteMetrics {
            status: self.status.clone(),
            peer_checks: self.peers.writer.clone(),
            engine_shifts: self.autoshift.engine_shift_writes.clone(),
        }
    }

    /// Registers each component's collector with the process's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.control.clone()));
        registry.register_collector(Box::new(self.publisher.clone()));
        registry.register_collector(Box::new(self.status.clone()));
        registry.register_collector(Box::new(self.peers.clone()));
        registry.register_collector(Box::new(self.autoshift.clone()));
        registry.register_collector(Box::new(self.pushes.clone()));
        registry.register_collector(Box::new(CheckerCollector {
            checker: METRIC_EVALUATOR.into(),
            metrics: self.metric_evaluator.clone(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use healthroute_admin::metrics::{Registry, encode};

    use super::*;

    // The operator's registry as main builds it: its own families and its Metric-check
    // evaluator's, typed and named as the chart's alerts and dashboard read them.
    #[test]
    fn the_operator_exposition_names_and_types_every_family() {
        let metrics = OperatorMetrics::default();
        metrics
            .control
            .compile_micros_sum
            .fetch_add(1_250_000, Ordering::Relaxed);
        metrics.control.leader.store(true, Ordering::Relaxed);
        metrics.control.set_shift_expiries(vec![(
            "shop/drain-a".into(),
            "zone-a".into(),
            1_800_000_000,
        )]);
        metrics
            .metric_evaluator
            .latency
            .record(1, std::time::Duration::from_millis(3));
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let text = encode(&registry);
        for line in [
            "# TYPE healthroute_operator_compile_seconds_total counter",
            "healthroute_operator_compile_seconds_total 1.25",
            "# TYPE healthroute_operator_leader gauge",
            "healthroute_operator_leader 1",
            r#"healthroute_operator_zonal_shift_expiry_timestamp_seconds{zonal_shift="shop/drain-a",away_from="zone-a"} 1800000000"#,
            "# TYPE healthroute_checker_probe_latency_seconds histogram",
            r#"healthroute_checker_probe_latency_seconds_bucket{checker="metric-evaluator",le="0.005"} 1"#,
            r#"healthroute_checker_probe_latency_seconds_count{checker="metric-evaluator"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    // Every family the operator exported as one struct keeps its name and type now that each
    // component registers its own (the chart's alerts and dashboard read them).
    #[test]
    fn every_component_keeps_the_names_of_its_families() {
        let mut registry = Registry::default();
        OperatorMetrics::default().register(&mut registry);
        let text = encode(&registry);
        let counters = [
            "events",
            "compiles",
            "groups_recompiled",
            "checks_evaluated",
            "shards_written",
            "table_deltas_written",
            "table_bytes_written",
            "table_folds",
            "publish_failures",
            "status_writes",
            "status_write_errors",
            "events_recorded",
            "compile_seconds",
            "publish_seconds",
            "status_repairs",
        ];
        let gauges = [
            "table_groups",
            "table_generation",
            "published_generation",
            "table_shards",
            "status_backlog",
            "checks_without_checker",
            "publish_failing",
            "leader",
            "zonal_shift_expiry_timestamp_seconds",
        ];
        for (names, kind, suffix) in [
            (&counters[..], "counter", "_total"),
            (&gauges[..], "gauge", ""),
        ] {
            for name in names {
                let line = format!("# TYPE healthroute_operator_{name}{suffix} {kind}");
                assert!(
                    text.lines().any(|l| l == line),
                    "missing {line:?} in\n{text}"
                );
            }
        }
    }

    // SEM-AS11: the leader exports standalone mode's three autoshift families: the zones
    // autoshifted away from, every outcome from 0, the runs not started by reason; a term
    // that ends takes its zones away.
    #[test]
    fn the_autoshift_families_are_standalone_modes() {
        use healthroute_api::{NotStartedReason, ObjectKey, PracticeRunOutcome};
        use healthroute_compiler::AutoshiftEvent;
        let metrics = OperatorMetrics::default();
        let config = ObjectKey::new("shop", "frontend");
        metrics.autoshift.engines.count(&[
            AutoshiftEvent::PracticeRunEnded {
                config: config.clone(),
                zone: "zone-b".into(),
                outcome: PracticeRunOutcome::Failed,
                message: "outcome alarm errors is in ALARM".into(),
            },
            AutoshiftEvent::PracticeRunNotStarted {
                config: config.clone(),
                reason: NotStartedReason::BlockedWindow,
                message: "in a blocked window".into(),
                request: Some("start:1".into()),
            },
            AutoshiftEvent::AutoshiftStarted {
                config,
                zone: "zone-a".into(),
                message: "zone-a is impaired".into(),
            },
        ]);
        metrics
            .autoshift
            .engines
            .set_active([("zone-a".to_owned(), 1)].into_iter().collect());
        let text = |m: &OperatorMetrics| {
            let mut registry = Registry::default();
            m.register(&mut registry);
            encode(&registry)
        };
        let shown = text(&metrics);
        for line in [
            "# TYPE healthroute_autoshift_active gauge",
            r#"healthroute_autoshift_active{zone="zone-a"} 1"#,
            "# TYPE healthroute_practice_runs_total counter",
            r#"healthroute_practice_runs_total{outcome="Failed"} 1"#,
            r#"healthroute_practice_runs_total{outcome="Succeeded"} 0"#,
            r#"healthroute_practice_runs_total{outcome="CapacityCheckFailed"} 0"#,
            "# TYPE healthroute_practice_runs_not_started_total counter",
            r#"healthroute_practice_runs_not_started_total{reason="BlockedWindow"} 1"#,
        ] {
            assert!(
                shown.lines().any(|l| l == line),
                "missing {line:?} in\n{shown}"
            );
        }
        metrics.autoshift.engines.set_active(Default::default());
        assert!(
            text(&metrics)
                .lines()
                .any(|l| l == r#"healthroute_autoshift_active{zone="zone-a"} 0"#),
            "a zone seen this term ends at 0"
        );
        metrics.autoshift.engines.clear_active();
        assert!(!text(&metrics).contains("healthroute_autoshift_active{"));
    }

    // SEM-X4: the Peer checks' families, named and typed.
    #[test]
    fn the_peer_check_families_are_exported() {
        let metrics = OperatorMetrics::default();
        metrics.peers.checks.store(2, Ordering::Relaxed);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let text = encode(&registry);
        for line in [
            "# TYPE healthroute_operator_peer_check_writes_total counter",
            "# TYPE healthroute_operator_peer_check_write_errors_total counter",
            "# TYPE healthroute_operator_peer_checks gauge",
            "healthroute_operator_peer_checks 2",
            "# TYPE healthroute_operator_peer_check_writes_pending gauge",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
