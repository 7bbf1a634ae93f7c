//! An API server stand-in behind a `tower-test` mock: it keeps the table ConfigMaps, records
//! every request with the time it arrived, and answers status, table and HealthCheck writes
//! as a test says (at once, after a delay, with an error, or never). With
//! [`Settings::objects`] it also keeps the other objects the operator reads and writes
//! (ServiceAccounts, Leases, Deployments, RecordGroups, HealthChecks, ZonalShifts) as an API
//! server would: lists by namespace and label selector, gets, patches, deletes with a uid
//! precondition.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value as Json, json};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How a kind of write is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// An error status with this code.
    Fail(u16),
    /// No answer, ever (the request hangs until the client gives up).
    Hang,
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    pub path: String,
    pub body: Json,
}

impl Seen {
    /// The table ConfigMap this request writes, by name: a replace names it in the path, a
    /// create in the body.
    fn table_write(&self) -> Option<&str> {
        let path = self.path.split('?').next().unwrap_or_default();
        match self.method.as_str() {
            "PUT" => path.split("/configmaps/").nth(1),
            "POST" if path.ends_with("/configmaps") => self.body["metadata"]["name"].as_str(),
            _ => None,
        }
        .filter(|name| name.starts_with(healthroute_operator::publish::TABLE_NAME))
    }
    /// A write of the table manifest ConfigMap.
    pub fn is_manifest_write(&self) -> bool {
        self.table_write() == Some(healthroute_operator::publish::TABLE_NAME)
    }
    pub fn is_shard_write(&self) -> bool {
        self.table_write()
            .is_some_and(|name| healthroute_table::contract::shard_index(name).is_some())
    }
    pub fn is_delta_write(&self) -> bool {
        self.table_write()
            .is_some_and(|name| name.contains("-delta-"))
    }
    /// A write that makes a new table generation available to the resolvers: a manifest, or
    /// a delta on one (P11).
    pub fn is_table_commit(&self) -> bool {
        self.is_manifest_write() || self.is_delta_write()
    }
    pub fn is_status_write(&self) -> bool {
        self.method == "PATCH" && self.path.contains("/status?")
    }
    /// A write of a HealthCheck itself (not its status): the operator's Peer checks.
    pub fn is_check_write(&self) -> bool {
        self.method != "GET"
            && self.path.contains("/healthchecks/")
            && !self.path.contains("/status?")
    }
    pub fn is_event(&self) -> bool {
        self.method == "POST" && self.path.contains("/events")
    }
    /// The manifest's generation, for a manifest write.
    /// The generation a manifest or a delta write carries.
    pub fn manifest_generation(&self) -> Option<u64> {
        let data = self.body["data"]["table.json"].as_str()?;
        serde_json::from_str::<Json>(data).ok()?["generation"].as_u64()
    }
}

#[derive(Default)]
struct State {
    configmaps: BTreeMap<String, Json>,
    /// Secrets by `namespace/name`, answered to GETs.
    secrets: BTreeMap<String, Json>,
    /// Other objects by (plural, namespace, name), with [`Settings::objects`].
    objects: BTreeMap<(String, String, String), Json>,
    log: Vec<Seen>,
    /// Answers held back on purpose (`Answer::Hang`).
    hung: Vec<tower_test::mock::SendResponse<Response<Body>>>,
}

#[derive(Clone)]
pub struct Settings {
    pub tables: Answer,
    pub statuses: Answer,
    /// Writes of HealthChecks themselves (the operator's Peer checks).
    pub checks: Answer,
    /// Every write is answered after this long.
    pub write_delay: Duration,
    /// Writes of table shards (not manifests, not deltas) are answered after this long more.
    pub shard_write_delay: Duration,
    /// Keep the objects of [`STORED`] kinds as an API server would (off: writes are echoed,
    /// reads answered 404, as before).
    pub objects: bool,
    /// Deletes of a table delta (the publisher's old deltas), before `tables`.
    pub delta_deletes: Answer,
}

/// The kinds kept with [`Settings::objects`], by their plural.
pub const STORED: &[&str] = &[
    "serviceaccounts",
    "leases",
    "deployments",
    "recordgroups",
    "healthchecks",
    "zonalshifts",
];

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tables: Answer::Ok,
            statuses: Answer::Ok,
            checks: Answer::Ok,
            write_delay: Duration::ZERO,
            shard_write_delay: Duration::ZERO,
            objects: false,
            delta_deletes: Answer::Ok,
        }
    }
}

#[derive(Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
    settings: Arc<Mutex<Settings>>,
    changed: Arc<Notify>,
}

impl FakeApi {
    /// A client whose every request this stand-in answers.
    pub fn start(settings: Settings) -> (FakeApi, Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = FakeApi {
            state: Arc::default(),
            settings: Arc::new(Mutex::new(settings)),
            changed: Arc::new(Notify::new()),
        };
        let server = api.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let server = server.clone();
                tokio::spawn(async move { server.answer(req, send).await });
            }
        });
        (api, Client::new(service, "healthroute"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("fake API state")
    }

    pub fn set(&self, change: impl FnOnce(&mut Settings)) {
        change(&mut self.settings.lock().expect("settings"));
    }

    /// Puts a ConfigMap on the server as if an earlier leader had written it.
    pub fn put_configmap(&self, object: Json) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        self.lock().configmaps.insert(name, object);
    }

    /// Puts a Secret with these (plain) values on the server.
    pub fn put_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        use std::fmt::Write as _;
        let b64 = |v: &str| {
            const T: &[u8; 64] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut out = String::new();
            for chunk in v.as_bytes().chunks(3) {
                let n = chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b))
                    << (8 * (3 - chunk.len()));
                for i in 0..4 {
                    if i <= chunk.len() {
                        let _ = write!(out, "{}", T[((n >> (18 - 6 * i)) & 63) as usize] as char);
                    } else {
                        out.push('=');
                    }
                }
            }
            out
        };
        let data: serde_json::Map<String, Json> = data
            .iter()
            .map(|(k, v)| (k.to_string(), Json::String(b64(v))))
            .collect();
        self.lock().secrets.insert(
            format!("{namespace}/{name}"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": data}),
        );
    }

    /// Puts an object of a [`STORED`] kind on the server (`plural`; its namespace and name from
    /// its metadata), with a uid unless it has one.
    pub fn put_object(&self, plural: &str, mut object: Json) {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{plural}-{namespace}-{name}"));
        }
        self.lock()
            .objects
            .insert((plural.to_owned(), namespace, name), object);
    }

    /// The object of kind `plural` at `namespace/name`.
    pub fn object(&self, plural: &str, namespace: &str, name: &str) -> Option<Json> {
        self.lock()
            .objects
            .get(&(plural.to_owned(), namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The `namespace/name` of every object of kind `plural`.
    pub fn object_names(&self, plural: &str) -> Vec<String> {
        self.lock()
            .objects
            .keys()
            .filter(|(p, _, _)| p == plural)
            .map(|(_, ns, name)| format!("{ns}/{name}"))
            .collect()
    }

    pub fn configmap_names(&self) -> Vec<String> {
        self.lock().configmaps.keys().cloned().collect()
    }

    pub fn configmap(&self, name: &str) -> Option<Json> {
        self.lock().configmaps.get(name).cloned()
    }

    pub fn log(&self) -> Vec<Seen> {
        self.lock().log.clone()
    }

    /// Waits until a request matching `pred` has arrived (after the first `skip` requests),
    /// and returns it; panics after `within`.
    pub async fn wait_for(
        &self,
        what: &str,
        skip: usize,
        within: Duration,
        pred: impl Fn(&Seen) -> bool,
    ) -> Seen {
        let deadline = Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            if let Some(seen) = self.lock().log.iter().skip(skip).find(|s| pred(s)).cloned() {
                return seen;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let log: Vec<String> = self
                    .log()
                    .iter()
                    .map(|s| format!("{} {}", s.method, s.path))
                    .collect();
                panic!("no {what} within {within:?}; requests seen: {log:#?}");
            }
        }
    }

    async fn answer(
        &self,
        req: Request<Body>,
        send: tower_test::mock::SendResponse<Response<Body>>,
    ) {
        let method = req.method().as_str().to_owned();
        let path = req.uri().to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
        let body: Json = serde_json::from_slice(&bytes).unwrap_or(Json::Null);
        let seen = Seen {
            at: Instant::now(),
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
        };
        let is_shard_write = seen.is_shard_write();
        self.lock().log.push(seen);
        self.changed.notify_waiters();
        let settings = self.settings.lock().expect("settings").clone();
        let is_table = path.contains("/configmaps");
        let is_write = method != "GET";
        if is_write && !settings.write_delay.is_zero() {
            tokio::time::sleep(settings.write_delay).await;
        }
        if is_shard_write && !settings.shard_write_delay.is_zero() {
            tokio::time::sleep(settings.shard_write_delay).await;
        }
        let is_check = path.contains("/healthchecks/");
        let delta_delete = method == "DELETE" && path.contains("-delta-");
        let answer = match (is_write, is_table, path.contains("/status?")) {
            (true, true, _) if delta_delete => settings.delta_deletes,
            (true, true, _) => settings.tables,
            (true, false, true) => settings.statuses,
            (true, false, false) if is_check => settings.checks,
            _ => Answer::Ok,
        };
        match answer {
            Answer::Hang => {
                self.lock().hung.push(send);
                return;
            }
            Answer::Fail(code) => {
                return reply(
                    send,
                    code,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": format!("stand-in refuses this write ({code})"), "reason": "InternalError", "code": code}),
                );
            }
            Answer::Ok => {}
        }
        let name = path
            .split('?')
            .next()
            .unwrap_or_default()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let secret = path
            .split('?')
            .next()
            .and_then(|p| p.strip_prefix("/api/v1/namespaces/"))
            .and_then(|p| p.split_once("/secrets/"))
            .map(|(ns, name)| format!("{ns}/{name}"));
        if settings.objects
            && let Some(at) = ObjectPath::of(&path)
            && STORED.contains(&at.plural.as_str())
        {
            let (code, reply_body) = self.answer_object(&method, &path, &at, &body);
            return reply(send, code, &reply_body);
        }
        match method.as_str() {
            "GET" if secret.is_some() => {
                let found = secret.and_then(|k| self.lock().secrets.get(&k).cloned());
                match found {
                    Some(s) => reply(send, 200, &s),
                    None => reply(
                        send,
                        404,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                    ),
                }
            }
            "GET" if is_table => {
                let selector = query(&path, "labelSelector").unwrap_or_default();
                let items: Vec<Json> = self
                    .lock()
                    .configmaps
                    .values()
                    .filter(|cm| selected(&cm["metadata"]["labels"], &selector))
                    .cloned()
                    .collect();
                reply(
                    send,
                    200,
                    &json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1"}, "items": items}),
                );
            }
            // The publisher's writes: a replace of what is there, a create of what is not.
            "PUT" | "POST" if is_table => {
                let create = method == "POST";
                let name = if create {
                    body["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                } else {
                    name
                };
                let written = match self.lock().configmaps.entry(name) {
                    Entry::Occupied(mut at) if !create => {
                        at.insert(body.clone());
                        Ok(200)
                    }
                    Entry::Vacant(at) if create => {
                        at.insert(body.clone());
                        Ok(201)
                    }
                    Entry::Occupied(_) => Err((409, "AlreadyExists")),
                    Entry::Vacant(_) => Err((404, "NotFound")),
                };
                match written {
                    Ok(code) => reply(send, code, &body),
                    Err((code, reason)) => reply(
                        send,
                        code,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}),
                    ),
                }
            }
            "DELETE" if is_table && name == "configmaps" => {
                // A delete of a collection, by label selector (the publisher's old deltas).
                let selector = query(&path, "labelSelector").unwrap_or_default();
                self.lock()
                    .configmaps
                    .retain(|_, cm| !selected(&cm["metadata"]["labels"], &selector));
                reply(
                    send,
                    200,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                );
            }
            "DELETE" if is_table => {
                self.lock().configmaps.remove(&name);
                reply(
                    send,
                    200,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                );
            }
            "DELETE" if is_check => reply(
                send,
                200,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ),
            "PATCH" | "POST" => {
                let mut obj = body.clone();
                if obj["metadata"].is_null() {
                    obj["metadata"] = json!({"name": "x", "namespace": "shop"});
                }
                reply(send, 200, &obj);
            }
            _ => reply(
                send,
                404,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
            ),
        }
    }
}

impl FakeApi {
    /// A request for an object of a [`STORED`] kind: its answer's code and body.
    fn answer_object(&self, method: &str, path: &str, at: &ObjectPath, body: &Json) -> (u16, Json) {
        let not_found = || {
            (
                404,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
            )
        };
        let success = || {
            (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
            )
        };
        let mut state = self.lock();
        let key = |name: &str| {
            (
                at.plural.clone(),
                at.namespace.clone().unwrap_or_default(),
                name.to_owned(),
            )
        };
        match (method, &at.name) {
            ("GET", None) => {
                let selector = query(path, "labelSelector").unwrap_or_default();
                let items: Vec<Json> = state
                    .objects
                    .iter()
                    .filter(|((p, ns, _), o)| {
                        *p == at.plural
                            && at.namespace.as_ref().is_none_or(|n| n == ns)
                            && selected(&o["metadata"]["labels"], &selector)
                    })
                    .map(|(_, o)| o.clone())
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
            ("GET", Some(name)) => match state.objects.get(&key(name)) {
                Some(o) => (200, o.clone()),
                None => not_found(),
            },
            ("DELETE", Some(name)) => {
                let Some(found) = state.objects.get(&key(name)) else {
                    return not_found();
                };
                let wanted = &body["preconditions"]["uid"];
                if !wanted.is_null() && *wanted != found["metadata"]["uid"] {
                    return (
                        409,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}),
                    );
                }
                state.objects.remove(&key(name));
                success()
            }
            ("PATCH", Some(name)) => {
                let k = key(name);
                let object = match (state.objects.get_mut(&k), at.subresource.as_deref()) {
                    (Some(o), Some("status")) => {
                        o["status"] = body["status"].clone();
                        o.clone()
                    }
                    (Some(o), Some("scale")) => {
                        let replicas = body["spec"]["replicas"].clone();
                        let generation = o["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
                        o["metadata"]["generation"] = json!(generation);
                        o["spec"]["replicas"] = replicas.clone();
                        o["status"]["replicas"] = replicas.clone();
                        o["status"]["observedGeneration"] = json!(generation);
                        return (
                            200,
                            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                                   "metadata": {"name": name, "namespace": k.1},
                                   "spec": {"replicas": replicas}, "status": {"replicas": replicas}}),
                        );
                    }
                    (Some(o), _) => {
                        merge(o, body);
                        o.clone()
                    }
                    (None, None) => {
                        let mut o = body.clone();
                        o["metadata"]["namespace"] = json!(k.1);
                        o["metadata"]["uid"] = json!(format!("uid-{}-{}-{}", k.0, k.1, k.2));
                        state.objects.insert(k, o.clone());
                        o
                    }
                    (None, Some(_)) => return not_found(),
                };
                (200, object)
            }
            ("POST", None) => {
                let name = body["metadata"]["name"].as_str().unwrap_or_default();
                if state.objects.contains_key(&key(name)) {
                    return (
                        409,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}),
                    );
                }
                let mut o = body.clone();
                o["metadata"]["uid"] = json!(format!("uid-{}-{name}", at.plural));
                state.objects.insert(key(name), o.clone());
                (201, o)
            }
            _ => not_found(),
        }
    }
}

/// Where a request points: the kind (its plural), the namespace, the name, the subresource.
pub struct ObjectPath {
    pub plural: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl ObjectPath {
    /// `/api/v1/...` or `/apis/GROUP/VERSION/...`, `namespaces/NS/` or not.
    pub fn of(path: &str) -> Option<ObjectPath> {
        let path = path.split('?').next()?;
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let rest = match *parts.first()? {
            "api" => parts.get(2..)?,
            "apis" => parts.get(3..)?,
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
            _ => (None, rest),
        };
        Some(ObjectPath {
            plural: (*rest.first()?).to_owned(),
            namespace,
            name: rest.get(1).map(|s| (*s).to_owned()),
            subresource: rest.get(2).map(|s| (*s).to_owned()),
        })
    }
}

/// A JSON merge patch (RFC 7386) of `patch` into `target`.
fn merge(target: &mut Json, patch: &Json) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Json::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// A query parameter of `path`, percent-decoded as far as selectors need.
fn query(path: &str, key: &str) -> Option<String> {
    let (_, q) = path.split_once('?')?;
    let value = q
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?;
    Some(
        value
            .replace("%2F", "/")
            .replace("%3D", "=")
            .replace("%21", "!")
            .replace("%2C", ","),
    )
}

fn reply(send: tower_test::mock::SendResponse<Response<Body>>, code: u16, value: &Json) {
    let mut response = Response::new(Body::from(serde_json::to_vec(value).unwrap_or_default()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    send.send_response(response);
}

/// Whether `labels` match a selector of `key=value` and `key!=value` terms (what the publisher
/// sends).
fn selected(labels: &Json, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k].as_str() != Some(v)
        } else if let Some((k, v)) = term.split_once('=') {
            labels[k].as_str() == Some(v)
        } else {
            labels.get(term).is_some()
        }
    })
}
