//! Writing the compiled table as ConfigMaps (the format is `healthroute_table::published`),
//! and the leader-gated task that does it beside the control loop.
//!
//! ```text
//!  control loop ──watch<PublishRequest> (newest table only)──▶ publisher task
//!     ▲                                                         │ new term: read back what is
//!     │                                                         │ published (generation, groups)
//!     └────────── PublishFeedback: ReadBack / Published / Failed ┘ then: changed shards, manifest
//! ```
//!
//! The operator is the only writer (P3). Unchanged shards are not rewritten: the content hash
//! of every shard is kept (and read back from the objects' annotations when a new leader
//! starts), and the manifest is written last, so a resolver never assembles a set that is
//! still being written. The generation in the manifest belongs to the publisher: a new term
//! continues above the highest generation published or served (P4), whatever the compiler in
//! this process counted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use healthroute_table::published::{self, DATA_KEY, MANIFEST, Manifest, SHARD, TABLE_LABEL};
use healthroute_table::{RoutingTable, Value};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::metrics::PublisherMetrics;
use healthroute_admin::retry::{Backoff, ErrorLog};

/// The manifest ConfigMap's name; shards are `<name>-<index>`.
pub const TABLE_NAME: &str = "healthroute-table";
const HASH_ANNOTATION: &str = "healthroute.io/content-hash";
/// The longest one table request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What one publish did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PublishReport {
    pub shards_written: usize,
    pub manifest_written: bool,
    /// The generation the resolvers can assemble now.
    pub generation: u64,
    pub shards: u32,
}

/// What a new leader finds published.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReadBack {
    /// The manifest's generation (0 when nothing is published).
    pub generation: u64,
    /// Every group in the shards found, newest copy of each: what the resolvers serve, or
    /// are about to (a leader that stopped between a shard and the manifest left newer
    /// shards than the manifest names; their groups are good versions all the same).
    pub groups: BTreeMap<healthroute_table::GroupKey, Arc<healthroute_table::CompiledGroup<Value>>>,
}

pub struct Publisher {
    api: Api<ConfigMap>,
    encoder: published::Encoder,
    /// Content hash of what is on the server, by ConfigMap name.
    written: BTreeMap<String, String>,
    /// The shard hashes the published manifest names.
    manifest: Option<Manifest>,
    /// The highest generation published or served that this publisher knows of.
    generation: u64,
    loaded: bool,
}

impl Publisher {
    /// A publisher with at least `min_shards` shards (more when the table needs them).
    pub fn new(api: Api<ConfigMap>, min_shards: u32) -> Self {
        Publisher {
            api,
            encoder: published::Encoder::new(min_shards),
            written: BTreeMap::new(),
            manifest: None,
            generation: 0,
            loaded: false,
        }
    }

    /// Forgets what was written (a new leadership term reads the server again).
    pub fn reset(&mut self) {
        self.written.clear();
        self.manifest = None;
        self.loaded = false;
    }

    /// Publishes nothing below `generation` (the highest a resolver says it serves).
    pub fn raise_generation(&mut self, generation: u64) {
        self.generation = self.generation.max(generation);
    }

    /// Reads what is published: the content hashes (so unchanged shards are not rewritten),
    /// the generation to continue above, and the groups served.
    pub async fn read_back(&mut self) -> Result<ReadBack, Error> {
        let list = timed(
            "listing the table ConfigMaps",
            self.api.list(&ListParams::default().labels(TABLE_LABEL)),
        )
        .await?
        .map_err(Error::ListTable)?;
        self.written = list
            .items
            .iter()
            .filter_map(|cm| {
                Some((
                    cm.name_any(),
                    cm.annotations().get(HASH_ANNOTATION)?.clone(),
                ))
            })
            .collect();
        let mut found = ReadBack::default();
        let mut shards = Vec::new();
        let mut manifest = None;
        for cm in &list.items {
            let Some(data) = cm.data.as_ref().and_then(|d| d.get(DATA_KEY)) else {
                continue;
            };
            if cm.labels().get(TABLE_LABEL).map(String::as_str) == Some(MANIFEST) {
                match serde_json::from_str::<Manifest>(data) {
                    Ok(m) => manifest = Some(m),
                    Err(e) => {
                        tracing::warn!(error = %e, "published manifest unreadable; it will be rewritten")
                    }
                }
            } else {
                match serde_json::from_str::<published::Shard>(data) {
                    Ok(shard) => shards.push(shard),
                    Err(e) => {
                        tracing::warn!(configmap = %cm.name_any(), error = %e, "published shard unreadable; it will be rewritten")
                    }
                }
            }
        }
        // With a manifest, a group counts from the shard its layout puts it in: shards left
        // over from another shard count do not bring back what they held.
        let count = manifest.as_ref().map(|m: &Manifest| m.shards);
        for shard in shards {
            let index = shard.index;
            found.groups.extend(
                shard
                    .groups
                    .into_iter()
                    .filter(|(k, _)| count.is_none_or(|n| published::shard_of(k, n) == index)),
            );
        }
        if let Some(m) = &manifest {
            found.generation = m.generation;
            self.generation = self.generation.max(m.generation);
        }
        self.manifest = manifest;
        self.loaded = true;
        Ok(found)
    }

    /// Writes the shards whose content changed, then the manifest under the next generation,
    /// then removes shards a smaller table no longer uses; stops before any write once
    /// `still_leader` is false.
    pub async fn publish(
        &mut self,
        table: &RoutingTable<Value>,
        still_leader: impl Fn() -> bool,
    ) -> Result<PublishReport, Error> {
        if !self.loaded {
            self.read_back().await?;
        }
        let encoded = self.encoder.encode(table)?;
        let mut report = PublishReport {
            generation: self.generation,
            shards: encoded.manifest.shards,
            ..Default::default()
        };
        let same_set = self.manifest.as_ref().is_some_and(|m| {
            m.shards == encoded.manifest.shards && m.hashes == encoded.manifest.hashes
        });
        if same_set {
            return Ok(report);
        }
        for (index, hash, json) in &encoded.shards {
            let name = format!("{TABLE_NAME}-{index}");
            if self.written.get(&name) == Some(hash) {
                continue;
            }
            if !still_leader() {
                return Err(Error::NotLeader);
            }
            self.apply(
                &name,
                SHARD,
                hash,
                String::from_utf8_lossy(json).into_owned(),
            )
            .await?;
            self.written.insert(name, hash.clone());
            report.shards_written += 1;
        }
        let manifest = Manifest {
            generation: self.generation + 1,
            ..encoded.manifest
        };
        let body = serde_json::to_string(&manifest).map_err(Error::EncodeManifest)?;
        let hash = published::content_hash(body.as_bytes());
        if !still_leader() {
            return Err(Error::NotLeader);
        }
        self.apply(TABLE_NAME, MANIFEST, &hash, body).await?;
        self.written.insert(TABLE_NAME.to_owned(), hash);
        self.generation = manifest.generation;
        report.generation = manifest.generation;
        report.manifest_written = true;
        self.manifest = Some(manifest);
        self.remove_unused_shards(report.shards).await;
        Ok(report)
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

    async fn apply(&self, name: &str, role: &str, hash: &str, data: String) -> Result<(), Error> {
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": { TABLE_LABEL: role, "app.kubernetes.io/managed-by": "healthroute-operator" },
                "annotations": { HASH_ANNOTATION: hash },
            },
            "data": { DATA_KEY: data },
        });
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
        tokio::select! {
            changed = requests.changed() => if changed.is_err() { return },
            _ = retry => retry_at = None,
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
                metrics.published(report.generation, report.shards, report.shards_written);
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
