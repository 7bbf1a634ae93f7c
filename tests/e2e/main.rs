//! End-to-end tests: the real `healthroute-resolver` binary, on the real example files.

mod autoshift;
mod dns;
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
