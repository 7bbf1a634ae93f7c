//! What the compiler and the manifest loader refuse: the crate's one error enum, and the
//! located problem of a manifest file that it collects.

use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A served zone (or another name given to the compiler) is not a DNS name.
    #[error(transparent)]
    Name(#[from] healthroute_table::Error),
    /// A value the API's schema lets through but this API refuses (an `expiresIn`).
    #[error(transparent)]
    Api(#[from] healthroute_api::Error),
    /// Every problem found in a manifest directory, one per line; nothing is loaded when
    /// there is one.
    #[error("{}", lines(.0))]
    Manifests(Vec<ManifestError>),
}

/// One problem in one manifest, located as precisely as it can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    /// 1-based index of the YAML document in the file.
    pub document: usize,
    /// `Kind namespace/name`, once known.
    pub object: Option<String>,
    /// The JSON path of the field at fault, once known.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {})", self.file.display(), self.document)?;
        if let Some(o) = &self.object {
            write!(f, ", {o}")?;
        }
        f.write_str(": ")?;
        if let Some(field) = self.field.as_deref().filter(|s| !s.is_empty()) {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

fn lines(errors: &[ManifestError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
