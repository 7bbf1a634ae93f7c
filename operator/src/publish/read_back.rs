//! A term's start: what is published (the content hash of every object, so that unchanged
//! shards are not rewritten; the manifest and the deltas on it; the groups the resolvers
//! serve), and the generation to continue above (P4, P6).

use healthroute_table::contract::{
    DATA_KEY, DELTA, HASH_ANNOTATION, MANIFEST, TABLE_LABEL, shard_name,
};
use healthroute_table::published::{self, Delta, Manifest};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::ListParams;

use super::{Publisher, ReadBack, timed};
use crate::error::Error;
use crate::owner;

impl Publisher {
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
                hash.is_some() && self.written.get(&shard_name(i)) == hash
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
}
