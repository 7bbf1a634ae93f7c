//! Zone affinity end to end: two standalone resolvers on the same manifests
//! (examples/zone-affinity), in different zones, answer differently over UDP and TCP, count
//! their answers by locality, and agree with the simulator asked from the same zone.

use std::collections::BTreeSet;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{Q, TCP, UDP, query};
use crate::support::{Resolver, repo, share, simulate};

/// Every distinct A answer (its sorted addresses, space-separated) over `n` queries.
fn answers(r: &Resolver, name: &str, transport: Q, n: usize) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for _ in 0..n {
        let (m, _) = query(r.dns, name, RecordType::A, transport);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{name}");
        let mut ips: Vec<String> = m
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect();
        ips.sort();
        out.insert(ips.join(" "));
    }
    out
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

// SEM-A1 SEM-A2 SEM-A3 SEM-A5: the same manifests, three resolvers in three zones, three
// answers; the simulator asked from each zone says the same; answers are counted by locality.
#[test]
fn resolvers_in_different_zones_answer_from_their_zone() {
    let dir = repo().join("examples").join("zone-affinity");
    let a = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    let b = Resolver::start(&dir, &["--zone-name", "zone-b"]);
    let d = Resolver::start(&dir, &["--zone-name", "zone-d"]);

    let every = "10.0.1.1 10.0.1.2 10.0.2.1 10.0.2.2 10.0.3.1";
    for transport in [UDP, TCP] {
        assert_eq!(
            answers(&a, "api.example.com", transport, 5),
            set(&["10.0.1.1 10.0.1.2"])
        );
        assert_eq!(
            answers(&b, "api.example.com", transport, 5),
            set(&["10.0.2.1 10.0.2.2"])
        );
        assert_eq!(answers(&d, "api.example.com", transport, 5), set(&[every]));
    }
    // Weighted 80/20 across two zones: each zone's resolver answers its own record only.
    assert_eq!(
        answers(&a, "web.example.com", UDP, 40),
        set(&["192.0.2.10"])
    );
    assert_eq!(
        answers(&b, "web.example.com", UDP, 40),
        set(&["192.0.2.20"])
    );
    assert_eq!(
        answers(&d, "web.example.com", UDP, 200),
        set(&["192.0.2.10", "192.0.2.20"])
    );

    for (zone, want) in [
        ("zone-a", "10.0.1.1 10.0.1.2"),
        ("zone-b", "10.0.2.1 10.0.2.2"),
        ("zone-d", every),
    ] {
        let out = simulate(
            "zone-affinity",
            &["--from-zone", zone, "--queries", "200", "api.example.com"],
        );
        assert_eq!(
            share(&out, want),
            100.0,
            "simulate --from-zone {zone}:\n{out}"
        );
    }
    let out = simulate(
        "zone-affinity",
        &[
            "--from-zone",
            "zone-b",
            "--queries",
            "200",
            "web.example.com",
        ],
    );
    assert_eq!(share(&out, "192.0.2.20"), 100.0, "{out}");

    // A5: zone-a's answers of api were from its zone; zone-d's from every zone.
    let count = |r: &Resolver, group: &str, locality: &str| -> u64 {
        let line = format!(
            "healthroute_zone_affinity_answers_total{{record_group=\"{group}\",locality=\"{locality}\"}} "
        );
        r.metrics()
            .lines()
            .find_map(|l| {
                l.strip_prefix(line.as_str())
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    };
    assert_eq!(count(&a, "shop/api", "same-zone"), 10);
    assert_eq!(count(&a, "shop/api", "all-zones"), 0);
    assert_eq!(count(&d, "shop/api", "all-zones"), 10);
    assert_eq!(count(&d, "shop/api", "same-zone"), 0);
}
