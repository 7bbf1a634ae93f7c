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
use healthroute_table::contract::RESOLVER_LABEL;

/// What a watch does when the API server does not serve its kind (404 on the list).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unserved {
    /// Retries, unlisted: nothing is compiled until it lists.
    Wait,
    /// Counts as listed with no object (and keeps retrying).
    Empty,
}

fn not_served(error: &watcher::Error) -> bool {
    matches!(error,
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 404)
}

/// Whether the API server refused a streaming list as a request it does not take: with the
/// WatchList feature off it answers `sendInitialEvents` with 422 (Invalid); 400 is allowed
/// for the same. Anything else (403, 5xx, a dropped connection) is retried as it is.
fn refuses_streaming(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 422 || s.code == 400)
}

/// One watch as a stream of [`Input`]s: retried with a bounded backoff, its failures logged
/// once a minute each, a kind the server does not serve handled as `unserved` says.
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
    // server answering again (client-go's default waits up to 30 s). The initial list is
    // a streaming list (one watch that sends every object, then a bookmark): no pages, so
    // no continue token to expire while 100,000 objects are read on a busy server, and no
    // page held whole in memory. A server without it is listed in pages, as before.
    let start = move |streaming: bool| {
        let cfg = if streaming {
            cfg.clone().streaming_lists()
        } else {
            cfg.clone()
        };
        watcher(api.clone(), cfg).backoff(Backoff::watch()).boxed()
    };
    let mut events = start(true);
    let mut paged = false;
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
                Some(Err(error)) if !paged && refuses_streaming(&error) => {
                    tracing::info!(%error, "the API server does not take streaming lists (WatchList): listing {kind} in pages");
                    paged = true;
                    events = start(false);
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

/// Every watch the operator needs, merged into one stream: the objects it compiles in every
/// namespace, the Nodes, the checker Leases and the resolvers' registrations in `namespace`.
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
        // The resolvers' registrations (crate::registry): not compiled, and no compile waits
        // for them.
        watch(
            Api::<Lease>::namespaced(client.clone(), namespace),
            watcher::Config::default().labels(RESOLVER_LABEL),
            "ResolverLease",
            Input::Resolver,
            Unserved::Wait,
        ),
    ])
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;

    use super::*;

    /// A Lease as the API server sends it.
    fn lease(name: &str, rv: &str) -> serde_json::Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": name, "namespace": "hr", "resourceVersion": rv}})
    }

    /// An API server stand-in for one Lease watch: `streams` says whether it takes streaming
    /// lists; every request's query is recorded. A watch that is not the initial one hangs.
    fn server(streams: bool) -> (Client, Arc<Mutex<Vec<String>>>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut hung = Vec::new();
            while let Some((req, send)) = handle.next_request().await {
                let query = req.uri().query().unwrap_or_default().to_owned();
                log.lock().expect("log").push(query.clone());
                let initial = query.contains("sendInitialEvents=true");
                let body = if initial && streams {
                    // Every object, then the bookmark that ends the initial events.
                    let added = json!({"type": "ADDED", "object": lease("a", "7")});
                    let end = json!({"type": "BOOKMARK", "object": {
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"resourceVersion": "8",
                                     "annotations": {"k8s.io/initial-events-end": "true"}}}});
                    Some((200, format!("{added}\n{end}\n")))
                } else if initial {
                    let refused = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Invalid", "code": 422,
                        "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"});
                    Some((422, refused.to_string()))
                } else if !query.contains("watch=true") {
                    let list = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                        "metadata": {"resourceVersion": "8"}, "items": [lease("a", "7")]});
                    Some((200, list.to_string()))
                } else {
                    None
                };
                match body {
                    Some((code, body)) => send.send_response(
                        Response::builder()
                            .status(code)
                            .body(Body::from(body.into_bytes()))
                            .expect("a response"),
                    ),
                    None => hung.push(send),
                }
            }
        });
        (Client::new(service, "hr"), seen)
    }

    /// The first three inputs of a Lease watch: Init, the one Lease, InitDone.
    async fn first_three(client: Client) -> Vec<String> {
        let mut inputs = watch(
            Api::<Lease>::namespaced(client, "hr"),
            watcher::Config::default(),
            "Lease",
            Input::Lease,
            Unserved::Wait,
        );
        let mut got = Vec::new();
        while got.len() < 3 {
            let next = tokio::time::timeout(std::time::Duration::from_secs(5), inputs.next())
                .await
                .expect("the watch went quiet")
                .expect("the watch ended");
            got.push(match next {
                Input::Lease(watcher::Event::Init) => "init".to_owned(),
                Input::Lease(watcher::Event::InitApply(l)) => l.metadata.name.unwrap_or_default(),
                Input::Lease(watcher::Event::InitDone) => "done".to_owned(),
                _ => "other".to_owned(),
            });
        }
        got
    }

    #[tokio::test]
    async fn the_initial_list_is_a_streaming_list() {
        let (client, seen) = server(true);
        assert_eq!(first_three(client).await, ["init", "a", "done"]);
        let seen = seen.lock().expect("log").clone();
        assert!(seen[0].contains("sendInitialEvents=true"), "{seen:?}");
        assert!(
            seen.iter().all(|q| q.contains("watch=true")),
            "a list in pages was asked for: {seen:?}"
        );
    }

    #[tokio::test]
    async fn a_server_without_streaming_lists_is_listed_in_pages() {
        let (client, seen) = server(false);
        assert_eq!(first_three(client).await, ["init", "a", "done"]);
        let seen = seen.lock().expect("log").clone();
        let streaming = seen
            .iter()
            .filter(|q| q.contains("sendInitialEvents=true"))
            .count();
        assert_eq!(streaming, 1, "asked once, then paged for good: {seen:?}");
        assert!(seen[1].contains("limit=500"), "{seen:?}");
    }
}
