//! Writing the compiled table as ConfigMaps (the format is `healthroute_table::published`,
//! where it lives and what resolvers read back `healthroute_table::contract`), and the
//! leader-gated task that does it beside the control loop.
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
//! pass [`FOLD_AFTER_DELTAS`] or [`FOLD_AFTER_BYTES`] (growing with the table:
//! [`fold_due`]), a fold writes them into the shards and a new manifest, one write at a time
//! between changes, never in a change's way: a change that arrives during a fold is a delta
//! on the old manifest, and the fold ends with a catch-up
//! delta on the new manifest written before it, so the new manifest never serves anything
//! older than what was served. The deltas of older manifests are then deleted beside the
//! publisher, [`DELETE_PACE`] a second; a new manifest cuts that short. The generation in the
//! manifest and the deltas belongs to the publisher: a new term continues above the highest
//! generation published or served (P4), whatever the compiler in this process counted.
//!
//! Every table object names the installation's owner (the operator's ServiceAccount, resolved
//! at each term's start: [`crate::owner`]) in its `ownerReferences`, so that uninstalling the
//! chart removes the table with it (P13). Objects on the server without that owner (written
//! before it was set, or for an account made again) count as not written: the term's first
//! table rewrites them.
//!
//! The boxes above, one module each:
//!
//! ```text
//!   task.rs       the publisher task: requests in, feedback out, backoff, when a fold may step
//!   read_back.rs  a term's start: what is published, and above which generation to go on
//!   write.rs      a change: a delta on the manifest, or a full table (shards, then manifest)
//!   fold.rs       between changes: the deltas folded into the shards and a new manifest
//!   mod.rs        the publisher's state, its owner (P13), and one object's write
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use healthroute_table::contract::{BASE_LABEL, DATA_KEY, DELTA, HASH_ANNOTATION, TABLE_LABEL};
use healthroute_table::published::{self, Manifest};
use healthroute_table::{CompiledGroup, GroupKey, RoutingTable, Value};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;

use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::owner;
use crate::push::Pusher;

mod fold;
mod read_back;
mod task;
mod write;

pub use fold::{DELETE_PACE, FOLD_AFTER_BYTES, FOLD_AFTER_DELTAS, FoldStep, fold_due};
pub use healthroute_table::contract::{ReadBack, TABLE_NAME, delta_name};
/// A change larger than this is published as a full table (it touches most shards anyway).
pub use healthroute_table::published::MAX_DELTA_BYTES;
pub use task::{PublishFeedback, PublishRequest, run_publisher};

use fold::Fold;

/// The longest one table request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Groups as a delta or a shard carries them.
type DeltaGroups = BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>;

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
    /// The delete of older manifests' deltas under way, beside the publisher and at a pace: at
    /// a takeover it removes the old leader's hundreds of deltas, which took the API server up
    /// to 0.9 s that the next change waited through (#44). `Err` when it failed. Nothing waits
    /// for it: a new manifest cuts it short.
    deleting: Option<tokio::task::JoinHandle<Result<(), String>>>,
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
            deleting: None,
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
        // A deposed leader's delete must not outlive its term: its selector would take the
        // next leader's deltas too. (The term's read-back finds what is left.)
        self.stop_deleting();
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

    /// Writes one table object whole; a delta is labelled with the generation of its manifest.
    ///
    /// The objects are this writer's alone and always written whole, so each is sent as
    /// itself: a shard or the manifest replaces what is there (created when it is not), a
    /// delta is created (replaced when a write of it that failed left it there). A server-side
    /// apply made the API server merge a 360 KiB shard field by field with the one it held:
    /// 41-48 ms of its CPU a shard against 15-30 ms for a replace, and 5.2 ms against 4.0 ms
    /// for a small object's round trip (`bench/table_cost.py`, #44).
    async fn write_object(
        &self,
        name: &str,
        role: &str,
        hash: &str,
        base: Option<u64>,
        data: String,
    ) -> Result<(), Error> {
        let mut labels = BTreeMap::from([
            (TABLE_LABEL.to_owned(), role.to_owned()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                FIELD_MANAGER.to_owned(),
            ),
        ]);
        if let Some(base) = base {
            labels.insert(BASE_LABEL.to_owned(), base.to_string());
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    HASH_ANNOTATION.to_owned(),
                    hash.to_owned(),
                )])),
                owner_references: self.owner.clone().map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(DATA_KEY.to_owned(), data)])),
            ..ConfigMap::default()
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let replace = || timed(name, self.api.replace(name, &params, &cm));
        let create = || timed(name, self.api.create(&params, &cm));
        let written = if role == DELTA {
            match create().await? {
                Err(kube::Error::Api(s)) if s.is_already_exists() => replace().await?,
                created => created,
            }
        } else {
            match replace().await? {
                Err(kube::Error::Api(s)) if s.is_not_found() => match create().await? {
                    // Made meanwhile (another writer's last write): replaced after all.
                    Err(kube::Error::Api(s)) if s.is_already_exists() => replace().await?,
                    created => created,
                },
                replaced => replaced,
            }
        };
        written.map(|_| ()).map_err(|source| Error::WriteTable {
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
