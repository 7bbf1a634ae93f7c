//! Signed answers end to end (K1-K6): the real resolver signing a standalone directory's
//! zone, asked through a real validating resolver (Unbound, with the zone's DS from
//! `healthroute-resolver dnssec ds` as its trust anchor), and checked by a second validator
//! (BIND's `delv`). `.ci/run` installs both.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{
    Backend, Resolver, eventually, free_port, resolver, run_resolver, sample, temp_dir,
};

/// The zone's groups: every answer type, a CNAME into the zone and one to a name that does
/// not exist, a weighted spread, a failover whose primary is checked against `backend`, and
/// a group across zones for a zonal shift.
fn manifests(backend: &Backend) -> String {
    let group = |name: &str, spec: &str| {
        format!(
            "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: t}}\nspec:\n{spec}---\n"
        )
    };
    [
        group("www", "  name: www.example.com.\n  type: A\n  routingPolicy: Simple\n  records: [{setIdentifier: x, values: [\"192.0.2.1\"]}]\n"),
        group("www6", "  name: www.example.com.\n  type: AAAA\n  routingPolicy: Simple\n  records: [{setIdentifier: x, values: [\"2001:db8::1\"]}]\n"),
        group("txt", "  name: txt.example.com.\n  type: TXT\n  routingPolicy: Simple\n  records: [{setIdentifier: x, values: ['\"v=spf1 -all\"']}]\n"),
        group("alias", "  name: alias.example.com.\n  type: CNAME\n  routingPolicy: Simple\n  records: [{setIdentifier: x, values: [www.example.com.]}]\n"),
        group("dangling", "  name: dangling.example.com.\n  type: CNAME\n  routingPolicy: Simple\n  records: [{setIdentifier: x, values: [gone.example.com.]}]\n"),
        group("spread", "  name: spread.example.com.\n  type: A\n  routingPolicy: Weighted\n  records:\n    - {setIdentifier: a, weight: 1, values: [\"192.0.2.11\"]}\n    - {setIdentifier: b, weight: 1, values: [\"192.0.2.12\"]}\n    - {setIdentifier: c, weight: 1, values: [\"192.0.2.13\"]}\n"),
        group("fo", "  name: fo.example.com.\n  type: A\n  routingPolicy: Failover\n  records:\n    - {setIdentifier: main, failover: {role: Primary}, values: [\"192.0.2.21\"], healthCheckRef: {name: main}}\n    - {setIdentifier: dr, failover: {role: Secondary}, values: [\"198.51.100.21\"]}\n"),
        group("zonal", "  name: zonal.example.com.\n  type: A\n  routingPolicy: Weighted\n  records:\n    - {setIdentifier: zone-a, weight: 1, zone: zone-a, values: [\"192.0.2.31\"]}\n    - {setIdentifier: zone-b, weight: 1, zone: zone-b, values: [\"192.0.2.32\"]}\n"),
        format!(
            "apiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: main, namespace: t}}\nspec:\n  type: TCP\n  target: {{address: 127.0.0.1, port: {}}}\n  requestIntervalSeconds: 1\n  failureThreshold: 2\n  connectTimeoutSeconds: 1\n",
            backend.addr.port()
        ),
    ]
    .concat()
}

/// A new key from `healthroute-resolver dnssec keygen`.
fn keygen(algorithm: &str) -> String {
    run_resolver(&["dnssec", "keygen", "--algorithm", algorithm])
}

/// The DS lines `dnssec ds` prints for `dir`.
fn ds_lines(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().expect("a UTF-8 temp dir");
    ds_of(&run_resolver(&["dnssec", "ds", "--manifests", dir]))
}

/// The DS lines of what `dnssec ds` (or `simulate ZONE DS`) printed.
fn ds_of(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with(';') && l.contains(" DS "))
        .map(str::to_owned)
        .collect()
}

/// Unbound on loopback, validating `example.com.` with `anchors` (zone-file DS lines), its
/// cache off so that every question reaches the resolver.
struct Unbound {
    child: Child,
    addr: SocketAddr,
}

impl Unbound {
    fn start(dir: &Path, upstream: SocketAddr, anchors: &[String]) -> Unbound {
        let port = free_port();
        let anchors: String = anchors
            .iter()
            .map(|a| format!("    trust-anchor: \"{a}\"\n"))
            .collect();
        let conf = dir.join("unbound.conf");
        std::fs::write(
            &conf,
            format!(
                "server:\n    interface: 127.0.0.1@{port}\n    port: {port}\n    do-ip6: no\n    access-control: 127.0.0.0/8 allow\n    username: \"\"\n    chroot: \"\"\n    directory: \"{dir}\"\n    pidfile: \"{dir}/unbound.pid\"\n    use-syslog: no\n    logfile: \"\"\n    module-config: \"validator iterator\"\n    do-not-query-localhost: no\n    cache-max-ttl: 0\n    cache-max-negative-ttl: 0\n    val-log-level: 2\n    verbosity: 1\n{anchors}stub-zone:\n    name: \"example.com.\"\n    stub-addr: {ip}@{uport}\nremote-control:\n    control-enable: no\n",
                dir = dir.display(),
                ip = upstream.ip(),
                uport = upstream.port(),
            ),
        )
        .expect("write");
        let child = Command::new("unbound")
            .args(["-d", "-c"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unbound runs (apt install unbound)");
        let u = Unbound {
            child,
            addr: ([127, 0, 0, 1], port).into(),
        };
        eventually(Duration::from_secs(10), || {
            dig(u.addr, "www.example.com", "A").status == "NOERROR"
        })
        .expect("unbound answers");
        u
    }

    fn stop_and_log(mut self) -> String {
        let _ = self.child.kill();
        let mut log = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut log);
        }
        let _ = self.child.wait();
        log
    }
}

impl Drop for Unbound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `dig` saw: the status, whether AD was set, and the answer section's records.
struct Dug {
    status: String,
    ad: bool,
    answers: Vec<String>,
}

/// `dig +dnssec` of `name` `rtype` at `server` with `options`: what it prints.
fn dig_text(server: SocketAddr, options: &[&str], name: &str, rtype: &str) -> String {
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args([
            "-p",
            &server.port().to_string(),
            "+dnssec",
            "+time=3",
            "+tries=1",
        ])
        .args(options)
        .args([name, rtype])
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn dig(server: SocketAddr, name: &str, rtype: &str) -> Dug {
    let text = dig_text(server, &[], name, rtype);
    let status = text
        .split("status: ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("NO ANSWER")
        .to_owned();
    let ad = text
        .lines()
        .find(|l| l.starts_with(";; flags:"))
        .is_some_and(|l| {
            l.split(';')
                .nth(2)
                .is_some_and(|f| f.split_whitespace().any(|f| f == "ad"))
        });
    let answers = text
        .split(";; ANSWER SECTION:\n")
        .nth(1)
        .map(|s| {
            s.lines()
                .take_while(|l| !l.is_empty())
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect()
        })
        .unwrap_or_default();
    Dug {
        status,
        ad,
        answers,
    }
}

/// The A values of an answer.
fn a_values(d: &Dug) -> Vec<String> {
    d.answers
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(3) == Some(&"A")).then(|| f[4].to_owned())
        })
        .collect()
}

/// A signed zone in `dir` (one CSK, `zone.pem`) with `nameservers` as in the settings.
fn signed_dir(tag: &str, backend: &Backend) -> PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("zone.pem"), keygen("13")).expect("write");
    std::fs::write(
        dir.join("healthroute.yaml"),
        "zones:\n  - name: example.com\n    nameservers: [{name: ns1.example.com, addresses: [127.0.0.1]}]\n    dnssec:\n      keys: [{file: zone.pem}]\ndefaultTtl: 60\n",
    )
    .expect("write");
    std::fs::write(dir.join("groups.yaml"), manifests(backend)).expect("write");
    dir
}

// SEM-K2 SEM-K3 SEM-K4 SEM-K6: through Unbound validating with the zone's DS, every answer
// type, the apex's records, NODATA, a name that does not exist and the end of a dangling
// CNAME come back with AD; so do the answers of a weighted spread, a failover as it happens
// and a zonal shift as it starts; no query gets SERVFAIL. delv agrees. The metrics count
// the signatures made and the cache's hits.
#[test]
fn a_validating_resolver_trusts_every_answer() {
    let backend = Backend::start();
    let dir = signed_dir("dnssec-validate", &backend);
    let r = Resolver::start(&dir, &["--zone-name", "zone-a"]);
    let anchors = ds_lines(&dir);
    assert_eq!(anchors.len(), 1, "one CSK: {anchors:?}");
    let unbound = Unbound::start(&dir, r.dns, &anchors);
    let mut servfails = 0;
    let mut ask = |name: &str, rtype: &str| {
        let d = dig(unbound.addr, name, rtype);
        if d.status == "SERVFAIL" {
            servfails += 1;
        }
        d
    };
    for (name, rtype, status) in [
        ("www.example.com", "A", "NOERROR"),
        ("www.example.com", "AAAA", "NOERROR"),
        ("txt.example.com", "TXT", "NOERROR"),
        ("alias.example.com", "A", "NOERROR"),
        ("example.com", "SOA", "NOERROR"),
        ("example.com", "NS", "NOERROR"),
        ("example.com", "DNSKEY", "NOERROR"),
        ("example.com", "CDS", "NOERROR"),
        ("ns1.example.com", "A", "NOERROR"),
        // NODATA, a name that does not exist (compact denial: NOERROR), a dangling CNAME.
        ("www.example.com", "MX", "NOERROR"),
        ("nope.example.com", "A", "NOERROR"),
        ("deep.nope.example.com", "TXT", "NOERROR"),
        ("dangling.example.com", "A", "NOERROR"),
    ] {
        let d = ask(name, rtype);
        assert_eq!(d.status, status, "{name} {rtype}");
        assert!(d.ad, "{name} {rtype}: not validated: {:?}", d.answers);
    }
    let nodata = ask("www.example.com", "MX");
    assert!(nodata.answers.is_empty(), "{:?}", nodata.answers);
    let chain = ask("alias.example.com", "A");
    assert_eq!(a_values(&chain), ["192.0.2.1"], "{:?}", chain.answers);

    // A weighted spread: each answer signed (its variant cached), each validated. Asked until
    // every variant came back, not a fixed 30 times: unbound keeps time in whole seconds, and
    // once a loaded machine saw only 2 of the 3 values in 30 questions.
    let mut seen = std::collections::BTreeSet::new();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    for _ in 0..300 {
        let d = ask("spread.example.com", "A");
        assert!(d.ad, "{:?}", d.answers);
        seen.extend(a_values(&d));
        if seen.len() == 3 || std::time::Instant::now() > until {
            break;
        }
    }
    assert_eq!(seen.len(), 3, "{seen:?}");

    // A failover as it happens: validated before, during and after.
    assert_eq!(a_values(&ask("fo.example.com", "A")), ["192.0.2.21"]);
    backend.stop();
    eventually(Duration::from_secs(10), || {
        let d = ask("fo.example.com", "A");
        assert!(d.ad, "during the failover: {:?}", d.answers);
        a_values(&d) == ["198.51.100.21"]
    })
    .expect("fails over");

    // A zonal shift away from zone-b as it starts.
    let now = jiff::Timestamp::now();
    std::fs::write(
        dir.join("shift.yaml"),
        format!("apiVersion: healthroute.io/v1alpha1\nkind: ZonalShift\nmetadata: {{name: away, namespace: t, creationTimestamp: \"{now}\"}}\nspec:\n  awayFrom: zone-b\n  target: {{recordGroup: zonal}}\n  expiresIn: 1h\n"),
    )
    .expect("write");
    eventually(Duration::from_secs(10), || {
        (0..10).all(|_| {
            let d = ask("zonal.example.com", "A");
            assert!(d.ad, "during the shift: {:?}", d.answers);
            a_values(&d) == ["192.0.2.31"]
        })
    })
    .expect("shifts away from zone-b");
    assert_eq!(servfails, 0);
    let log = unbound.stop_and_log();
    assert!(!log.contains("validation failure"), "{log}");

    // delv (BIND's validator) with the DNSKEY as its anchor agrees.
    let dnskey = std::process::Command::new("dig")
        .args([
            "+short",
            "-p",
            &r.dns.port().to_string(),
            "@127.0.0.1",
            "example.com",
            "DNSKEY",
        ])
        .output()
        .expect("dig");
    let key = String::from_utf8_lossy(&dnskey.stdout).trim().to_owned();
    let fields: Vec<&str> = key.splitn(4, ' ').collect();
    let anchor = dir.join("anchor.conf");
    std::fs::write(
        &anchor,
        format!(
            "trust-anchors {{ example.com. static-key {} {} {} \"{}\"; }};\n",
            fields[0],
            fields[1],
            fields[2],
            fields[3].replace(' ', "")
        ),
    )
    .expect("write");
    for (name, rtype) in [
        ("www.example.com", "A"),
        ("nope.example.com", "A"),
        ("example.com", "NS"),
    ] {
        let out = Command::new("delv")
            .arg(format!("@{}", r.dns.ip()))
            .args(["-p", &r.dns.port().to_string(), "-a"])
            .arg(&anchor)
            .args(["+root=example.com", name, rtype])
            .output()
            .expect("delv runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("fully validated"),
            "delv {name} {rtype}:\n{text}"
        );
    }

    let metrics = r.metrics();
    let made = sample(
        &metrics,
        "healthroute_dnssec_signatures_total{zone=\"example.com.\"}",
    )
    .unwrap_or(0.0);
    let hits = sample(
        &metrics,
        "healthroute_dnssec_cache_hits_total{zone=\"example.com.\"}",
    )
    .unwrap_or(0.0);
    let expiry = sample(
        &metrics,
        "healthroute_dnssec_signature_expiry_seconds{zone=\"example.com.\"}",
    )
    .unwrap_or(0.0);
    assert!(
        made > 0.0 && hits > made,
        "made {made}, hits {hits}:\n{metrics}"
    );
    assert!(
        expiry > 12.0 * 3600.0 && expiry <= 24.0 * 3600.0,
        "{expiry}"
    );
}

/// The settings of [`signed_dir`] with `keys` (YAML flow entries) instead.
fn set_keys(dir: &Path, keys: &str) {
    let settings = format!(
        "zones:\n  - name: example.com\n    nameservers: [{{name: ns1.example.com, addresses: [127.0.0.1]}}]\n    dnssec:\n      keys: [{keys}]\ndefaultTtl: 60\n"
    );
    // Written whole and renamed, as kubelet swaps a mounted file: never read half-written.
    let tmp = dir.join(".healthroute.yaml.new");
    std::fs::write(&tmp, settings).expect("write");
    std::fs::rename(&tmp, dir.join("healthroute.yaml")).expect("rename");
}

/// The key tags of the DNSKEY RRset and of the RRSIG over www's A, asked directly.
fn served_tags(dns: SocketAddr) -> (Vec<String>, Vec<String>) {
    let tags = |name: &str, rtype: &str, field: usize| -> Vec<String> {
        let d = dig(dns, name, rtype);
        d.answers
            .iter()
            .filter(|l| l.split(' ').nth(3) == Some("RRSIG"))
            .filter_map(|l| l.split(' ').nth(field).map(str::to_owned))
            .collect()
    };
    let dnskeys = dig(dns, "example.com", "DNSKEY")
        .answers
        .iter()
        .filter(|l| l.split(' ').nth(3) == Some("DNSKEY"))
        .count();
    (vec![dnskeys.to_string()], tags("www.example.com", "A", 10))
}

// SEM-K5 SEM-K1: a CSK rollover by the user guide's steps while a validating resolver asks
// without a pause (the parent holding both DS, the double-DS method): the new key published,
// then signing while the old one stays published, then the old one withdrawn, each step
// picked up from the edited settings without a restart. No answer is SERVFAIL or unvalidated.
#[test]
fn a_key_rollover_under_load_loses_no_answer() {
    let backend = Backend::start();
    let dir = signed_dir("dnssec-roll", &backend);
    std::fs::write(dir.join("next.pem"), keygen("13")).expect("write");
    let r = Resolver::start(&dir, &[]);
    let old_tag = served_tags(r.dns).1;
    set_keys(&dir, "{file: zone.pem}, {file: next.pem, state: published}");
    let anchors = ds_lines(&dir);
    assert_eq!(anchors.len(), 2, "{anchors:?}");
    set_keys(&dir, "{file: zone.pem}");
    let unbound = Unbound::start(&dir, r.dns, &anchors);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, addr) = (stop.clone(), unbound.addr);
        std::thread::spawn(move || {
            let (mut asked, mut bad) = (0, Vec::new());
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < deadline
            {
                for (name, rtype) in [("www.example.com", "A"), ("nope.example.com", "A")] {
                    let d = dig(addr, name, rtype);
                    asked += 1;
                    if d.status != "NOERROR" || !d.ad {
                        bad.push(format!("{name} {rtype}: {} ad={}", d.status, d.ad));
                    }
                }
            }
            (asked, bad)
        })
    };
    // 1. The new key published beside the old one.
    set_keys(&dir, "{file: zone.pem}, {file: next.pem, state: published}");
    eventually(Duration::from_secs(20), || served_tags(r.dns).0 == ["2"]).expect("two DNSKEYs");
    std::thread::sleep(Duration::from_secs(2));
    // 2. The new key signs; the old one stays published (cached signatures still verify).
    set_keys(&dir, "{file: zone.pem, state: published}, {file: next.pem}");
    eventually(Duration::from_secs(20), || {
        let tags = served_tags(r.dns).1;
        !tags.is_empty() && tags != old_tag
    })
    .expect("signed by the new key");
    std::thread::sleep(Duration::from_secs(2));
    // 3. The old key withdrawn.
    set_keys(&dir, "{file: next.pem}");
    eventually(Duration::from_secs(20), || served_tags(r.dns).0 == ["1"]).expect("one DNSKEY");
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (asked, bad) = load.join().expect("load");
    assert!(asked > 50, "{asked} queries");
    eprintln!(
        "rollover: {asked} queries through Unbound, {} not validated",
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} of {asked} not validated: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    let log = unbound.stop_and_log();
    assert!(!log.contains("validation failure"), "{log}");

    // A key file that is not a key leaves the last keys signing (K5), said in the metrics.
    std::fs::write(dir.join("next.pem"), "not a key\n").expect("write");
    eventually(Duration::from_secs(20), || {
        sample(
            &r.metrics(),
            "healthroute_dnssec_key_reload_failures_total{zone=\"example.com.\"}",
        ) == Some(1.0)
    })
    .expect("the failure counted");
    let d = dig(r.dns, "www.example.com", "A");
    assert!(
        d.answers.iter().any(|l| l.contains("RRSIG")),
        "still signed: {:?}",
        d.answers
    );
}

// SEM-K1: a key that cannot be used stops the resolver at start, naming the file, never
// the key; nothing is served unsigned.
#[test]
fn a_bad_key_is_a_start_up_error() {
    let backend = Backend::start();
    let dir = signed_dir("dnssec-bad", &backend);
    std::fs::write(
        dir.join("zone.pem"),
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .expect("write");
    let out = resolver()
        .arg("--manifests")
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("zone.pem") && err.contains("not a PKCS#8 private key"),
        "{err}"
    );
    std::fs::remove_file(dir.join("zone.pem")).expect("remove");
    let out = resolver()
        .arg("--manifests")
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("DNSSEC key") && err.contains("zone.pem"),
        "{err}"
    );
}

// SEM-K4: the simulator prints the DS the parent zone needs, the same `dnssec ds` prints;
// over UDP a signed answer larger than the client's limit is truncated whole (TC, no record),
// and TCP brings it whole with its RRSIG (D4 with K2).
#[test]
fn the_simulator_prints_the_ds_and_big_signed_answers_truncate_whole() {
    let backend = Backend::start();
    let dir = signed_dir("dnssec-sim", &backend);
    let dir_text = dir.to_str().expect("a UTF-8 temp dir");
    let text = run_resolver(&["simulate", "--manifests", dir_text, "example.com", "DS"]);
    let ds = ds_of(&text);
    assert_eq!(ds, ds_lines(&dir), "{text}");

    std::fs::write(
        dir.join("big.yaml"),
        format!(
            "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: big, namespace: t}}\nspec:\n  name: big.example.com.\n  type: TXT\n  routingPolicy: Simple\n  records: [{{setIdentifier: x, values: [{}]}}]\n",
            (0..6)
                .map(|i| format!("'\"{i}{}\"'", "x".repeat(200)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
    .expect("write");
    let r = Resolver::start(&dir, &[]);
    let udp = dig_text(
        r.dns,
        &["+bufsize=1232", "+ignore"],
        "big.example.com",
        "TXT",
    );
    assert!(udp.contains(" tc"), "truncated: {udp}");
    assert!(udp.contains("ANSWER: 0,"), "nothing cut in half: {udp}");
    let tcp = dig_text(r.dns, &["+tcp"], "big.example.com", "TXT");
    assert!(tcp.contains("ANSWER: 7,"), "six TXT and their RRSIG: {tcp}");
    assert!(tcp.contains("RRSIG\tTXT"), "{tcp}");
}
