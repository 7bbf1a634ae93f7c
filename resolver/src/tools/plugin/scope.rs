//! Where a command looks ([`Scope`]: one namespace or all), how it reads through the API
//! server (a kind not served reads as none of it), and how it prints ([`Output`]: a table as
//! kubectl prints one, or JSON).

use std::fmt::Write as _;

use crate::error::Error;
use healthroute_api::ZonalAutoshift;
use healthroute_compiler::ObjectKey;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value as Json;

/// Where a command looks: one namespace, or all of them.
#[derive(Clone, Debug)]
pub enum Scope {
    Namespace(String),
    All,
}

impl Scope {
    pub(super) fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        match self {
            Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
            Scope::All => Api::all(client.clone()),
        }
    }

    /// Every `K` in the scope that `params` selects; `what` names the request in the error.
    pub(super) async fn list<K>(
        &self,
        client: &Client,
        params: &ListParams,
        what: &'static str,
    ) -> Result<Vec<K>, Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Ok(self
            .api::<K>(client)
            .list(params)
            .await
            .map_err(err(what))?
            .items)
    }
}

/// An object's key, `namespace/name`.
pub(super) fn key_of(object: &impl ResourceExt) -> ObjectKey {
    ObjectKey::new(object.namespace().unwrap_or_default(), object.name_any())
}

/// Whether the API server answered that it does not serve the kind (its CRD is not
/// installed), or that the user may not read it.
pub(super) fn unserved_or_forbidden(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) if matches!(s.code, 403 | 404) => Some(s.code),
        _ => None,
    }
}

/// Every ZonalAutoshift in the scope; none when the kind is not served (an install without
/// its CRD reads as one without ZonalAutoshifts).
pub(super) async fn autoshifts(
    client: &Client,
    scope: &Scope,
) -> Result<Vec<ZonalAutoshift>, Error> {
    match scope
        .api::<ZonalAutoshift>(client)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(e) if matches!(unserved_or_forbidden(&e), Some(404)) => Ok(Vec::new()),
        Err(source) => Err(Error::Kube {
            what: "cannot list ZonalAutoshifts",
            source,
        }),
    }
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

pub(super) fn err(what: &'static str) -> impl Fn(kube::Error) -> Error {
    move |source| Error::Kube { what, source }
}

/// Left-aligned columns, two spaces apart, as kubectl prints them.
pub(super) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

pub(super) fn json_text(v: &Json) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}
