//! A change: one delta on the published manifest when the term has one and the change is
//! small (pushed to the resolvers as it is written, P12), else a full table: the shards whose
//! content changed, then the manifest (P11). A term's first table renews the manifest over the
//! shards already on the server when it can.

use std::sync::Arc;

use healthroute_table::contract::{DELTA, MANIFEST, SHARD, TABLE_NAME, delta_name, shard_name};
use healthroute_table::published::{self, Delta, Manifest};
use healthroute_table::{GroupKey, RoutingTable, Value};

use super::fold::{Fold, fold_due};
use super::{DeltaGroups, MAX_DELTA_BYTES, PublishReport, Publisher};
use crate::error::Error;

/// Shard writes of a full table in flight at once (a fold writes one at a time, between
/// changes).
const SHARD_WRITES_IN_FLIGHT: usize = 4;

impl Publisher {
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
                    .write_object(
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
        }) && encoded
            .shards
            .iter()
            .all(|(index, hash, _)| self.written.get(&shard_name(*index)) == Some(hash));
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
            .map(|(index, hash, json)| (shard_name(*index), hash, json))
            .filter(|(name, hash, _)| self.written.get(name) != Some(*hash))
            .collect();
        for batch in changed.chunks(SHARD_WRITES_IN_FLIGHT) {
            if !still_leader() {
                return Err(Error::NotLeader);
            }
            let writes = batch.iter().map(|(name, hash, json)| {
                self.write_object(
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
    pub(super) async fn write_manifest(
        &mut self,
        manifest: Manifest,
        catch_up: Option<(DeltaGroups, Vec<GroupKey>)>,
        still_leader: &impl Fn() -> bool,
    ) -> Result<(Manifest, usize), Error> {
        self.stop_deleting();
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
            self.write_object(
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
        self.write_object(TABLE_NAME, MANIFEST, &hash, None, body)
            .await?;
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
}
