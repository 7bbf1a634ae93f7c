//! The resolvers' registry: which resolvers there are, the table generation each serves (P4)
//! and where each takes pushed deltas (P12). It is apart from the compiler's inputs
//! ([`crate::index`]): a resolver registers whether or not its checker runs, and nothing here
//! is compiled. Synchronous, like the index: tests drive it without an API server.
//!
//! ```text
//!  watch Lease healthroute-resolver-<name> (label healthroute.io/resolver) ──┐
//!  watch Lease healthroute-checker-<name>: an older resolver's registration ─┴▶ Registry::apply
//!      ├──▶ highest_served_generation: the publisher's floor (P4)
//!      └──▶ push_addresses: where the pusher sends each delta (P12)
//! ```
//!
//! The format of a registration is the contract's ([`healthroute_table::contract`]). Resolvers
//! from before registrations wrote the same annotations on their checker Lease, which the
//! operator watches for heartbeats anyway; they are read from there too, so that during a
//! rolling upgrade the floor and the pushes stay as they were. A checker Lease that carries
//! none (every resolver since) registers nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher;

use crate::index::{Input, key_of};
use healthroute_compiler::ObjectKey;
use healthroute_table::contract::{REGISTRATION_LASTS, Registration};

/// Which Lease a registration was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Source {
    /// A resolver's own registration Lease.
    Registration,
    /// An older resolver's checker Lease.
    CheckerLease,
}

/// One resolver as its Lease says.
#[derive(Debug)]
struct Entry {
    /// The table generation it serves (P4).
    served_generation: Option<u64>,
    /// Where it takes pushes (P12), shared with every request that names it.
    push_address: Option<Arc<str>>,
    renewed: Option<jiff::Timestamp>,
}

/// The resolvers, as their Leases say. See the module's doc.
#[derive(Debug, Default)]
pub struct Registry {
    resolvers: BTreeMap<(Source, ObjectKey), Entry>,
    /// Keys listed since a watch restarted (Init): the others are gone at InitDone.
    relist: HashMap<Source, BTreeSet<ObjectKey>>,
}

impl Registry {
    /// Takes in one watch event: a registration Lease's, or a checker Lease's (an older
    /// resolver's registration); other inputs are not the registry's. True when the resolvers
    /// pushed to changed (one came, went or moved), so that the publisher is told.
    pub fn apply(&mut self, input: &Input) -> bool {
        let (source, event) = match input {
            Input::Resolver(e) => (Source::Registration, e),
            Input::Lease(e) => (Source::CheckerLease, e),
            _ => return false,
        };
        let now = jiff::Timestamp::now();
        let before = self.push_addresses(now);
        self.event(source, event);
        self.push_addresses(now) != before
    }

    fn event(&mut self, source: Source, event: &watcher::Event<Lease>) {
        match event {
            watcher::Event::Apply(l) => self.upsert(source, l),
            watcher::Event::Delete(l) => {
                self.resolvers.remove(&(source, key_of(l)));
            }
            watcher::Event::Init => {
                self.relist.insert(source, BTreeSet::new());
            }
            watcher::Event::InitApply(l) => {
                self.relist.entry(source).or_default().insert(key_of(l));
                self.upsert(source, l);
            }
            watcher::Event::InitDone => {
                let listed = self.relist.remove(&source).unwrap_or_default();
                self.resolvers
                    .retain(|(s, key), _| *s != source || listed.contains(key));
            }
        }
    }

    fn upsert(&mut self, source: Source, lease: &Lease) {
        let key = (source, key_of(lease));
        let registration = lease
            .metadata
            .annotations
            .as_ref()
            .map(Registration::from_annotations)
            .unwrap_or_default();
        // A checker Lease registers only an older resolver (one that wrote these on it).
        if source == Source::CheckerLease && registration.is_empty() {
            self.resolvers.remove(&key);
            return;
        }
        let renewed = lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0);
        self.resolvers.insert(
            key,
            Entry {
                served_generation: registration.served_generation,
                push_address: registration.push_address.as_deref().map(Arc::from),
                renewed,
            },
        );
    }

    /// The highest table generation any resolver says it serves (0 when none says).
    pub fn highest_served_generation(&self) -> u64 {
        self.resolvers
            .values()
            .filter_map(|e| e.served_generation)
            .max()
            .unwrap_or(0)
    }

    /// Where the resolvers whose registration was renewed within
    /// [`REGISTRATION_LASTS`] take pushed deltas (P12), in order, each once.
    pub fn push_addresses(&self, now: jiff::Timestamp) -> Arc<[Arc<str>]> {
        let lasts = jiff::SignedDuration::try_from(REGISTRATION_LASTS)
            .unwrap_or(jiff::SignedDuration::from_secs(10));
        let mut addresses: Vec<Arc<str>> = self
            .resolvers
            .values()
            .filter(|e| e.renewed.is_some_and(|at| now.duration_since(at) < lasts))
            .filter_map(|e| e.push_address.clone())
            .collect();
        addresses.sort();
        addresses.dedup();
        addresses.into()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use healthroute_api::CHECKER_LABEL;
    use healthroute_table::contract::{
        PUSH_ADDRESS_ANNOTATION, RESOLVER_LABEL, SERVED_GENERATION_ANNOTATION,
        registration_lease_name,
    };

    /// A registration Lease as a resolver writes it, serving generation 7.
    fn registration(name: &str, renewed: &str, address: Option<&str>) -> Input {
        let registration = Registration {
            served_generation: Some(7),
            push_address: address.map(str::to_owned),
        };
        let lease = serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": registration_lease_name(name), "namespace": "healthroute",
                         "labels": {RESOLVER_LABEL: name},
                         "annotations": registration.annotations()},
            "spec": {"holderIdentity": name, "renewTime": renewed}
        }))
        .expect("valid");
        Input::Resolver(Event::Apply(lease))
    }

    /// A checker Lease, with `annotations` (an older resolver's) or none (every resolver's
    /// since registrations).
    fn checker_lease(name: &str, renewed: &str, annotations: serde_json::Value) -> Lease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("healthroute-checker-{name}"), "namespace": "healthroute",
                         "labels": {CHECKER_LABEL: name}, "annotations": annotations},
            "spec": {"holderIdentity": name, "renewTime": renewed}
        }))
        .expect("valid")
    }

    // SEM-P12: deltas are pushed to the address each resolver advertises on its registration,
    // while that registration is renewed (within its 10 s): a resolver gone stops being
    // pushed to, and one that advertises nothing is never pushed to. SEM-P4: the floor is the
    // highest generation any says it serves.
    #[test]
    fn deltas_are_pushed_to_the_resolvers_whose_registration_is_live() {
        let mut registry = Registry::default();
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().expect("time");
        for input in [
            registration("a", "2026-01-01T00:00:59.000000Z", Some("10.0.0.1:8055")),
            registration("b", "2026-01-01T00:00:55.000000Z", Some("10.0.0.2:8055")),
            registration("gone", "2026-01-01T00:00:30.000000Z", Some("10.0.0.3:8055")),
            registration("none", "2026-01-01T00:00:59.000000Z", None),
        ] {
            registry.apply(&input);
        }
        let to: Vec<String> = registry
            .push_addresses(now)
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(to, ["10.0.0.1:8055", "10.0.0.2:8055"]);
        assert_eq!(registry.highest_served_generation(), 7);
    }

    // SEM-P12: a resolver that comes, goes or moves its listener changes where deltas go: the
    // registry says so, and says nothing for a renewal that changes none of it.
    #[test]
    fn only_a_change_of_the_resolvers_pushed_to_is_told() {
        let mut registry = Registry::default();
        let at = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        assert!(registry.apply(&registration("a", &at, Some("10.0.0.1:8055"))));
        assert!(!registry.apply(&registration("a", &at, Some("10.0.0.1:8055"))));
        assert!(registry.apply(&registration("a", &at, Some("10.0.0.9:8055"))));
        let Input::Resolver(Event::Apply(lease)) = registration("a", &at, None) else {
            unreachable!()
        };
        assert!(registry.apply(&Input::Resolver(Event::Delete(lease))));
        assert!(registry.push_addresses(jiff::Timestamp::now()).is_empty());
        // A relist that no longer has a resolver forgets it.
        registry.apply(&registration("b", &at, Some("10.0.0.2:8055")));
        registry.apply(&Input::Resolver(Event::Init));
        assert!(registry.apply(&Input::Resolver(Event::InitDone)));
        assert_eq!(registry.highest_served_generation(), 0);
    }

    // SEM-P4 SEM-P12: during a rolling upgrade, a resolver from before registrations still
    // tells its generation and push address on its checker Lease; a checker Lease without
    // them registers nothing, and a relist of the checker Leases leaves registrations be.
    #[test]
    fn an_older_resolvers_checker_lease_still_registers_it() {
        let mut registry = Registry::default();
        let now = jiff::Timestamp::now();
        let at = now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        let old = checker_lease(
            "old",
            &at,
            json!({SERVED_GENERATION_ANNOTATION: "12", PUSH_ADDRESS_ANNOTATION: "10.0.0.4:8055"}),
        );
        let new = checker_lease("new", &at, json!({}));
        registry.apply(&registration("new", &at, Some("10.0.0.5:8055")));
        registry.apply(&Input::Lease(Event::Init));
        registry.apply(&Input::Lease(Event::InitApply(old)));
        registry.apply(&Input::Lease(Event::InitApply(new)));
        registry.apply(&Input::Lease(Event::InitDone));
        assert_eq!(registry.highest_served_generation(), 12);
        let to: Vec<String> = registry
            .push_addresses(now)
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(to, ["10.0.0.4:8055", "10.0.0.5:8055"]);
        // Upgraded: its checker Lease written again without them.
        let upgraded = checker_lease("old", &at, json!({}));
        assert!(registry.apply(&Input::Lease(Event::Apply(upgraded))));
        assert_eq!(registry.highest_served_generation(), 7);
    }
}
