//! Writing the compiled table as ConfigMaps (the format is `healthroute_table::published`).
//!
//! The operator is the only writer (P3). Unchanged shards are not rewritten: the content hash
//! of every shard is kept (and read back from the objects' annotations when a new leader
//! starts), and the manifest is written last, so a resolver never assembles a set that is
//! still being written.

use std::collections::BTreeMap;

use healthroute_table::published::{self, DATA_KEY, MANIFEST, SHARD, TABLE_LABEL};
use healthroute_table::{RoutingTable, Value};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::status::FIELD_MANAGER;

/// The manifest ConfigMap's name; shards are `<name>-<index>`.
pub const TABLE_NAME: &str = "healthroute-table";
const HASH_ANNOTATION: &str = "healthroute.io/content-hash";

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("encoding the table: {0}")]
    Encode(String),
    #[error("writing ConfigMap {name}: {source}")]
    Write {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing the table ConfigMaps: {0}")]
    List(#[source] kube::Error),
}

/// What one publish did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PublishReport {
    pub shards_written: usize,
    pub manifest_written: bool,
}

pub struct Publisher {
    api: Api<ConfigMap>,
    encoder: published::Encoder,
    /// Content hash of what is on the server, by ConfigMap name.
    written: BTreeMap<String, String>,
    loaded: bool,
}

impl Publisher {
    pub fn new(api: Api<ConfigMap>, shards: u32) -> Self {
        Publisher {
            api,
            encoder: published::Encoder::new(shards),
            written: BTreeMap::new(),
            loaded: false,
        }
    }

    /// Forgets what was written (a new leadership term reads the server again).
    pub fn reset(&mut self) {
        self.written.clear();
        self.loaded = false;
    }

    async fn load(&mut self) -> Result<(), PublishError> {
        let list = self
            .api
            .list(&ListParams::default().labels(TABLE_LABEL))
            .await
            .map_err(PublishError::List)?;
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
        self.loaded = true;
        Ok(())
    }

    /// Writes the shards whose content changed, then the manifest.
    pub async fn publish(
        &mut self,
        table: &RoutingTable<Value>,
    ) -> Result<PublishReport, PublishError> {
        if !self.loaded {
            self.load().await?;
        }
        let encoded = self.encoder.encode(table).map_err(PublishError::Encode)?;
        let mut report = PublishReport::default();
        for (index, hash, json) in &encoded.shards {
            let name = format!("{TABLE_NAME}-{index}");
            if self.written.get(&name) == Some(hash) {
                continue;
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
        let manifest = serde_json::to_string(&encoded.manifest)
            .map_err(|e| PublishError::Encode(e.to_string()))?;
        let hash = published::content_hash(manifest.as_bytes());
        if self.written.get(TABLE_NAME) != Some(&hash) {
            self.apply(TABLE_NAME, MANIFEST, &hash, manifest).await?;
            self.written.insert(TABLE_NAME.to_owned(), hash);
            report.manifest_written = true;
        }
        Ok(report)
    }

    async fn apply(
        &self,
        name: &str,
        role: &str,
        hash: &str,
        data: String,
    ) -> Result<(), PublishError> {
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
        self.api
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(cm),
            )
            .await
            .map(|_| ())
            .map_err(|source| PublishError::Write {
                name: name.to_owned(),
                source,
            })
    }
}
