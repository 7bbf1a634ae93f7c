//! The operator ↔ resolver contract: every name, label, key and format the publisher (the
//! operator's leader) and the readers (the resolvers) must agree on, in one place, as
//! `healthroute-exchange` is for peer clusters. The table's own encoding is
//! `published`, the push protocol `push`; this module says where they live
//! on the API server and how a resolver tells the leader about itself.
//!
//! ```text
//!  operator leader ──SSA ConfigMaps in the release namespace──────────────▶ resolvers (watch)
//!                     TABLE_NAME (manifest), TABLE_NAME-<i> (shards),
//!                     TABLE_NAME-delta-<g> (deltas), labelled TABLE_LABEL=<role>,
//!                     the JSON under DATA_KEY, each shard's hash under HASH_ANNOTATION
//!                  ──POST push::PATH, the delta signed (P12)──────────────▶ push listener
//!  resolver ──SSA Lease healthroute-resolver-<name>, labelled RESOLVER_LABEL=<name>,
//!             renewed every RENEW_EVERY, owned by its Pod (P13)──────────▶ operator's registry
//!             annotations: the generation it serves (P4), where it takes pushes (P12)
//! ```
//!
//! The resolver's registration is its own Lease, written whether or not its checker runs:
//! the checker's heartbeat Lease (H7) is a compiler input and says only that the checker is
//! reachable. A resolver from before the registration wrote the same two annotations on its
//! checker Lease; the operator still reads them there ([`Registration::from_annotations`]
//! reads either), so a rolling upgrade keeps its floor and its pushes.
//!
//! What a new leader reads back from the ConfigMaps is [`ReadBack`]: the status writer judges
//! what is served from it (P5, P6).

use std::collections::BTreeMap;
use std::time::Duration;

/// The manifest ConfigMap's name; shards are `<name>-<index>` ([`shard_name`]), deltas
/// `<name>-delta-<generation>` ([`delta_name`]).
pub const TABLE_NAME: &str = "healthroute-table";
/// Label on every table ConfigMap; resolvers watch this selector. Its value is the object's
/// role: [`MANIFEST`], [`SHARD`] or [`DELTA`].
pub const TABLE_LABEL: &str = "healthroute.io/table";
/// Value of [`TABLE_LABEL`] on the manifest.
pub const MANIFEST: &str = "manifest";
/// Value of [`TABLE_LABEL`] on a shard.
pub const SHARD: &str = "shard";
/// Value of [`TABLE_LABEL`] on a delta.
pub const DELTA: &str = "delta";
/// On a delta: the generation of the manifest it applies to, so that the deltas of older
/// bases go with one label-selected delete.
pub const BASE_LABEL: &str = "healthroute.io/table-base";
/// The data key holding the JSON in each ConfigMap.
pub const DATA_KEY: &str = "table.json";
/// On a shard and the manifest: the content hash of its JSON, so that a new leader rewrites
/// only what changed.
pub const HASH_ANNOTATION: &str = "healthroute.io/content-hash";

/// The name of shard `index`'s ConfigMap.
pub fn shard_name(index: u32) -> String {
    format!("{TABLE_NAME}-{index}")
}

/// The name of the delta object of `generation`.
pub fn delta_name(generation: u64) -> String {
    format!("{TABLE_NAME}-delta-{generation}")
}

/// The shard index a ConfigMap name stands for (`None` for the manifest, a delta or another
/// object).
pub fn shard_index(name: &str) -> Option<u32> {
    name.strip_prefix(TABLE_NAME)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// What a new leader finds published.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReadBack {
    /// The highest generation of the manifest and the deltas found (0 when nothing is published).
    pub generation: u64,
    /// Every group in the shards found, newest copy of each, with the deltas on the manifest
    /// applied: what the resolvers serve, or are about to (a leader that stopped between a
    /// shard and the manifest left newer shards than the manifest names; their groups are
    /// good versions all the same).
    pub groups: crate::Groups,
}

/// Label on a resolver's registration Lease; its value is the resolver's name.
pub const RESOLVER_LABEL: &str = "healthroute.io/resolver";
/// On a registration: the table generation the resolver serves (P4).
pub const SERVED_GENERATION_ANNOTATION: &str = "healthroute.io/served-generation";
/// On a registration: where the resolver's push listener is reached, `host:port` (P12).
pub const PUSH_ADDRESS_ANNOTATION: &str = "healthroute.io/push-address";
/// How often a resolver renews its registration.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);
/// A registration counts while it was renewed within this (P12): a resolver gone stops
/// being pushed to. Also the Lease's `leaseDurationSeconds`.
pub const REGISTRATION_LASTS: Duration = Duration::from_secs(10);

/// The name of resolver `resolver`'s registration Lease.
pub fn registration_lease_name(resolver: &str) -> String {
    format!("healthroute-resolver-{resolver}")
}

/// The field manager a resolver writes its registration under (it owns only that Lease).
pub fn registration_field_manager(resolver: &str) -> String {
    format!("healthroute-resolver-{resolver}")
}

/// What a resolver tells the leader about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    /// The table generation it serves (P4): a new leader continues above it.
    pub served_generation: Option<u64>,
    /// Where the leader pushes deltas to it (P12); none when it takes no pushes.
    pub push_address: Option<String>,
}

impl Registration {
    /// The registration as a Lease's annotations.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::new();
        if let Some(g) = self.served_generation {
            annotations.insert(SERVED_GENERATION_ANNOTATION.to_owned(), g.to_string());
        }
        if let Some(address) = &self.push_address {
            annotations.insert(PUSH_ADDRESS_ANNOTATION.to_owned(), address.clone());
        }
        annotations
    }

    /// The registration a Lease's annotations hold (a registration Lease's, or an older
    /// resolver's checker Lease's); a generation that is not a number counts as none.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        Registration {
            served_generation: annotations
                .get(SERVED_GENERATION_ANNOTATION)
                .and_then(|g| g.parse().ok()),
            push_address: annotations.get(PUSH_ADDRESS_ANNOTATION).cloned(),
        }
    }

    /// Whether it tells nothing.
    pub fn is_empty(&self) -> bool {
        self.served_generation.is_none() && self.push_address.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-P4 SEM-P12: a registration goes through a Lease's annotations and back unchanged;
    // what is not a number is no generation.
    #[test]
    fn a_registration_round_trips_through_annotations() {
        let r = Registration {
            served_generation: Some(41),
            push_address: Some("10.1.2.3:8055".into()),
        };
        assert_eq!(Registration::from_annotations(&r.annotations()), r);
        assert!(Registration::default().annotations().is_empty());
        let mut odd = r.annotations();
        odd.insert(SERVED_GENERATION_ANNOTATION.into(), "forty".into());
        assert_eq!(Registration::from_annotations(&odd).served_generation, None);
    }

    #[test]
    fn table_object_names() {
        assert_eq!(shard_name(3), "healthroute-table-3");
        assert_eq!(shard_index(&shard_name(3)), Some(3));
        assert_eq!(shard_index(TABLE_NAME), None);
        assert_eq!(shard_index(&delta_name(7)), None);
        assert_eq!(registration_lease_name("r-1"), "healthroute-resolver-r-1");
    }
}
