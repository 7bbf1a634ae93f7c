//! healthroute's control plane.
//!
//! - [`api`]: the custom resources (`HealthCheck`, `RecordGroup`, `ZonalShift`).
//! - [`crd`]: the CRD documents generated from them (written to `crds/` by `crdgen`).
//! - [`compiler`]: the routing rules, from objects to a compiled table (pure, incremental).
//! - [`manifests`]: reading a directory of manifests (standalone mode, the simulator).
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod checker;
pub mod compiler;
pub mod controller;
pub mod crd;
pub mod fuzzing;
pub mod index;
pub mod leader;
pub mod manifests;
pub mod metrics;
pub mod process;
pub mod publish;
pub mod rbac;
pub mod retry;
pub mod status;
pub mod status_writer;
