//! The Kubernetes API calls each binary makes, kept next to the code that makes them. The
//! chart's Roles are tested against these lists (exactly: nothing missing, nothing extra).

use serde::Serialize;

/// One rule: an API group, a resource, the verbs, and whether it is cluster-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Access {
    pub api_group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    /// Cluster-wide (ClusterRole) or in the release namespace only (Role).
    pub cluster: bool,
}

const READ: &[&str] = &["get", "list", "watch"];

/// The operator: watches everything it compiles (and the Nodes, for zonal autoshift's
/// detection, AS3), writes status, creates and deletes the Peer checks peer sources need
/// (X4), publishes the table (creates and replaces ConfigMaps), and holds the leader Lease.
pub const OPERATOR: &[Access] = &[
    Access {
        api_group: "healthroute.io",
        resource: "recordgroups",
        verbs: READ,
        cluster: true,
    },
    // Peer checks (X4): server-side apply creates (create) and updates (patch) them; the
    // leader deletes the ones no group needs any more.
    Access {
        api_group: "healthroute.io",
        resource: "healthchecks",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        cluster: true,
    },
    // The ZonalShifts that show the engines' shifts (AS13): applied, then deleted when the
    // shift ends.
    Access {
        api_group: "healthroute.io",
        resource: "zonalshifts",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        cluster: true,
    },
    Access {
        api_group: "healthroute.io",
        resource: "zonalautoshifts",
        verbs: READ,
        cluster: true,
    },
    Access {
        api_group: "healthroute.io",
        resource: "recordgroups/status",
        verbs: &["patch"],
        cluster: true,
    },
    Access {
        api_group: "healthroute.io",
        resource: "healthchecks/status",
        verbs: &["patch"],
        cluster: true,
    },
    Access {
        api_group: "healthroute.io",
        resource: "zonalshifts/status",
        verbs: &["patch"],
        cluster: true,
    },
    // The engine's memory across leaders (AS11): written after each compile that changed it.
    Access {
        api_group: "healthroute.io",
        resource: "zonalautoshifts/status",
        verbs: &["patch"],
        cluster: true,
    },
    Access {
        api_group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: READ,
        cluster: true,
    },
    Access {
        api_group: "",
        resource: "services",
        verbs: READ,
        cluster: true,
    },
    // Zonal autoshift's detection: each zone's Nodes and whether they are Ready (AS3 c).
    Access {
        api_group: "",
        resource: "nodes",
        verbs: READ,
        cluster: true,
    },
    Access {
        api_group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        cluster: true,
    },
    // Metric checks (H15): the bearer token and CA of a check's Prometheus, by name, from
    // the check's namespace. `get` only: the operator never lists or watches Secrets.
    Access {
        api_group: "",
        resource: "secrets",
        verbs: &["get"],
        cluster: true,
    },
    Access {
        api_group: "",
        resource: "configmaps",
        // create and update: each table object is written whole (P11); patch: the operator
        // of the release before, which server-side applied them, publishes until an
        // upgrade's rollout replaces it; delete: the deltas of older manifests and the shards
        // a smaller table no longer uses, one at a time.
        verbs: &["get", "list", "create", "update", "patch", "delete"],
        cluster: false,
    },
    // watch: the checker Leases (H7) and the resolvers' registrations (P4, P12). delete:
    // `uninstall` (P13) deletes the leader Lease, and the checker Leases and registrations of
    // pods that are gone.
    Access {
        api_group: "coordination.k8s.io",
        resource: "leases",
        verbs: &[
            "get", "list", "watch", "create", "update", "patch", "delete",
        ],
        cluster: false,
    },
    // The owner of the table and the leader Lease (P13): the operator's own account, by name.
    Access {
        api_group: "",
        resource: "serviceaccounts",
        verbs: &["get"],
        cluster: false,
    },
    // `uninstall` (P13) stops the operator first: its own Deployment, by name.
    Access {
        api_group: "apps",
        resource: "deployments",
        verbs: &["get"],
        cluster: false,
    },
    Access {
        api_group: "apps",
        resource: "deployments/scale",
        verbs: &["patch"],
        cluster: false,
    },
];

/// The resolver: reads the published table; as a checker, reads HealthChecks, writes its own
/// status entries and its own heartbeat Lease, which it deletes after its drain (P9).
pub const RESOLVER: &[Access] = &[
    Access {
        api_group: "",
        resource: "configmaps",
        verbs: READ,
        cluster: false,
    },
    Access {
        api_group: "healthroute.io",
        resource: "healthchecks",
        verbs: READ,
        cluster: true,
    },
    Access {
        api_group: "healthroute.io",
        resource: "healthchecks/status",
        verbs: &["patch"],
        cluster: true,
    },
    // Its own registration and its checker's heartbeat, applied, and deleted after the drain
    // (P9).
    Access {
        api_group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["create", "patch", "delete"],
        cluster: false,
    },
];

/// Both lists as JSON, for the chart test.
pub fn as_json() -> String {
    #[derive(Serialize)]
    struct Both {
        operator: &'static [Access],
        resolver: &'static [Access],
    }
    let both = Both {
        operator: OPERATOR,
        resolver: RESOLVER,
    };
    serde_json::to_string(&both).expect("static rules serialize")
}
