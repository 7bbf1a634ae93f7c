//! Telling an impaired zone from one bad service (SEMANTICS AS2, AS3), and the capacity check
//! of a practice run (AS8): pure arithmetic over what the groups' compiles counted.
//!
//! ```text
//!   group::compile ─▶ GroupZoneHealth (per zone: values, unhealthy, capacity; before shifts)
//!   targeted groups' GroupZoneHealth + Nodes per zone + zone alarms ─▶ detect ─▶ Verdict per zone
//!   targeted groups' GroupZoneHealth + a zone ─▶ capacity_check
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use healthroute_api::{ObjectKey, ZoneDetection};

/// One zone's values of one group, counted before any shift.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZoneHealth {
    pub values: u32,
    pub unhealthy: u32,
    /// Capacity as A3 counts it: a Weighted record's weight split evenly over its values, one
    /// per value otherwise.
    pub capacity: f64,
    pub healthy_capacity: f64,
}

impl ZoneHealth {
    fn add(&mut self, healthy: bool, capacity: f64) {
        self.values += 1;
        self.capacity += capacity;
        if healthy {
            self.healthy_capacity += capacity;
        } else {
            self.unhealthy += 1;
        }
    }
}

/// What detection and the capacity check read of one group: its values per zone, and those
/// without a zone (A2), each healthy or not as if no shift applied (AS2).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupZoneHealth {
    pub zones: BTreeMap<Arc<str>, ZoneHealth>,
    pub zoneless: ZoneHealth,
}

impl GroupZoneHealth {
    pub fn add(&mut self, zone: Option<&Arc<str>>, healthy: bool, capacity: f64) {
        match zone {
            Some(z) => self
                .zones
                .entry(z.clone())
                .or_default()
                .add(healthy, capacity),
            None => self.zoneless.add(healthy, capacity),
        }
    }

    fn capacity(&self) -> f64 {
        self.zoneless.capacity + self.zones.values().map(|z| z.capacity).sum::<f64>()
    }
}

/// The thresholds of AS3, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    pub unhealthy_percent: u32,
    pub other_zones_under_percent: u32,
    pub minimum_groups: u32,
    pub node_not_ready_percent: u32,
}

/// What detection says of one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub detection: ZoneDetection,
    /// One of the zone's own signals is over its threshold, other zones aside: an
    /// autoshifted zone is healthy again only when this is false (AS4).
    pub own_signal: bool,
}

/// Nodes of one zone: how many, and how many are not Ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCount {
    pub nodes: u32,
    pub not_ready: u32,
}

/// `part` is at least `percent` of `whole` (integers, no rounding).
fn at_least(part: u32, whole: u32, percent: u32) -> bool {
    whole > 0 && u64::from(part) * 100 >= u64::from(percent) * u64::from(whole)
}

/// AS3 over the targeted groups: one verdict per zone that holds targeted values, in zone
/// order. `alarms` gives, per zone, the zone alarm's state (`Some(true)`: in ALARM; `None`:
/// the HealthCheck does not exist) and its name; `assumed` is a zone taken as impaired by
/// every signal (the simulator's what-if).
pub fn detect(
    groups: &[&GroupZoneHealth],
    nodes: &BTreeMap<String, NodeCount>,
    alarms: &[(String, String, Option<bool>)],
    assumed: Option<&str>,
    t: &Thresholds,
) -> Vec<Verdict> {
    // Per zone: values, unhealthy values, groups with values, groups with unhealthy values.
    let mut per_zone: BTreeMap<&str, (u32, u32, u32, u32)> = BTreeMap::new();
    for g in groups {
        for (zone, h) in &g.zones {
            let e = per_zone.entry(zone).or_default();
            e.0 += h.values;
            e.1 += h.unhealthy;
            e.2 += u32::from(h.values > 0);
            e.3 += u32::from(h.unhealthy > 0);
        }
    }
    let share_under = |zone: &str| {
        per_zone
            .iter()
            .filter(|(z, _)| **z != zone)
            .all(|(_, (values, unhealthy, _, _))| {
                !at_least(*unhealthy, *values, t.other_zones_under_percent)
            })
    };
    let nodes_under = |zone: &str| {
        nodes
            .iter()
            .filter(|(z, _)| z.as_str() != zone)
            .all(|(_, n)| !at_least(n.not_ready, n.nodes, t.other_zones_under_percent))
    };
    let mut verdicts = Vec::with_capacity(per_zone.len());
    for (&zone, &(values, unhealthy, with_values, with_unhealthy)) in &per_zone {
        let mut reasons: Vec<String> = Vec::new();
        let mut blocked: Vec<String> = Vec::new();
        let mut own = false;
        let mut impaired = false;
        // (a) endpoints.
        let enough_groups = with_unhealthy >= t.minimum_groups.min(with_values);
        let share = 100 * u64::from(unhealthy) / u64::from(values.max(1));
        if at_least(unhealthy, values, t.unhealthy_percent) && enough_groups {
            own = true;
            if share_under(zone) {
                impaired = true;
                reasons.push(format!(
                    "{unhealthy} of {values} values unhealthy ({share}%) in {with_unhealthy} groups"
                ));
            } else {
                blocked.push(format!(
                    "{unhealthy} of {values} values unhealthy ({share}%), but another zone is at {}% or more: not a failure of one zone",
                    t.other_zones_under_percent
                ));
            }
        } else if unhealthy > 0 {
            blocked.push(if enough_groups {
                format!(
                    "{unhealthy} of {values} values unhealthy ({share}%, under {}%)",
                    t.unhealthy_percent
                )
            } else {
                format!(
                    "{unhealthy} of {values} values unhealthy, in {with_unhealthy} group(s): one group is not a zone ({} needed)",
                    t.minimum_groups.min(with_values)
                )
            });
        }
        // (b) the zone alarm.
        for (z, check, state) in alarms.iter().filter(|(z, _, _)| z == zone) {
            match state {
                Some(true) => {
                    own = true;
                    impaired = true;
                    reasons.push(format!("zone alarm {check} is in ALARM"));
                }
                Some(false) => {}
                None => blocked.push(format!("zone alarm {check} for {z} names no HealthCheck")),
            }
        }
        // (c) Nodes.
        let node = nodes.get(zone).copied();
        if let Some(n) = node
            && at_least(n.not_ready, n.nodes, t.node_not_ready_percent)
        {
            own = true;
            if nodes_under(zone) {
                impaired = true;
                reasons.push(format!("{} of {} Nodes not Ready", n.not_ready, n.nodes));
            } else {
                blocked.push(format!(
                    "{} of {} Nodes not Ready, but so are {}% or more in another zone",
                    n.not_ready, n.nodes, t.other_zones_under_percent
                ));
            }
        }
        if assumed == Some(zone) {
            own = true;
            impaired = true;
            reasons.push("assumed impaired (--zone-impaired)".into());
        }
        let reason = if impaired { reasons } else { blocked };
        verdicts.push(Verdict {
            detection: ZoneDetection {
                zone: zone.to_owned(),
                values,
                unhealthy_values: unhealthy,
                unhealthy_groups: with_unhealthy,
                nodes: node.map(|n| n.nodes),
                nodes_not_ready: node.map(|n| n.not_ready),
                impaired,
                reason: (!reason.is_empty()).then(|| reason.join("; ")),
            },
            own_signal: own,
        });
    }
    verdicts
}

/// AS8: every group with values in `zone` keeps, outside it, healthy capacity of at least
/// `percent` of its whole capacity. The error names the first group that does not.
pub fn capacity_check(
    groups: &[(&ObjectKey, &GroupZoneHealth)],
    zone: &str,
    percent: u32,
) -> Result<(), String> {
    for (key, g) in groups {
        if g.zones.get(zone).is_none_or(|z| z.values == 0) {
            continue;
        }
        let total = g.capacity();
        let healthy_outside = g.zoneless.healthy_capacity
            + g.zones
                .iter()
                .filter(|(z, _)| &***z != zone)
                .map(|(_, h)| h.healthy_capacity)
                .sum::<f64>();
        // Compared with a little slack, as A3 does: 1/2 of 2 is 50%.
        if healthy_outside <= 0.0 || healthy_outside * 100.0 + 1e-9 < f64::from(percent) * total {
            return Err(format!(
                "RecordGroup {key}: healthy capacity outside {zone} is {} of {} ({:.0}%), under {percent}%",
                fmt(healthy_outside),
                fmt(total),
                if total > 0.0 {
                    100.0 * healthy_outside / total
                } else {
                    0.0
                }
            ));
        }
    }
    Ok(())
}

fn fmt(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{c:.0}")
    } else {
        format!("{c:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        unhealthy_percent: 50,
        other_zones_under_percent: 20,
        minimum_groups: 2,
        node_not_ready_percent: 50,
    };

    /// A group with one value per zone given, healthy or not.
    fn group(values: &[(&str, bool)]) -> GroupZoneHealth {
        let mut g = GroupZoneHealth::default();
        for (zone, healthy) in values {
            g.add(Some(&Arc::from(*zone)), *healthy, 1.0);
        }
        g
    }

    fn impaired(v: &[Verdict]) -> Vec<&str> {
        v.iter()
            .filter(|v| v.detection.impaired)
            .map(|v| v.detection.zone.as_str())
            .collect()
    }

    // SEM-AS2 SEM-AS3: zone-a failing in three groups is a zone; in one group it is not, and a
    // failure in every zone is not one zone's either.
    #[test]
    fn a_correlated_failure_in_one_zone_is_an_impaired_zone() {
        let bad_a = group(&[("zone-a", false), ("zone-b", true), ("zone-c", true)]);
        let good = group(&[("zone-a", true), ("zone-b", true), ("zone-c", true)]);
        let none = BTreeMap::new();
        let v = detect(&[&bad_a, &bad_a, &bad_a], &none, &[], None, &T);
        assert_eq!(impaired(&v), ["zone-a"]);
        assert!(v[0].own_signal && !v[1].own_signal);
        assert_eq!(
            (v[0].detection.values, v[0].detection.unhealthy_values),
            (3, 3)
        );

        let v = detect(&[&bad_a, &good, &good], &none, &[], None, &T);
        assert!(impaired(&v).is_empty(), "{v:?}");
        assert!(!v[0].own_signal);

        // One group with many values in zone-a, all failing: still one group.
        let mut big = GroupZoneHealth::default();
        for _ in 0..4 {
            big.add(Some(&Arc::from("zone-a")), false, 1.0);
        }
        let v = detect(&[&big, &good, &good], &none, &[], None, &T);
        assert!(impaired(&v).is_empty(), "{v:?}");
        let why = v[0].detection.reason.clone().unwrap_or_default();
        assert!(why.contains("one group is not a zone"), "{why}");

        // Failing everywhere: no zone stands out.
        let bad_ab = group(&[("zone-a", false), ("zone-b", false), ("zone-c", true)]);
        let v = detect(&[&bad_ab, &bad_ab], &none, &[], None, &T);
        assert!(impaired(&v).is_empty(), "{v:?}");
        assert!(v[0].own_signal, "zone-a's own share is over the bar");

        // A single targeted group: every group with values in the zone is enough.
        let v = detect(&[&bad_a], &none, &[], None, &T);
        assert_eq!(impaired(&v), ["zone-a"]);
    }

    // SEM-AS3: a zone alarm in ALARM, or half a zone's Nodes not Ready, impairs it; Nodes
    // failing in every zone do not.
    #[test]
    fn zone_alarms_and_nodes_impair_a_zone() {
        let good = group(&[("zone-a", true), ("zone-b", true)]);
        let alarms = vec![
            ("zone-b".to_string(), "net-b".to_string(), Some(true)),
            ("zone-a".to_string(), "net-a".to_string(), None),
        ];
        let v = detect(&[&good], &BTreeMap::new(), &alarms, None, &T);
        assert_eq!(impaired(&v), ["zone-b"]);
        assert!(
            v[0].detection
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("names no HealthCheck"))
        );

        let nodes: BTreeMap<String, NodeCount> = [
            (
                "zone-a".to_string(),
                NodeCount {
                    nodes: 4,
                    not_ready: 2,
                },
            ),
            (
                "zone-b".to_string(),
                NodeCount {
                    nodes: 4,
                    not_ready: 0,
                },
            ),
        ]
        .into();
        let v = detect(&[&good], &nodes, &[], None, &T);
        assert_eq!(impaired(&v), ["zone-a"]);
        assert_eq!(v[0].detection.nodes_not_ready, Some(2));
        let mut both = nodes.clone();
        both.insert(
            "zone-b".into(),
            NodeCount {
                nodes: 4,
                not_ready: 1,
            },
        );
        let v = detect(&[&good], &both, &[], None, &T);
        assert!(impaired(&v).is_empty(), "{v:?}");
    }

    // SEM-AS8: capacity as A3 counts it; the default 50% admits a shift that leaves half.
    #[test]
    fn the_capacity_check_counts_healthy_capacity_outside_the_zone() {
        let key = ObjectKey::new("shop", "api");
        let two = group(&[("zone-a", true), ("zone-b", true)]);
        assert_eq!(capacity_check(&[(&key, &two)], "zone-a", 50), Ok(()));
        assert!(capacity_check(&[(&key, &two)], "zone-a", 51).is_err());
        let half_sick = group(&[("zone-a", true), ("zone-b", true), ("zone-b", false)]);
        let err = capacity_check(&[(&key, &half_sick)], "zone-a", 50).expect_err("1 of 3");
        assert!(err.contains("1 of 3 (33%)"), "{err}");
        // A group with nothing in the zone is not affected.
        assert_eq!(capacity_check(&[(&key, &half_sick)], "zone-c", 50), Ok(()));
        // 0% still needs something healthy outside.
        let alone = group(&[("zone-a", true), ("zone-b", false)]);
        assert!(capacity_check(&[(&key, &alone)], "zone-a", 0).is_err());
    }
}
