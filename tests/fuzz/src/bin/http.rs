//! cargo-afl target: see tests/fuzz/README.md. The checks are `healthroute_checker::fuzzing::http_response`.
fn main() {
    afl::fuzz!(|data: &[u8]| healthroute_checker::fuzzing::http_response(data));
}
