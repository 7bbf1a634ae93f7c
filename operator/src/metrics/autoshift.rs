//! Zonal autoshift's numbers in the operator: what the engines did (SEMANTICS AS1, AS11),
//! counted by the compiler host ([`healthroute_compiler::host`]) under the families and
//! labels standalone mode exports too, so that one dashboard and one set of alerts read both;
//! and the operator's own, the writes of the ZonalShifts that mirror the engines' shifts
//! (AS13).
//!
//! A replica that is not the leader exports no `healthroute_autoshift_active` or
//! `healthroute_autoshift_configuration_invalid` series and counts nothing: what the engines
//! decide is the leader's.

use std::sync::Arc;

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};
use healthroute_compiler::host;

use super::WriteCounters;

#[derive(Debug, Default)]
pub struct AutoshiftMetrics {
    /// What the engines did, as the leader's compiles saw it: the host counts into it.
    pub engines: Arc<host::AutoshiftMetrics>,
    /// The writes of the ZonalShifts that mirror the engines' shifts (AS13; the operator's
    /// alone: standalone mode writes no object).
    pub engine_shift_writes: Arc<WriteCounters>,
}

impl Collector for AutoshiftMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        self.engines.encode_into(&mut encoder)?;
        let mut out = Exposition::new(encoder);
        let w = &self.engine_shift_writes;
        out.counter(
            "healthroute_operator_engine_shift_writes_total",
            "Writes of the ZonalShifts that show the autoshift engines' shifts (applied, status, deleted).",
            WriteCounters::get(&w.writes),
        )?;
        out.counter(
            "healthroute_operator_engine_shift_write_errors_total",
            "Engine-shift writes that failed (retried with backoff unless the server refused the body).",
            WriteCounters::get(&w.write_errors),
        )?;
        out.gauge(
            "healthroute_operator_engine_shift_writes_pending",
            "Engine-shift writes waiting to be sent.",
            WriteCounters::get(&w.pending) as i64,
        )
    }
}

#[cfg(test)]
mod tests {
    use healthroute_admin::metrics::{Registry, encode};

    use super::*;

    // SEM-AS1 SEM-AS11 SEM-AS13: the leader exports standalone mode's families, the unusable
    // configurations' gauge among them, then its own engine-shift writes.
    #[test]
    fn the_operator_exports_the_hosts_families_and_its_engine_shift_writes() {
        let metrics = Arc::new(AutoshiftMetrics::default());
        metrics.engines.set_invalid(
            [("shop/fleet".to_owned(), "BadWindow")]
                .into_iter()
                .collect(),
        );
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics.clone()));
        let text = encode(&registry);
        for line in [
            "# TYPE healthroute_autoshift_active gauge",
            "# TYPE healthroute_practice_runs_total counter",
            "# TYPE healthroute_practice_runs_not_started_total counter",
            "# TYPE healthroute_autoshift_configuration_invalid gauge",
            r#"healthroute_autoshift_configuration_invalid{zonal_autoshift="shop/fleet",reason="BadWindow"} 1"#,
            "# TYPE healthroute_operator_engine_shift_writes_total counter",
            "healthroute_operator_engine_shift_writes_pending 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
