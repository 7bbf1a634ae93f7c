//! cargo-afl target: see tests/fuzz/README.md. The checks are `healthroute_compiler::fuzzing::manifests`.
fn main() {
    afl::fuzz!(|data: &[u8]| healthroute_compiler::fuzzing::manifests(data));
}
