//! The zones the resolvers are authoritative for: a group whose name lies in none of them is
//! rejected (S8, `ZoneNotServed`), and the most specific one that holds a name is its zone.

use healthroute_table::normalize_name;

use crate::error::Error;

/// The zones the resolvers are authoritative for, normalised (lower case, trailing dot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServedZones(Vec<String>);

impl ServedZones {
    pub fn new<S: AsRef<str>>(zones: impl IntoIterator<Item = S>) -> Result<Self, Error> {
        let mut out = Vec::new();
        for z in zones {
            let z = normalize_name(z.as_ref())?;
            if !out.contains(&z) {
                out.push(z);
            }
        }
        // Longest first, so the most specific zone matches first.
        out.sort_by(|a: &String, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        Ok(ServedZones(out))
    }
    /// The most specific served zone that contains `name` (normalised).
    pub fn zone_of(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|z| name == z.as_str() || name.ends_with(&format!(".{z}")))
            .map(String::as_str)
    }
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}
