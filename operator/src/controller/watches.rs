//! Every watch the operator needs, merged into one stream of [`Input`]s. Each watch runs in
//! a span of its own (`watch{kind=...}`), retries with a bounded backoff, and logs its
//! failures itself: once a minute per distinct error, not at every retry. Every kind is read
//! down to what the operator reads while it is deserialized ([`crate::watched`],
//! [`crate::node`]): managed fields and the like are never allocated.
//!
//! The ZonalAutoshift watch alone takes a kind the API server does not serve (its CRD not
//! installed yet, as after a `helm upgrade`, which installs no new CRD) as listed and empty, so
//! the rest keeps being compiled; it lists them as soon as the CRD is there.

use std::collections::VecDeque;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::index::Input;
use crate::node::WatchedNode;
use crate::watched::{Lean, SERVICE_NAME_LABEL, unwrap_event};
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::CHECKER_LABEL;
use healthroute_api::{HealthCheck, RecordGroup, ZonalAutoshift, ZonalShift};

/// What a watch does when the API server does not serve its kind (404 on the list).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unserved {
    /// Retries, unlisted: nothing is compiled until it lists.
    Wait,
    /// Counts as listed with no object (and keeps retrying).
    Empty,
}

fn not_served(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// Every watch the operator needs, merged into one stream: the objects it compiles in every
/// namespace, the Nodes, the checker Leases in `namespace`.
pub fn inputs(client: &Client, namespace: &str) -> impl Stream<Item = Input> + Send + use<> {
    inputs_in(client, namespace, None)
}

/// [`inputs`], with the objects it compiles (RecordGroups, HealthChecks, ZonalShifts,
/// ZonalAutoshifts, EndpointSlices, Services) watched only in `watched` when it is given.
/// Nodes are cluster-wide either way.
pub fn inputs_in(
    client: &Client,
    namespace: &str,
    watched: Option<&str>,
) -> impl Stream<Item = Input> + Send + use<> {
    fn api<K>(client: &Client, watched: Option<&str>) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match watched {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    fn w<K>(
        api: Api<K>,
        cfg: watcher::Config,
        kind: &'static str,
        wrap: fn(watcher::Event<K>) -> Input,
    ) -> futures::stream::BoxStream<'static, Input>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        watch(api, cfg, kind, wrap, Unserved::Wait)
    }
    fn watch<K>(
        api: Api<K>,
        cfg: watcher::Config,
        kind: &'static str,
        wrap: fn(watcher::Event<K>) -> Input,
        unserved: Unserved,
    ) -> futures::stream::BoxStream<'static, Input>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        // Bounded backoff, reset on success: a watch resumes within about a second of the API
        // server answering again (client-go's default waits up to 30 s).
        let mut events = watcher(api, cfg).backoff(Backoff::watch()).boxed();
        let span = tracing::info_span!("watch", kind);
        let mut errors = ErrorLog::default();
        let mut queued: VecDeque<Input> = VecDeque::new();
        // Whether an unserved kind was last told as listed empty (said once until it lists).
        let mut told_empty = false;
        // The span is entered at each poll: the watcher's own requests and logs are in it.
        futures::stream::poll_fn(move |cx| {
            let _entered = span.enter();
            loop {
                if let Some(input) = queued.pop_front() {
                    return std::task::Poll::Ready(Some(input));
                }
                match futures::ready!(events.poll_next_unpin(cx)) {
                    Some(Ok(event)) => {
                        told_empty = false;
                        return std::task::Poll::Ready(Some(wrap(event)));
                    }
                    Some(Err(error)) if unserved == Unserved::Empty && not_served(&error) => {
                        if !told_empty {
                            told_empty = true;
                            queued.push_back(wrap(watcher::Event::Init));
                            queued.push_back(wrap(watcher::Event::InitDone));
                        }
                        if errors.should_log(&error.to_string()) {
                            tracing::warn!(%error, "{kind} is not served by the API server (is its CRD installed?): compiling as if there were none, and retrying (logged once a minute)");
                        }
                    }
                    Some(Err(error)) => {
                        // Every watch retries within a second while the API server is away.
                        if errors.should_log(&error.to_string()) {
                            tracing::warn!(%error, "watch failed; retrying (logged once a minute)");
                        }
                    }
                    None => return std::task::Poll::Ready(None),
                }
            }
        })
        .boxed()
    }
    let all = watcher::Config::default();
    futures::stream::select_all(vec![
        w(
            api::<Lean<RecordGroup>>(client, watched),
            all.clone(),
            "RecordGroup",
            |e| Input::Group(unwrap_event(e)),
        ),
        w(
            api::<Lean<HealthCheck>>(client, watched),
            all.clone(),
            "HealthCheck",
            |e| Input::Check(unwrap_event(e)),
        ),
        w(
            api::<Lean<ZonalShift>>(client, watched),
            all.clone(),
            "ZonalShift",
            |e| Input::Shift(unwrap_event(e)),
        ),
        // A new kind: an install upgraded without its CRD still compiles everything else.
        watch(
            api::<Lean<ZonalAutoshift>>(client, watched),
            all.clone(),
            "ZonalAutoshift",
            |e| Input::Autoshift(unwrap_event(e)),
            Unserved::Empty,
        ),
        w(
            api::<Lean<EndpointSlice>>(client, watched),
            watcher::Config::default().labels(SERVICE_NAME_LABEL),
            "EndpointSlice",
            |e| Input::Slice(unwrap_event(e)),
        ),
        w(
            api::<Lean<Service>>(client, watched),
            all.clone(),
            "Service",
            |e| Input::Service(unwrap_event(e)),
        ),
        // Cluster-scoped, and read down to their zone and readiness (crate::node).
        w(
            Api::<WatchedNode>::all(client.clone()),
            all,
            "Node",
            Input::Node,
        ),
        w(
            Api::<Lease>::namespaced(client.clone(), namespace),
            watcher::Config::default().labels(CHECKER_LABEL),
            "Lease",
            Input::Lease,
        ),
    ])
}
