//! A manifest directory on disk, for standalone mode and the simulator: every `*.yaml` and
//! `*.yml` below it (recursively, in path order; hidden files and `healthroute.yaml` left
//! out), read one file at a time into the compiler's manifest loader.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use healthroute_compiler::Error;
use healthroute_compiler::manifests::{ManifestError, Manifests, is_manifest_file};

/// Loads the manifests of `dir`; every problem, with its file, object and field, or nothing.
pub fn load(dir: &Path) -> Result<Manifests, Error> {
    read(files(dir).map_err(|e| unreadable(dir, e))?)
}

/// One manifest file as listed: its path, size and modification time. A listing that is the
/// same as the last one is a directory that did not change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManifestFile {
    pub path: PathBuf,
    pub len: u64,
    pub modified: Option<SystemTime>,
}

/// The manifest files below `dir`, in path order.
pub fn files(dir: &Path) -> std::io::Result<Vec<ManifestFile>> {
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    Ok(files)
}

/// Reads `files` (from [`files`]) one at a time into the manifest loader.
pub fn read(files: Vec<ManifestFile>) -> Result<Manifests, Error> {
    Manifests::load_files(files.into_iter().map(|file| {
        let text = std::fs::read_to_string(&file.path);
        (file.path, text)
    }))
}

/// The error of a directory that cannot be listed.
pub fn unreadable(dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::Manifests(vec![ManifestError {
        file: dir.to_path_buf(),
        document: 0,
        object: None,
        field: None,
        message: format!("cannot read the directory: {e}"),
    }])
}

fn collect(dir: &Path, out: &mut Vec<ManifestFile>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        // Followed through symlinks; one that leads nowhere is read, and fails, as a file.
        let meta = std::fs::metadata(&path).ok();
        if meta.as_ref().is_some_and(|m| m.is_dir()) {
            collect(&path, out)?;
        } else if is_manifest_file(name) {
            out.push(ManifestFile {
                len: meta.as_ref().map_or(0, |m| m.len()),
                modified: meta.and_then(|m| m.modified().ok()),
                path,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Standalone mode reads what `kubectl apply -R -f DIR` would: YAML files in every
    // subdirectory, not hidden ones, not the configuration; a file it cannot read is an error
    // naming it, and nothing is loaded.
    #[test]
    fn a_directory_is_read_recursively_without_hidden_files_or_the_config() {
        let dir = std::env::temp_dir().join(format!("hr-manifest-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub/.hidden")).expect("dirs");
        let group = |name: &str| {
            format!(
                "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: t}}\nspec:\n  name: {name}.example.com.\n  type: A\n  routingPolicy: Simple\n  records:\n    - {{setIdentifier: a, values: [\"192.0.2.1\"]}}\n"
            )
        };
        std::fs::write(dir.join("a.yaml"), group("a")).expect("write");
        std::fs::write(dir.join("sub/b.yml"), group("b")).expect("write");
        std::fs::write(dir.join("sub/.hidden/c.yaml"), group("c")).expect("write");
        std::fs::write(dir.join(".d.yaml"), group("d")).expect("write");
        std::fs::write(dir.join("notes.txt"), "not yaml").expect("write");
        std::fs::write(dir.join("healthroute.yaml"), "zones: [example.com]\n").expect("write");
        let m = load(&dir).expect("loads");
        let names: Vec<String> = m.groups.keys().map(|k| k.name.to_string()).collect();
        assert_eq!(names, ["a", "b"]);

        std::fs::create_dir_all(dir.join("broken.yaml")).expect("a directory named like a file");
        std::fs::write(dir.join("broken.yaml/e.yaml"), "kind: [").expect("write");
        let err = load(&dir).expect_err("a bad file");
        assert!(err.to_string().contains("e.yaml"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
