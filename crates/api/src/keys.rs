//! `namespace/name`: the one key type for objects, groups included, in both planes.
//!
//! A key's text form (its `Display`) is also the wire form of a group's key in a published
//! table (the table's `GroupKey`). Every group key is made by [`ObjectKey::group_key`] and read
//! back by [`ObjectKey::parse_group_key`], in both planes: nothing else writes `namespace/name`
//! into a table or splits one apart.

use std::fmt;
use std::sync::Arc;

use healthroute_table::GroupKey;

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

    /// The table's key of this group: `namespace/name`, the wire form of a published table's
    /// keys (a group's, an alias's target), which [`ObjectKey::parse_group_key`] reads back.
    pub fn group_key(&self) -> GroupKey {
        self.to_string().into()
    }

    /// The key written as `namespace/name` (a table's `GroupKey`, this type's `Display`): the
    /// inverse of `Display` for every key of a real object, whose namespace holds no `/` and
    /// whose parts are not empty. `None` for text that is not such a key (it came from a
    /// table, which an older or a broken writer may have filled).
    pub fn parse_group_key(text: &str) -> Option<ObjectKey> {
        let (namespace, name) = text.split_once('/')?;
        (!namespace.is_empty() && !name.is_empty()).then(|| ObjectKey::new(namespace, name))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::ObjectKey;

    // A group key read back from a table is the key that wrote it.
    #[test]
    fn a_group_key_parses_back_to_the_key_it_displays() {
        let key = ObjectKey::new("shop", "web");
        assert_eq!(key.to_string(), "shop/web");
        assert_eq!(&*key.group_key(), "shop/web");
        assert_eq!(ObjectKey::parse_group_key(&key.group_key()), Some(key));
        // Only the first `/` separates: a namespace never holds one.
        assert_eq!(
            ObjectKey::parse_group_key("shop/web/extra"),
            Some(ObjectKey::new("shop", "web/extra"))
        );
    }

    #[test]
    fn text_that_is_not_a_group_key_parses_to_none() {
        for text in ["", "web", "/web", "shop/", "/"] {
            assert_eq!(ObjectKey::parse_group_key(text), None, "{text:?}");
        }
    }
}
