//! Resolver configuration: flags, and in standalone mode a `healthroute.yaml` in the manifest
//! directory (flags win).

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

use healthroute_compiler::manifests::CONFIG_FILE;

use crate::error::Error;
use healthroute_compiler::{DEFAULT_TTL, ServedZones};

/// `healthroute.yaml`: the same settings as the flags, in camelCase.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub zones: Vec<String>,
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
/// `exchange` (the flag wins for the address). Key files are read here, once.
pub fn peers_and_exchange(
    file: &FileConfig,
    flag_listen: Option<SocketAddr>,
) -> Result<
    (
        healthroute_checker::peer::Peers,
        Option<crate::exchange::ExchangeConfig>,
    ),
    Error,
> {
    use healthroute_checker::peer::Peers;
    let peers = Peers::from_config(&file.peers).map_err(Error::Peers)?;
    let listen = flag_listen.or(file.exchange.as_ref().map(|e| e.listen));
    let exchange = match (
        listen,
        Peers::server_keys(&file.peers).map_err(Error::Peers)?,
    ) {
        (Some(listen), Some(keys)) => Some(crate::exchange::ExchangeConfig { listen, keys }),
        (Some(_), None) => return Err(Error::ExchangeWithoutPeers),
        (None, _) => None,
    };
    Ok((peers, exchange))
}

impl FileConfig {
    /// Reads `DIR/healthroute.yaml`; a missing file is an empty configuration.
    pub fn load(dir: &Path) -> Result<FileConfig, Error> {
        let path = dir.join(CONFIG_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => yaml(&text).map_err(|e| Error::ParseConfig {
                path,
                source: Box::new(e),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileConfig::default()),
            Err(source) => Err(Error::ReadConfig { path, source }),
        }
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
        &file.zones
    } else {
        flag_zones
    };
    if zones.is_empty() {
        return Err(Error::NoZone);
    }
    let zones = ServedZones::new(zones)?;
    Ok((zones, flag_ttl.or(file.default_ttl).unwrap_or(DEFAULT_TTL)))
}
