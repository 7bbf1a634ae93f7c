//! The scenario a simulation answers: the question, the time it is asked at, and the what-ifs
//! (a check seen unhealthy, a Metric check's evaluation, what a peer said or that it is lost,
//! an endpoint not ready, a zone impaired, a practice run asked for, views handed in), each
//! read once: from the CLI's flags (`SimulateArgs::scenario`) or built directly by
//! `kubectl healthroute explain`.
//!
//! ```text
//!   flags ──parse──▶ Scenario ◀── plugin (the cluster's views)
//!                      │ apply to the manifests and a compiler
//!                      ▼
//!   manifests ─▶ Compiler (what-ifs applied, compiled at `now`) ─▶ output
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use healthroute_api::{CheckType, MetricState};
use healthroute_compiler::manifests::Manifests;
use healthroute_compiler::{CheckerView, Compiler, ObjectKey, ServedZones};
use healthroute_table::{PeerValue, RecordType, normalize_name};
use jiff::Timestamp;

use crate::error::Error;

/// The checker name the simulator reports its what-if views as.
const SIMULATOR: &str = "simulator";

/// One simulation: what is asked, when, and what is assumed.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The name asked: lower case, with the trailing dot.
    pub name: String,
    pub record_type: RecordType,
    /// The time the simulation runs at (zonal shift expiry, practice run windows).
    pub now: Timestamp,
    /// HealthChecks (`name` or `namespace/name`) seen unhealthy by their checkers.
    pub unhealthy: Vec<String>,
    /// Metric checks taken as having evaluated to a state long enough to flip (H13).
    pub alarms: Vec<Alarm>,
    /// What a peer cluster's group answers as healthy (X2).
    pub peers: Vec<PeerHeard>,
    /// Peer clusters whose every peer source is unhealthy (X8).
    pub peers_down: Vec<String>,
    /// Endpoints (by address) neither ready nor serving.
    pub not_ready: Vec<IpAddr>,
    /// A zone every ZonalAutoshift with autoshift Enabled takes as impaired (AS3, AS4).
    pub zone_impaired: Option<String>,
    /// A practice run asked of every ZonalAutoshift now (AS7, AS8, AS10).
    pub practice_run: Option<PracticeRun>,
    /// Views to start from, each with a fresh heartbeat (the plugin's: what each checker
    /// reported in status).
    pub views: Vec<(ObjectKey, CheckerView)>,
    /// How many answers to draw, and the seed they are drawn from.
    pub queries: usize,
    pub seed: u64,
    /// Print the decision path.
    pub explain: bool,
    /// Ask as a resolver in this zone does (A1); `None`: the manifests' `zoneName`, if any.
    pub from_zone: Option<String>,
}

impl Scenario {
    /// `name` asked for `record_type` at `now` (RFC 3339; `None`: now), with no what-if,
    /// 10,000 draws from seed 1 and no explanation.
    pub fn asking(name: &str, record_type: &str, now: Option<&str>) -> Result<Self, Error> {
        let now = match now {
            Some(raw) => raw.parse::<Timestamp>().map_err(|source| Error::Now {
                raw: raw.to_owned(),
                source,
            })?,
            None => Timestamp::now(),
        };
        Ok(Scenario {
            now,
            record_type: record_type.parse()?,
            name: normalize_name(name)?,
            unhealthy: Vec::new(),
            alarms: Vec::new(),
            peers: Vec::new(),
            peers_down: Vec::new(),
            not_ready: Vec::new(),
            zone_impaired: None,
            practice_run: None,
            views: Vec::new(),
            queries: 10_000,
            seed: 1,
            explain: false,
            from_zone: None,
        })
    }
}

/// `--alarm NAME=STATE`: a Metric check's evaluation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alarm {
    /// The check, `name` or `namespace/name`.
    pub check: String,
    pub state: MetricState,
    /// The flag as written, for messages.
    pub wanted: String,
}

impl Alarm {
    /// `NAME=ok`, `NAME=alarm` or `NAME=nodata` (any case).
    pub fn parse(wanted: &str) -> Result<Self, Error> {
        let (check, state) = wanted
            .split_once('=')
            .ok_or_else(|| Error::AlarmForm(wanted.to_owned()))?;
        let state = match state.to_ascii_lowercase().as_str() {
            "ok" => MetricState::Ok,
            "alarm" => MetricState::Alarm,
            "nodata" => MetricState::InsufficientData,
            other => {
                return Err(Error::AlarmState {
                    wanted: wanted.to_owned(),
                    state: other.to_owned(),
                });
            }
        };
        Ok(Alarm {
            check: check.to_owned(),
            state,
            wanted: wanted.to_owned(),
        })
    }

    /// The state as the flag wrote it.
    fn written(&self) -> &str {
        self.wanted.split_once('=').map_or("", |(_, s)| s)
    }
}

/// `--peer CLUSTER/NAMESPACE/NAME=VALUE[,VALUE...]`: what a peer cluster's group answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerHeard {
    pub cluster: String,
    /// The peer's group (`namespace/name`, as a record's `peer.recordGroup` names it).
    pub group: ObjectKey,
    /// The values as the asking groups' records would write them: their type is those
    /// groups' (X6), known once the manifests are, and they are parsed then.
    pub values: Vec<String>,
}

impl PeerHeard {
    pub fn parse(wanted: &str) -> Result<Self, Error> {
        let form = || Error::PeerForm(wanted.to_owned());
        let (target, values) = wanted.split_once('=').ok_or_else(form)?;
        let (cluster, group) = target.split_once('/').ok_or_else(form)?;
        let group = ObjectKey::parse_group_key(group).ok_or_else(form)?;
        Ok(PeerHeard {
            cluster: cluster.to_owned(),
            group,
            values: values
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// `--practice-run ZONE|next`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PracticeRun {
    /// Away from the next zone in rotation.
    Next,
    AwayFrom(String),
}

impl PracticeRun {
    pub fn parse(zone: &str) -> Self {
        if zone == "next" {
            PracticeRun::Next
        } else {
            PracticeRun::AwayFrom(zone.to_owned())
        }
    }
}

impl Scenario {
    /// `--not-ready`: each endpoint with one of these addresses is neither ready nor
    /// serving; an address no endpoint has is an error.
    pub fn mark_not_ready(&self, manifests: &mut Manifests) -> Result<(), Error> {
        for ip in &self.not_ready {
            let mut found = false;
            for svc in manifests.services.values_mut() {
                for ep in svc.endpoints.iter_mut().filter(|e| e.address == *ip) {
                    ep.ready = false;
                    ep.serving = false;
                    found = true;
                }
            }
            if !found {
                return Err(Error::NoSuchEndpoint(ip.to_string()));
            }
        }
        Ok(())
    }

    /// The compiler over `manifests` with the what-ifs applied, compiled at `now`.
    pub fn compile(
        &self,
        zones: &ServedZones,
        ttl: u32,
        manifests: &Manifests,
    ) -> Result<Compiler, Error> {
        let mut compiler = Compiler::new(zones.clone(), ttl).explaining();
        let mut applied = manifests.clone();
        if let Some(run) = &self.practice_run {
            ask_practice_runs(&mut applied, run);
        }
        let _ = applied.apply_to(&mut compiler, None);
        compiler.assume_impaired(self.zone_impaired.clone());
        for wanted in &self.unhealthy {
            mark_unhealthy(&mut compiler, manifests, wanted)?;
        }
        for alarm in &self.alarms {
            set_alarm(&mut compiler, manifests, alarm)?;
        }
        set_peers(&mut compiler, manifests, &self.peers, &self.peers_down)?;
        for (key, view) in &self.views {
            compiler.set_heartbeat(view.checker.clone(), self.now);
            compiler.set_check_view(key, view.clone());
        }
        compiler.set_heartbeat(SIMULATOR, self.now);
        compiler.compile(self.now);
        Ok(compiler)
    }
}

/// `--practice-run`: every ZonalAutoshift is asked for a run now (AS10), with a request value
/// none of them answered yet.
fn ask_practice_runs(manifests: &mut Manifests, run: &PracticeRun) {
    use healthroute_api::{PRACTICE_RUN_ANNOTATION, PRACTICE_RUN_ZONE_ANNOTATION};
    for autoshift in manifests.autoshifts.values_mut() {
        let annotations = autoshift
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(PRACTICE_RUN_ANNOTATION.into(), "start:simulate".into());
        match run {
            PracticeRun::Next => annotations.remove(PRACTICE_RUN_ZONE_ANNOTATION),
            PracticeRun::AwayFrom(zone) => {
                annotations.insert(PRACTICE_RUN_ZONE_ANNOTATION.into(), zone.clone())
            }
        };
        if let Some(status) = autoshift.status.as_mut() {
            status.last_request = None;
        }
    }
}

/// What the simulator's checker reports of a check.
fn simulated(healthy: bool, message: String, values: Vec<PeerValue>) -> CheckerView {
    CheckerView {
        checker: SIMULATOR.into(),
        zone: None,
        healthy,
        message: Some(message),
        values,
    }
}

/// `--unhealthy NAME`: every HealthCheck it names is seen unhealthy by the simulator's
/// checker. A Calculated check has no checker of its own, so it cannot be.
fn mark_unhealthy(
    compiler: &mut Compiler,
    manifests: &Manifests,
    wanted: &str,
) -> Result<(), Error> {
    for key in checks_named(manifests, "--unhealthy", wanted, wanted)? {
        if manifests.checks[&key].spec.check_type == CheckType::Calculated {
            return Err(Error::CalculatedUnhealthy(wanted.to_owned()));
        }
        compiler.set_check_view(&key, simulated(false, "--unhealthy".into(), Vec::new()));
    }
    Ok(())
}

/// `--peer` and `--peer-down`: the simulator's checker is the one that asked each Peer
/// check's peer (X4). A value is written as the asking groups' records would write it; its
/// type is theirs.
fn set_peers(
    compiler: &mut Compiler,
    manifests: &Manifests,
    heard: &[PeerHeard],
    down: &[String],
) -> Result<(), Error> {
    let mut said: BTreeMap<(&str, ObjectKey), &PeerHeard> = heard
        .iter()
        .map(|p| ((p.cluster.as_str(), p.group.clone()), p))
        .collect();
    let peer_checks = manifests
        .checks
        .iter()
        .filter_map(|(k, c)| c.spec.peer.as_ref().map(|p| (k, p)));
    let mut known = BTreeSet::new();
    for (key, target) in peer_checks {
        known.insert(target.cluster.as_str());
        let heard = target
            .group()
            .and_then(|group| said.remove(&(target.cluster.as_str(), group)));
        let is_down = down.contains(&target.cluster);
        if heard.is_none_or(|h| h.values.is_empty()) && !is_down {
            continue;
        }
        // The asking groups' type is the values' (X6: `TYPE value`).
        let rtype = manifests
            .groups
            .iter()
            .filter(|(g, _)| g.namespace == key.namespace)
            .find(|(_, g)| {
                g.spec
                    .records
                    .iter()
                    .any(|r| r.peer.as_ref() == Some(target))
            })
            .map_or(RecordType::A, |(_, g)| {
                healthroute_compiler::group::record_type(g.spec.record_type)
            });
        let mut values = Vec::new();
        for text in heard.map(|h| h.values.as_slice()).unwrap_or_default() {
            let value =
                PeerValue::parse(rtype.as_str(), text).map_err(|source| Error::PeerValue {
                    wanted: format!("{}/{}={text}", target.cluster, target.record_group),
                    source,
                })?;
            values.push(value);
        }
        let message = if is_down { "--peer-down" } else { "--peer" };
        compiler.set_check_view(key, simulated(!is_down, message.into(), values));
    }
    if let Some(((cluster, group), _)) = said.into_iter().next() {
        return Err(Error::NoSuchPeerSource {
            flag: "--peer",
            name: format!("{cluster}/{group}"),
        });
    }
    if let Some(cluster) = down.iter().find(|c| !known.contains(c.as_str())) {
        return Err(Error::NoSuchPeerSource {
            flag: "--peer-down",
            name: cluster.clone(),
        });
    }
    Ok(())
}

/// `--alarm NAME=STATE`: every Metric check it names has evaluated to STATE for long enough to
/// flip (H13); `nodata` follows the check's insufficient-data setting.
fn set_alarm(compiler: &mut Compiler, manifests: &Manifests, alarm: &Alarm) -> Result<(), Error> {
    for key in checks_named(manifests, "--alarm", &alarm.check, &alarm.wanted)? {
        let spec = &manifests.checks[&key].spec;
        let Some(metric) = spec
            .metric
            .as_ref()
            .filter(|_| spec.check_type == CheckType::Metric)
        else {
            return Err(Error::NotMetric {
                wanted: alarm.wanted.clone(),
                check: key.to_string(),
            });
        };
        // Without data, the check's insufficient-data setting decides; `LastKnownStatus`:
        // no observation, the check keeps the status it had (H13, H6).
        let healthy = alarm
            .state
            .observation(metric.insufficient_data_health_status.unwrap_or_default());
        if let Some(healthy) = healthy {
            let message = format!("{}: simulated (--alarm {})", alarm.state, alarm.written());
            compiler.set_check_view(&key, simulated(healthy, message, Vec::new()));
        }
    }
    Ok(())
}

/// The HealthChecks that `name` (`namespace/name`, or a name alone) means; none is an error
/// for `flag`, quoting what was `wanted`.
fn checks_named(
    manifests: &Manifests,
    flag: &'static str,
    name: &str,
    wanted: &str,
) -> Result<Vec<ObjectKey>, Error> {
    let keys: Vec<ObjectKey> = manifests
        .checks
        .keys()
        .filter(|k| k.to_string() == name || &*k.name == name)
        .cloned()
        .collect();
    if keys.is_empty() {
        return Err(Error::NoSuchCheck {
            flag,
            name: wanted.to_owned(),
        });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-H13: `--alarm` reads its state once, in any case, and refuses what is not one.
    #[test]
    fn alarms_parse_once_and_refuse_unknown_states() {
        let alarm = Alarm::parse("errors=ALARM").expect("parses");
        assert_eq!(
            (alarm.check.as_str(), alarm.state),
            ("errors", MetricState::Alarm)
        );
        assert_eq!(alarm.written(), "ALARM");
        assert_eq!(
            Alarm::parse("errors=nodata").map(|a| a.state).ok(),
            Some(MetricState::InsufficientData)
        );
        assert!(matches!(Alarm::parse("errors"), Err(Error::AlarmForm(_))));
        assert!(matches!(
            Alarm::parse("errors=red"),
            Err(Error::AlarmState { state, .. }) if state == "red"
        ));
    }

    // SEM-X9: `--peer` names a cluster and a namespace/name, and values.
    #[test]
    fn peers_heard_parse_their_form() {
        let heard = PeerHeard::parse("west/shop/api=198.51.100.11, 198.51.100.12,").expect("ok");
        assert_eq!(heard.cluster, "west");
        assert_eq!(heard.group, ObjectKey::new("shop", "api"));
        assert_eq!(heard.values, ["198.51.100.11", "198.51.100.12"]);
        for bad in [
            "west/shop/api",
            "west=1.2.3.4",
            "west/api=1.2.3.4",
            "west/shop/=1",
        ] {
            assert!(
                matches!(PeerHeard::parse(bad), Err(Error::PeerForm(_))),
                "{bad}"
            );
        }
    }
}
