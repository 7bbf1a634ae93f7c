//! healthroute's control plane.
//!
//! - [`api`]: the custom resources (`HealthCheck`, `RecordGroup`, `ZonalShift`).
//! - [`crd`]: the CRD documents generated from them (written to `crds/` by `crdgen`).
#![forbid(unsafe_code)]

pub mod api;
pub mod compiler;
pub mod crd;
