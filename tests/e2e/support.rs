//! Helpers shared by the end-to-end tests.

use std::path::PathBuf;
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The resolver binary that Cargo built for this test run.
pub fn resolver() -> Command {
    Command::new(env!("CARGO_BIN_EXE_healthroute-resolver"))
}

/// Runs `healthroute-resolver simulate` on an example directory; returns stdout, or panics
/// with stderr.
pub fn simulate(example: &str, args: &[&str]) -> String {
    let out = resolver()
        .arg("simulate")
        .arg("--manifests")
        .arg(repo().join("examples").join(example))
        .args(args)
        .output()
        .expect("runs healthroute-resolver");
    assert!(
        out.status.success(),
        "simulate {example} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The share (in percent) of an answer line in simulate's output, or 0.
pub fn share(output: &str, answer: &str) -> f64 {
    output
        .lines()
        .filter_map(|l| {
            let (pct, rest) = l.trim().split_once("%  ")?;
            (rest == answer)
                .then(|| pct.trim().parse::<f64>().ok())
                .flatten()
        })
        .next()
        .unwrap_or(0.0)
}
