//! What the fuzz targets check (`tests/fuzz`, run with cargo-afl), as plain functions: the
//! targets call them on every input, and `cargo test` replays the committed corpora through
//! them, so a crash found once stays a test. This crate's target reads manifests; the
//! checker's reads HTTP responses, the resolver's DNS packets and tables. `replay` (with the
//! `testing` feature: it reads the corpus from the repository) replays all of them.
//!
//! Built only for tests and with the `fuzzing` feature (tests/fuzz turns it on; `testing`
//! implies it): production binaries carry none of it.
//!
//! Each check returns normally for any input and panics only when an invariant breaks.

use crate::manifests::Manifests;
use crate::{Compiler, ServedZones};

/// YAML bytes, as a file of a manifest directory, to a compiled table: a bad document is an
/// error naming it, never a panic; whatever compiles gives a table of groups in the zone.
pub fn manifests(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let zones = ServedZones::new(["example.com"]).expect("a valid zone");
    match Manifests::load_str(std::path::Path::new("fuzz.yaml"), text) {
        Ok(m) => {
            let mut compiler = Compiler::new(zones.clone(), 60);
            let _ = m.apply_to(&mut compiler, None);
            compiler.compile(jiff::Timestamp::from_second(1_800_000_000).expect("a time"));
            for group in compiler.table().groups.values() {
                assert!(
                    zones.zone_of(&group.name).is_some(),
                    "{} served outside the zones",
                    group.name
                );
            }
        }
        Err(e) => assert!(!e.to_string().is_empty(), "an error says what is wrong"),
    }
}

/// Runs `check` over every input of `target`'s committed corpus (what the fuzzers kept and
/// every crash they found); a corpus that is missing or empty fails.
#[cfg(any(test, feature = "testing"))]
pub fn replay(target: &str, check: impl Fn(&[u8])) {
    let inputs = corpus(target);
    assert!(!inputs.is_empty(), "the {target} corpus is empty");
    inputs.iter().for_each(|input| check(input));
}

/// The committed corpus of `target` (`tests/fuzz/corpus/<target>/`), every file, in name
/// order: what the replay tests feed the checks.
#[cfg(any(test, feature = "testing"))]
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every input the fuzzers kept (and every crash they found) goes through again.
    #[test]
    fn the_manifest_corpus_replays() {
        replay("manifests", manifests);
    }
}
