//! What runs beside a server and never in it.
//!
//! ```text
//!   simulate   "what if": a table compiled from manifests and scenario, asked like a server
//!   dnssec     a new signing key, and the DS records to hand to the parent zone (K1, K4)
//!   plugin     kubectl healthroute: status, explain, simulate against a cluster
//!   fuzzing    the fuzz targets' checks (tests and tests/fuzz only)
//! ```

// The fuzz targets' checks: built for this crate's tests and for tests/fuzz (feature
// `fuzzing`), never into the binaries.
pub mod dnssec;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod plugin;
pub mod simulate;
