//! healthroute's API: the custom resources of `healthroute.io/v1alpha1` (`HealthCheck`,
//! `RecordGroup`, `ZonalShift`, `ZonalAutoshift`, with the field names of `docs/api.md`), the names both planes
//! agree on, and ([`crd`]) the CRDs generated from them.
//!
//! Validation lives in the schema so that `kubectl apply` of a bad object fails before any
//! controller sees it: ranges, enums and defaults through schemars, and the rules that span
//! fields as CEL (`x-kubernetes-validations`). The same rules run client-side on manifest files
//! (see `healthroute_compiler::manifests`), so standalone mode and the simulator reject
//! exactly what the API server would.

// kube-derive's repeated `printcolumn(..)` arguments look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

mod health_check;
mod keys;
mod record_group;
mod view;
mod zonal_autoshift;
mod zonal_shift;

pub mod crd;
pub mod openapi;

use std::collections::BTreeMap;

pub use health_check::*;
pub use healthroute_table::PeerValue;
pub use keys::ObjectKey;
pub use record_group::*;
pub use view::{CheckerView, DENIED_BY_POLICY};
pub use zonal_autoshift::*;
pub use zonal_shift::*;

pub const GROUP: &str = "healthroute.io";
pub const VERSION: &str = "v1alpha1";

/// The label of every checker's heartbeat Lease (its value: the checker's name).
pub const CHECKER_LABEL: &str = "healthroute.io/checker";
/// The checker name of the operator leader's Metric-check evaluator (H14).
pub const METRIC_EVALUATOR: &str = "metric-evaluator";

/// What is wrong with a value of this API that its schema alone does not catch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "{0:?}: write a duration as hours, minutes and seconds in that order, as in 2h, 30m or 1h30m"
    )]
    DurationForm(String),
    #[error("{raw:?}: not a duration: {reason}")]
    NotADuration { raw: String, reason: String },
    #[error("{0:?}: expiresIn is from 1m to 72h")]
    ExpiresInRange(String),
    #[error("{0:?} is not a Metric state (OK, ALARM, INSUFFICIENT_DATA)")]
    NotAMetricState(String),
}

/// Labels of an object, as the selector code reads them.
pub type Labels = BTreeMap<String, String>;
