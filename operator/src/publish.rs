//! Writing the compiled table as ConfigMaps (the format is `healthroute_table::published`),
//! and the leader-gated task that does it beside the control loop.
//!
//! ```text
//!  control loop ──watch<PublishRequest> (newest table only)──▶ publisher task
//!     ▲                                                         │ new term: read back what is
//!     │                                                         │ published, then a manifest
//!     └────────── PublishFeedback: ReadBack / Published / Failed ┘ then: a delta per change;
//!                                                                  now and then a fold, between
//!                                                                  changes
//! ```
//!
//! The operator is the only writer (P3). A term starts with a new manifest, written last, so
//! that a resolver never assembles a set that is still being written: when the shards on the
//! server are those the published manifest names, it names them again after a catch-up delta
//! with every change since them; otherwise it follows the shards whose content changed (the
//! content hash of every shard is read back from the objects' annotations, so unchanged ones
//! are not rewritten). After that, each change is one
//! delta object (`healthroute-table-delta-<generation>`): the groups that changed, on top of
//! the manifest, so that a change costs what changed (P11). When the deltas since the manifest
//! pass [`FOLD_AFTER_DELTAS`] or [`FOLD_AFTER_BYTES`] (per 8 shards: [`fold_due`]), a fold
//! writes them into the shards and a
//! new manifest, one write at a time between changes, never in a change's way: a change that
//! arrives during a fold is a delta on the old manifest, and the fold ends with a catch-up
//! delta on the new manifest written before it, so the new manifest never serves anything
//! older than what was served. The deltas of older manifests are then deleted with one
//! label-selected request. The generation in the manifest and the deltas belongs to the
//! publisher: a new term continues above the highest generation published or served (P4),
//! whatever the compiler in this process counted.
//!
//! Every table object names the installation's owner (the operator's ServiceAccount, resolved
//! at each term's start: [`crate::owner`]) in its `ownerReferences`, so that uninstalling the
//! chart removes the table with it (P13). Objects on the server without that owner (written
//! before it was set, or for an account made again) count as not written: the term's first
//! table rewrites them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use healthroute_table::published::{
    self, BASE_LABEL, DATA_KEY, DELTA, Delta, Encoded, MANIFEST, Manifest, SHARD, TABLE_LABEL,
};
use healthroute_table::{CompiledGroup, GroupKey, RoutingTable, Value};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::metrics::PublisherMetrics;
use crate::owner;
use crate::push::Pusher;
use healthroute_admin::retry::{Backoff, ErrorLog};

/// The manifest ConfigMap's name; shards are `<name>-<index>`, deltas `<name>-delta-<generation>`.
pub const TABLE_NAME: &str = "healthroute-table";
const HASH_ANNOTATION: &str = "healthroute.io/content-hash";
/// The longest one table request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A fold starts when this many deltas lie on a manifest of up to 8 shards ...
pub const FOLD_AFTER_DELTAS: usize = 64;
/// ... or when they hold this many bytes together; a reader that starts reads them all.
pub const FOLD_AFTER_BYTES: usize = 256 * 1024;

/// Whether `deltas` (how many, how many bytes) on a manifest of `shards` shards call for a
/// fold, `times` the threshold. The threshold grows with the table past 8 shards: a fold
/// rewrites up to every shard (about 256 KiB each), so a fixed 64 deltas would cost each
/// change half a shard at 100,000 groups; 8 deltas per shard (rounded up to 8 shards) keep a fold at
/// about 32 KiB per change at any size, and the deltas a starting resolver reads beside
/// the shards at about an eighth of the table's bytes.
pub fn fold_due(deltas: (usize, usize), shards: u32, times: usize) -> bool {
    let scale = (shards as usize).div_ceil(8).max(1) * times;
    deltas.0 >= FOLD_AFTER_DELTAS * scale || deltas.1 >= FOLD_AFTER_BYTES * scale
}
/// Shard writes of a full table in flight at once (a fold writes one at a time, between
/// changes).
const SHARD_WRITES_IN_FLIGHT: usize = 4;
/// A change larger than this is published as a full table (it touches most shards anyway).
pub use healthroute_table::published::MAX_DELTA_BYTES;

/// Groups as a delta or a shard carries them.
type DeltaGroups = BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>;

/// The name of the delta object of `generation`.
pub fn delta_name(generation: u64) -> String {
    format!("{TABLE_NAME}-delta-{generation}")
}

/// What one publish did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PublishReport {
    pub shards_written: usize,
    pub manifest_written: bool,
    pub delta_written: bool,
    /// Bytes of table data sent to the API server.
    pub bytes_written: usize,
    /// The generation the resolvers can assemble now.
    pub generation: u64,
    pub shards: u32,
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
    pub groups: healthroute_table::Groups,
}

/// What one step of a fold did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FoldStep {
    pub shards_written: usize,
    pub bytes_written: usize,
    /// The fold ended: its manifest is written.
    pub done: bool,
    /// A newer table arrived during the step's write, which was given up for it (to be
    /// written again at the next step; after the manifest, the clean-up is left for later).
    pub given_up: bool,
    /// The generation the resolvers can assemble now.
    pub generation: u64,
}

/// A fold in progress: the table whose shards are being written.
struct Fold {
    target: Arc<RoutingTable<Value>>,
    encoded: Option<Encoded>,
    /// The encode of `target` under way, off the publisher's task (with its own copy of the
    /// encoder, which replaces the publisher's when it is done).
    encoding: Option<
        tokio::task::JoinHandle<(
            published::Encoder,
            Result<Encoded, healthroute_table::Error>,
        )>,
    >,
    /// The next shard to look at.
    next: usize,
}

impl Fold {
    /// A fold of `target`, from its encode on.
    fn of(target: Arc<RoutingTable<Value>>) -> Self {
        Fold {
            target,
            encoded: None,
            encoding: None,
            next: 0,
        }
    }
}

pub struct Publisher {
    api: Api<ConfigMap>,
    encoder: published::Encoder,
    /// Content hash of what is on the server, by ConfigMap name (shards and manifest).
    written: BTreeMap<String, String>,
    /// The published manifest, with the content hash of its JSON (the deltas' base).
    manifest: Option<(Manifest, String)>,
    /// What the resolvers can assemble now: the manifest's table with every delta since.
    served: Option<Arc<RoutingTable<Value>>>,
    /// Deltas written on the manifest: how many, how many bytes.
    deltas: (usize, usize),
    /// Deltas of older manifests may lie on the server: delete them after the next manifest.
    stale_deltas: bool,
    /// The highest generation published or served that this publisher knows of.
    generation: u64,
    loaded: bool,
    /// The next publish writes a full table (a term's first: deltas continue a manifest only
    /// within the term that wrote it).
    full_next: bool,
    /// The groups of the published manifest's shards, as read back, when the shards on the
    /// server are exactly those it names: a term's first table can then name the same shards
    /// in a new manifest, with what changed since as its catch-up delta.
    manifest_groups: Option<healthroute_table::Groups>,
    fold: Option<Fold>,
    /// Sends each delta to the resolvers as it is written (P12).
    pusher: Option<Pusher>,
    /// The ServiceAccount that owns the table, and the leader Lease given the same owner (P13).
    owner_account: Option<(String, String)>,
    /// That account as an owner, as last resolved (kept when it can no longer be read: objects
    /// written while the release is being removed still go with it).
    owner: Option<OwnerReference>,
}

impl Publisher {
    /// A publisher with at least `min_shards` shards (more when the table needs them).
    pub fn new(api: Api<ConfigMap>, min_shards: u32) -> Self {
        Publisher {
            api,
            encoder: published::Encoder::new(min_shards),
            written: BTreeMap::new(),
            manifest: None,
            served: None,
            deltas: (0, 0),
            stale_deltas: false,
            generation: 0,
            loaded: false,
            full_next: true,
            manifest_groups: None,
            fold: None,
            pusher: None,
            owner_account: None,
            owner: None,
        }
    }

    /// Every table object is owned by the ServiceAccount `account` of the table's namespace,
    /// and each term gives the Lease `leader_lease` the same owner (P13).
    pub fn with_owner(
        mut self,
        account: impl Into<String>,
        leader_lease: impl Into<String>,
    ) -> Self {
        self.owner_account = Some((account.into(), leader_lease.into()));
        self
    }

    /// Resolves the owner (a term's start) and gives the leader Lease to it. The table is never
    /// held back for its owner: an account that cannot be read leaves the last one resolved
    /// (or none, said once per term); only an API server that does not answer fails the term's
    /// read-back, which is retried.
    async fn resolve_owner(&mut self) -> Result<(), Error> {
        let Some((account, lease)) = self.owner_account.clone() else {
            return Ok(());
        };
        let client = self.api.clone().into_client();
        let namespace = self.api.namespace().unwrap_or_default().to_owned();
        match timed(
            "reading the table's owner",
            owner::resolve(&client, &namespace, &account),
        )
        .await?
        {
            Ok(Some(found)) => self.owner = Some(found),
            Ok(None) if self.owner.is_some() => {
                tracing::warn!(service_account = %account, "the table's owner is gone (the release is being removed?): written for the one it had")
            }
            Ok(None) => tracing::warn!(
                service_account = %account,
                "the table's owner cannot be read: the table is written without one, and uninstalling without hooks would leave it"
            ),
            Err(source) => return Err(Error::ReadOwner { account, source }),
        }
        if let Some(found) = &self.owner {
            let adopted = owner::adopt_lease(&client, &namespace, &lease, found);
            match timed("owning the leader Lease", adopted).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::debug!(lease = %lease, error = %e, "leader Lease not given its owner; tried again next term")
                }
                Err(e) => {
                    tracing::debug!(lease = %lease, error = %e, "leader Lease not given its owner; tried again next term")
                }
            }
        }
        Ok(())
    }

    /// Pushes each delta to the resolvers as it writes it (P12).
    pub fn with_pusher(mut self, pusher: Pusher) -> Self {
        self.pusher = Some(pusher);
        self
    }

    /// Where deltas are pushed from now on: the resolvers' advertised addresses.
    pub fn push_to(&mut self, addresses: Arc<[Arc<str>]>) {
        if let Some(pusher) = self.pusher.as_mut() {
            pusher.retarget(addresses);
        }
    }

    /// The published manifest's shard count (0 before the first).
    fn shards(&self) -> u32 {
        self.manifest.as_ref().map_or(0, |(m, _)| m.shards)
    }

    /// Forgets what was written (a new leadership term reads the server again).
    pub fn reset(&mut self) {
        self.written.clear();
        self.manifest = None;
        self.served = None;
        self.deltas = (0, 0);
        self.loaded = false;
        self.full_next = true;
        self.manifest_groups = None;
        self.fold = None;
    }

    /// Publishes nothing below `generation` (the highest a resolver says it serves). A raise
    /// makes the next table a full one (P4): a delta names the generation before it, and no
    /// reader of this manifest has the generations skipped, so a delta after them would never
    /// apply (until a fold, up to 64 changes later).
    pub fn raise_generation(&mut self, generation: u64) {
        if generation > self.generation {
            self.generation = generation;
            self.full_next = true;
        }
    }

    /// A fold is under way: [`Publisher::fold_step`] has work.
    pub fn folding(&self) -> bool {
        self.fold.is_some()
    }

    /// Reads what is published: the content hashes (so unchanged shards are not rewritten),
    /// the generation to continue above, and the groups served.
    pub async fn read_back(&mut self) -> Result<ReadBack, Error> {
        self.resolve_owner().await?;
        let list = timed(
            "listing the table ConfigMaps",
            self.api.list(&ListParams::default().labels(TABLE_LABEL)),
        )
        .await?
        .map_err(Error::ListTable)?;
        let role = |cm: &ConfigMap| cm.labels().get(TABLE_LABEL).cloned();
        // An object without this installation's owner counts as not written (P13).
        let owner = self.owner.clone();
        let owned = |cm: &ConfigMap| {
            owner
                .as_ref()
                .is_none_or(|o| owner::owned_by(&cm.metadata, o))
        };
        let mut manifest_owned = true;
        self.written = list
            .items
            .iter()
            .filter(|cm| role(cm).as_deref() != Some(DELTA))
            .filter(|cm| owned(cm))
            .filter_map(|cm| {
                Some((
                    cm.name_any(),
                    cm.annotations().get(HASH_ANNOTATION)?.clone(),
                ))
            })
            .collect();
        let mut found = ReadBack::default();
        let mut shards = Vec::new();
        let mut deltas = Vec::new();
        let mut manifest = None;
        for cm in &list.items {
            let Some(data) = cm.data.as_ref().and_then(|d| d.get(DATA_KEY)) else {
                continue;
            };
            match role(cm).as_deref() {
                Some(MANIFEST) => match serde_json::from_str::<Manifest>(data) {
                    Ok(m) => {
                        manifest_owned = owned(cm);
                        manifest = Some((m, published::content_hash(data.as_bytes())));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "published manifest unreadable; it will be rewritten")
                    }
                },
                Some(DELTA) => match serde_json::from_str::<Delta>(data) {
                    Ok(d) => deltas.push(d),
                    Err(e) => {
                        tracing::warn!(configmap = %cm.name_any(), error = %e, "published delta unreadable; it will be deleted")
                    }
                },
                _ => match serde_json::from_str::<published::Shard>(data) {
                    Ok(shard) => shards.push(shard),
                    Err(e) => {
                        tracing::warn!(configmap = %cm.name_any(), error = %e, "published shard unreadable; it will be rewritten")
                    }
                },
            }
        }
        self.stale_deltas = list
            .items
            .iter()
            .any(|cm| role(cm).as_deref() == Some(DELTA));
        // With a manifest, a group counts from the shard its layout puts it in: shards left
        // over from another shard count do not bring back what they held.
        let count = manifest
            .as_ref()
            .map(|(m, _): &(Manifest, String)| m.shards);
        for shard in shards {
            let index = shard.index;
            found.groups.extend(
                shard
                    .groups
                    .into_iter()
                    .filter(|(k, _)| count.is_none_or(|n| published::shard_of(k, n) == index)),
            );
        }
        self.manifest_groups = manifest.as_ref().and_then(|(m, _)| {
            let named = (0..m.shards).all(|i| {
                let hash = m.hashes.get(i as usize);
                hash.is_some() && self.written.get(&format!("{TABLE_NAME}-{i}")) == hash
            });
            named.then(|| found.groups.clone())
        });
        if let Some((m, hash)) = &manifest {
            found.generation = m.generation;
            // The deltas on the manifest, in order, as the resolvers apply them.
            let mut at = m.generation;
            while let Some(d) = deltas
                .iter()
                .find(|d| &d.base_hash == hash && d.previous == at)
            {
                for key in &d.removed {
                    found.groups.remove(key);
                }
                found
                    .groups
                    .extend(d.groups.iter().map(|(k, g)| (k.clone(), g.clone())));
                at = d.generation;
            }
        }
        // Above every generation written, applied or not.
        let highest = deltas.iter().map(|d| d.generation).max().unwrap_or(0);
        found.generation = found.generation.max(highest);
        self.generation = self.generation.max(found.generation);
        // A manifest without the owner is not continued: the term's first table writes a new
        // one (its generation still counts, above).
        self.manifest = manifest.filter(|_| manifest_owned);
        self.loaded = true;
        self.full_next = true;
        Ok(found)
    }

    /// Publishes `table`: as a delta on the published manifest when the term has one and the
    /// change is small, else as a full table; stops before any write once `still_leader` is
    /// false.
    pub async fn publish(
        &mut self,
        table: &Arc<RoutingTable<Value>>,
        still_leader: impl Fn() -> bool,
    ) -> Result<PublishReport, Error> {
        if !self.loaded {
            self.read_back().await?;
        }
        // The shards read back name the base of a renewed manifest for the first publish
        // after the read-back only: anything written since (a fold) changes what they hold.
        let read_back_shards = self.manifest_groups.take();
        if !self.full_next
            && let (Some(served), Some((manifest, base_hash))) = (&self.served, &self.manifest)
        {
            let (groups, removed) = published::diff(&served.groups, &table.groups);
            let mut report = PublishReport {
                generation: self.generation,
                shards: manifest.shards,
                ..Default::default()
            };
            if groups.is_empty() && removed.is_empty() {
                self.served = Some(table.clone());
                return Ok(report);
            }
            let delta = Delta {
                base: manifest.generation,
                base_hash: base_hash.clone(),
                previous: self.generation,
                generation: self.generation + 1,
                groups,
                removed,
            };
            let body = serde_json::to_string(&delta).map_err(Error::EncodeManifest)?;
            if body.len() <= MAX_DELTA_BYTES {
                if !still_leader() {
                    return Err(Error::NotLeader);
                }
                let hash = published::content_hash(body.as_bytes());
                let bytes = body.len();
                // P12: the resolvers have it while its ConfigMap is being written.
                let pushed = self.pusher.as_mut().is_some_and(|p| p.push(&body) > 0);
                let written = self
                    .apply(
                        &delta_name(delta.generation),
                        DELTA,
                        &hash,
                        Some(delta.base),
                        body,
                    )
                    .await;
                if let Err(e) = written {
                    if pushed {
                        // Resolvers may serve a generation that was never written: the next
                        // table goes above it, in full (P12, as P4).
                        self.raise_generation(delta.generation);
                    }
                    return Err(e);
                }
                self.generation = delta.generation;
                self.served = Some(table.clone());
                self.stale_deltas = true;
                self.deltas = (self.deltas.0 + 1, self.deltas.1 + bytes);
                if self.fold.is_none() && fold_due(self.deltas, self.shards(), 1) {
                    self.fold = Some(Fold::of(table.clone()));
                }
                report.generation = self.generation;
                report.delta_written = true;
                report.bytes_written = bytes;
                return Ok(report);
            }
        }
        self.publish_full(table, still_leader, read_back_shards)
            .await
    }

    /// Writes the shards whose content changed, then the manifest under the next generation,
    /// then removes shards a smaller table no longer uses and deltas of older manifests.
    async fn publish_full(
        &mut self,
        table: &Arc<RoutingTable<Value>>,
        still_leader: impl Fn() -> bool,
        read_back_shards: Option<healthroute_table::Groups>,
    ) -> Result<PublishReport, Error> {
        // Before the encode: a renewed manifest names shards already written, and encoding
        // 100,000 groups for nothing would take a takeover's second.
        if let Some(base) = read_back_shards
            && let Some(report) = self.renew_manifest(base, table, &still_leader).await?
        {
            return Ok(report);
        }
        let encoded = self.encoder.encode(table)?;
        let mut report = PublishReport {
            generation: self.generation,
            shards: encoded.manifest.shards,
            ..Default::default()
        };
        // The shards it names are on the server as written (their content, their owner).
        let same_set = self.manifest.as_ref().is_some_and(|(m, _)| {
            m.shards == encoded.manifest.shards && m.hashes == encoded.manifest.hashes
        }) && encoded.shards.iter().all(|(index, hash, _)| {
            self.written.get(&format!("{TABLE_NAME}-{index}")) == Some(hash)
        });
        // The manifest on the server is this table, and no delta lies on it: nothing to write.
        if same_set && self.generation == self.manifest.as_ref().map_or(0, |(m, _)| m.generation) {
            self.settle(table, 0);
            return Ok(report);
        }
        // The shards whose content changed, a few at a time: a term's first table at 100,000
        // groups rewrites up to every shard (about 256 KiB each), one after the other took
        // seconds of a takeover. The manifest follows once all of them are written.
        let changed: Vec<_> = encoded
            .shards
            .iter()
            .map(|(index, hash, json)| (format!("{TABLE_NAME}-{index}"), hash, json))
            .filter(|(name, hash, _)| self.written.get(name) != Some(*hash))
            .collect();
        for batch in changed.chunks(SHARD_WRITES_IN_FLIGHT) {
            if !still_leader() {
                return Err(Error::NotLeader);
            }
            let writes = batch.iter().map(|(name, hash, json)| {
                self.apply(
                    name,
                    SHARD,
                    hash,
                    None,
                    String::from_utf8_lossy(json).into_owned(),
                )
            });
            let results = futures::future::join_all(writes).await;
            let mut failed = None;
            for ((name, hash, json), result) in batch.iter().zip(results) {
                match result {
                    Ok(()) => {
                        self.written.insert(name.clone(), (*hash).clone());
                        report.shards_written += 1;
                        report.bytes_written += json.len();
                    }
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        let (manifest, bytes) = self
            .write_manifest(encoded.manifest, None, &still_leader)
            .await?;
        report.generation = manifest.generation;
        report.manifest_written = true;
        report.bytes_written += bytes;
        self.settle(table, 0);
        self.clean_up(report.shards).await;
        Ok(report)
    }

    /// A term's first table, when the shards on the server are the ones the published manifest
    /// names: a new manifest naming the same shards, after a catch-up delta with what changed
    /// since them (the deltas of the last term, and this change), as a fold ends. A new
    /// manifest still starts the term (an old leader's deltas on the old one are left behind,
    /// as with any full table), without rewriting the shards those deltas touched: at 100,000
    /// groups that was most of the 117 shards and seconds of a takeover. Nothing is written
    /// when the shards hold this table and no delta lies on them. `None` when the catch-up
    /// would not fit in one object: a full table then.
    async fn renew_manifest(
        &mut self,
        base: healthroute_table::Groups,
        table: &Arc<RoutingTable<Value>>,
        still_leader: &impl Fn() -> bool,
    ) -> Result<Option<PublishReport>, Error> {
        let Some((manifest, _)) = &self.manifest else {
            return Ok(None);
        };
        let manifest = manifest.clone();
        let (groups, removed) = published::diff(&base, &table.groups);
        let fits = serde_json::to_vec(&(&groups, &removed))
            .is_ok_and(|json| json.len() <= published::MAX_SHARD_BYTES - 1024);
        if !fits {
            return Ok(None);
        }
        let shards = manifest.shards;
        if groups.is_empty() && removed.is_empty() && self.generation == manifest.generation {
            // The manifest on the server is this table, and no delta lies on it.
            self.settle(table, 0);
            return Ok(Some(PublishReport {
                generation: self.generation,
                shards,
                ..Default::default()
            }));
        }
        let catch_up = (!groups.is_empty() || !removed.is_empty()).then_some((groups, removed));
        let (_, bytes) = self
            .write_manifest(manifest, catch_up, still_leader)
            .await?;
        self.served = Some(table.clone());
        self.full_next = false;
        self.fold = None;
        let report = PublishReport {
            generation: self.generation,
            shards,
            manifest_written: true,
            bytes_written: bytes,
            ..Default::default()
        };
        self.clean_up(shards).await;
        Ok(Some(report))
    }

    /// Writes `manifest` under the next generation, after `catch_up` (the changes from the
    /// manifest's table to what is served) as a delta on it; returns the manifest written and
    /// the bytes sent.
    async fn write_manifest(
        &mut self,
        manifest: Manifest,
        catch_up: Option<(DeltaGroups, Vec<GroupKey>)>,
        still_leader: &impl Fn() -> bool,
    ) -> Result<(Manifest, usize), Error> {
        let manifest = Manifest {
            generation: self.generation + 1,
            ..manifest
        };
        let body = serde_json::to_string(&manifest).map_err(Error::EncodeManifest)?;
        let hash = published::content_hash(body.as_bytes());
        let mut bytes = body.len();
        let mut generation = manifest.generation;
        if let Some((groups, removed)) = catch_up {
            let delta = Delta {
                base: manifest.generation,
                base_hash: hash.clone(),
                previous: manifest.generation,
                generation: manifest.generation + 1,
                groups,
                removed,
            };
            let body = serde_json::to_string(&delta).map_err(Error::EncodeManifest)?;
            if !still_leader() {
                return Err(Error::NotLeader);
            }
            bytes += body.len();
            let delta_bytes = body.len();
            let delta_hash = published::content_hash(body.as_bytes());
            self.apply(
                &delta_name(delta.generation),
                DELTA,
                &delta_hash,
                Some(manifest.generation),
                body,
            )
            .await?;
            self.stale_deltas = true;
            self.deltas = (1, delta_bytes);
            generation = delta.generation;
        }
        if !still_leader() {
            return Err(Error::NotLeader);
        }
        self.apply(TABLE_NAME, MANIFEST, &hash, None, body).await?;
        self.written.insert(TABLE_NAME.to_owned(), hash.clone());
        self.generation = generation;
        self.manifest = Some((manifest.clone(), hash));
        Ok((manifest, bytes))
    }

    /// After a full table: it is what is served, with no delta on it yet.
    fn settle(&mut self, table: &Arc<RoutingTable<Value>>, deltas: usize) {
        self.served = Some(table.clone());
        self.deltas = (deltas, 0);
        self.full_next = false;
        self.fold = None;
    }

    /// One step of the fold under way: encodes its table, or writes one shard that changed,
    /// or (the last step) the catch-up delta and the new manifest.
    pub async fn fold_step(&mut self, still_leader: impl Fn() -> bool) -> Result<FoldStep, Error> {
        self.fold_step_until(still_leader, std::future::pending())
            .await
    }

    /// [`Publisher::fold_step`], given up when `newer` (a newer table to publish) completes
    /// first while a shard is being written or old objects deleted: the change is not held
    /// behind a write of hundreds of kilobytes (P11). A shard given up is written again at the
    /// next step (the write is idempotent; no manifest names it until the fold's own). Once
    /// the deltas on the manifest reach twice the fold's threshold, the fold is no longer
    /// given up: a steady stream of changes cannot postpone it for ever.
    pub async fn fold_step_until(
        &mut self,
        still_leader: impl Fn() -> bool,
        newer: impl std::future::Future<Output = ()>,
    ) -> Result<FoldStep, Error> {
        let mut newer = std::pin::pin!(newer);
        let yielding = !fold_due(self.deltas, self.shards(), 2);
        let mut step = FoldStep {
            generation: self.generation,
            ..Default::default()
        };
        let Some(fold) = self.fold.as_mut() else {
            step.done = true;
            return Ok(step);
        };
        let Some(encoded) = fold.encoded.as_ref() else {
            // On a blocking thread: encoding 100,000 groups takes most of a second, and a
            // change that arrives meanwhile is published at once while the encode goes on.
            let encoding = fold.encoding.get_or_insert_with(|| {
                let (mut encoder, target) = (self.encoder.clone(), fold.target.clone());
                tokio::task::spawn_blocking(move || {
                    let encoded = encoder.encode(&target);
                    (encoder, encoded)
                })
            });
            let joined = if yielding {
                tokio::select! {
                    biased;
                    joined = &mut *encoding => joined,
                    () = newer.as_mut() => {
                        step.given_up = true;
                        return Ok(step);
                    }
                }
            } else {
                (&mut *encoding).await
            };
            fold.encoding = None;
            let (encoder, encoded) = joined.map_err(|e| Error::FoldEncode(e.to_string()))?;
            fold.encoded = Some(encoded?);
            self.encoder = encoder;
            return Ok(step);
        };
        while let Some((index, hash, json)) = encoded.shards.get(fold.next) {
            let name = format!("{TABLE_NAME}-{index}");
            if self.written.get(&name) == Some(hash) {
                fold.next += 1;
                continue;
            }
            if !still_leader() {
                return Err(Error::NotLeader);
            }
            let (hash, data) = (hash.clone(), String::from_utf8_lossy(json).into_owned());
            let bytes = data.len();
            let write = self.apply(&name, SHARD, &hash, None, data);
            if yielding {
                tokio::select! {
                    biased;
                    written = write => written?,
                    () = newer.as_mut() => {
                        step.given_up = true;
                        return Ok(step);
                    }
                }
            } else {
                write.await?;
            }
            self.written.insert(name, hash);
            if let Some(fold) = self.fold.as_mut() {
                fold.next += 1;
            }
            step.bytes_written = bytes;
            step.shards_written = 1;
            return Ok(step);
        }
        let Some(Fold {
            target,
            encoded: Some(encoded),
            ..
        }) = self.fold.take()
        else {
            step.done = true;
            return Ok(step);
        };
        let served = self.served.clone().unwrap_or_else(|| target.clone());
        let (groups, removed) = published::diff(&target.groups, &served.groups);
        let catch_up = (!groups.is_empty() || !removed.is_empty()).then_some((groups, removed));
        let more = catch_up.is_some();
        let shards = encoded.manifest.shards;
        match self
            .write_manifest(encoded.manifest, catch_up, &still_leader)
            .await
        {
            Ok((_, bytes)) => step.bytes_written = bytes,
            Err(e) => {
                // Tried again from the start (what is written already is not written twice).
                self.fold = Some(Fold::of(target));
                return Err(e);
            }
        }
        if !more {
            self.deltas = (0, 0);
        }
        // Harmless where it is cut short: tried again after the next manifest.
        tokio::select! {
            biased;
            () = self.clean_up(shards) => {}
            () = newer.as_mut(), if yielding => step.given_up = true,
        }
        step.done = true;
        step.generation = self.generation;
        Ok(step)
    }

    /// Deletes what the manifest no longer names: shards at or beyond `count`, and the deltas
    /// of older manifests (one label-selected request). Harmless where they stay: no reader
    /// uses them. Tried again after the next manifest.
    async fn clean_up(&mut self, count: u32) {
        self.remove_unused_shards(count).await;
        let Some((manifest, _)) = &self.manifest else {
            return;
        };
        if !self.stale_deltas {
            return;
        }
        let selector = format!(
            "{TABLE_LABEL}={DELTA},{BASE_LABEL}!={}",
            manifest.generation
        );
        let list = ListParams::default().labels(&selector);
        match timed(
            "deleting old deltas",
            self.api.delete_collection(&DeleteParams::default(), &list),
        )
        .await
        {
            Ok(Ok(_)) => {
                // Only the manifest's own deltas (if any) are left.
                self.stale_deltas = self.deltas.0 > 0;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "old deltas not deleted"),
            Err(e) => tracing::debug!(error = %e, "old deltas not deleted"),
        }
    }

    /// Deletes shards at or beyond `count`: after a shrink the manifest no longer names them.
    async fn remove_unused_shards(&mut self, count: u32) {
        let unused: Vec<String> = self
            .written
            .keys()
            .filter(|name| {
                name.strip_prefix(TABLE_NAME)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .and_then(|i| i.parse::<u32>().ok())
                    .is_some_and(|i| i >= count)
            })
            .cloned()
            .collect();
        for name in unused {
            match timed(&name, self.api.delete(&name, &DeleteParams::default())).await {
                Ok(Ok(_)) => {
                    self.written.remove(&name);
                }
                Ok(Err(kube::Error::Api(s))) if s.is_not_found() => {
                    self.written.remove(&name);
                }
                // Harmless where it stays: no manifest names it. Tried again next time.
                Ok(Err(e)) => {
                    tracing::debug!(configmap = %name, error = %e, "unused shard not removed")
                }
                Err(e) => {
                    tracing::debug!(configmap = %name, error = %e, "unused shard not removed")
                }
            }
        }
    }

    /// Applies one table object; a delta is labelled with the generation of its manifest.
    async fn apply(
        &self,
        name: &str,
        role: &str,
        hash: &str,
        base: Option<u64>,
        data: String,
    ) -> Result<(), Error> {
        let mut labels =
            json!({ TABLE_LABEL: role, "app.kubernetes.io/managed-by": "healthroute-operator" });
        if let Some(base) = base {
            labels[BASE_LABEL] = json!(base.to_string());
        }
        let mut cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": { HASH_ANNOTATION: hash },
            },
            "data": { DATA_KEY: data },
        });
        if let Some(owner) = &self.owner {
            cm["metadata"]["ownerReferences"] = json!([owner]);
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        timed(name, self.api.patch(name, &params, &Patch::Apply(cm)))
            .await?
            .map(|_| ())
            .map_err(|source| Error::WriteTable {
                name: name.to_owned(),
                source,
            })
    }
}

async fn timed<T>(what: &str, request: impl std::future::Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .map_err(|_| Error::Timeout {
            what: what.into(),
            after: REQUEST_TIMEOUT,
        })
}

/// What the control loop asks of the publisher: the newest table of a leadership term.
#[derive(Debug, Clone, Default)]
pub struct PublishRequest {
    /// The leadership term; 0 while not the leader.
    pub term: u64,
    /// The highest generation a resolver says it serves: the next one goes above it.
    pub floor: u64,
    /// The table to publish; `None` until the term's read-back has been taken in.
    pub table: Option<Arc<RoutingTable<Value>>>,
    /// Where deltas are pushed (P12): the resolvers' advertised addresses.
    pub push_to: Arc<[Arc<str>]>,
}

/// What the publisher tells the control loop.
#[derive(Debug)]
pub enum PublishFeedback {
    /// What a new term found published; the control loop takes it in before it sends a table.
    ReadBack { term: u64, found: ReadBack },
    /// `table` is what the resolvers can assemble now, as `generation`.
    Published {
        term: u64,
        generation: u64,
        table: Arc<RoutingTable<Value>>,
    },
    /// Publishing failed; it is retried with backoff (or when a newer table comes).
    Failed { term: u64, error: String },
}

/// Publishes the newest requested table of the current term, until `requests` closes.
pub async fn run_publisher(
    mut publisher: Publisher,
    mut requests: watch::Receiver<PublishRequest>,
    feedback: mpsc::UnboundedSender<PublishFeedback>,
    metrics: Arc<PublisherMetrics>,
) {
    let mut term = 0;
    let mut read_back = false;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut errors = ErrorLog::default();
    let mut last: Option<(u64, Arc<RoutingTable<Value>>)> = None;
    loop {
        let retry = async {
            match retry_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        // A fold goes on only while no newer table waits, and a newer table that arrives
        // during one of its writes cuts that write short: a change never waits for a fold.
        let fold_now = term != 0 && read_back && retry_at.is_none() && publisher.folding();
        tokio::select! {
            biased;
            changed = requests.changed() => if changed.is_err() { return },
            _ = retry => retry_at = None,
            _ = std::future::ready(()), if fold_now => {
                let started = std::time::Instant::now();
                let current = &requests;
                // Has seen what `requests` has: completes when a newer table is sent.
                let mut newer = requests.clone();
                let step = publisher
                    .fold_step_until(|| current.borrow().term == term, async move {
                        let _ = newer.changed().await;
                    })
                    .await;
                metrics.took(started.elapsed());
                match step {
                    Ok(step) => {
                        metrics.folded(step.shards_written, step.bytes_written, step.done);
                        if step.given_up {
                            tracing::debug!("a fold's write cut short for a newer table");
                        }
                        if step.done {
                            backoff.reset();
                            tracing::debug!(generation = step.generation, "deltas folded into a new manifest");
                        }
                    }
                    Err(Error::NotLeader) => {}
                    Err(e) => {
                        metrics.failed();
                        let error = e.to_string();
                        if errors.should_log(&error) {
                            tracing::error!(%error, "folding the table's deltas failed; retrying (logged once a minute per error)");
                        }
                        retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                    }
                }
                continue;
            }
        }
        let request = requests.borrow_and_update().clone();
        if request.term != term {
            term = request.term;
            read_back = false;
            last = None;
            retry_at = None;
            publisher.reset();
            backoff.reset();
            metrics.new_term();
        }
        // After a failure, a newer table waits for the backoff too: an API server that is
        // down is not asked once per change.
        if term == 0 || retry_at.is_some() {
            continue;
        }
        publisher.raise_generation(request.floor);
        publisher.push_to(request.push_to.clone());
        let failed = |error: String, errors: &mut ErrorLog| {
            metrics.failed();
            if errors.should_log(&error) {
                tracing::error!(%error, "publishing the routing table failed; retrying (logged once a minute per error)");
            }
            let _ = feedback.send(PublishFeedback::Failed { term, error });
        };
        if !read_back {
            match publisher.read_back().await {
                Ok(found) => {
                    read_back = true;
                    backoff.reset();
                    let _ = feedback.send(PublishFeedback::ReadBack { term, found });
                }
                Err(e) => {
                    failed(e.to_string(), &mut errors);
                    retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
                }
            }
            continue;
        }
        let Some(table) = request.table else { continue };
        if last
            .as_ref()
            .is_some_and(|(t, l)| *t == term && Arc::ptr_eq(l, &table))
        {
            continue; // already published (a floor change alone)
        }
        let started = std::time::Instant::now();
        let current = &requests;
        let result = publisher
            .publish(&table, || current.borrow().term == term)
            .await;
        metrics.took(started.elapsed());
        match result {
            Ok(report) => {
                backoff.reset();
                metrics.published(
                    report.generation,
                    report.shards,
                    report.shards_written,
                    report.delta_written,
                    report.bytes_written,
                );
                last = Some((term, table.clone()));
                let _ = feedback.send(PublishFeedback::Published {
                    term,
                    generation: report.generation,
                    table,
                });
            }
            Err(Error::NotLeader) => {}
            Err(e) => {
                failed(e.to_string(), &mut errors);
                retry_at = Some(tokio::time::Instant::now() + backoff.next_delay());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-P11: the fold threshold is 64 deltas or 256 KiB up to 8 shards, and grows with the
    // table past that, so that a fold costs about 32 KiB per change at any size.
    #[test]
    fn the_fold_threshold_grows_with_the_table() {
        let small = 8;
        assert!(!fold_due((63, 63 * 600), small, 1));
        assert!(fold_due((64, 64 * 600), small, 1));
        assert!(fold_due((3, FOLD_AFTER_BYTES), small, 1));
        // 100,000 groups: 117 shards, 15 times the threshold.
        let large = 117;
        assert!(!fold_due((64, 64 * 600), large, 1));
        assert!(!fold_due((959, 959 * 600), large, 1));
        assert!(fold_due((960, 960 * 600), large, 1));
        assert!(fold_due((10, 15 * FOLD_AFTER_BYTES), large, 1));
        // Twice the threshold: a fold no longer gives way to changes.
        assert!(!fold_due((1919, 0), large, 2));
        assert!(fold_due((1920, 0), large, 2));
        // Before a first manifest (no shards yet), the base threshold.
        assert!(fold_due((64, 0), 0, 1));
        // The amortised cost: a fold rewrites at most every shard (about 256 KiB each).
        for shards in [1_u32, 8, 21, 117, 400] {
            let deltas = (1..)
                .find(|&n| fold_due((n, n * 600), shards, 1))
                .expect("a fold comes");
            let per_change = shards as usize * 256 * 1024 / deltas;
            assert!(
                per_change <= 33 * 1024,
                "{shards} shards: {per_change} bytes per change"
            );
        }
    }
}
