use healthroute_api::{RecordGroup, ZonalAutoshiftStatus};
use healthroute_compiler::ServedZones;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::Event;
use serde_json::json;
use tokio::time::Instant;

use super::*;
use crate::index::Input;
use crate::peers::PeerChecks;
use crate::writes::{Write, WriteOutcome};

/// The next status the writer would send (marked in flight).
fn ready(queue: &WriteQueue) -> Option<StatusUpdate> {
    queue.take_ready(Instant::now()).map(status_of)
}

fn status_of(write: Write) -> StatusUpdate {
    match write {
        Write::Status(update) => update,
        other => panic!("not a status: {other:?}"),
    }
}

/// `update` was written, as the writer settles it.
fn mark_written(queue: &WriteQueue, update: &StatusUpdate) {
    queue.finish(
        Write::Status(update.clone()),
        &WriteOutcome::Written,
        Instant::now(),
    );
}

/// A leader's Peer checks before any compile: no group names a peer.
fn no_peer_checks(queue: &WriteQueue) -> PeerChecks {
    PeerChecks::new(queue.clone(), Default::default())
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("valid")
}

fn api(status: Option<RecordGroupStatus>) -> RecordGroup {
    let mut g: RecordGroup = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": "api", "namespace": "shop", "generation": 1},
        "spec": {"name": "api.example.com.", "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "x", "values": ["192.0.2.1"]}]}
    }))
    .expect("valid");
    g.status = status;
    g
}

/// An index that has listed `api` and nothing else.
fn listed() -> Index {
    let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
    index.apply(Input::Group(Event::Init));
    index.apply(Input::Group(Event::InitApply(api(None))));
    index.apply(Input::Group(Event::InitDone));
    for input in [
        Input::Check(Event::Init),
        Input::Check(Event::InitDone),
        Input::Shift(Event::Init),
        Input::Shift(Event::InitDone),
        Input::Slice(Event::Init),
        Input::Slice(Event::InitDone),
        Input::Service(Event::<Service>::Init),
        Input::Service(Event::<Service>::InitDone),
        Input::Lease(Event::Init),
        Input::Lease(Event::InitDone),
        Input::Autoshift(Event::Init),
        Input::Autoshift(Event::InitDone),
        Input::Node(Event::Init),
        Input::Node(Event::InitDone),
    ] {
        index.apply(input);
    }
    index
}

fn fleet(status: Option<ZonalAutoshiftStatus>) -> healthroute_api::ZonalAutoshift {
    let mut a: healthroute_api::ZonalAutoshift = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
        "metadata": {"name": "fleet", "namespace": "shop", "generation": 1,
                     "creationTimestamp": "2027-01-15T08:00:00Z"},
        "spec": {"target": {"recordGroup": "api"}, "autoshift": "Enabled",
                 "practiceRun": {"outcomeAlarms": [{"name": "outcome"}]}}
    }))
    .expect("valid");
    a.status = status;
    a
}

fn compile(ledger: &mut Ledger, index: &mut Index, now: Timestamp) {
    let report = index.compiler.compile(now);
    ledger.compiled(index, report.changed_groups, report.changed_checks, now);
    settle(ledger, index, now);
}

/// Every step of the settle the control loop would take between inputs.
fn settle(ledger: &mut Ledger, index: &Index, now: Timestamp) {
    while ledger.settling() {
        ledger.settle_step(index, now, usize::MAX);
    }
}

// SEM-AS11: a ZonalAutoshift's status is written at the first compile of a term (it is the
// engine's memory), an engine's report goes out as Events with the next status even when
// the status itself says nothing new, and the re-check writes back what another writer
// changed.
#[test]
fn a_zonal_autoshift_status_carries_the_engines_events_and_is_repaired() {
    use healthroute_api::{NotStartedReason, ZonalAutoshift};
    use healthroute_compiler::AutoshiftEvent;
    let mut index = listed();
    index.apply(Input::Autoshift(Event::Apply(fleet(None))));
    let (mut ledger, queue, _) = leading(&mut index);
    let written = ready(&queue).expect("fleet's status");
    mark_written(&queue, &written);
    let Status::ZonalAutoshift(shown) = (*written.status).clone() else {
        panic!("a ZonalAutoshift's status: {written:?}");
    };
    let shown = *shown;
    assert_eq!(
        shown.autoshift,
        Some(healthroute_api::AutoshiftState::Inactive)
    );
    assert!(shown.conditions.iter().any(|c| c.type_ == "Autoshift"));
    index.apply(Input::Autoshift(Event::Apply(fleet(Some(shown.clone())))));
    compile(&mut ledger, &mut index, t(10));
    assert_eq!(queue.backlog(), 0, "nothing new");

    // An engine's report with nothing new in the status still goes out, as an Event.
    ledger.take_autoshift_events(&[AutoshiftEvent::PracticeRunNotStarted {
        config: ObjectKey::new("shop", "fleet"),
        reason: NotStartedReason::BlockedDate,
        message: "2027-01-15 is a blocked date".into(),
        request: None,
    }]);
    compile(&mut ledger, &mut index, t(20));
    let told = ready(&queue).expect("the Event's update");
    mark_written(&queue, &told);
    assert_eq!(
        told.notices().iter().map(|n| n.reason).collect::<Vec<_>>(),
        ["PracticeRunNotStarted"]
    );
    // Its Events are about the object itself.
    let about = told.events.as_ref().and_then(|e| e.about.kind.as_deref());
    assert_eq!(about, Some("ZonalAutoshift"));

    // Another writer clears the last request answered: the re-check writes it back.
    let mut overwritten: ZonalAutoshift = fleet(Some(shown.clone()));
    if let Some(st) = overwritten.status.as_mut() {
        st.conditions.clear();
        st.next_practice_run = None;
    }
    index.apply(Input::Autoshift(Event::Apply(overwritten)));
    ledger.watched(
        &index,
        &(StatusKind::ZonalAutoshift, ObjectKey::new("shop", "fleet")),
    );
    assert_eq!(ledger.recheck(&index, &no_peer_checks(&queue), t(30)), 1);
    let again = ready(&queue).expect("written again");
    assert!(again.events.is_none());
    assert!(again.status.shown_by(&written.status));
}

// SEM-P5: a status someone else overwrote stays wrong until the periodic re-check: that
// writes what the leader would write again (without Events), once, and nothing while the
// object shows it.
#[test]
fn a_status_changed_by_another_writer_is_written_again_at_the_recheck() {
    let mut index = listed();
    let (mut ledger, queue, metrics) = leading(&mut index);
    assert_eq!(queue.backlog(), 0, "the status waits for the table (P5)");
    assert_eq!(
        ledger.recheck(&index, &no_peer_checks(&queue), t(0)),
        0,
        "nor does a re-check write it"
    );
    ledger.take_published(1, index.compiler.table());
    settle(&mut ledger, &index, t(0));
    let written = ready(&queue).expect("api's status");
    mark_written(&queue, &written);
    let Status::RecordGroup(shown) = (*written.status).clone() else {
        panic!("a RecordGroup's status: {written:?}");
    };
    assert!(shown.served);

    // The watch brings the write back: nothing to repair.
    index.apply(Input::Group(Event::Apply(api(Some(shown.clone())))));
    compile(&mut ledger, &mut index, t(10));
    assert_eq!(ledger.recheck(&index, &no_peer_checks(&queue), t(10)), 0);
    assert_eq!(queue.backlog(), 0);

    // Another writer says it is not served. Its spec did not change: no compile fixes it.
    let mut overwritten = shown.clone();
    overwritten.served = false;
    overwritten.conditions.clear();
    index.apply(Input::Group(Event::Apply(api(Some(overwritten)))));
    compile(&mut ledger, &mut index, t(20));
    assert_eq!(queue.backlog(), 0, "only the re-check sees it");
    assert_eq!(ledger.recheck(&index, &no_peer_checks(&queue), t(30)), 1);
    assert_eq!(
        ledger.recheck(&index, &no_peer_checks(&queue), t(31)),
        0,
        "once while it is queued"
    );
    let again = ready(&queue).expect("written again");
    assert!(again.events.is_none(), "{:?}", again.events);
    assert!(again.status.shown_by(&written.status) && written.status.shown_by(&again.status));
    assert_eq!(
        again.status, written.status,
        "the same transition times too"
    );
    assert_eq!(
        metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

// SEM-P5: the re-check runs in steps (a change that comes meanwhile is compiled after one
// step, not after the whole pass): each step judges the next objects in order, a tick
// while a pass is under way does not start it again, and every object is judged once.
#[test]
fn the_recheck_runs_in_steps_and_judges_each_object_once() {
    let mut index = listed();
    let named = |name: &str, status: Option<RecordGroupStatus>| {
        let mut g = api(status);
        g.metadata.name = Some(name.into());
        g.spec.name = format!("{name}.example.com.");
        Input::Group(Event::Apply(g))
    };
    let names = ["api", "b", "c", "d", "e"];
    for name in &names[1..] {
        index.apply(named(name, None));
    }
    let (mut ledger, queue, metrics) = leading(&mut index);
    ledger.take_published(1, index.compiler.table());
    settle(&mut ledger, &index, t(0));
    // Every status is written, and another writer then says none is served.
    while let Some(written) = ready(&queue) {
        mark_written(&queue, &written);
        let Status::RecordGroup(mut shown) = (*written.status).clone() else {
            panic!("a RecordGroup's status: {written:?}");
        };
        index.apply(named(&written.key.name, Some(shown.clone())));
        ledger.watched(&index, &(StatusKind::RecordGroup, written.key.clone()));
        shown.served = false;
        index.apply(named(&written.key.name, Some(shown)));
    }
    assert!(!ledger.rechecking());
    ledger.start_recheck();
    assert!(ledger.rechecking());
    assert_eq!(
        ledger.recheck_step(&index, &no_peer_checks(&queue), t(30), 2),
        Some(2)
    );
    ledger.start_recheck(); // the next tick, while the pass is under way
    assert_eq!(
        ledger.recheck_step(&index, &no_peer_checks(&queue), t(30), 2),
        Some(2)
    );
    assert_eq!(
        queue.backlog(),
        4,
        "api, b, c and d, in the order of their keys"
    );
    assert_eq!(
        ledger.recheck_step(&index, &no_peer_checks(&queue), t(31), 2),
        Some(1),
        "e, and the pass ends"
    );
    assert!(!ledger.rechecking());
    assert_eq!(
        ledger.recheck_step(&index, &no_peer_checks(&queue), t(31), 2),
        None
    );
    let mut again = Vec::new();
    while let Some(update) = ready(&queue) {
        again.push(update.key.name.to_string());
    }
    assert_eq!(again, names);
    assert_eq!(
        metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
        5
    );
}

/// A leader at the start of its term: the read-back taken in, `index` compiled once.
fn leading(index: &mut Index) -> (Ledger, WriteQueue, Arc<StatusMetrics>) {
    let queue = WriteQueue::default();
    let metrics = Arc::new(StatusMetrics::default());
    let mut ledger = Ledger::new(queue.clone(), metrics.clone());
    ledger.new_term(true);
    ledger.hold_read_back(ReadBack::default());
    ledger.take_read_back(index);
    compile(&mut ledger, index, t(0));
    (ledger, queue, metrics)
}

/// A leader that compiled `index`, saw its table published and wrote api's status.
fn api_written(index: &mut Index) -> (Ledger, WriteQueue, Arc<StatusMetrics>, StatusUpdate) {
    let (mut ledger, queue, metrics) = leading(index);
    ledger.take_published(1, index.compiler.table());
    settle(&mut ledger, index, t(0));
    let written = ready(&queue).expect("api's status");
    mark_written(&queue, &written);
    (ledger, queue, metrics, written)
}

// SEM-P7: a term's first table makes every group's status due; they are judged in steps of
// the budget, a compile between two steps (a change) is judged too, and each status is
// written once.
#[test]
fn a_terms_first_statuses_are_settled_in_steps() {
    let mut index = listed();
    for name in ["b", "c", "d", "e"] {
        let mut g = api(None);
        g.metadata.name = Some(name.into());
        g.spec.name = format!("{name}.example.com.");
        index.apply(Input::Group(Event::Apply(g)));
    }
    let (mut ledger, queue, _) = leading(&mut index);
    assert!(!ledger.settling(), "nothing is published yet");
    ledger.take_published(1, index.compiler.table());
    assert!(ledger.settling());
    assert_eq!(queue.backlog(), 0, "nothing is judged before a step");
    assert_eq!(ledger.settle_step(&index, t(0), 2), 2);
    assert_eq!(queue.backlog(), 2, "api and b");
    // A change between two steps: its group awaits its own publication.
    let mut edited = api(None);
    edited.spec.records[0].values = Some(vec!["192.0.2.9".into()]);
    index.apply(Input::Group(Event::Apply(edited)));
    let report = index.compiler.compile(t(1));
    ledger.compiled(&index, report.changed_groups, report.changed_checks, t(1));
    assert_eq!(ledger.settle_step(&index, t(1), 2), 2);
    assert_eq!(ledger.settle_step(&index, t(1), 2), 1, "e ends the pass");
    assert_eq!(queue.backlog(), 5);
    // A second pass follows for what the compile changed: api waits for its table.
    assert!(ledger.settling());
    ledger.settle_step(&index, t(1), 2);
    assert!(!ledger.settling());
    assert_eq!(
        queue.backlog(),
        5,
        "api's new version is not published yet (P5)"
    );
    ledger.take_published(2, index.compiler.table());
    settle(&mut ledger, &index, t(2));
    let mut written = Vec::new();
    while let Some(update) = ready(&queue) {
        mark_written(&queue, &update);
        written.push(update.key.name.to_string());
    }
    written.sort();
    assert_eq!(
        written,
        ["api", "b", "c", "d", "e"],
        "one write each, api's the newest"
    );
}

// SEM-P7: a term's first pass makes room for every group at once: the steps that fill what
// was sent and the writes owed never grow them (a doubling rehashed 57,344 entries of each
// inside one step, and a change waited for it).
#[test]
fn a_terms_first_pass_has_room_for_every_group_before_its_first_step() {
    let mut index = listed();
    let n = 3000;
    for i in 0..n {
        let mut g = api(None);
        g.metadata.name = Some(format!("g{i}"));
        g.spec.name = format!("g{i}.example.com.");
        index.apply(Input::Group(Event::Apply(g)));
    }
    let (mut ledger, queue, _) = leading(&mut index);
    ledger.take_published(1, index.compiler.table());
    let room = (ledger.sent.capacity(), queue.pending_capacity());
    assert!(room.0 > n && room.1 > n, "{room:?}");
    let mut steps = 0;
    while ledger.settling() {
        ledger.settle_step(&index, t(0), 500);
        steps += 1;
        assert_eq!((ledger.sent.capacity(), queue.pending_capacity()), room);
    }
    assert!(steps >= 6, "{steps}");
    assert_eq!(ledger.sent.len(), n + 1);
    assert_eq!(queue.backlog(), n + 1, "every status owed");
}

// SEM-P7: a term's start makes every check's status due as well; they are judged in steps
// too, before the groups, and not at the compile that made them due.
#[test]
fn a_terms_first_check_statuses_are_judged_in_steps() {
    let mut index = listed();
    for name in ["c1", "c2", "c3"] {
        let check: healthroute_api::HealthCheck = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": name, "namespace": "shop", "generation": 1},
            "spec": {"type": "TCP", "target": {"address": "192.0.2.1", "port": 80}}
        }))
        .expect("valid");
        index.apply(Input::Check(Event::Apply(check)));
    }
    let queue = WriteQueue::default();
    let mut ledger = Ledger::new(queue.clone(), Arc::new(StatusMetrics::default()));
    ledger.new_term(true);
    ledger.hold_read_back(ReadBack::default());
    ledger.take_read_back(&mut index);
    let report = index.compiler.compile(t(0));
    ledger.compiled(&index, report.changed_groups, report.changed_checks, t(0));
    assert!(ledger.settling(), "the checks are due");
    assert_eq!(queue.backlog(), 0, "nothing is judged at the compile");
    assert_eq!(ledger.settle_step(&index, t(0), 2), 2);
    assert_eq!(queue.backlog(), 2);
    assert_eq!(ledger.settle_step(&index, t(0), 2), 1, "the last check");
    assert_eq!(queue.backlog(), 3);
    assert_eq!(ledger.settle_step(&index, t(0), 2), 1, "then the groups");
    assert_eq!(queue.backlog(), 3, "api waits for its table (P5)");
    assert!(!ledger.settling());
    ledger.take_published(1, index.compiler.table());
    assert_eq!(ledger.settle_step(&index, t(0), 2), 1, "api");
    let mut written = Vec::new();
    while let Some(update) = ready(&queue) {
        mark_written(&queue, &update);
        written.push(update.key.name.to_string());
    }
    written.sort();
    assert_eq!(written, ["api", "c1", "c2", "c3"]);
}

// SEM-P5: a status just written whose watch event has not arrived yet is not "changed by
// another writer": the recheck leaves it to the next one, which writes it again only if
// the object still does not show it.
#[test]
fn a_write_the_watch_has_not_brought_back_is_not_repaired_at_once() {
    let mut index = listed();
    let (mut ledger, queue, metrics, _) = api_written(&mut index);
    // No watch event since: the object still shows no status.
    assert_eq!(
        ledger.recheck(&index, &no_peer_checks(&queue), t(10)),
        0,
        "its echo may be on the way"
    );
    assert_eq!(queue.backlog(), 0);
    assert_eq!(
        ledger.recheck(&index, &no_peer_checks(&queue), t(70)),
        1,
        "a recheck later, it is not"
    );
    assert!(ready(&queue).is_some(), "written again");
    assert_eq!(
        metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

// SEM-P5: a status owed is the leader's one record of it, shared with the queue; once the
// object shows exactly what was written, the leader keeps one copy of the status (the
// index's, shared), and what it writes after another writer's change is the
// same as before, transition times and all.
#[test]
fn a_status_the_object_shows_is_kept_once() {
    let mut index = listed();
    let (mut ledger, queue, _, written) = api_written(&mut index);
    let Status::RecordGroup(shown) = (*written.status).clone() else {
        panic!("a RecordGroup's status: {written:?}");
    };
    let key = ObjectKey::new("shop", "api");
    let skey = (StatusKind::RecordGroup, key.clone());
    // Before the echo, the write the queue held was the ledger's own record, not a copy, and
    // carried no object reference: it had no Events.
    assert!(
        matches!(ledger.sent.get(&skey), Some(Sent::Own(own)) if Arc::ptr_eq(own, &written.status))
    );
    assert!(written.events.is_none());

    // The watch's echo of the write: the control loop hands each watched group over at
    // once (`Control::apply`), so the copy goes before any recheck.
    index.apply(Input::Group(Event::Apply(api(Some(shown.clone())))));
    let watched = index.groups[&key].status.clone().expect("watched status");
    let shared = |ledger: &Ledger| matches!(ledger.sent.get(&skey), Some(Sent::Shown(s)) if Arc::ptr_eq(s, &watched));
    ledger.watched(&index, &skey);
    assert!(shared(&ledger), "{:?}", ledger.sent.get(&skey));
    assert_eq!(ledger.recheck(&index, &no_peer_checks(&queue), t(10)), 0);
    assert!(shared(&ledger), "{:?}", ledger.sent.get(&skey));

    // A new term judges the group against what it shows: right as it is, and kept once.
    ledger.new_term(true);
    ledger.hold_read_back(ReadBack {
        generation: 1,
        groups: index.compiler.table().groups.clone(),
    });
    ledger.take_read_back(&mut index);
    compile(&mut ledger, &mut index, t(20));
    assert_eq!(queue.backlog(), 0, "nothing to write");
    assert!(shared(&ledger), "{:?}", ledger.sent.get(&skey));

    let mut overwritten = shown.clone();
    overwritten.served = false;
    overwritten.conditions.clear();
    index.apply(Input::Group(Event::Apply(api(Some(overwritten)))));
    assert_eq!(ledger.recheck(&index, &no_peer_checks(&queue), t(30)), 1);
    let again = ready(&queue).expect("written again");
    assert_eq!(
        again.status, written.status,
        "the same transition times too"
    );
}

// Times are kept at the API's precision, so that what the watch brings back is equal to
// what was sent.
#[test]
fn times_are_whole_seconds() {
    let now = Timestamp::from_millisecond(1_800_000_000_250).expect("valid");
    assert_eq!(api_time(now), t(0));
}
/// `write` done as the writer does it, and the object as the API server then holds it in the
/// index (with a uid), its watch event taken in.
fn peer_check_written(
    ledger: &mut Ledger,
    index: &mut Index,
    queue: &WriteQueue,
) -> (crate::writes::PeerWrite, healthroute_api::HealthCheck) {
    use crate::writes::PeerWrite;
    let write = queue.take_ready(Instant::now()).expect("the Peer check");
    queue.finish(write.clone(), &WriteOutcome::Written, Instant::now());
    let Write::PeerCheck(apply @ PeerWrite::Apply { .. }) = write else {
        panic!("a Peer check's apply: {write:?}");
    };
    let PeerWrite::Apply { key, check } = &apply else {
        unreachable!()
    };
    let mut held = check.as_ref().clone();
    held.metadata.uid = Some("uid-check".into());
    index.apply(Input::Check(Event::Apply(held.clone())));
    ledger.watched(index, &(StatusKind::HealthCheck, key.clone()));
    (apply, held)
}

// SEM-X4 SEM-P5: the periodic re-check compares the Peer checks as watched with what the
// groups need: one another writer changed is applied again, one another writer deleted is
// made again, and each counts as a repair; one that shows what was written is left alone.
#[test]
fn the_recheck_repairs_a_peer_check_another_writer_changed_or_deleted() {
    let mut index = listed();
    let mut needs_peer = api(None);
    needs_peer.metadata.uid = Some("uid-api".into());
    needs_peer.spec = serde_json::from_value(json!({
        "name": "api.example.com.", "type": "A", "routingPolicy": "Weighted",
        "records": [{"setIdentifier": "p0", "peer": {"cluster": "west", "recordGroup": "shop/api"}},
                    {"setIdentifier": "own", "values": ["192.0.2.1"]}]
    }))
    .expect("valid spec");
    index.apply(Input::Group(Event::Apply(needs_peer)));
    let (mut ledger, queue, metrics) = leading(&mut index);
    while ready(&queue).is_some() {} // the statuses: not this test's
    let mut peers = PeerChecks::new(queue.clone(), Default::default());
    peers.after_compile(&index);
    let (apply, held) = peer_check_written(&mut ledger, &mut index, &queue);
    assert_eq!(ledger.recheck(&index, &peers, t(10)), 0, "as written");

    // Another writer changes the check: no compile plans it again, the re-check does.
    let mut changed = held.clone();
    changed.spec.request_interval_seconds = 5;
    index.apply(Input::Check(Event::Apply(changed)));
    assert_eq!(ledger.recheck(&index, &peers, t(20)), 1);
    assert_eq!(
        ledger.recheck(&index, &peers, t(21)),
        0,
        "once while queued"
    );
    let again = queue.take_ready(Instant::now()).expect("applied again");
    assert_eq!(
        again,
        Write::PeerCheck(apply.clone()),
        "the same typed check"
    );
    queue.finish(again, &WriteOutcome::Written, Instant::now());
    let key = apply.key().clone();
    index.apply(Input::Check(Event::Apply(held.clone())));
    ledger.watched(&index, &(StatusKind::HealthCheck, key));

    // Another writer deletes it: made again.
    index.apply(Input::Check(Event::Delete(held)));
    assert_eq!(ledger.recheck(&index, &peers, t(30)), 1);
    let made = queue.take_ready(Instant::now()).expect("made again");
    assert_eq!(made, Write::PeerCheck(apply));
    assert_eq!(
        metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

/// Group `i` of three frontend groups, each a Service with one endpoint in each of three
/// zones, zone-a's not ready: the ZonalAutoshift over them shifts away from zone-a.
fn impaired_zone_a(index: &mut Index) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    for (i, name) in ["api", "web", "search"].into_iter().enumerate() {
        let group: RecordGroup = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": name, "namespace": "shop", "generation": 1,
                         "uid": format!("uid-{name}"), "labels": {"tier": "frontend"}},
            "spec": {"name": format!("{name}.example.com."), "type": "A",
                     "routingPolicy": "MultiValue",
                     "records": [{"setIdentifier": "pods", "service": {"name": format!("svc-{name}")}}]}
        }))
        .expect("valid group");
        index.apply(Input::Group(Event::Apply(group)));
        let endpoints: Vec<serde_json::Value> = ["zone-a", "zone-b", "zone-c"]
            .iter()
            .enumerate()
            .map(|(z, zone)| {
                json!({"addresses": [format!("10.7.{i}.{}", z + 1)], "zone": zone,
                       "conditions": {"ready": z != 0}})
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("svc-{name}-1"), "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": format!("svc-{name}")}},
            "addressType": "IPv4", "endpoints": endpoints
        }))
        .expect("valid slice");
        index.apply(Input::Slice(Event::Apply(slice)));
    }
    let autoshift = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
        "metadata": {"name": "frontend", "namespace": "shop", "generation": 1,
                     "uid": "uid-frontend", "creationTimestamp": "2027-01-15T08:00:00Z"},
        "spec": {"target": {"selector": {"matchLabels": {"tier": "frontend"}}},
                 "autoshift": "Enabled", "detection": {"holdTime": "1h"},
                 "practiceRun": {"outcomeAlarms": [{"name": "outcome"}], "cadence": "168h"}}
    }))
    .expect("valid autoshift");
    index.apply(Input::Autoshift(Event::Apply(autoshift)));
}

// SEM-AS13 SEM-P5: the periodic re-check compares the mirrors of the engines' shifts as
// watched with the shifts the engines hold: a mirror another writer changed is applied
// again (its object; its status is still the engine's), one another writer deleted is made
// again (object and status), and each counts as a repair.
#[test]
fn the_recheck_repairs_a_mirror_another_writer_changed_or_deleted() {
    use crate::writes::ShiftWrite;
    let mut index = listed();
    impaired_zone_a(&mut index);
    let (mut ledger, queue, metrics) = leading(&mut index);
    let peers = no_peer_checks(&queue);
    let wanted = crate::engine_shifts::wanted(&index);
    let [
        ShiftWrite::Apply {
            key,
            object: Some(object),
            status: Some(status),
        },
    ] = wanted.as_slice()
    else {
        panic!("the autoshift's mirror, object and status: {wanted:#?}");
    };
    assert_eq!(&*key.name, "frontend-autoshift");
    // As the API server holds it once written.
    let mut held = object.as_ref().clone();
    held.metadata.uid = Some("uid-mirror".into());
    held.status = Some(status.as_ref().clone());
    index.apply(Input::Shift(Event::Apply(held.clone())));
    while ready(&queue).is_some() {} // the statuses: not this test's
    assert_eq!(ledger.recheck(&index, &peers, t(10)), 0, "as written");

    // Another writer moves it to another zone: its object is applied again.
    let mut changed = held.clone();
    changed.spec.away_from = "zone-b".into();
    index.apply(Input::Shift(Event::Apply(changed)));
    assert_eq!(ledger.recheck(&index, &peers, t(20)), 1);
    assert_eq!(
        ledger.recheck(&index, &peers, t(21)),
        0,
        "once while queued"
    );
    let again = queue.take_ready(Instant::now()).expect("applied again");
    let Write::EngineShift(ShiftWrite::Apply {
        object: Some(object_again),
        status: None,
        ..
    }) = &again
    else {
        panic!("the mirror's object alone: {again:?}");
    };
    assert_eq!(object_again.spec.away_from, "zone-a");
    assert_eq!(object_again.metadata, object.metadata);
    queue.finish(again, &WriteOutcome::Written, Instant::now());
    index.apply(Input::Shift(Event::Apply(held.clone())));
    ledger.watched(&index, &(StatusKind::ZonalShift, key.clone()));

    // Another writer deletes it: made again, with the engine's status.
    index.apply(Input::Shift(Event::Delete(held)));
    assert_eq!(ledger.recheck(&index, &peers, t(30)), 1);
    let made = queue.take_ready(Instant::now()).expect("made again");
    assert_eq!(made, Write::EngineShift(wanted[0].clone()));
    assert_eq!(
        metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}
