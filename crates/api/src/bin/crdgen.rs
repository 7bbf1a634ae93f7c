//! Writes the CRDs generated from the API types: to `crds/` and to the chart's
//! `charts/healthroute/crds/` (run from the repository root), or to the directories given.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut dirs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        dirs = vec![
            PathBuf::from("crds"),
            PathBuf::from("charts/healthroute/crds"),
        ];
    }
    let rendered = match healthroute_api::crd::rendered() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("crdgen: rendering the CRDs failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    for dir in dirs {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("crdgen: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        for (file, yaml) in &rendered {
            let path = dir.join(file);
            if let Err(e) = std::fs::write(&path, yaml) {
                eprintln!("crdgen: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}", path.display());
        }
    }
    ExitCode::SUCCESS
}
