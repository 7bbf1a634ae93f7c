//! How one Peer-check write is sent (the writer task is [`crate::writes`]).

use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use super::plan::{PEER_FIELD_MANAGER, PeerWrite};
use crate::writes::{ObjectWrite, delete_params};
use healthroute_api::HealthCheck;
use healthroute_compiler::ObjectKey;

impl ObjectWrite for PeerWrite {
    const WHAT: &'static str = "peer check";

    fn key(&self) -> &ObjectKey {
        PeerWrite::key(self)
    }

    async fn send(&self, client: &Client) -> Result<(), kube::Error> {
        let key = self.key();
        let api: Api<HealthCheck> = Api::namespaced(client.clone(), &key.namespace);
        match self {
            PeerWrite::Apply { body, .. } => api
                .patch(
                    &key.name,
                    &PatchParams::apply(PEER_FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map(|_| ()),
            PeerWrite::Delete { uid, .. } => api
                .delete(&key.name, &delete_params(uid.clone()))
                .await
                .map(|_| ()),
        }
    }
}
