//! `namespace/name`: the one key type for objects, groups included, in both planes.

use std::fmt;
use std::sync::Arc;

/// `namespace/name` of an object. The compiler keeps a key in several maps and indexes; the
/// parts are shared (`Arc<str>`), so a copy of a key allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ObjectKey {
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        ObjectKey {
            namespace: namespace.as_ref().into(),
            name: name.as_ref().into(),
        }
    }
    /// The key of `name` in this key's namespace (which it shares).
    pub fn sibling(&self, name: &str) -> Self {
        ObjectKey {
            namespace: self.namespace.clone(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
