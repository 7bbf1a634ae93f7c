//! cargo-afl target: see tests/fuzz/README.md. The checks are `healthroute_operator::fuzzing::http_response`.
fn main() {
    afl::fuzz!(|data: &[u8]| healthroute_operator::fuzzing::http_response(data));
}
