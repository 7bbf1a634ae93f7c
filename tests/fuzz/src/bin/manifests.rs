//! cargo-afl target: see tests/fuzz/README.md. The checks are `healthroute_operator::fuzzing::manifests`.
fn main() {
    afl::fuzz!(|data: &[u8]| healthroute_operator::fuzzing::manifests(data));
}
