//! The Helm chart: its CRDs are the generated ones, and the chart tests (lint, render with
//! defaults and with every option, Kubernetes schema validation, values schema, RBAC exactly
//! as `rbac.rs` lists; the resolver's `--config` file with its zones, peers and exchange, each
//! key file it names mounted from its Secret, the exchange and public LoadBalancer Services)
//! pass. The Python part needs `helm-python-sdk`, `kubernetes-validate`
//! and PyYAML (installed by .ci/run); without them it is skipped with the reason printed.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn chart_crds_are_the_generated_ones() {
    for (file, yaml) in healthroute_api::crd::rendered().expect("renders") {
        let in_chart = std::fs::read_to_string(repo().join("charts/healthroute/crds").join(file))
            .unwrap_or_default();
        assert!(
            in_chart == yaml,
            "charts/healthroute/crds/{file} differs: run `cargo run -p healthroute-api --bin crdgen`"
        );
    }
}

#[test]
fn chart_renders_validates_and_grants_exactly_what_the_binaries_use() {
    let probe = Command::new("python3")
        .args(["-c", "import helm_python, kubernetes_validate, yaml"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        _ => {
            eprintln!(
                "skipped: python3 with helm-python-sdk, kubernetes-validate and PyYAML is not installed (.ci/run installs them)"
            );
            return;
        }
    }
    let out = Command::new("python3")
        .arg(repo().join("charts/tests/chart_test.py"))
        .arg(healthroute_operator::rbac::as_json())
        .output()
        .expect("runs python3");
    assert!(
        out.status.success(),
        "chart tests failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
