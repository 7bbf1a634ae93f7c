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
//! [`ZoneConfig`]s; each mistake is reported with the field it is in.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use healthroute_compiler::manifests::CONFIG_FILE;

use crate::error::Error;
use crate::serving::{NameServer, ZoneConfig};
use crate::wire::{in_zone, wire_name};
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
}

/// `exchange:` in `healthroute.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExchangeFileConfig {
    /// Where peers' checkers ask (`--exchange-listen`).
    pub listen: SocketAddr,
}

/// The peers a checker asks and the exchange listener's keys, from the file's `peers` and
/// `exchange` (the flag wins for the address). Key files are read here, once; a relative
/// `secretFile` is relative to the configuration file's folder (`config_path`).
pub fn peers_and_exchange(
    file: &FileConfig,
    config_path: &Path,
    flag_listen: Option<SocketAddr>,
) -> Result<
    (
        healthroute_checker::peer::Peers,
        Option<crate::exchange::ExchangeConfig>,
    ),
    Error,
> {
    use healthroute_checker::peer::Peers;
    let base = config_path.parent().unwrap_or(Path::new("."));
    let mut configs = file.peers.clone();
    for key in configs.iter_mut().flat_map(|p| p.keys.iter_mut()) {
        if let Some(f) = &key.secret_file
            && f.is_relative()
        {
            key.secret_file = Some(base.join(f));
        }
    }
    let peers = Peers::from_config(&configs).map_err(Error::Peers)?;
    let listen = flag_listen.or(file.exchange.as_ref().map(|e| e.listen));
    let exchange = match (listen, peers.server_keys().map_err(Error::Peers)?) {
        (Some(listen), Some(keys)) => Some(crate::exchange::ExchangeConfig { listen, keys }),
        (Some(_), None) => return Err(Error::ExchangeWithoutPeers),
        (None, _) => None,
    };
    Ok((peers, exchange))
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
        let file: FileConfig = yaml(&text).map_err(|e| Error::ParseConfig {
            path: path.to_owned(),
            source: Box::new(e),
        })?;
        // The zones' names and addresses now, with the file's name in the message; what
        // depends on the flags (which zones are served) when the zones are set up.
        described_zones(&file, path, DEFAULT_TTL)?;
        Ok(file)
    }
}

/// Reads YAML the way kubectl does (YAML 1.1: `yes`, `on`, `y` are booleans), as the
/// manifest loader does.
fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, healthroute_compiler::manifests::yaml_options())
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
    let bad = |at: String, message: String| Error::ZoneConfig {
        file: file_path.to_owned(),
        at,
        message,
    };
    let mut described = described_zones(file, file_path, default_ttl)?;

    let mut flag_servers = Vec::with_capacity(flag_nameservers.len());
    for raw in flag_nameservers {
        let name = normalize(raw).map_err(|e| Error::ZoneConfig {
            file: PathBuf::from("--nameserver"),
            at: raw.clone(),
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
    let bad = |at: String, message: String| Error::ZoneConfig {
        file: file_path.to_owned(),
        at,
        message,
    };
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
            let config = zone_object(i, &name, zone, default_ttl, &bad)?;
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
    Ok(ZoneConfig {
        apex: apex.to_owned(),
        nameservers,
        mname: soa_name("mname", &zone.soa.mname)?,
        rname: soa_name("rname", &zone.soa.rname)?,
        default_ttl,
    })
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
}
