//! cargo-afl target: see tests/fuzz/README.md. The checks are `healthroute_resolver::tools::fuzzing::published_table`.
fn main() {
    afl::fuzz!(|data: &[u8]| healthroute_resolver::tools::fuzzing::published_table(data));
}
