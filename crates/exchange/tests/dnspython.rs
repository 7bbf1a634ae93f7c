//! Interoperability with an independent TSIG implementation, dnspython: its signed query is
//! verified by `verify_query` and it validates the answer `encode_answer` signs over its MAC;
//! our query is validated by dnspython and its signed answer read by `read_answer`. Needs
//! `python3` with dnspython (`python3 -m pip install dnspython`); without it the test fails
//! and says so, rather than passing on nothing.

use std::{
    process::Command,
    time::{SystemTime, UNIX_EPOCH},
};

use healthroute_exchange::{
    ExchangeError, KeyRing, MAX_MESSAGE_SIZE, PeerAnswer, PeerValue, Query, TsigKey, encode_answer,
    verify_query,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The shared key: `hr-peer.`, hmac-sha256, 32 bytes.
const KEY_NAME: &str = "hr-peer.";
const SECRET: &str = "aHItcGVlci1pbnRlcm9wLXNlY3JldC0zMi1ieXRlcyE=";

/// dnspython's side, one subcommand per step; it prints one JSON object.
const SCRIPT: &str = r#"
import json, sys
import dns.message, dns.name, dns.rcode, dns.rdata, dns.tsig

cmd, key_name, secret = sys.argv[1:4]
keyring = {dns.name.from_text(key_name): dns.tsig.Key(key_name, secret, algorithm=dns.tsig.HMAC_SHA256)}

def out(**fields):
    print(json.dumps(fields))

if cmd == "query":
    q = dns.message.make_query(sys.argv[4], "TXT")
    q.flags = 0
    q.use_tsig(keyring, keyname=key_name, algorithm=dns.tsig.HMAC_SHA256)
    wire = q.to_wire()
    out(wire=wire.hex(), mac=q.mac.hex())
elif cmd == "read_answer":
    wire, mac = bytes.fromhex(sys.argv[4]), bytes.fromhex(sys.argv[5])
    try:
        r = dns.message.from_wire(wire, keyring=keyring, request_mac=mac)
    except Exception as e:
        out(error=type(e).__name__)
        sys.exit(0)
    values = [[s.decode() for s in rd.strings] for rrset in r.answer for rd in rrset]
    out(rcode=dns.rcode.to_text(r.rcode()), signed_by=str(r.keyname), values=values)
elif cmd == "answer":
    wire, values = bytes.fromhex(sys.argv[4]), json.loads(sys.argv[5])
    q = dns.message.from_wire(wire, keyring=keyring)
    r = dns.message.make_response(q)
    if values is None:
        r.set_rcode(dns.rcode.NXDOMAIN)
    else:
        rrset = r.find_rrset(r.answer, q.question[0].name, "IN", "TXT", create=True)
        for t, v in values:
            rrset.add(dns.rdata.from_text("IN", "TXT", json.dumps(t) + " " + json.dumps(v)), 0)
    out(wire=r.to_wire().hex(), query_key=str(q.keyname))
else:
    sys.exit("unknown command " + cmd)
"#;

/// Runs the script; fails with install instructions if python3 or dnspython is missing.
fn dnspython(args: &[&str]) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let check = Command::new("python3")
        .args(["-c", "import dns.message, dns.tsig"])
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        _ => {
            return Err(
                "this interop test needs python3 with dnspython: run `python3 -m pip install dnspython`"
                    .into(),
            );
        }
    }
    let output = Command::new("python3")
        .args(["-c", SCRIPT])
        .args(args)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "dnspython script {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn text<'a>(value: &'a serde_json::Value, field: &str) -> Result<&'a str, String> {
    value[field]
        .as_str()
        .ok_or_else(|| format!("no {field} in {value}"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    (0..text.len())
        .step_by(2)
        .map(|i| {
            Ok(u8::from_str_radix(
                text.get(i..i + 2).ok_or("odd hex")?,
                16,
            )?)
        })
        .collect()
}

fn now() -> Result<u64, std::time::SystemTimeError> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs())
}

fn ring() -> Result<KeyRing, healthroute_exchange::Error> {
    KeyRing::new(vec![TsigKey::new(KEY_NAME, "hmac-sha256", SECRET)?])
}

/// A peer value from its two wire parts (the tests write valid ones).
fn peer_value(record_type: &str, text: impl AsRef<str>) -> PeerValue {
    PeerValue::parse(record_type, text.as_ref()).expect("a valid peer value")
}

fn healthy() -> PeerAnswer {
    PeerAnswer::Healthy(vec![
        peer_value("A", "192.0.2.1"),
        peer_value("CNAME", "api.eu-west.example.com."),
        peer_value("TXT", "\"v=spf1 -all\""),
    ])
}

#[test]
fn a_dnspython_query_is_verified_and_dnspython_validates_our_answer() -> TestResult {
    let query = dnspython(&[
        "query",
        KEY_NAME,
        SECRET,
        "api.v2.shop.exchange.healthroute.invalid.",
    ])?;
    let wire = unhex(text(&query, "wire")?)?;
    let mac = text(&query, "mac")?;
    let keys = ring()?;
    let verified = verify_query(&wire, &keys, now()?)?;
    assert_eq!(verified.group(), ("shop", "api.v2"));
    assert_eq!(verified.key().name().to_ascii(), KEY_NAME);

    for (answer, rcode, values) in [
        (
            healthy(),
            "NOERROR",
            serde_json::json!([
                ["A", "192.0.2.1"],
                ["CNAME", "api.eu-west.example.com."],
                ["TXT", "\"v=spf1 -all\""]
            ]),
        ),
        (PeerAnswer::NothingHealthy, "NOERROR", serde_json::json!([])),
        (PeerAnswer::NoSuchGroup, "NXDOMAIN", serde_json::json!([])),
    ] {
        let bytes = encode_answer(&verified, &answer, now()?, MAX_MESSAGE_SIZE);
        let read = dnspython(&["read_answer", KEY_NAME, SECRET, &hex(&bytes), mac])?;
        assert_eq!(read["error"], serde_json::Value::Null, "{read}");
        assert_eq!(text(&read, "rcode")?, rcode);
        assert_eq!(text(&read, "signed_by")?, KEY_NAME);
        assert_eq!(read["values"], values);
    }

    // dnspython's validation is real: a changed byte fails it.
    let mut tampered = encode_answer(&verified, &healthy(), now()?, MAX_MESSAGE_SIZE);
    let at = tampered
        .windows(9)
        .position(|w| w == b"192.0.2.1")
        .ok_or("value not found")?;
    tampered[at + 8] = b'9';
    let read = dnspython(&["read_answer", KEY_NAME, SECRET, &hex(&tampered), mac])?;
    assert_eq!(text(&read, "error")?, "BadSignature", "{read}");
    Ok(())
}

#[test]
fn dnspython_reads_our_badkey_rejection() -> TestResult {
    let other_secret = "c29tZW9uZSBlbHNlJ3Mgc2VjcmV0LCAzMiBieXRlcw==";
    let query = dnspython(&[
        "query",
        "someone-else.",
        other_secret,
        "api.shop.exchange.healthroute.invalid.",
    ])?;
    let wire = unhex(text(&query, "wire")?)?;
    let rejection = verify_query(&wire, &ring()?, now()?)
        .err()
        .ok_or("a query signed with an unknown key was accepted")?;
    assert_eq!(rejection.label(), "bad_key");
    let response = rejection.response().ok_or("no response")?;
    let read = dnspython(&[
        "read_answer",
        "someone-else.",
        other_secret,
        &hex(response),
        text(&query, "mac")?,
    ])?;
    assert_eq!(text(&read, "error")?, "PeerBadKey", "{read}");
    Ok(())
}

#[test]
fn dnspython_validates_our_query_and_we_read_its_signed_answer() -> TestResult {
    let keys = ring()?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, now()?)?;
    let answer = dnspython(&[
        "answer",
        KEY_NAME,
        SECRET,
        &hex(&bytes),
        r#"[["A", "192.0.2.1"], ["AAAA", "2001:db8::1"]]"#,
    ])?;
    assert_eq!(text(&answer, "query_key")?, KEY_NAME);
    let read = pending.read_answer(&unhex(text(&answer, "wire")?)?, now()?)?;
    assert_eq!(
        read,
        PeerAnswer::Healthy(vec![
            peer_value("A", "192.0.2.1"),
            peer_value("AAAA", "2001:db8::1"),
        ])
    );

    let Query { bytes, pending } = Query::new("shop", "gone", &keys, now()?)?;
    let answer = dnspython(&["answer", KEY_NAME, SECRET, &hex(&bytes), "null"])?;
    let read = pending.read_answer(&unhex(text(&answer, "wire")?)?, now()?)?;
    assert_eq!(read, PeerAnswer::NoSuchGroup);

    // A dnspython answer whose MAC is altered fails.
    let Query { bytes, pending } = Query::new("shop", "api", &keys, now()?)?;
    let forged = dnspython(&[
        "answer",
        KEY_NAME,
        SECRET,
        &hex(&bytes),
        r#"[["A", "192.0.2.1"]]"#,
    ])?;
    let mut wire = unhex(text(&forged, "wire")?)?;
    // The TSIG RR ends with the MAC, then ID, error and other-length (2 bytes each).
    let in_mac = wire.len().checked_sub(10).ok_or("short answer")?;
    wire[in_mac] ^= 0xff;
    assert_eq!(
        pending.read_answer(&wire, now()?),
        Err(ExchangeError::BadSignature)
    );
    Ok(())
}
