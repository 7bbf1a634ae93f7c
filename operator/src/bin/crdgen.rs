//! Writes the CRDs generated from the API types to a directory (default: `crds/`).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("crds"));
    let rendered = match healthroute_operator::crd::rendered() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("crdgen: rendering the CRDs failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (file, yaml) in rendered {
        let path = dir.join(file);
        if let Err(e) = std::fs::write(&path, yaml) {
            eprintln!("crdgen: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
