//! The table's writes: deltas and folds into a new manifest, shards a few at a time, a change
//! during a fold, and a publish that fails (SEM-P11, SEM-P5).

use super::*;

// SEM-P11: after the term's full table, each change is one delta holding the group that
// changed; past FOLD_AFTER_DELTAS the deltas are folded into the shards and a new manifest,
// between changes, and the deltas of the old manifest are deleted. What a resolver assembles
// from the objects on the server is the newest table at every step.
#[tokio::test]
async fn changes_are_deltas_folded_into_a_new_manifest() {
    let n = 40;
    let (api, running, _) = leader_published(Settings::default(), n).await;
    let changes = FOLD_AFTER_DELTAS + 3;
    for c in 0..changes {
        let before = api.log().len();
        let i = c % n;
        let ready = (c / n) % 2 == 1;
        running.send(Input::Slice(Event::Apply(slice(i, ready))));
        // The table commits that follow, until what a resolver assembles from the server has
        // the change (a fold's manifest, written between two changes, may come first).
        let mut skip = before;
        loop {
            let commit = api
                .wait_for("the change's table", skip, IN_TIME, |s| s.is_table_commit())
                .await;
            skip = api
                .log()
                .iter()
                .position(|s| s.path == commit.path && s.body == commit.body)
                .map_or(api.log().len(), |at| at + 1)
                .max(skip + 1);
            if c == 0 {
                assert!(commit.is_delta_write(), "{}", commit.path);
                let data = commit.body["data"][DATA_KEY].as_str().expect("data");
                let delta: published::Delta = serde_json::from_str(data).expect("delta");
                let keys: Vec<String> = delta.groups.keys().map(|k| k.to_string()).collect();
                assert_eq!(keys, [format!("shop/g{i}")], "the group that changed, only");
            }
            let g = format!(
                "{:?}",
                served_table(&api).groups[format!("shop/g{i}").as_str()].selection
            );
            if g.contains(&format!("10.0.{i}.2")) == ready {
                break;
            }
            assert!(commit.is_manifest_write(), "change {c}, its delta: {g}");
        }
    }
    // The fold: a second manifest, and only the deltas written on it remain.
    let fold = api
        .wait_for("the fold's manifest", 0, IN_TIME, |s| {
            s.is_manifest_write() && s.manifest_generation() > Some(1)
        })
        .await;
    let folded_at = fold.manifest_generation().expect("generation");
    assert!(folded_at > FOLD_AFTER_DELTAS as u64, "{folded_at}");
    let deadline = std::time::Instant::now() + IN_TIME;
    loop {
        let stale: Vec<String> = api
            .configmap_names()
            .into_iter()
            .filter(|name| {
                let cm = api.configmap(name).expect("listed");
                cm["metadata"]["labels"]["healthroute.io/table"] == "delta"
                    && cm["metadata"]["labels"]["healthroute.io/table-base"]
                        != folded_at.to_string().as_str()
            })
            .collect();
        if stale.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "old deltas left: {stale:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = changes - 1;
    let g = format!(
        "{:?}",
        served_table(&api).groups[format!("shop/g{}", last % n).as_str()].selection
    );
    assert_eq!(
        g.contains(&format!("10.0.{}.2", last % n)),
        (last / n) % 2 == 1,
        "{g}"
    );
    running.stop().await;
}

// SEM-P11: a full table's shards are written a few at a time, the manifest once all are:
// with every table write left unanswered, exactly 4 shard writes are in flight and no
// manifest follows them.
#[tokio::test]
async fn a_full_tables_shards_are_written_four_at_a_time() {
    let (api, client) = FakeApi::start(Settings {
        tables: Answer::Hang,
        ..Settings::default()
    });
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    config.shards = 8;
    let running = start_with(client, true, config);
    let n = 40;
    running.list(
        (0..n).map(service_group).collect(),
        (0..n).map(|i| slice(i, true)).collect(),
        vec![],
    );
    let shard_writes = |api: &FakeApi| api.log().iter().filter(|s| s.is_shard_write()).count();
    for _ in 0..100 {
        if shard_writes(&api) >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(shard_writes(&api), 4, "{:?}", api.log());
    assert!(!api.log().iter().any(|s| s.is_manifest_write()));
    running.task.abort(); // its writes never end
}

// SEM-P11: a change that arrives while a fold's shard write is in flight does not wait for
// it: the write is cut short, the change goes out as a delta on the old manifest, and the fold
// writes the shard again afterwards and ends with a manifest that serves every change. Here
// shard writes hang until told otherwise, so a change that waited for one would never be
// written at all.
#[tokio::test]
async fn a_change_during_a_folds_shard_write_goes_out_at_once() {
    // Enough groups that g30 and g31 are still unready when the fold starts.
    let n = FOLD_AFTER_DELTAS - 16;
    let (api, running, _) = leader_published(Settings::default(), n).await;
    api.set(|s| s.shard_write_delay = Duration::from_secs(3600));
    // One change at a time until the fold starts: every group unready, then the first ones
    // ready again (change c: group c % n, ready on the second round).
    let mut folding = 0;
    for c in 0..FOLD_AFTER_DELTAS {
        folding = api.log().len();
        running.send(Input::Slice(Event::Apply(slice(c % n, c >= n))));
        api.wait_for("the change's delta", folding, IN_TIME, |s| {
            s.is_delta_write()
        })
        .await;
    }
    api.wait_for("the fold's first shard write", folding, IN_TIME, |s| {
        s.is_shard_write()
    })
    .await;
    // g30 ready again while that write hangs: it goes out at once, as a delta.
    running.send(Input::Slice(Event::Apply(slice(30, true))));
    api.wait_for("the change during the fold", folding, IN_TIME, |s| {
        s.is_delta_write() && s.body.to_string().contains("shop/g30")
    })
    .await;
    let g30 = format!("{:?}", served_table(&api).groups["shop/g30"].selection);
    assert!(g30.contains("10.0.30.2"), "served at once: {g30}");
    // Shard writes answer again; the next change cuts the hanging write short too, and the
    // fold then ends with a manifest that serves both changes.
    api.set(|s| s.shard_write_delay = Duration::ZERO);
    running.send(Input::Slice(Event::Apply(slice(31, true))));
    api.wait_for("the fold's manifest", folding, IN_TIME, |s| {
        s.is_manifest_write() && s.manifest_generation() > Some(1)
    })
    .await;
    let table = served_table(&api);
    for i in 0..n {
        let g = format!(
            "{:?}",
            table.groups[format!("shop/g{i}").as_str()].selection
        );
        let ready = i < FOLD_AFTER_DELTAS - n || i == 30 || i == 31;
        assert_eq!(g.contains(&format!("10.0.{i}.2")), ready, "g{i}: {g}");
    }
    running.stop().await;
}

// SEM-P5: while the table cannot be written, the edited group's status says its new version is
// not served (and what is), an Event says so, the failure is counted and /readyz fails; once
// the write succeeds, all of it turns back.
#[tokio::test]
async fn a_failing_publish_is_reported_as_such() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start(
        client,
        true,
        vec![rg("api", "api.example.com.", "192.0.2.1")],
        vec![],
        vec![],
    );
    let status = |s: &Seen| s.is_status_write() && s.path.contains("/recordgroups/api/");
    let first = api.wait_for("api's first status", 0, IN_TIME, status).await;
    assert_eq!(condition(&first.body, "Ready")["status"], "True");
    assert_eq!(first.body["status"]["servedGeneration"], 1);

    api.set(|s| s.tables = Answer::Fail(500));
    let before = api.log().len();
    let mut edited = rg("api", "api.example.com.", "192.0.2.2");
    edited.metadata.generation = Some(2);
    running.send(Input::Group(Event::Apply(edited.clone())));
    let failed = api
        .wait_for(
            "api's status after a failed publish",
            before,
            IN_TIME,
            status,
        )
        .await
        .body;
    let ready = condition(&failed, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PublishFailed"))
    );
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("500")
            && message.contains("still serve the version of table generation 1"),
        "{message}"
    );
    assert_eq!(
        failed["status"]["served"], true,
        "the old version is served"
    );
    assert_eq!(failed["status"]["servedGeneration"], 1);
    let event = api
        .wait_for("a PublishFailed Event", before, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "PublishFailed"
        })
        .await;
    assert_eq!(event.body["regarding"]["name"], "api");
    assert_eq!(event.body["type"], "Warning");
    assert!(running.metrics.publisher.failures.load(Ordering::Relaxed) >= 1);
    assert!(
        running
            .readiness
            .not_ready()
            .is_some_and(|why| why.contains("cannot be published")),
        "/readyz fails while the table cannot be published"
    );

    // The API server takes writes again: the retry publishes, and the status follows.
    api.set(|s| s.tables = Answer::Ok);
    let recovered = api
        .wait_for("api's status once published", before, IN_TIME, |s| {
            status(s) && condition(&s.body, "Ready")["status"] == "True"
        })
        .await
        .body;
    assert_eq!(recovered["status"]["servedGeneration"], 2);
    assert_eq!(
        served_table(&api).groups["shop/api"].selection,
        compiled(0, &[edited]).groups["shop/api"].selection
    );
    api.wait_for("a Published Event", before, IN_TIME, |s| {
        s.is_event() && s.body["reason"] == "Published"
    })
    .await;
    assert_eq!(running.readiness.not_ready(), None);
    running.stop().await;
}

/// A leader started over a published table of `n` groups, with the deltas `old` of an older
/// manifest left on the server (a takeover's).
fn leading_over_old_deltas(settings: Settings, n: usize, old: &[&str]) -> (FakeApi, Running) {
    let (api, client) = FakeApi::start(settings);
    let groups: Vec<RecordGroup> = (0..n).map(service_group).collect();
    put_published(&api, &compiled(1, &groups), 2);
    for name in old {
        api.put_configmap(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "healthroute",
                         "labels": {"healthroute.io/table": "delta", "healthroute.io/table-base": "1"}},
            "data": {DATA_KEY: "{}"}
        }));
    }
    let running = start(
        client,
        true,
        groups,
        (0..n).map(|i| slice(i, true)).collect(),
        vec![],
    );
    (api, running)
}

// SEM-P11: the delete of older manifests' deltas goes beside the publisher, one at a time: a
// change made while it is still under way (a takeover's hundreds of old deltas) is written
// at once.
#[tokio::test]
async fn a_change_does_not_wait_for_the_old_deltas_delete() {
    let settings = Settings {
        delta_deletes: Answer::Hang,
        ..Settings::default()
    };
    let (api, running) = leading_over_old_deltas(settings, 4, &["healthroute-table-delta-7"]);
    api.wait_for("the old deltas' delete", 0, IN_TIME, |s| {
        s.method == "DELETE" && s.path.contains("healthroute-table-delta-7")
    })
    .await;
    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(1, false))));
    let delta = api
        .wait_for("the change's delta", before, Duration::from_secs(5), |s| {
            s.is_delta_write()
        })
        .await;
    let data = delta.body["data"][DATA_KEY].as_str().expect("data");
    let delta: published::Delta = serde_json::from_str(data).expect("delta");
    let keys: Vec<String> = delta.groups.keys().map(|k| k.to_string()).collect();
    assert_eq!(keys, ["shop/g1"]);
    running.stop().await;
}

// SEM-P11: nothing waits for the delete of older manifests' deltas, a new manifest included:
// a fold while hundreds are still being deleted, at DELETE_PACE, writes its manifest, cutting
// the delete short, and the delete starts again under the new manifest, sparing its deltas.
#[tokio::test]
async fn a_fold_cuts_the_old_deltas_delete_short() {
    let n = 40;
    // A minute of deletes: the fold comes long before they are done.
    let old: Vec<String> = (0..60 * DELETE_PACE)
        .map(|i| format!("healthroute-table-delta-old-{i}"))
        .collect();
    let old: Vec<&str> = old.iter().map(String::as_str).collect();
    let (api, running) = leading_over_old_deltas(Settings::default(), n, &old);
    let first = api
        .wait_for("the term's manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await
        .manifest_generation()
        .expect("generation");
    api.wait_for("the old deltas' delete", 0, IN_TIME, |s| {
        s.method == "DELETE" && s.path.contains("-delta-old-")
    })
    .await;
    for c in 0..FOLD_AFTER_DELTAS + 3 {
        let before = api.log().len();
        running.send(Input::Slice(Event::Apply(slice(c % n, c / n % 2 == 1))));
        api.wait_for("the change's delta", before, IN_TIME, |s| {
            s.is_delta_write()
        })
        .await;
    }
    let fold = api
        .wait_for("the fold's manifest", 0, IN_TIME, |s| {
            s.is_manifest_write() && s.manifest_generation() > Some(first)
        })
        .await;
    let old_left = |api: &FakeApi| {
        api.configmap_names()
            .iter()
            .filter(|name| name.contains("-delta-old-"))
            .count()
    };
    assert!(
        old_left(&api) > 0,
        "the fold waited for the old deltas' delete"
    );
    let folded_at = fold.manifest_generation().expect("generation");
    let after = api.log().len();
    api.wait_for(
        "the delete again, under the new manifest",
        after,
        IN_TIME,
        |s| s.method == "DELETE" && s.path.contains("-delta-"),
    )
    .await;
    let log = api.log();
    let own: Vec<&str> = log
        .iter()
        .filter(|s| {
            s.is_delta_write()
                && s.body["metadata"]["labels"]["healthroute.io/table-base"]
                    == folded_at.to_string().as_str()
        })
        .filter_map(|s| s.body["metadata"]["name"].as_str())
        .collect();
    assert!(!own.is_empty(), "the fold's catch-up delta");
    for name in own {
        assert!(
            !log.iter().any(|s| s.method == "DELETE"
                && s.path
                    .split('?')
                    .next()
                    .is_some_and(|p| p.ends_with(&format!("/{name}")))),
            "the new manifest's delta {name} is spared"
        );
        assert!(api.configmap(name).is_some(), "{name}");
    }
    running.stop().await;
}
