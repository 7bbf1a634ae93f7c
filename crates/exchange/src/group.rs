//! A RecordGroup's exchange name, both ways: `namespace/name` ⇄
//! `<name>.<namespace>.exchange.healthroute.invalid.`. Kubernetes names are DNS subdomains
//! (lowercase, may hold dots) and namespaces one DNS label, so the server reads the labels from
//! the right: the zone, then the namespace, then whatever is left is the name.

use hickory_proto::rr::Name;

/// The zone every exchange question is under (`.invalid`, RFC 6761: nobody else resolves it).
pub const EXCHANGE_ZONE: &str = "exchange.healthroute.invalid.";

/// The zone's labels, leftmost first.
const ZONE_LABELS: [&[u8]; 3] = [b"exchange", b"healthroute", b"invalid"];

/// The question name for a group, or why there is none.
pub(crate) fn qname(namespace: &str, name: &str) -> Result<Name, String> {
    if !is_label(namespace.as_bytes()) {
        return Err(format!(
            "namespace {namespace:?} is not a DNS label (lowercase letters, digits and '-', at most 63)"
        ));
    }
    if name.is_empty() || !name.split('.').all(|l| is_label(l.as_bytes())) {
        return Err(format!(
            "name {name:?} is not a DNS subdomain (lowercase labels separated by dots)"
        ));
    }
    let labels = name
        .split('.')
        .map(str::as_bytes)
        .chain(std::iter::once(namespace.as_bytes()))
        .chain(ZONE_LABELS);
    let mut qname = Name::from_labels(labels).map_err(|e| format!("the question name {e}"))?;
    qname.set_fqdn(true);
    Ok(qname)
}

/// The group `(namespace, name)` a question name asks for, lowercased; `None` for a name
/// outside the zone or whose labels cannot be a namespace and a name.
pub(crate) fn parse_qname(qname: &Name) -> Option<(String, String)> {
    let labels: Vec<Vec<u8>> = qname.iter().map(|l| l.to_ascii_lowercase()).collect();
    let zone_start = labels.len().checked_sub(ZONE_LABELS.len())?;
    if labels[zone_start..]
        .iter()
        .map(Vec::as_slice)
        .ne(ZONE_LABELS)
    {
        return None;
    }
    let namespace_at = zone_start.checked_sub(1)?;
    let name_labels = &labels[..namespace_at];
    let namespace = &labels[namespace_at];
    if name_labels.is_empty() || !is_label(namespace) || !name_labels.iter().all(|l| is_label(l)) {
        return None;
    }
    let name = name_labels
        .iter()
        .map(|l| String::from_utf8_lossy(l))
        .collect::<Vec<_>>()
        .join(".");
    Some((String::from_utf8_lossy(namespace).into_owned(), name))
}

/// An RFC 1123 label as Kubernetes names use them: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most
/// 63 bytes.
fn is_label(label: &[u8]) -> bool {
    let inner_ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let end_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (1..=63).contains(&label.len())
        && label.iter().all(inner_ok)
        && end_ok(label.first())
        && end_ok(label.last())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_including_dots() -> Result<(), String> {
        for (ns, name) in [("shop", "api"), ("shop", "api.v2.eu"), ("a", "b-1")] {
            let q = qname(ns, name)?;
            assert_eq!(
                q.to_ascii(),
                format!("{name}.{ns}.exchange.healthroute.invalid.")
            );
            assert_eq!(parse_qname(&q), Some((ns.to_owned(), name.to_owned())));
        }
        Ok(())
    }

    #[test]
    fn parsing_ignores_case_and_refuses_names_outside_the_zone() -> Result<(), String> {
        // Raw labels, so that names hickory's text parser refuses ("-shop") can be tried.
        let q = |s: &str| {
            let labels = s.split('.').filter(|l| !l.is_empty()).map(str::as_bytes);
            let mut name = Name::from_labels(labels).map_err(|e| e.to_string())?;
            name.set_fqdn(true);
            Ok::<_, String>(name)
        };
        assert_eq!(
            parse_qname(&q("API.Shop.Exchange.HealthRoute.Invalid.")?),
            Some(("shop".into(), "api".into()))
        );
        for outside in [
            "shop.exchange.healthroute.invalid.",
            "exchange.healthroute.invalid.",
            "api.shop.exchange.healthroute.example.",
            "api.shop.other.healthroute.invalid.",
            "api_x.shop.exchange.healthroute.invalid.",
            "api.-shop.exchange.healthroute.invalid.",
            ".",
        ] {
            assert_eq!(parse_qname(&q(outside)?), None, "{outside}");
        }
        Ok(())
    }

    #[test]
    fn groups_that_cannot_be_named_are_refused() {
        assert!(qname("Shop", "api").is_err());
        assert!(qname("shop.eu", "api").is_err());
        assert!(qname("shop", "").is_err());
        assert!(qname("shop", "api..v2").is_err());
        assert!(qname("shop", &"a".repeat(64)).is_err());
        let long = vec!["a".repeat(63); 4].join(".");
        assert!(qname("shop", &long).is_err());
    }
}
