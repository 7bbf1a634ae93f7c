//! Resolver configuration: flags, and a `healthroute.yaml` (flags win): the manifest
//! directory's in standalone mode, or the file `--config` names in either mode.
//!
//! A served zone in the file is a name (`zones: [example.com]`), or an object that also names
//! the zone's nameservers, their addresses and the SOA's names (D12):
//!
//! ```yaml
//! zones:
//!   - name: example.com
//!     nameservers: [{name: ns1.example.com., addresses: [192.0.2.53, "2001:db8::53"]}]
//!     soa: {mname: ns1.example.com., rname: hostmaster.example.com.}
//! ```
//!
//! [`zone_configs`] checks it all at start and turns it into the serving table's
//! [`ZoneConfig`]s; each mistake is reported with the file, the line and column, and the
//! field it is in ([`Error::Config`]).
//!
//! The file may hold secrets (a peer's TSIG key, `peers[].keys[].secret`), so no message
//! quotes it (SEM-X10): a YAML mistake is told by its place and serde's words without the
//! scalar at fault ([`YamlError`]), and a key by its name and what is wrong with it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::dns::dnssec::FreshSettings;
use healthroute_compiler::manifests::{CONFIG_FILE, YamlError};

use crate::dns::serving::{NameServer, ZoneConfig};
use crate::dns::wire::{in_zone, wire_name};
use crate::error::Error;
use healthroute_compiler::{DEFAULT_TTL, ServedZones};

/// `healthroute.yaml`: the same settings as the flags, in camelCase.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub zones: Vec<ZoneEntry>,
    pub listen: Option<SocketAddr>,
    pub upstream: Option<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
    pub default_ttl: Option<u32>,
    /// The zone this resolver runs in (`--zone-name`).
    pub zone_name: Option<String>,
    /// Peer clusters (X1): their exchange listeners and TSIG keys.
    #[serde(default)]
    pub peers: Vec<healthroute_checker::peer::PeerConfig>,
    /// This cluster's exchange listener, which peers ask (X6).
    pub exchange: Option<ExchangeFileConfig>,
    /// Where each field was written, for the mistakes found once the file is read.
    #[serde(skip)]
    pub places: Places,
}

/// Where each field of a configuration file is written (line and column, 1-based), by its
/// path (`peers[0].keys[1].secret`): the mistakes found after the file is read, which serde
/// cannot place, are told with their line too. Positions only: no value of the file is kept
/// here, and `Debug` shows how many there are.
#[derive(Clone, Default, PartialEq)]
pub struct Places(BTreeMap<String, (u64, u64)>);

impl fmt::Debug for Places {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Places({} fields)", self.0.len())
    }
}

impl Places {
    /// The places of `text`'s fields; none when it is not YAML (its error is told anyway).
    fn of(text: &str) -> Places {
        let mut places = Places::default();
        if let Ok(root) = yaml::<Node>(text) {
            places.record(String::new(), &root);
        }
        places
    }

    fn record(&mut self, path: String, node: &Node) {
        match node {
            Node::Leaf => {}
            Node::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.insert(format!("{path}[{i}]"), item);
                }
            }
            Node::Map(entries) => {
                for (key, value) in entries {
                    let Some(key) = key else { continue };
                    let path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    self.insert(path, value);
                }
            }
        }
    }

    fn insert(&mut self, path: String, node: &serde_saphyr::Spanned<Node>) {
        let at = node.referenced;
        if at.line() > 0 {
            self.0.insert(path.clone(), (at.line(), at.column()));
        }
        self.record(path, &node.value);
    }

    /// Where `field` is written, else the nearest field that holds it (a missing field's
    /// object).
    pub fn of_field(&self, field: &str) -> Option<(u64, u64)> {
        let mut field = field;
        loop {
            if let Some(&at) = self.0.get(field) {
                return Some(at);
            }
            field = &field[..field.rfind(['.', '['])?];
        }
    }
}

/// A YAML node, kept for its place and its children's: no scalar is kept.
enum Node {
    Leaf,
    Seq(Vec<serde_saphyr::Spanned<Node>>),
    /// Keys that are strings, by name (others: `None`).
    Map(Vec<(Option<String>, serde_saphyr::Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("YAML")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_i128<E>(self, _: i128) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_u128<E>(self, _: u128) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_bytes<E>(self, _: &[u8]) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Leaf)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(Key(key)) = map.next_key()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Node::Map(entries))
            }
        }
        d.deserialize_any(Any)
    }
}

/// A mapping's key: its text when it is a string.
struct Key(Option<String>);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(Some(v.to_owned())))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Key, E> {
                Ok(Key(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Key, E> {
                Ok(Key(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Key, E> {
                Ok(Key(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Key, E> {
                Ok(Key(None))
            }
            fn visit_unit<E>(self) -> Result<Key, E> {
                Ok(Key(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Key(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Key(None))
            }
        }
        d.deserialize_any(Text)
    }
}

/// `exchange:` in `healthroute.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExchangeFileConfig {
    /// Where peers' checkers ask (`--exchange-listen`).
    pub listen: SocketAddr,
}

/// The peers a checker asks and the exchange listener's keys, from the file's `peers` and
/// `exchange` (the flag wins for the address). Key files are read here, and again while
/// running (`healthroute_checker::peer::follow_key_files`, X1: a changed Secret is taken
/// without a restart); a relative `secretFile` is relative to the configuration file's folder
/// (`config_path`). A mistake is told with the field it is in (`peers[0].keys[1].secret`),
/// never with a secret (SEM-X10).
pub fn peers_and_exchange(
    file: &FileConfig,
    config_path: &Path,
    flag_listen: Option<SocketAddr>,
) -> Result<
    (
        healthroute_checker::peer::Peers,
        Option<crate::dns::exchange::ExchangeConfig>,
    ),
    Error,
> {
    use healthroute_checker::peer::Peers;
    let base = config_path.parent().unwrap_or(Path::new("."));
    let mut configs = file.peers.clone();
    for (i, peer) in configs.iter_mut().enumerate() {
        for (j, key) in peer.keys.iter_mut().enumerate() {
            let at = format!("peers[{i}].keys[{j}]");
            // A file's secret is checked here as if it were inline, so that a mistake is told
            // at its place; the peers keep the file's path, to read it again while running.
            let from_file = key.secret.is_none() && key.secret_file.is_some();
            let mut checked = key.clone();
            if let Some(f) = key.secret_file.as_mut().filter(|_| from_file) {
                let path = base.join(&*f);
                let secret = std::fs::read(&path).map_err(|e| {
                    file.mistake(
                        config_path,
                        format!("{at}.secretFile"),
                        format!("TSIG key {}: cannot read {}: {e}", key.name, path.display()),
                    )
                })?;
                checked.secret = Some(String::from_utf8_lossy(&secret).into_owned());
                checked.secret_file = None;
                *f = path;
            }
            if let Err(e) = checked.load() {
                let (field, what_to_do) = key_field(&e, from_file);
                return Err(file.mistake(
                    config_path,
                    format!("{at}{field}"),
                    format!("{e}{what_to_do}"),
                ));
            }
        }
    }
    // What is left to find is a peer's: its name, its addresses, its number of keys, a key
    // name given two secrets. Such an error names the peer; the last peer of that name is
    // the one it was found at.
    let at_peer = |e: healthroute_checker::Error| {
        let healthroute_checker::Error::PeerConfig { peer, .. } = &e else {
            return Error::Peers(e);
        };
        match file.peers.iter().rposition(|p| p.name == *peer) {
            Some(i) => file.mistake(config_path, format!("peers[{i}]"), e.to_string()),
            None => Error::Peers(e),
        }
    };
    let peers = Peers::from_config(&configs).map_err(at_peer)?;
    let listen = flag_listen.or(file.exchange.as_ref().map(|e| e.listen));
    let exchange = match (listen, peers.server_keys()) {
        (Some(listen), Some(keys)) => Some(crate::dns::exchange::ExchangeConfig { listen, keys }),
        (Some(_), None) => return Err(Error::ExchangeWithoutPeers),
        (None, _) => None,
    };
    Ok((peers, exchange))
}

/// The field of a key (after `peers[i].keys[j]`) that `e` is about, and what to do about it
/// when the message does not say.
fn key_field(e: &healthroute_exchange::Error, from_file: bool) -> (&'static str, &'static str) {
    use healthroute_exchange::Error as E;
    let secret = if from_file { ".secretFile" } else { ".secret" };
    match e {
        E::KeyName { .. } => (".name", ""),
        E::UnsupportedAlgorithm { .. } => (".algorithm", ""),
        E::SecretNotBase64 { .. } => (
            secret,
            "; write the secret in base64, as `openssl rand -base64 32` prints one",
        ),
        E::SecretTooShort { .. } => (secret, ""),
        _ => ("", ""),
    }
}

/// One entry of `zones:`: a zone's name, or the zone with its nameservers and SOA names.
#[derive(Debug, Clone, PartialEq)]
pub enum ZoneEntry {
    Name(String),
    Zone(ZoneObject),
}

impl ZoneEntry {
    /// The zone's name as written.
    pub fn name(&self) -> &str {
        match self {
            ZoneEntry::Name(name) => name,
            ZoneEntry::Zone(zone) => &zone.name,
        }
    }
}

/// `{name, nameservers, soa}` (D12).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneObject {
    pub name: String,
    #[serde(default)]
    pub nameservers: Vec<NameServerEntry>,
    #[serde(default)]
    pub soa: SoaNames,
    /// Signed answers (K1): the keys and the signatures' timing.
    #[serde(default)]
    pub dnssec: Option<crate::dns::dnssec::DnssecEntry>,
}

/// `{name, addresses}`: addresses are kept as written and checked by [`zone_configs`], which
/// says which one is wrong.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameServerEntry {
    pub name: String,
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// `soa: {mname, rname}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoaNames {
    pub mname: Option<String>,
    pub rname: Option<String>,
}

impl<'de> Deserialize<'de> for ZoneEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = ZoneEntry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a zone name, or {name, nameservers, soa}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ZoneEntry, E> {
                Ok(ZoneEntry::Name(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ZoneEntry, A::Error> {
                // Through the derived form, so that an unknown key is named with the keys
                // that are allowed.
                ZoneObject::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ZoneEntry::Zone)
            }
        }
        d.deserialize_any(Entry)
    }
}

impl FileConfig {
    /// Reads `DIR/healthroute.yaml`; a missing file is an empty configuration.
    pub fn load(dir: &Path) -> Result<FileConfig, Error> {
        match Self::read(&dir.join(CONFIG_FILE)) {
            Err(Error::ReadConfig { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(FileConfig::default())
            }
            other => other,
        }
    }

    /// Reads the file `--config` names, which must exist.
    pub fn read(path: &Path) -> Result<FileConfig, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadConfig {
            path: path.to_owned(),
            source,
        })?;
        let mut file = parse(&text, path)?;
        file.places = Places::of(&text);
        // The zones' names and addresses now, with the file's name in the message; what
        // depends on the flags (which zones are served) when the zones are set up.
        described_zones(&file, path, DEFAULT_TTL)?;
        Ok(file)
    }

    /// An [`Error::Config`] at `field` of this file (read from `path`).
    fn mistake(&self, path: &Path, field: String, message: String) -> Error {
        Error::Config {
            file: path.to_owned(),
            line_column: self.places.of_field(&field),
            field,
            message,
        }
    }
}

/// The settings in `text` (read from `path`), or the mistake: the field serde stopped at
/// (`peers[0].keys[0].secret`), its place and what is wrong, in words without the file's
/// text ([`YamlError`]).
fn parse(text: &str, path: &Path) -> Result<FileConfig, Error> {
    let mut at = None;
    serde_saphyr::with_deserializer_from_str_with_options(text, yaml_options(), |d| {
        serde_path_to_error::deserialize(d).map_err(|e| {
            at = Some(e.path().clone());
            e.into_inner()
        })
    })
    .map_err(|e| {
        let e = YamlError::new(&e);
        // A syntax error is in no field yet: serde was wherever the parser stopped.
        let field = match at {
            Some(at) if !e.syntax => field_path(&at, e.unknown_field),
            _ => String::new(),
        };
        Error::Config {
            file: path.to_owned(),
            line_column: e.line_column,
            field,
            message: if e.syntax {
                format!("not valid YAML: {}", e.message)
            } else {
                e.message
            },
        }
    })
}

/// `peers[0].keys[0]`, as people write a field. An unknown field's own name is left out:
/// it may be anything (a misplaced secret too), and the message names it when it looks like
/// a name.
fn field_path(path: &serde_path_to_error::Path, unknown_field: bool) -> String {
    use serde_path_to_error::Segment;
    let mut segments: Vec<&Segment> = path.iter().collect();
    if unknown_field && matches!(segments.last(), Some(Segment::Map { .. })) {
        segments.pop();
    }
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    out
}

/// Reads YAML the way kubectl does (YAML 1.1: `yes`, `on`, `y` are booleans), as the
/// manifest loader does.
fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, yaml_options())
}

fn yaml_options() -> serde_saphyr::Options {
    healthroute_compiler::manifests::yaml_options()
}

/// Served zones and default TTL: from the flags when given, else from the file.
pub fn zones_and_ttl(
    flag_zones: &[String],
    flag_ttl: Option<u32>,
    file: &FileConfig,
) -> Result<(ServedZones, u32), Error> {
    let zones = if flag_zones.is_empty() {
        ServedZones::new(file.zones.iter().map(ZoneEntry::name))?
    } else {
        ServedZones::new(flag_zones)?
    };
    if zones.names().is_empty() {
        return Err(Error::NoZone);
    }
    Ok((zones, flag_ttl.or(file.default_ttl).unwrap_or(DEFAULT_TTL)))
}

/// Each served zone's apex records (D12), checked: the zones are `zones` (flags or file,
/// [`zones_and_ttl`]); a zone the file describes as an object keeps its nameservers and SOA
/// names, also when `--zone` flags chose the zones; `--nameserver` flags, when given, name
/// every zone's nameservers (without addresses), as before the file could. `file_path` is
/// where `file` came from, for the messages.
pub fn zone_configs(
    zones: &ServedZones,
    flag_nameservers: &[String],
    default_ttl: u32,
    file: &FileConfig,
    file_path: &Path,
) -> Result<Vec<ZoneConfig>, Error> {
    let bad = |at: String, message: String| file.mistake(file_path, at, message);
    let mut described = described_zones(file, file_path, default_ttl)?;

    let mut flag_servers = Vec::with_capacity(flag_nameservers.len());
    for raw in flag_nameservers {
        let name = normalize(raw).map_err(|e| Error::Config {
            file: PathBuf::from("--nameserver"),
            line_column: None,
            field: raw.clone(),
            message: e,
        })?;
        flag_servers.push(NameServer::from(name.as_str()));
    }

    let apexes: Vec<Vec<u8>> = zones.names().iter().map(|z| wire_name(z)).collect();
    // A nameserver's addresses, and where they were given: one name, one set of addresses.
    let mut addressed: HashMap<String, (String, Vec<IpAddr>)> = HashMap::new();
    let mut out = Vec::with_capacity(zones.names().len());
    for apex in zones.names() {
        let (index, mut zone) = described.remove(apex).unwrap_or_else(|| {
            (
                usize::MAX,
                ZoneConfig {
                    apex: apex.to_string(),
                    default_ttl,
                    ..ZoneConfig::default()
                },
            )
        });
        if !flag_servers.is_empty() {
            zone.nameservers = flag_servers.clone();
        }
        for (j, ns) in zone.nameservers.iter().enumerate() {
            if ns.addresses.is_empty() {
                continue;
            }
            let at = format!("zones[{index}].nameservers[{j}].addresses");
            let wire = wire_name(&ns.name);
            if !apexes.iter().any(|apex| in_zone(&wire, apex)) {
                return Err(bad(
                    at,
                    format!(
                        "{} lies outside every served zone, so its addresses cannot be served; \
                         list it without addresses",
                        ns.name
                    ),
                ));
            }
            let mut mine = ns.addresses.clone();
            mine.sort();
            match addressed.get(&ns.name) {
                Some((there, theirs)) if *theirs != mine => {
                    return Err(bad(
                        at,
                        format!("{} has other addresses in {there}", ns.name),
                    ));
                }
                Some(_) => {}
                None => {
                    addressed.insert(ns.name.clone(), (at, mine));
                }
            }
        }
        out.push(zone);
    }
    Ok(out)
}

/// The zone objects of `file` (read from `file_path`), checked, as [`ZoneConfig`]s by
/// normalised name, each with its index in `zones:`. A zone listed twice is an error when
/// either listing is an object (which one would hold?); two plain names are one zone, as they
/// always were.
fn described_zones(
    file: &FileConfig,
    file_path: &Path,
    default_ttl: u32,
) -> Result<HashMap<String, (usize, ZoneConfig)>, Error> {
    let bad = |at: String, message: String| file.mistake(file_path, at, message);
    let mut described: HashMap<String, (usize, ZoneConfig)> = HashMap::new();
    let mut listed: HashMap<String, (usize, bool)> = HashMap::new();
    for (i, entry) in file.zones.iter().enumerate() {
        let name = normalize(entry.name())
            .map_err(|e| bad(format!("zones[{i}]{}", name_field(entry)), e))?;
        let object = matches!(entry, ZoneEntry::Zone(_));
        if let Some(&(first, was_object)) = listed.get(&name) {
            if object || was_object {
                return Err(bad(
                    format!("zones[{i}]"),
                    format!("{name} is listed twice (zones[{first}])"),
                ));
            }
            continue;
        }
        listed.insert(name.clone(), (i, object));
        if let ZoneEntry::Zone(zone) = entry {
            let base = file_path.parent().unwrap_or(Path::new("."));
            let config = zone_object(i, &name, zone, default_ttl, base, &bad)?;
            described.insert(name, (i, config));
        }
    }
    Ok(described)
}

/// One zone object of the file, checked, as a [`ZoneConfig`].
fn zone_object(
    i: usize,
    apex: &str,
    zone: &ZoneObject,
    default_ttl: u32,
    base: &Path,
    bad: &dyn Fn(String, String) -> Error,
) -> Result<ZoneConfig, Error> {
    let mut nameservers: Vec<NameServer> = Vec::with_capacity(zone.nameservers.len());
    for (j, ns) in zone.nameservers.iter().enumerate() {
        let at = format!("zones[{i}].nameservers[{j}]");
        let name = normalize(&ns.name).map_err(|e| bad(format!("{at}.name"), e))?;
        if let Some(k) = nameservers.iter().position(|n| n.name == name) {
            return Err(bad(
                format!("{at}.name"),
                format!("{name} is listed twice (nameservers[{k}])"),
            ));
        }
        let mut addresses = Vec::with_capacity(ns.addresses.len());
        for (k, raw) in ns.addresses.iter().enumerate() {
            let address: IpAddr = raw.trim().parse().map_err(|_| {
                bad(
                    format!("{at}.addresses[{k}]"),
                    format!("{raw:?} is not an IPv4 or IPv6 address"),
                )
            })?;
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        nameservers.push(NameServer { name, addresses });
    }
    let soa_name = |field: &str, raw: &Option<String>| {
        raw.as_deref()
            .map(normalize)
            .transpose()
            .map_err(|e| bad(format!("zones[{i}].soa.{field}"), e))
    };
    let dnssec = zone
        .dnssec
        .as_ref()
        .map(|entry| {
            entry
                .config(base)
                .map_err(|(field, why)| bad(format!("zones[{i}].dnssec.{field}"), why))
        })
        .transpose()?;
    Ok(ZoneConfig {
        apex: apex.to_owned(),
        nameservers,
        mname: soa_name("mname", &zone.soa.mname)?,
        rname: soa_name("rname", &zone.soa.rname)?,
        default_ttl,
        dnssec,
    })
}

/// Each signed zone's `dnssec` settings in the settings file at `path`, read again (K5), by
/// normalised apex; the file's error when it cannot be read.
pub fn dnssec_settings(path: &Path) -> FreshSettings {
    let file = FileConfig::read(path).map_err(|e| e.to_string())?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = std::collections::HashMap::new();
    for entry in &file.zones {
        let ZoneEntry::Zone(zone) = entry else {
            continue;
        };
        let (Some(dnssec), Ok(apex)) =
            (&zone.dnssec, healthroute_table::normalize_name(&zone.name))
        else {
            continue;
        };
        let config = dnssec
            .config(base)
            .map_err(|(field, why)| format!("dnssec.{field}: {why}"));
        out.insert(apex, config);
    }
    Ok(out)
}

/// `.name` for a zone object, nothing for a plain name: the field a bad zone name is in.
fn name_field(entry: &ZoneEntry) -> &'static str {
    match entry {
        ZoneEntry::Name(_) => "",
        ZoneEntry::Zone(_) => ".name",
    }
}

fn normalize(raw: &str) -> Result<String, String> {
    healthroute_table::normalize_name(raw).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` as the file `--config` names.
    fn read(text: &str) -> Result<FileConfig, Error> {
        let path = std::env::temp_dir().join(format!(
            "healthroute-config-{}-{}.yaml",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::write(&path, text).expect("write");
        let read = FileConfig::read(&path);
        let _ = std::fs::remove_file(&path);
        read
    }

    /// The zones as the resolver would serve them.
    fn served(text: &str, flag_zones: &[&str], flag_ns: &[&str]) -> Result<Vec<ZoneConfig>, Error> {
        let file = read(text)?;
        let flag_zones: Vec<String> = flag_zones.iter().map(|z| z.to_string()).collect();
        let flag_ns: Vec<String> = flag_ns.iter().map(|z| z.to_string()).collect();
        let (zones, ttl) = zones_and_ttl(&flag_zones, None, &file)?;
        zone_configs(&zones, &flag_ns, ttl, &file, Path::new("healthroute.yaml"))
    }

    const TWO_ZONES: &str = r#"
zones:
  - Example.com
  - name: shop.example.org
    nameservers:
      - {name: NS1.shop.example.org, addresses: [192.0.2.53, "2001:db8::53", 192.0.2.53]}
      - {name: ns.provider.net.}
    soa: {rname: dns.shop.example.org.}
defaultTtl: 30
"#;

    // SEM-D12: a zone is a name (as before) or an object with its nameservers, their
    // addresses and the SOA's names; names are normalised, repeated addresses kept once.
    #[test]
    fn zones_are_names_or_objects() {
        let zones = served(TWO_ZONES, &[], &[]).expect("valid");
        let shop = zones
            .iter()
            .find(|z| z.apex == "shop.example.org.")
            .expect("shop");
        assert_eq!(
            shop.nameservers,
            [
                NameServer {
                    name: "ns1.shop.example.org.".into(),
                    addresses: vec![
                        [192, 0, 2, 53].into(),
                        "2001:db8::53".parse().expect("an address")
                    ],
                },
                NameServer::from("ns.provider.net."),
            ]
        );
        assert_eq!(shop.mname, None, "the first nameserver, at build");
        assert_eq!(shop.rname.as_deref(), Some("dns.shop.example.org."));
        assert_eq!(shop.default_ttl, 30);
        let plain = zones
            .iter()
            .find(|z| z.apex == "example.com.")
            .expect("example.com");
        assert_eq!(
            *plain,
            ZoneConfig {
                apex: "example.com.".into(),
                default_ttl: 30,
                ..ZoneConfig::default()
            },
            "no nameserver: ns.<zone> at build, as before"
        );
    }

    // SEM-D12: flags win: `--zone` flags choose the zones (a zone the file describes keeps its
    // nameservers), `--nameserver` flags name every zone's nameservers, without addresses.
    #[test]
    fn flags_win_over_the_file() {
        let zones = served(TWO_ZONES, &["shop.example.org", "other.example"], &[]).expect("valid");
        assert_eq!(
            zones.iter().map(|z| z.apex.as_str()).collect::<Vec<_>>(),
            ["shop.example.org.", "other.example."]
        );
        assert_eq!(zones[0].nameservers.len(), 2);
        assert!(zones[1].nameservers.is_empty());
        let zones = served(TWO_ZONES, &[], &["NS.Elsewhere.net"]).expect("valid");
        assert!(
            zones
                .iter()
                .all(|z| z.nameservers == [NameServer::from("ns.elsewhere.net.")])
        );
        let e = served(TWO_ZONES, &[], &["bad..name"]).expect_err("a bad flag");
        assert!(
            e.to_string().starts_with("--nameserver: bad..name: "),
            "{e}"
        );
    }

    // SEM-D12: every mistake in a zone's configuration is an error at start that names the
    // file and the field, never a panic.
    #[test]
    fn mistakes_name_their_field() {
        let cases = [
            (
                "zones: [{name: example.com, nameserver: []}]",
                "unknown field `nameserver`, expected one of name, nameservers, soa",
            ),
            (
                "zones: [{name: example.com, nameservers: [{name: ns1.example.com, address: []}]}]",
                "unknown field `address`",
            ),
            (
                "zones: [42]",
                "expected a zone name, or {name, nameservers, soa}",
            ),
            ("zones: [{nameservers: []}]", "missing field `name`"),
            (
                "zones: [{name: example.com, nameservers: [{name: ns1.example.com, addresses: [300.1.2.3]}]}]",
                "zones[0].nameservers[0].addresses[0]: \"300.1.2.3\" is not an IPv4 or IPv6 address",
            ),
            (
                "zones: [{name: example.com, nameservers: [{name: \"ns 1.example.com\"}]}]",
                "zones[0].nameservers[0].name: ",
            ),
            (
                "zones: [{name: example.com, nameservers: [{name: ns1.example.com}, {name: NS1.example.com.}]}]",
                "zones[0].nameservers[1].name: ns1.example.com. is listed twice (nameservers[0])",
            ),
            ("zones: [{name: \"ex ample.com\"}]", "zones[0].name: "),
            ("zones: [\"ex ample.com\"]", "zones[0]: "),
            (
                "zones: [example.com, {name: Example.com.}]",
                "zones[1]: example.com. is listed twice (zones[0])",
            ),
            (
                "zones: [{name: example.com, soa: {mname: \"a..b\"}}]",
                "zones[0].soa.mname: ",
            ),
            (
                "zones: [{name: example.com, soa: {serial: 1}}]",
                "unknown field `serial`",
            ),
            (
                "zones: [{name: example.com, nameservers: [{name: ns1.other.net, addresses: [192.0.2.1]}]}]",
                "zones[0].nameservers[0].addresses: ns1.other.net. lies outside every served zone",
            ),
            (
                "zones: [{name: a.example, nameservers: [{name: ns.a.example, addresses: [192.0.2.1]}]},\n        {name: b.example, nameservers: [{name: ns.a.example, addresses: [192.0.2.2]}]}]",
                "zones[1].nameservers[0].addresses: ns.a.example. has other addresses in zones[0].nameservers[0].addresses",
            ),
        ];
        for (text, expected) in cases {
            let e = served(text, &[], &[]).expect_err(text);
            let shown = e.to_string();
            assert!(shown.contains(expected), "{text}:\n{shown}");
            assert!(shown.contains(".yaml"), "names the file: {shown}");
        }
        // The same nameserver in two zones, with the same addresses (or none the second
        // time): one name, one answer.
        served(
            "zones: [{name: a.example, nameservers: [{name: ns.a.example, addresses: [192.0.2.1]}]},\n        {name: b.example, nameservers: [{name: ns.a.example, addresses: [192.0.2.1]}, {name: ns.a.example}]}]",
            &[],
            &[],
        )
        .expect_err("listed twice in b");
        served(
            "zones: [{name: a.example, nameservers: [{name: ns.a.example, addresses: [192.0.2.1]}]},\n        {name: b.example, nameservers: [{name: ns.a.example}]}]",
            &[],
            &[],
        )
        .expect("a name without addresses elsewhere");
    }

    /// base64 of [`DECODED`]: a secret no message may hold, in either form.
    const SECRET: &str = "aGVhbHRocm91dGUtdGVzdC1zZWNyZXQtZG8tbm90LXByaW50";
    const DECODED: &str = "healthroute-test-secret-do-not-print";

    /// The peers of `text` checked as the resolver checks them at start, in a folder of
    /// their own (for `secretFile`s, written first: `(name, content)`).
    fn peers(text: &str, files: &[(&str, &str)]) -> Result<(), Error> {
        let dir = std::env::temp_dir().join(format!(
            "healthroute-peers-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        for (name, content) in files {
            std::fs::write(dir.join(name), content).expect("write");
        }
        let path = dir.join(CONFIG_FILE);
        std::fs::write(&path, text).expect("write");
        let checked = FileConfig::read(&path)
            .and_then(|file| peers_and_exchange(&file, &path, None).map(|_| ()));
        let _ = std::fs::remove_dir_all(&dir);
        checked
    }

    fn peer_with(key: &str) -> String {
        format!(
            "zones: [example.com]\npeers:\n  - name: west\n    addresses: [\"127.0.0.1:5454\"]\n    keys:\n      - name: east-west.\n{key}"
        )
    }

    /// The error's text, checked to hold no secret, in one line.
    fn told(e: &Error) -> String {
        let text = e.to_string();
        assert!(!text.contains(SECRET), "the secret: {text}");
        assert!(!text.contains(DECODED), "the decoded secret: {text}");
        assert!(!text.contains(&SECRET[..16]), "part of the secret: {text}");
        assert!(!text.contains('\n'), "one line: {text}");
        let debug = format!("{e:?}");
        assert!(
            !debug.contains(SECRET) && !debug.contains(DECODED),
            "{debug}"
        );
        text
    }

    // SEM-X10: a mistake in the file is told as FILE:LINE:COLUMN: FIELD: what, without the
    // lines around it and without the value at fault, whatever is wrong with a secret.
    #[test]
    fn mistakes_near_a_secret_do_not_quote_it() {
        let cases = [
            // A YAML syntax error on the secret's line, and on the next one.
            (
                peer_with(&format!("        secret: \"{SECRET}\n")),
                ".yaml:",
                "not valid YAML",
            ),
            (
                peer_with(&format!("        secret: {SECRET}\n       oops: [\n")),
                ".yaml:",
                "not valid YAML",
            ),
            // Not base64.
            (
                peer_with(&format!("        secret: \"{SECRET}!\"\n")),
                ".yaml:7:17: peers[0].keys[0].secret: TSIG key east-west.: the secret is not base64",
                "openssl rand -base64 32",
            ),
            // Too short, and the wrong algorithm.
            (
                peer_with(&format!("        secret: {}\n", &SECRET[..12])),
                ".yaml:7:17: peers[0].keys[0].secret: TSIG key east-west.: the secret has 9 bytes",
                "at least 16",
            ),
            (
                peer_with(&format!(
                    "        algorithm: hmac-md5\n        secret: {SECRET}\n"
                )),
                ".yaml:7:20: peers[0].keys[0].algorithm: ",
                "hmac-sha256",
            ),
            // A list where the secret belongs, a map, a number.
            (
                peer_with(&format!("        secret: [{SECRET}, {DECODED}]\n")),
                ".yaml:7:17: peers[0].keys[0].secret: expected string scalar",
                "",
            ),
            (
                peer_with(&format!("        secret: {{{SECRET}: {DECODED}}}\n")),
                ".yaml:7:17: peers[0].keys[0].secret: expected string scalar",
                "",
            ),
            // The secret where a key's field name belongs.
            (
                peer_with(&format!("        {SECRET}: x\n")),
                ".yaml:7:9: peers[0].keys[0]: unknown field (not shown), expected one of name, algorithm, secret, secretFile",
                "",
            ),
            // Both secret and secretFile.
            (
                peer_with(&format!(
                    "        secret: {SECRET}\n        secretFile: key\n"
                )),
                "peers[0].keys[0]: TSIG key east-west.: give exactly one of secret and secretFile",
                "",
            ),
        ];
        for (text, place, what) in cases {
            let e = peers(&text, &[("key", SECRET)]).expect_err(&text);
            let shown = told(&e);
            assert!(shown.contains(place), "{text}\n{shown}");
            assert!(shown.contains(what), "{text}\n{shown}");
        }
        // The secret is valid; the mistake is elsewhere in the peer.
        let e = peers(
            &format!(
                "peers:\n  - name: West\n    addresses: [\"127.0.0.1:5454\"]\n    keys: [{{name: k., secret: {SECRET}}}]\n"
            ),
            &[],
        )
        .expect_err("a bad name");
        assert!(
            told(&e).contains(".yaml:2:5: peers[0]: peer West: the name must be a DNS label"),
            "{e}"
        );
    }

    // SEM-X10: a secret read from `secretFile` is checked as an inline one, and a mistake in
    // it points at `secretFile`, without the file's content.
    #[test]
    fn a_bad_secret_file_is_told_by_its_field() {
        let text = peer_with("        secretFile: key\n");
        peers(&text, &[("key", &format!("{SECRET}\n"))]).expect("a good key file");
        let e = peers(&text, &[("key", DECODED)]).expect_err("not base64");
        assert!(
            told(&e).contains(".yaml:7:21: peers[0].keys[0].secretFile: TSIG key east-west.: the secret is not base64"),
            "{e}"
        );
        let e = peers(&text, &[]).expect_err("no file");
        assert!(
            told(&e).contains("peers[0].keys[0].secretFile: TSIG key east-west.: cannot read "),
            "{e}"
        );
    }

    // SEM-X1 SEM-X10: a key file the configuration names is read again while running: a
    // changed secret is accepted by the exchange listener at once, the previous one still
    // signs the checker's queries and is still accepted; a file that turns unreadable, not
    // base64 or too short keeps the secret in use, told once by its file and field without
    // the secret, and counted.
    #[test]
    fn key_files_are_read_again_while_running() {
        use healthroute_checker::peer::KeyReload;
        use healthroute_exchange::{KeyRing, Query, TsigKey, verify_query};
        // "healthroute-next-secret-32-bytes"
        const NEXT: &str = "aGVhbHRocm91dGUtbmV4dC1zZWNyZXQtMzItYnl0ZXM=";
        let dir = std::env::temp_dir().join(format!(
            "healthroute-key-reload-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let key_file = dir.join("key");
        std::fs::write(&key_file, format!("{SECRET}\n")).expect("write");
        let path = dir.join(CONFIG_FILE);
        let text = format!(
            "exchange: {{listen: \"127.0.0.1:5354\"}}\n{}",
            peer_with("        secretFile: key\n")
        );
        std::fs::write(&path, text).expect("write");
        let file = FileConfig::read(&path).expect("valid");
        let (peers, exchange) = peers_and_exchange(&file, &path, None).expect("valid");
        let listener = exchange.expect("an exchange listener").keys;
        let key = |secret: &str| TsigKey::new("east-west.", "hmac-sha256", secret).expect("key");
        let accepts = |secret: &str, at: u64| {
            let ring = KeyRing::new(vec![key(secret)]).expect("ring");
            let query = Query::new("shop", "www", &ring, at).expect("query");
            verify_query(&query.bytes, &listener.load(), at).is_ok()
        };
        let now = 1_780_000_000;
        assert!(accepts(SECRET, now) && !accepts(NEXT, now));

        let (lines, _guard) = crate::test_log::capture();

        assert_eq!(peers.reload_key_files(now), KeyReload::default());
        std::fs::write(&key_file, format!("{NEXT}\n")).expect("write");
        assert_eq!(
            peers.reload_key_files(now),
            KeyReload {
                loaded: 1,
                refused: 0
            }
        );
        assert!(accepts(NEXT, now) && accepts(SECRET, now));
        let west = peers.get("west").expect("west");
        assert_eq!(west.keys().signing_key(now), &key(SECRET));

        for (content, says) in [
            (Some(DECODED), "the secret is not base64"),
            (Some("c2hvcnQ="), "the secret has 5 bytes"),
            (None, "cannot read secretFile"),
        ] {
            match content {
                Some(content) => std::fs::write(&key_file, content).expect("write"),
                None => std::fs::remove_file(&key_file).expect("remove"),
            }
            for (at, refused) in [(now + 2, 1), (now + 4, 0)] {
                assert_eq!(
                    peers.reload_key_files(at),
                    KeyReload { loaded: 0, refused },
                    "{says}, told once"
                );
                assert!(accepts(NEXT, at) && accepts(SECRET, at), "{says}: kept");
            }
            let text = lines.text();
            let told: Vec<&str> = text.lines().filter(|l| l.contains(says)).collect();
            assert_eq!(told.len(), 1, "{says}: {text}");
            assert!(
                told[0].contains("peers[0].keys[0].secretFile: TSIG key east-west.")
                    && told[0].contains(&key_file.display().to_string())
                    && told[0].contains("the key's secret in use is kept"),
                "{}",
                told[0]
            );
        }
        assert_eq!(peers.key_reloads().get("loaded"), 1);
        assert_eq!(peers.key_reloads().get("refused"), 3);
        let text = lines.text();
        for secret in [SECRET, DECODED, NEXT, &SECRET[..16], &NEXT[..16]] {
            assert!(!text.contains(secret), "a secret in the log:\n{text}");
        }
        assert!(text.contains("a new secret from"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn places_are_found_by_field_or_the_field_that_holds_it() {
        let file = read(&peer_with(&format!("        secret: {SECRET}\n"))).expect("valid");
        assert_eq!(
            file.places.of_field("peers[0].keys[0].secret"),
            Some((7, 17))
        );
        assert_eq!(
            file.places.of_field("peers[0].keys[0].secretFile"),
            Some((6, 9))
        );
        assert_eq!(file.places.of_field("peers[0]"), Some((3, 5)));
        assert_eq!(file.places.of_field("nowhere"), None);
        let debug = format!("{file:?}");
        assert!(!debug.contains(SECRET), "{debug}");
    }
}
