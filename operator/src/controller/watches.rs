//! Every watch the operator needs, merged into one stream of [`Input`]s. Each watch runs in
//! a span of its own (`watch{kind=...}`), retries with a bounded backoff, and logs its
//! failures itself: once a minute per distinct error, not at every retry.

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::index::Input;
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::CHECKER_LABEL;
use healthroute_api::{HealthCheck, RecordGroup, ZonalShift};

/// Every watch the operator needs, merged into one stream: the objects it compiles in every
/// namespace, the checker Leases in `namespace`.
pub fn inputs(client: &Client, namespace: &str) -> impl Stream<Item = Input> + Send + use<> {
    inputs_in(client, namespace, None)
}

/// [`inputs`], with the objects it compiles (RecordGroups, HealthChecks, ZonalShifts,
/// EndpointSlices, Services) watched only in `watched` when it is given.
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
        // Bounded backoff, reset on success: a watch resumes within about a second of the API
        // server answering again (client-go's default waits up to 30 s).
        let mut events = watcher(api, cfg).backoff(Backoff::watch()).boxed();
        let span = tracing::info_span!("watch", kind);
        let mut errors = ErrorLog::default();
        // The span is entered at each poll: the watcher's own requests and logs are in it.
        futures::stream::poll_fn(move |cx| {
            let _entered = span.enter();
            loop {
                match futures::ready!(events.poll_next_unpin(cx)) {
                    Some(Ok(event)) => return std::task::Poll::Ready(Some(wrap(event))),
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
            api::<RecordGroup>(client, watched),
            all.clone(),
            "RecordGroup",
            Input::Group,
        ),
        w(
            api::<HealthCheck>(client, watched),
            all.clone(),
            "HealthCheck",
            Input::Check,
        ),
        w(
            api::<ZonalShift>(client, watched),
            all.clone(),
            "ZonalShift",
            Input::Shift,
        ),
        w(
            api::<EndpointSlice>(client, watched),
            watcher::Config::default().labels("kubernetes.io/service-name"),
            "EndpointSlice",
            Input::Slice,
        ),
        w(
            api::<Service>(client, watched),
            all,
            "Service",
            Input::Service,
        ),
        w(
            Api::<Lease>::namespaced(client.clone(), namespace),
            watcher::Config::default().labels(CHECKER_LABEL),
            "Lease",
            Input::Lease,
        ),
    ])
}
