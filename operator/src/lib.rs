//! healthroute's control plane, the operator: it watches the cluster's objects into the
//! compiler ([`index`], [`controller`]), and as the elected leader ([`leader`]) publishes the
//! compiled table ([`publish`]) to the resolvers that registered ([`registry`]), writes every
//! status and Event ([`status`]), creates the Peer checks that peer sources need ([`peers`])
//! and evaluates the Metric checks. Zonal autoshift runs in the compiler; the operator feeds it
//! ZonalAutoshifts and Nodes ([`node`]) and writes what it decides (its status is the engine's
//! memory across leaders; its shifts are mirrored as ZonalShifts, [`engine_shifts`]). One
//! leader-gated writer sends all of these ([`writes`]), typed up to the request. Each
//! component's numbers are in [`metrics`]; whether the replica is ready, in [`readiness`]; the
//! flags, resolved once, in [`settings`].
//!
//! The API types, the compiler and the checker are crates of their own
//! (`healthroute-api`, `healthroute-compiler`, `healthroute-checker`), shared with the
//! resolver; nothing in the resolver depends on this crate.
#![forbid(unsafe_code)]

pub mod controller;
pub mod credentials;
pub mod engine_shifts;
pub mod error;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod node;
pub mod owner;
pub mod peers;
pub mod publish;
pub mod push;
pub mod rbac;
pub mod readiness;
pub mod registry;
pub mod settings;
pub mod status;
pub mod uninstall;
pub mod watched;
pub mod writes;

/// The field manager of everything the operator writes with server-side apply: the table's
/// ConfigMaps and every status.
pub const FIELD_MANAGER: &str = "healthroute-operator";

/// The leader Lease's name (P3), in the release namespace.
pub const LEADER_LEASE: &str = "healthroute-operator";
