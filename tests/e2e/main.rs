//! End-to-end tests: the real `healthroute-resolver` binary, on the real example files.

mod simulate;
mod support;
