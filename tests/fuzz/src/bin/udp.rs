//! cargo-afl target: see tests/fuzz/README.md. The checks are `healthroute_resolver::tools::fuzzing::udp_datagram`.
fn main() {
    afl::fuzz!(|data: &[u8]| healthroute_resolver::tools::fuzzing::udp_datagram(data));
}
