//! A generated search over the contract's invariants: groups of every policy, over every record
//! source (static values with and without a zone, Service endpoints in every readiness state,
//! ClusterIP addresses, aliases with and without evaluate-target-health, CNAME targets, peer
//! records never heard, heard, heard of another type only, lost and split between checkers),
//! under every health state, a zonal shift of each type (customer, autoshift, practice run) and
//! zone affinity asked from every zone.
//!
//! Each case is compiled by the real compiler and resolved as a resolver in each zone does
//! ([`resolve_with`]); a small model of record health (R1-R5, X2-X5, Z2, Z6), written from
//! docs/semantics.md and not from the compiler, says what the answers may be:
//!
//! ```text
//!   Case ──▶ Compiler ──▶ table ──▶ resolve_with(zone) × draws ──▶ answers
//!     └────▶ Model (health per record, values per record) ──────────▶ invariants hold?
//! ```
//!
//! The budget: 256 cases by default, seeded (the same cases every run); `PROPTEST_CASES` and
//! `PROPTEST_RNG_SEED` run a longer or another search by hand (docs/reliability.md).

use std::collections::BTreeSet;

use super::*;
use crate::autoshift::AutoshiftInput;
use crate::peer::check_spec;
use healthroute_api::{
    NotAppliedReason, PeerTarget, PracticeRunRequest, RecordTypeSpec, RequestAction, ZoneAffinity,
};
use proptest::test_runner::{Config as ProptestConfig, RngSeed};

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
/// The groups an alias may point at.
const TARGETS: usize = 2;

/// The search's configuration: seeded and bounded unless the environment asks otherwise.
fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 256;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(41);
    }
    // A failure prints its shrunk case; the named tests below keep the ones found.
    config.failure_persistence = None;
    config
}

/// A record's health check, if it has one.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Check {
    None,
    Healthy,
    Unhealthy,
    /// `healthCheckRef` names a check that does not exist.
    Missing,
}

/// One EndpointSlice endpoint's conditions.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Endpoint {
    Ready,
    /// Terminating but still serving (H11: used when nothing is ready).
    ServingTerminating,
    /// Terminating and no longer serving.
    Gone,
    NotReady,
}

/// What a peer record's checkers have heard from the peer (X2-X5).
#[derive(Clone, Debug, PartialEq)]
enum Peer {
    /// The check exists, no checker has reported yet.
    NeverHeard,
    /// Every checker failed to reach the peer since it started: unhealthy, no values.
    Silent,
    /// Heard `n` values of the group's type.
    Heard(u8),
    /// Heard values, of another type only.
    OtherType,
    /// Heard `n` values once; the path has failed since (the values are kept for the last
    /// resort, X3).
    Lost(u8),
    /// Two checkers: one heard `n` values, the other cannot reach the peer (H7 quorum).
    Split(u8),
}

#[derive(Clone, Debug, PartialEq)]
enum Source {
    Static {
        values: u8,
        zone: Option<usize>,
    },
    Service {
        cluster_ip: bool,
        /// `addresses: ClusterIP` (else the endpoints).
        addresses_cluster_ip: bool,
        endpoints: Vec<(Endpoint, Option<usize>)>,
    },
    Alias {
        target: usize,
        evaluate: bool,
    },
    Peer(Peer),
}

#[derive(Clone, Debug)]
struct Record {
    source: Source,
    check: Check,
    weight: u32,
}

#[derive(Clone, Debug)]
struct Group {
    policy: RoutingPolicy,
    cname: bool,
    affinity: bool,
    records: Vec<Record>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Shift {
    Customer(usize),
    Autoshift(usize),
    PracticeRun(usize),
}

#[derive(Clone, Debug)]
struct Case {
    group: Group,
    /// Alias targets: A groups without aliases of their own.
    targets: Vec<Group>,
    shift: Option<Shift>,
}

fn zone_strategy() -> impl Strategy<Value = Option<usize>> {
    proptest::option::of(0..ZONES.len())
}

fn check_strategy() -> impl Strategy<Value = Check> {
    prop_oneof![
        3 => Just(Check::None),
        3 => Just(Check::Healthy),
        3 => Just(Check::Unhealthy),
        1 => Just(Check::Missing),
    ]
}

fn peer_strategy() -> impl Strategy<Value = Peer> {
    prop_oneof![
        Just(Peer::NeverHeard),
        Just(Peer::Silent),
        (1u8..3).prop_map(Peer::Heard),
        Just(Peer::OtherType),
        (1u8..3).prop_map(Peer::Lost),
        (1u8..3).prop_map(Peer::Split),
    ]
}

fn endpoint_strategy() -> impl Strategy<Value = (Endpoint, Option<usize>)> {
    (
        prop_oneof![
            Just(Endpoint::Ready),
            Just(Endpoint::ServingTerminating),
            Just(Endpoint::Gone),
            Just(Endpoint::NotReady),
        ],
        zone_strategy(),
    )
}

/// A record source; `cname` groups take static values and peers only, `aliases` says whether
/// an alias may be drawn.
fn source_strategy(cname: bool, aliases: bool) -> BoxedStrategy<Source> {
    let static_values =
        (1u8..3, zone_strategy()).prop_map(|(values, zone)| Source::Static { values, zone });
    let peer = peer_strategy().prop_map(Source::Peer);
    if cname {
        return prop_oneof![static_values, peer].boxed();
    }
    let service = (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(endpoint_strategy(), 0..4),
    )
        .prop_map(
            |(cluster_ip, addresses_cluster_ip, endpoints)| Source::Service {
                cluster_ip,
                addresses_cluster_ip,
                endpoints,
            },
        );
    if aliases {
        let alias = (0..TARGETS, any::<bool>())
            .prop_map(|(target, evaluate)| Source::Alias { target, evaluate });
        prop_oneof![static_values, service, alias, peer].boxed()
    } else {
        prop_oneof![static_values, service, peer].boxed()
    }
}

fn group_strategy(aliases: bool) -> impl Strategy<Value = Group> {
    (
        prop_oneof![
            Just(RoutingPolicy::Simple),
            Just(RoutingPolicy::Weighted),
            Just(RoutingPolicy::Failover),
            Just(RoutingPolicy::MultiValue),
        ],
        proptest::bool::weighted(0.15),
        any::<bool>(),
    )
        .prop_flat_map(move |(policy, cname, affinity)| {
            let len = match policy {
                RoutingPolicy::Simple => 1..2,
                _ => 1..5,
            };
            // MultiValue records cannot be aliases (S8).
            let aliases = aliases && policy != RoutingPolicy::MultiValue;
            let record = (source_strategy(cname, aliases), check_strategy(), 0u32..4).prop_map(
                |(source, check, weight)| Record {
                    source,
                    check,
                    weight,
                },
            );
            proptest::collection::vec(record, len).prop_map(move |records| Group {
                policy,
                cname,
                affinity,
                records,
            })
        })
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        group_strategy(true),
        proptest::collection::vec(
            group_strategy(false).prop_filter("targets are A groups", |g| !g.cname),
            TARGETS,
        ),
        proptest::option::of(prop_oneof![
            (0..ZONES.len()).prop_map(Shift::Customer),
            (0..ZONES.len()).prop_map(Shift::Autoshift),
            (0..ZONES.len()).prop_map(Shift::PracticeRun),
        ]),
    )
        .prop_map(|(group, targets, shift)| Case {
            group,
            targets,
            shift,
        })
}

/// The names in a case: the group is `g`, alias targets `t0`, `t1`; record `i` of group `name`
/// is `r{i}`, its check `{name}-hc{i}`, its Service `{name}-svc{i}`, its peer the group
/// `remote/{name}-{i}` of cluster `east`.
struct Names;

impl Names {
    fn check(group: &str, i: usize) -> String {
        format!("{group}-hc{i}")
    }
    fn service(group: &str, i: usize) -> String {
        format!("{group}-svc{i}")
    }
    fn peer(group: &str, i: usize) -> PeerTarget {
        PeerTarget {
            cluster: "east".into(),
            record_group: format!("remote/{group}-{i}"),
        }
    }
}

/// Every value in a case is unique, so an answer says which record it came from: the `g`th
/// group's record `i`, value `j` of kind `kind` (0 static, 1 endpoint, 2 cluster IP, 3 peer).
fn value(cname: bool, g: usize, i: usize, kind: u8, j: usize) -> String {
    if cname {
        format!("v{j}.k{kind}.r{i}.g{g}.example.net.")
    } else {
        format!("10.{g}.{}.{}", i * 4 + usize::from(kind), j + 1)
    }
}

/// The peer values as a checker reports them (`TYPE value`, X6).
fn peer_values(cname: bool, g: usize, i: usize, n: u8) -> Vec<String> {
    let rtype = if cname { "CNAME" } else { "A" };
    (0..usize::from(n))
        .map(|j| format!("{rtype} {}", value(cname, g, i, 3, j)))
        .collect()
}

fn group_spec(name: &str, g: usize, group: &Group) -> RecordGroupSpec {
    let records = group
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let id = format!("r{i}");
            let mut spec = match &r.source {
                Source::Static { values, zone } => {
                    let vs: Vec<String> = (0..usize::from(*values))
                        .map(|j| value(group.cname, g, i, 0, j))
                        .collect();
                    let refs: Vec<&str> = vs.iter().map(String::as_str).collect();
                    let rec = mk_record(&id, &refs);
                    match zone {
                        Some(z) => in_zone(rec, ZONES[*z]),
                        None => rec,
                    }
                }
                Source::Service {
                    addresses_cluster_ip,
                    ..
                } => {
                    let mut rec = mk_service_record(&id, &Names::service(name, i));
                    if *addresses_cluster_ip {
                        rec.service.as_mut().expect("service").addresses =
                            Some(ServiceAddresses::ClusterIp);
                    }
                    rec
                }
                Source::Alias { target, evaluate } => {
                    mk_alias_record(&id, &format!("t{target}"), *evaluate)
                }
                Source::Peer(_) => {
                    let target = Names::peer(name, i);
                    mk_peer_record(&id, &target.cluster, &target.record_group)
                }
            };
            if r.check != Check::None {
                spec = checked(spec, &Names::check(name, i));
            }
            match group.policy {
                RoutingPolicy::Weighted => spec = weighted(spec, r.weight),
                RoutingPolicy::Failover => {
                    let (role, priority) = if i == 0 {
                        (FailoverRole::Primary, None)
                    } else {
                        (FailoverRole::Secondary, Some(i as u32))
                    };
                    spec = failover(spec, role, priority);
                }
                _ => {}
            }
            spec
        })
        .collect();
    let mut spec = mk_group(name, group.policy, records);
    if group.cname {
        spec.record_type = RecordTypeSpec::Cname;
    }
    if group.affinity {
        spec.zone_affinity = Some(ZoneAffinity::PreferSameZone);
    }
    spec
}

/// Feeds one group and everything its records read into the compiler.
fn feed_group(c: &mut Compiler, name: &str, g: usize, group: &Group) {
    c.upsert_group(key(name), group_input(group_spec(name, g, group)));
    for (i, r) in group.records.iter().enumerate() {
        match r.check {
            Check::Healthy => set_check(c, &Names::check(name, i), true),
            Check::Unhealthy => set_check(c, &Names::check(name, i), false),
            Check::None | Check::Missing => {}
        }
        match &r.source {
            Source::Service {
                cluster_ip,
                endpoints,
                ..
            } => {
                let endpoints = endpoints
                    .iter()
                    .enumerate()
                    .map(|(j, (state, zone))| EndpointInput {
                        address: value(false, g, i, 1, j).parse().expect("ip"),
                        ready: *state == Endpoint::Ready,
                        serving: matches!(state, Endpoint::Ready | Endpoint::ServingTerminating),
                        terminating: matches!(state, Endpoint::ServingTerminating | Endpoint::Gone),
                        zone: zone.map(|z| ZONES[z].to_owned()),
                    })
                    .collect();
                let cluster_ips = if *cluster_ip {
                    vec![value(false, g, i, 2, 0).parse().expect("ip")]
                } else {
                    Vec::new()
                };
                c.upsert_service(
                    key(&Names::service(name, i)),
                    ServiceEndpoints {
                        cluster_ips,
                        endpoints,
                    },
                );
            }
            Source::Peer(peer) => {
                let target = Names::peer(name, i);
                let heard = |checker: &str, healthy: bool, values: Vec<String>| CheckerView {
                    values: values
                        .iter()
                        .map(|v| v.parse().expect("a `TYPE value` text"))
                        .collect(),
                    ..mk_view(checker, healthy)
                };
                let views = match peer {
                    Peer::NeverHeard => Vec::new(),
                    Peer::Silent => vec![heard("checker-a", false, Vec::new())],
                    Peer::Heard(n) => {
                        vec![heard("checker-a", true, peer_values(group.cname, g, i, *n))]
                    }
                    Peer::OtherType => vec![heard(
                        "checker-a",
                        true,
                        vec![if group.cname {
                            "A 192.0.2.99".into()
                        } else {
                            "AAAA 2001:db8::99".into()
                        }],
                    )],
                    Peer::Lost(n) => vec![heard(
                        "checker-a",
                        false,
                        peer_values(group.cname, g, i, *n),
                    )],
                    Peer::Split(n) => vec![
                        heard("checker-a", true, peer_values(group.cname, g, i, *n)),
                        heard("checker-b", false, Vec::new()),
                    ],
                };
                let mut input = CheckInput::new(check_spec(&target));
                input.views = views;
                c.upsert_check(key(&target.check_name()), input);
            }
            Source::Static { .. } | Source::Alias { .. } => {}
        }
    }
}

fn autoshift_over_g(enabled: bool, request: Option<usize>) -> AutoshiftInput {
    AutoshiftInput {
        spec: mk_autoshift("g", enabled),
        created: Some(t0()),
        request: Ok(request.map(|z| PracticeRunRequest {
            value: "start:search".into(),
            action: RequestAction::Start,
            zone: Some(ZONES[z].into()),
        })),
        status: None,
    }
}

fn compile_case(case: &Case) -> Compiler {
    let mut c = mk_compiler();
    for (t, target) in case.targets.iter().enumerate() {
        feed_group(&mut c, &format!("t{t}"), t + 1, target);
    }
    feed_group(&mut c, "g", 0, &case.group);
    for checker in ["checker-a", "checker-b"] {
        c.set_heartbeat(checker, t0());
    }
    match case.shift {
        Some(Shift::Customer(z)) => c.upsert_shift(
            key("s"),
            ShiftInput {
                spec: mk_shift(ZONES[z], "g", "1h"),
                created: Some(t0()),
                status: None,
            },
        ),
        Some(Shift::Autoshift(z)) => {
            c.upsert_autoshift(key("auto"), autoshift_over_g(true, None));
            c.assume_impaired(Some(ZONES[z].into()));
        }
        Some(Shift::PracticeRun(z)) => {
            set_check(&mut c, "outcome", true);
            c.upsert_autoshift(key("practice"), autoshift_over_g(false, Some(z)));
        }
        None => {}
    }
    c.compile(at(1));
    c
}

/// What the model says of one record: healthy or not, the values it answers while healthy,
/// and under the last resort.
#[derive(Debug)]
struct Judged {
    healthy: bool,
    healthy_values: BTreeSet<String>,
    all_values: BTreeSet<String>,
}

/// The model of one group: docs/semantics.md's record health, apart from the compiler.
struct Model<'a> {
    case: &'a Case,
}

impl Model<'_> {
    fn group(&self, g: usize) -> &Group {
        if g == 0 {
            &self.case.group
        } else {
            &self.case.targets[g - 1]
        }
    }

    /// R1-R5, H11, X2-X5, Z2 for record `i` of group `g`, with `shifted` the zone shifted away
    /// from (only the outer group is shifted).
    fn record(&self, g: usize, i: usize, shifted: Option<usize>) -> Judged {
        let group = self.group(g);
        let r = &group.records[i];
        let check_ok = matches!(r.check, Check::None | Check::Healthy);
        let set = |kind: u8, n: usize| -> BTreeSet<String> {
            (0..n).map(|j| value(group.cname, g, i, kind, j)).collect()
        };
        let (ok, healthy_values, all_values) = match &r.source {
            Source::Static { values, zone } => {
                let all = set(0, usize::from(*values));
                let ok = check_ok && (shifted.is_none() || *zone != shifted);
                (ok, if ok { all.clone() } else { BTreeSet::new() }, all)
            }
            Source::Service {
                cluster_ip,
                addresses_cluster_ip,
                endpoints,
            } => {
                let outside = |z: &Option<usize>| shifted.is_none() || *z != shifted;
                let pick = |want: &dyn Fn(Endpoint) -> bool| -> BTreeSet<String> {
                    endpoints
                        .iter()
                        .enumerate()
                        .filter(|(_, (s, z))| want(*s) && outside(z))
                        .map(|(j, _)| value(false, g, i, 1, j))
                        .collect()
                };
                let mut usable = pick(&|s| s == Endpoint::Ready);
                if usable.is_empty() {
                    usable = pick(&|s| s == Endpoint::ServingTerminating);
                }
                if *addresses_cluster_ip {
                    let ips = if *cluster_ip {
                        set(2, 1)
                    } else {
                        BTreeSet::new()
                    };
                    let ok = check_ok && !usable.is_empty() && !ips.is_empty();
                    (ok, if ok { ips.clone() } else { BTreeSet::new() }, ips)
                } else {
                    let all = set(1, endpoints.len());
                    let ok = check_ok && !usable.is_empty();
                    (ok, if ok { usable } else { BTreeSet::new() }, all)
                }
            }
            Source::Alias { target, evaluate } => {
                let t = target + 1;
                let target_healthy = self.any_healthy(t, None);
                // R4: a target with nothing to answer is never an answer.
                let ok = check_ok && self.has_values(t) && (!evaluate || target_healthy);
                let values = self.may_answer(t);
                (ok, values.clone(), values)
            }
            Source::Peer(peer) => {
                let (heard_ok, n) = match peer {
                    Peer::NeverHeard | Peer::Silent | Peer::OtherType => (false, 0),
                    Peer::Heard(n) | Peer::Split(n) => (true, *n),
                    Peer::Lost(n) => (false, *n),
                };
                let all = set(3, usize::from(n));
                let ok = check_ok && heard_ok;
                (ok, if ok { all.clone() } else { BTreeSet::new() }, all)
            }
        };
        Judged {
            healthy: ok,
            healthy_values,
            all_values,
        }
    }

    fn records(&self, g: usize, shifted: Option<usize>) -> Vec<Judged> {
        (0..self.group(g).records.len())
            .map(|i| self.record(g, i, shifted))
            .collect()
    }

    fn any_healthy(&self, g: usize, shifted: Option<usize>) -> bool {
        self.records(g, shifted).iter().any(|j| j.healthy)
    }

    /// Every value group `g` may answer, whatever the health.
    fn may_answer(&self, g: usize) -> BTreeSet<String> {
        self.records(g, None)
            .into_iter()
            .flat_map(|j| j.all_values)
            .collect()
    }

    /// Whether group `g` has anything to answer at all: a record with a value under the last
    /// resort. A name whose records hold no value anywhere has nothing to answer with; every
    /// other name answers (S6).
    fn has_values(&self, g: usize) -> bool {
        !self.may_answer(g).is_empty()
    }
}

/// The zone the case's shift moves away from, when the compiler applied it to `g`; checks Z6
/// on the way: a shift is applied exactly when it leaves a healthy record.
fn applied_shift(case: &Case, c: &Compiler, model: &Model<'_>) -> Result<Option<usize>, String> {
    let Some(shift) = case.shift else {
        return Ok(None);
    };
    let outcome = c.outcome(&key("g")).ok_or("g has no outcome")?;
    let Some(first) = outcome.shifts.first() else {
        if matches!(shift, Shift::Customer(_)) {
            return Err("SEM-Z2: a customer shift neither applied nor failed open".into());
        }
        return Ok(None); // the engine holds no shift (nothing impaired, a run not started)
    };
    // The zone the shift moves away from: the customer's, or the one the engine chose (an
    // autoshift may find another zone impaired than the one assumed, AS3).
    let zone = match shift {
        Shift::Customer(z) => ZONES[z].to_owned(),
        Shift::Autoshift(_) | Shift::PracticeRun(_) => {
            let config = if matches!(shift, Shift::Autoshift(_)) {
                "auto"
            } else {
                "practice"
            };
            let status = c
                .autoshift_status(&key(config))
                .ok_or("no autoshift status")?;
            status
                .shifts
                .iter()
                .find(|s| *s.name == *first.shift.name)
                .map(|s| s.away_from.clone())
                .ok_or_else(|| format!("{} is not in the engine's status", first.shift))?
        }
    };
    let zone = ZONES
        .iter()
        .position(|z| *z == zone)
        .ok_or_else(|| format!("a shift away from unknown zone {zone}"))?;
    let healthy_left = model.any_healthy(0, Some(zone));
    match (first.applied, first.reason) {
        (AppliedStatus::Applied, _) if !healthy_left => Err(format!(
            "SEM-Z6: a shift away from {} applied although it leaves no healthy record",
            ZONES[zone]
        )),
        (AppliedStatus::Applied, _) => Ok(Some(zone)),
        (_, Some(NotAppliedReason::NoHealthyCapacityElsewhere)) if healthy_left => Err(format!(
            "SEM-Z6: a shift away from {} failed open although a healthy record is left",
            ZONES[zone]
        )),
        _ => Ok(None),
    }
}

/// Every invariant over one case; `Err` says which rule broke and how.
fn check_case(case: &Case) -> Result<(), String> {
    let c = compile_case(case);
    let model = Model { case };
    for t in 0..TARGETS {
        if c.outcome(&key(&format!("t{t}")))
            .is_none_or(|o| o.compiled.is_err())
        {
            return Err(format!("alias target t{t} is not compiled"));
        }
    }
    let outcome = c.outcome(&key("g")).ok_or("g has no outcome")?;
    if let Err(rejection) = &outcome.compiled {
        return Err(format!("g is rejected: {rejection:?}"));
    }
    let shifted = applied_shift(case, &c, &model)?;
    let judged = model.records(0, shifted);
    let any_healthy = judged.iter().any(|j| j.healthy);

    let table = c.table();
    let g = table.groups.get("shop/g").ok_or("g is not in the table")?;
    // S6: the last resort is exactly "no record is healthy".
    if g.last_resort == any_healthy {
        return Err(format!(
            "SEM-S6: last resort is {}, but the model says a record is {}healthy: {judged:?}",
            g.last_resort,
            if any_healthy { "" } else { "not " }
        ));
    }
    let may_answer = model.may_answer(0);
    let mut rng = fastrand::Rng::with_seed(7);
    let lookup = |k: &str| table.groups.get(k).map(|g| &**g);
    for from in [None, Some(0), Some(1), Some(2)] {
        let zone = from.map(|z| ZONES[z]);
        let (_, in_zone_view) = g.selection_for(zone);
        if g.last_resort && in_zone_view {
            return Err(format!(
                "SEM-A4: under the last resort, {zone:?} has a zone view"
            ));
        }
        for _ in 0..24 {
            let resolved =
                resolve_with(g, zone, &mut rng, lookup).ok_or("the table breaks an invariant")?;
            let mut answered = BTreeSet::new();
            resolved.values.for_each(|v| {
                answered.insert(v.to_string());
            });
            let from_record = resolved
                .set_identifier
                .strip_prefix('r')
                .and_then(|i| i.parse::<usize>().ok())
                .ok_or("an answer names no record")?;
            let record = &judged[from_record];
            // S6: a name with values never answers empty.
            if answered.is_empty() && model.has_values(0) {
                return Err(format!(
                    "SEM-S6: empty answer from {zone:?} (record r{from_record}, last resort {}), though the group has values",
                    g.last_resort
                ));
            }
            // Only configured values, and only what the answering record holds.
            if !answered.is_subset(&may_answer) {
                return Err(format!("answered {answered:?}, not configured"));
            }
            let holds = |j: &Judged| {
                if g.last_resort {
                    j.all_values.clone()
                } else if j.healthy {
                    j.healthy_values.clone()
                } else {
                    BTreeSet::new()
                }
            };
            // A MultiValue answer mixes records' values (S5); any other is one record's.
            let allowed: BTreeSet<String> = if case.group.policy == RoutingPolicy::MultiValue {
                judged.iter().flat_map(holds).collect()
            } else {
                holds(record)
            };
            if !answered.is_subset(&allowed) {
                return Err(format!(
                    "SEM-S1: r{from_record} answered {answered:?}, but may answer only {allowed:?} (last resort {})",
                    g.last_resort
                ));
            }
            // S1: a healthy group answers from healthy records only.
            if !g.last_resort && !record.healthy {
                return Err(format!("SEM-S1: unhealthy r{from_record} answered"));
            }
            policy_holds(case, &judged, from_record, g.last_resort, &answered)?;
        }
    }
    Ok(())
}

/// The policy's own rule (S3, S4, S5) for the record that answered.
fn policy_holds(
    case: &Case,
    judged: &[Judged],
    from: usize,
    last_resort: bool,
    answered: &BTreeSet<String>,
) -> Result<(), String> {
    let group = &case.group;
    let candidate = |i: usize| {
        let j = &judged[i];
        if last_resort {
            !j.all_values.is_empty()
        } else {
            j.healthy && !j.healthy_values.is_empty()
        }
    };
    match group.policy {
        RoutingPolicy::Failover => {
            // S4: the first tier with a healthy record; under the last resort the first tier
            // that has something to answer (X3: a peer record never heard takes no part).
            let want = (0..judged.len()).find(|&i| {
                if last_resort {
                    candidate(i)
                } else {
                    judged[i].healthy
                }
            });
            if let Some(want) = want
                && want != from
            {
                return Err(format!(
                    "SEM-S4: r{from} answered, but tier r{want} should (last resort {last_resort})"
                ));
            }
        }
        RoutingPolicy::Weighted => {
            // S3: weight > 0 first; weight 0 only when no weighted record can answer.
            let positive = (0..judged.len()).any(|i| candidate(i) && group.records[i].weight > 0);
            if positive && group.records[from].weight == 0 && !answered.is_empty() {
                return Err(format!(
                    "SEM-S3: weight-0 r{from} answered while a weighted record could"
                ));
            }
        }
        RoutingPolicy::MultiValue => {
            if answered.len() > 8 {
                return Err(format!("SEM-S5: {} values", answered.len()));
            }
        }
        RoutingPolicy::Simple => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    // SEM-S1 SEM-S3 SEM-S4 SEM-S5 SEM-S6 SEM-X2 SEM-X3 SEM-R3 SEM-R4 SEM-Z2 SEM-Z6 SEM-A4
    // SEM-AS5: every generated combination keeps the contract's promises.
    #[test]
    fn every_combination_keeps_its_promises(case in case_strategy()) {
        if let Err(broken) = check_case(&case) {
            prop_assert!(false, "{broken}\n{case:#?}");
        }
    }
}

// SEM-S4 SEM-X3 SEM-S6: the generated search's first find (#41). A Failover group whose primary
// is a peer record never heard from, and whose secondary is unhealthy, answers the secondary
// under the last resort, not the primary's nothing.
#[test]
fn a_failover_primary_never_heard_from_leaves_the_last_resort_to_the_secondary() {
    let case = Case {
        group: Group {
            policy: RoutingPolicy::Failover,
            cname: false,
            affinity: false,
            records: vec![
                Record {
                    source: Source::Peer(Peer::Silent),
                    check: Check::None,
                    weight: 0,
                },
                Record {
                    source: Source::Static {
                        values: 1,
                        zone: None,
                    },
                    check: Check::Unhealthy,
                    weight: 0,
                },
            ],
        },
        targets: Vec::new(),
        shift: None,
    };
    let c = compile_case(&case);
    assert!(lr(&c, "g"));
    assert_eq!(answer(&c, "g"), "10.0.4.1");
}

// SEM-R4 SEM-S6: the search's second find. A Weighted group whose alias (without
// evaluate-target-health) points at a group with nothing to answer (its only record a peer never
// heard from) never answers that nothing: the alias is unhealthy and the static record answers.
#[test]
fn an_alias_to_a_target_with_nothing_to_answer_is_never_the_answer() {
    let nothing = Group {
        policy: RoutingPolicy::Simple,
        cname: false,
        affinity: false,
        records: vec![Record {
            source: Source::Peer(Peer::NeverHeard),
            check: Check::None,
            weight: 0,
        }],
    };
    let case = Case {
        group: Group {
            policy: RoutingPolicy::Weighted,
            cname: false,
            affinity: false,
            records: vec![
                Record {
                    source: Source::Static {
                        values: 1,
                        zone: None,
                    },
                    check: Check::None,
                    weight: 0,
                },
                Record {
                    source: Source::Alias {
                        target: 0,
                        evaluate: false,
                    },
                    check: Check::None,
                    weight: 0,
                },
            ],
        },
        targets: vec![nothing.clone(), nothing],
        shift: None,
    };
    let c = compile_case(&case);
    assert!(!lr(&c, "g"));
    assert_eq!(
        shares(&c, "g", 200).into_keys().collect::<Vec<_>>(),
        ["10.0.0.1"]
    );
    let records = &c.outcome(&key("g")).expect("compiled").records;
    assert_eq!(
        records[1].reason.as_deref(),
        Some("alias target t0 answers nothing")
    );
    assert_eq!(check_case(&case), Ok(()));
}

/// What a search's cases reached, so that a generator that drifts into trivial cases fails.
#[derive(Debug, Default)]
struct Reached {
    cases: usize,
    last_resort: usize,
    customer_applied: usize,
    autoshift_applied: usize,
    practice_run_applied: usize,
    failed_open: usize,
    zone_views: usize,
    peer_records: usize,
    alias_records: usize,
    service_records: usize,
    cname_groups: usize,
}

// The search's reach: over the CI budget's cases, every kind of state the invariants are about
// occurs (docs/reliability.md prints these counts).
#[test]
fn the_search_reaches_every_kind_of_case() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::new(config());
    let strategy = case_strategy();
    let mut reached = Reached::default();
    for _ in 0..runner.config().cases {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        let c = compile_case(&case);
        let Some(Ok(g)) = c.outcome(&key("g")).map(|o| o.compiled.clone()) else {
            continue;
        };
        reached.cases += 1;
        reached.last_resort += usize::from(g.last_resort);
        reached.zone_views += usize::from(
            g.zone_affinity
                .as_ref()
                .is_some_and(|z| !z.zones.is_empty()),
        );
        reached.cname_groups += usize::from(case.group.cname);
        for r in &case.group.records {
            match r.source {
                Source::Peer(_) => reached.peer_records += 1,
                Source::Alias { .. } => reached.alias_records += 1,
                Source::Service { .. } => reached.service_records += 1,
                Source::Static { .. } => {}
            }
        }
        let outcome = c.outcome(&key("g")).expect("outcome");
        for s in &outcome.shifts {
            if s.reason == Some(NotAppliedReason::NoHealthyCapacityElsewhere) {
                reached.failed_open += 1;
            }
            if s.applied == AppliedStatus::Applied {
                match case.shift {
                    Some(Shift::Customer(_)) => reached.customer_applied += 1,
                    Some(Shift::Autoshift(_)) => reached.autoshift_applied += 1,
                    Some(Shift::PracticeRun(_)) => reached.practice_run_applied += 1,
                    None => {}
                }
            }
        }
    }
    println!("{reached:#?}");
    let Reached {
        cases,
        last_resort,
        customer_applied,
        autoshift_applied,
        practice_run_applied,
        failed_open,
        zone_views,
        peer_records,
        alias_records,
        service_records,
        cname_groups,
    } = reached;
    for (what, n) in [
        ("compiled cases", cases),
        ("last resort", last_resort),
        ("customer shifts applied", customer_applied),
        ("autoshifts applied", autoshift_applied),
        ("practice runs applied", practice_run_applied),
        ("shifts failed open", failed_open),
        ("zone views", zone_views),
        ("peer records", peer_records),
        ("alias records", alias_records),
        ("service records", service_records),
        ("CNAME groups", cname_groups),
    ] {
        assert!(n > 0, "the search reached no {what}");
    }
}
