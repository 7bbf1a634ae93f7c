//! What the compiler and the manifest loader refuse.

use crate::manifests::ManifestError;

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

impl Error {
    /// The problems of a manifest directory (none for the other errors).
    pub fn manifest_problems(&self) -> &[ManifestError] {
        match self {
            Error::Manifests(problems) => problems,
            _ => &[],
        }
    }
}

fn lines(errors: &[ManifestError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
