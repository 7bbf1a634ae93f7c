//! Between changes: the deltas on the manifest folded into its shards and a new manifest, one
//! write at a time and never in a change's way (P11); then what the new manifest no longer
//! names is deleted.

use std::sync::Arc;

use healthroute_table::contract::{BASE_LABEL, DELTA, SHARD, TABLE_LABEL, shard_index, shard_name};
use healthroute_table::published::{self, Encoded};
use healthroute_table::{RoutingTable, Value};
use kube::api::{DeleteParams, ListParams};

use super::{Publisher, timed};
use crate::error::Error;

/// A fold starts when this many deltas lie on a manifest of up to 32 shards ...
pub const FOLD_AFTER_DELTAS: usize = 256;
/// ... or when they hold this many bytes together for every 8 shards; a reader that starts
/// reads them all.
pub const FOLD_AFTER_BYTES: usize = 256 * 1024;

/// Whether `deltas` (how many, how many bytes) on a manifest of `shards` shards call for a
/// fold, `times` the threshold. A fold rewrites up to every shard (about 256 KiB each), and
/// at 10,000 groups (8 shards) that is nearly every shard: the flips that met one waited for
/// it (a few in a minute, the slowest ones, #44). The count grows by 256 for every 32
/// shards, so that a fold costs at most about 32 KiB per change at any size (8 KiB at 8
/// shards) and the deltas stay a few hundred objects for every 32 shards; the bytes, by
/// 256 KiB for every 8 shards, keep what a starting resolver reads beside the shards to about
/// an eighth of the table's bytes at most.
pub fn fold_due(deltas: (usize, usize), shards: u32, times: usize) -> bool {
    let per = |n: usize| (shards as usize).div_ceil(n).max(1) * times;
    deltas.0 >= FOLD_AFTER_DELTAS * per(32) || deltas.1 >= FOLD_AFTER_BYTES * per(8)
}

/// Deletes of older manifests' deltas a second: at a takeover at 100,000 groups the old
/// leader leaves hundreds (a fold's threshold is about a thousand), which one
/// `deletecollection` handed to the API server at once, slowing the changes made meanwhile
/// (#44). Nothing waits for them (a new manifest cuts the delete short). A slower pace (20 a
/// second) did not take their cost out of a takeover's first minute: the same deletes, the
/// same serving time, spread over more of the minute.
pub const DELETE_PACE: u32 = 100;

/// Lists the deltas `selector` names and deletes them one at a time, [`DELETE_PACE`] a
/// second; one that is gone already counts as deleted. The first error ends it (the rest are
/// tried again after the next manifest).
async fn delete_paced(
    api: kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    selector: String,
) -> Result<(), String> {
    let list = ListParams::default().labels(&selector);
    let names: Vec<String> = match timed("listing old deltas", api.list_metadata(&list)).await {
        Ok(Ok(list)) => list
            .items
            .into_iter()
            .filter_map(|m| m.metadata.name)
            .collect(),
        Ok(Err(e)) => return Err(e.to_string()),
        Err(e) => return Err(e.to_string()),
    };
    let mut pace = tokio::time::interval(std::time::Duration::from_secs(1) / DELETE_PACE);
    for name in names {
        pace.tick().await;
        delete_one(&api, &name).await?;
    }
    Ok(())
}

/// Deletes the table object `name`; one that is gone already counts as deleted.
async fn delete_one(
    api: &kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    name: &str,
) -> Result<(), String> {
    match timed(name, api.delete(name, &DeleteParams::default())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.is_not_found() => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
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
pub(super) struct Fold {
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
    pub(super) fn of(target: Arc<RoutingTable<Value>>) -> Self {
        Fold {
            target,
            encoded: None,
            encoding: None,
            next: 0,
        }
    }
}

impl Publisher {
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
            let name = shard_name(*index);
            if self.written.get(&name) == Some(hash) {
                fold.next += 1;
                continue;
            }
            if !still_leader() {
                return Err(Error::NotLeader);
            }
            let (hash, data) = (hash.clone(), String::from_utf8_lossy(json).into_owned());
            let bytes = data.len();
            let write = self.write_object(&name, SHARD, &hash, None, data);
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
    /// of older manifests (listed by label, then deleted [`DELETE_PACE`] a second, beside the
    /// publisher: nothing waits for it, and the API server is not handed a thousand deletes at
    /// once). Harmless where they stay: no reader uses them. Tried again after the next
    /// manifest.
    pub(super) async fn clean_up(&mut self, count: u32) {
        self.remove_unused_shards(count).await;
        if self.deleting.as_ref().is_some_and(|d| !d.is_finished()) {
            return;
        }
        self.stop_deleting();
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
        self.deleting = Some(tokio::spawn(delete_paced(self.api.clone(), selector)));
        // Once it is done, only the manifest's own deltas (if any) are left.
        self.stale_deltas = self.deltas.0 > 0;
    }

    /// Ends the delete of older deltas, if one is under way, cutting it short: before a new
    /// manifest, whose own deltas its selector (every base but the one before) would take if
    /// it had not listed yet, and at a term's end. What it had not deleted (or failed to) is
    /// deleted after the next manifest; a change or a fold never waits for it.
    pub(super) fn stop_deleting(&mut self) {
        let Some(deleting) = self.deleting.take() else {
            return;
        };
        if !deleting.is_finished() {
            deleting.abort();
            self.stale_deltas = true;
            return;
        }
        // Finished: its outcome is ready, and a failure leaves deltas behind.
        let outcome = futures::FutureExt::now_or_never(deleting)
            .map(|joined| joined.unwrap_or_else(|e| Err(e.to_string())));
        if let Some(Err(error)) = outcome {
            tracing::debug!(%error, "old deltas not deleted");
            self.stale_deltas = true;
        }
    }

    /// Deletes shards at or beyond `count`: after a shrink the manifest no longer names them.
    async fn remove_unused_shards(&mut self, count: u32) {
        let unused: Vec<String> = self
            .written
            .keys()
            .filter(|name| shard_index(name).is_some_and(|i| i >= count))
            .cloned()
            .collect();
        for name in unused {
            match delete_one(&self.api, &name).await {
                Ok(()) => {
                    self.written.remove(&name);
                }
                // Harmless where it stays: no manifest names it. Tried again next time.
                Err(error) => {
                    tracing::debug!(configmap = %name, %error, "unused shard not removed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-P11: the fold threshold is 256 deltas up to 32 shards or 256 KiB up to 8 shards,
    // and grows with the table past that, so that a fold costs at most about 32 KiB per
    // change at any size.
    #[test]
    fn the_fold_threshold_grows_with_the_table() {
        // 10,000 groups: 8 shards.
        let small = 8;
        assert!(!fold_due((255, 255 * 360), small, 1));
        assert!(fold_due((256, 256 * 360), small, 1));
        assert!(fold_due((3, FOLD_AFTER_BYTES), small, 1));
        // 100,000 groups: 117 shards, 4 times the count and 15 times the bytes.
        let large = 117;
        assert!(!fold_due((256, 256 * 600), large, 1));
        assert!(!fold_due((1023, 1023 * 600), large, 1));
        assert!(fold_due((1024, 1024 * 600), large, 1));
        assert!(!fold_due((10, 15 * FOLD_AFTER_BYTES - 1), large, 1));
        assert!(fold_due((10, 15 * FOLD_AFTER_BYTES), large, 1));
        // Twice the threshold: a fold no longer gives way to changes.
        assert!(!fold_due((2047, 0), large, 2));
        assert!(fold_due((2048, 0), large, 2));
        // Before a first manifest (no shards yet), the base threshold.
        assert!(fold_due((256, 0), 0, 1));
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
            if shards <= 8 {
                assert!(per_change <= 8 * 1024, "{shards} shards: {per_change}");
            }
        }
    }
}
