//! Where the leader's Metric-check evaluator (H14) finds a check's credentials in a cluster.

use std::sync::Arc;

use healthroute_checker::CredentialSource;
use healthroute_checker::metric::Credentials;

use crate::error::Error;

/// Credentials from Secrets in the check's namespace (a cluster): `bearerTokenSecretRef` and
/// `caSecretRef`, read by name at each evaluation.
pub fn secret_credentials(client: kube::Client) -> CredentialSource {
    Arc::new(move |key, source| {
        let client = client.clone();
        let namespace = key.namespace.to_string();
        let source = source.clone();
        Box::pin(async move {
            let cluster = |e: Error| healthroute_checker::Error::Credentials(Box::new(e));
            if source.bearer_token_file.is_some() || source.ca_file.is_some() {
                return Err(cluster(Error::FilesInCluster));
            }
            let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
                kube::Api::namespaced(client, &namespace);
            let read = |r: Option<healthroute_api::SecretKeyRef>| {
                let api = api.clone();
                let namespace = namespace.clone();
                async move {
                    let Some(r) = r else { return Ok(None) };
                    let secret =
                        api.get_opt(&r.name)
                            .await
                            .map_err(|source| Error::ReadSecret {
                                namespace: namespace.clone(),
                                name: r.name.clone(),
                                source,
                            })?;
                    let secret = secret.ok_or_else(|| Error::NoSecret {
                        namespace: namespace.clone(),
                        name: r.name.clone(),
                    })?;
                    secret
                        .data
                        .and_then(|mut d| d.remove(&r.key))
                        .map(|b| Some(b.0))
                        .ok_or(Error::NoSecretKey {
                            namespace,
                            name: r.name,
                            key: r.key,
                        })
                }
            };
            let token = read(source.bearer_token_secret_ref.clone())
                .await
                .map_err(cluster)?;
            let ca_pem = read(source.ca_secret_ref.clone()).await.map_err(cluster)?;
            Credentials::from_bytes(token, ca_pem)
        })
    })
}
