//! The simulator against the resolver's two answering paths.

use std::sync::Arc;

use healthroute_table::{
    Answer, CompiledGroup, RecordType, RoutingTable, Selection, Target, Value,
};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, Record, RecordType as HType};
use proptest::prelude::*;

use super::output::describe;
use super::*;
use crate::dns::fastpath::{self, Fast};
use crate::dns::serving::{ServingTable, ZoneConfig};

const NAMES: [&str; 5] = ["a", "b", "c", "d.e", "f"];

/// A group at `NAMES[at]`: A values (Fixed or Weighted), or a CNAME to another name of the
/// pool, to a name that does not exist, or out of the zones.
fn group(at: usize, kind: u8, pick: u8) -> (String, CompiledGroup<Value>) {
    let name = format!("{}.example.com.", NAMES[at]);
    let key: Arc<str> = format!("t/{}-{kind}", NAMES[at]).into();
    let a = |i: u8| Value::A([192, 0, 2, i].into());
    let answer = |id: &str, values: Vec<Value>| Answer {
        set_identifier: id.into(),
        target: Target::Values(values),
    };
    let (record_type, selection) = match kind % 4 {
        0 => (
            RecordType::A,
            Selection::Fixed(answer("x", vec![a(at as u8), a(100)])),
        ),
        1 => (
            RecordType::A,
            Selection::weighted([
                (1, answer("w1", vec![a(10 + at as u8)])),
                (3, answer("w2", vec![a(20 + at as u8)])),
            ])
            .expect("weights"),
        ),
        2 => {
            let target = match pick % 3 {
                0 => format!("{}.example.com.", NAMES[pick as usize % NAMES.len()]),
                1 => "missing.example.com.".to_owned(),
                _ => "www.other.org.".to_owned(),
            };
            (
                RecordType::Cname,
                Selection::Fixed(answer("c", vec![Value::Cname(target)])),
            )
        }
        _ => (
            RecordType::Txt,
            Selection::Fixed(answer("t", vec![Value::Txt(format!("t{at}"))])),
        ),
    };
    (
        key.to_string(),
        CompiledGroup {
            key,
            name: name.into(),
            record_type,
            ttl: 30,
            last_resort: false,
            zone_affinity: None,
            selection,
        },
    )
}

/// The table: at most one group per name (a CNAME owns its name alone, as the compiler
/// enforces).
fn table(groups: &[(usize, u8, u8)]) -> RoutingTable<Value> {
    let mut t = RoutingTable::default();
    let mut taken = std::collections::BTreeSet::new();
    for &(at, kind, pick) in groups {
        if taken.insert(at) {
            let (key, g) = group(at, kind, pick);
            t.groups.insert(key.into(), Arc::new(g));
        }
    }
    t
}

fn value(r: &Record) -> String {
    match &r.data {
        RData::A(a) => a.0.to_string(),
        RData::CNAME(c) => c.0.to_ascii().to_lowercase(),
        RData::TXT(t) => t.to_string(),
        other => other.to_string(),
    }
}

/// Steps as the simulator prints them: values per owner, sorted.
fn steps(records: &[Record]) -> Vec<Vec<String>> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in records {
        let owner = r.name.to_ascii().to_lowercase();
        match out.last_mut() {
            Some((o, vs)) if *o == owner => vs.push(value(r)),
            _ => out.push((owner, vec![value(r)])),
        }
    }
    out.into_iter()
        .map(|(_, mut vs)| {
            vs.sort_by_key(|v| v.parse::<std::net::Ipv4Addr>().ok());
            vs
        })
        .collect()
}

proptest! {
    // SEM-D8 SEM-D2 SEM-D3: the UDP fast path, the hickory path and the simulator answer
    // every question alike over generated tables (CNAMEs to the zone, to missing names and
    // out of it; NODATA; NXDOMAIN; names in any case), pick for pick.
    #[test]
    fn fast_path_full_path_and_simulator_agree(
        groups in proptest::collection::vec((0usize..NAMES.len(), 0u8..4, 0u8..9), 1..6),
        asked in 0usize..NAMES.len() + 1,
        qtype in prop_oneof![Just(HType::A), Just(HType::AAAA), Just(HType::CNAME), Just(HType::TXT)],
        upper in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let counters = AnswerCounters::default();
        let zones = [ZoneConfig { apex: "example.com.".into(), nameservers: vec![], default_ttl: 45, ..ZoneConfig::default() }];
        let serving = ServingTable::build(&table(&groups), &zones, None, &counters).expect("builds");
        let label = NAMES.get(asked).copied().unwrap_or("nope");
        let mut text = format!("{label}.example.com.");
        if upper {
            text = text.to_uppercase();
        }
        let question = Name::from_ascii(&text).expect("name");
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(question.clone(), qtype));
        let req = m.to_vec().expect("encodes");

        let mut out = Vec::new();
        let fast = fastpath::answer(&serving, &Default::default(), &req, &mut out, &mut fastrand::Rng::with_seed(seed), &mut Tally::default());
        let replied = matches!(fast, Fast::Reply { .. });
        prop_assert!(replied, "the fast path answers");
        let reply = Message::from_vec(&out).expect("parses");

        let qname = wire_name(&text.to_lowercase());
        let outcome = serving.lookup(&qname, u16::from(qtype), &mut fastrand::Rng::with_seed(seed), &mut Tally::default());
        let (answers, authority) = crate::dns::handler::records(&serving, &outcome, &question);
        // Names compare without case (D3): the fast path compresses against the question.
        let shown = |rs: &[Record]| rs.iter().map(|r| (r.name.to_ascii().to_lowercase(), r.record_type(), value(r).to_lowercase())).collect::<Vec<_>>();
        prop_assert_eq!(shown(&reply.answers), shown(&answers));
        prop_assert_eq!(shown(&reply.authorities), shown(&authority));
        prop_assert_eq!(reply.metadata.response_code.low(), outcome.rcode());
        // The first answer is owned by the question as asked (D3).
        if let Some(first) = reply.answers.first() {
            prop_assert_eq!(first.name.to_ascii(), text.clone());
        }

        let described = describe(&serving.lookup(&qname, u16::from(qtype), &mut fastrand::Rng::with_seed(seed), &mut Tally::default()));
        if answers.is_empty() {
            prop_assert_eq!(described, "(no answer)".to_owned());
        } else {
            let body = described.split(" (").next().unwrap_or_default();
            let simulated: Vec<Vec<String>> = body
                .split(" → ")
                .filter(|s| *s != "NODATA" && *s != "NXDOMAIN")
                .map(|s| s.split(' ').map(|v| v.trim_matches('"').to_owned()).collect())
                .collect();
            let resolved: Vec<Vec<String>> = steps(&answers)
                .into_iter()
                .map(|vs| vs.into_iter().map(|v| v.trim_matches('"').to_owned()).collect())
                .collect();
            prop_assert_eq!(simulated, resolved, "{}", described);
        }
    }
}
