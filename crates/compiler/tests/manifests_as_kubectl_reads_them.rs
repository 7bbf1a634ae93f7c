//! Every healthroute object under examples/ and in the docs' YAML blocks, read as kubectl
//! reads YAML (1.1, with go-yaml's one-letter booleans) and validated against the generated
//! CRD schemas: a file the API server would refuse fails here, with the file and the field.
//! The work is tests/tools/validate_manifests.py (PyYAML and jsonschema, which .ci/run
//! installs with kubernetes-validate).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn examples_and_docs_are_valid_as_kubectl_reads_them() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let probe = Command::new("python3")
        .args(["-c", "import yaml, jsonschema"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIPPED examples_and_docs_are_valid_as_kubectl_reads_them: python3 with PyYAML and jsonschema is not installed (.ci/run installs them)"
        );
        return;
    }
    let out = Command::new("python3")
        .arg(repo.join("tests/tools/validate_manifests.py"))
        .output()
        .expect("runs python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 failures"), "{stdout}");
}
