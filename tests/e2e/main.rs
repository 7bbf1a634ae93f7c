//! End-to-end tests: the real `healthroute-resolver` binary, on the real example files.
//!
//! The workspace member `healthroute-e2e` (`cargo test -p healthroute-e2e`, and part of
//! `cargo test --workspace`). The binary is built by the first test that runs it
//! ([`support::resolver_binary`]; tests/e2e/Cargo.toml says why).

mod autoshift;
mod dns;
mod dnssec;
mod generated;
mod key_rotation;
mod metric;
mod peers;
mod protocol;
mod secrets;
mod simulate;
mod standalone;
mod support;
mod zone_affinity;
