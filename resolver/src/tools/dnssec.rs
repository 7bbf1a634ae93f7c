//! `dnssec keygen` and `dnssec ds` (K1, K4), in `healthroute-resolver` and
//! `kubectl healthroute`: a new key, and what to hand to the parent zone for a configuration's
//! signed zones (DS, with the DNSKEY and CDS beside it).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hickory_proto::dnssec::rdata::DNSSECRData;
use hickory_proto::rr::{Name, RData, Record};

use crate::config::{FileConfig, ZoneEntry};
use crate::dns::dnssec::keys::{self, KeyConfig, KeyState, ZoneKey};
use crate::error::Error;

/// `kubectl healthroute dnssec`: the same, and the DS of keys held in Secrets.
#[derive(Subcommand, Debug)]
pub enum PluginDnssecCommand {
    #[command(flatten)]
    Local(DnssecCommand),
    /// The DNSKEY and DS (SHA-256) of keys held in Secrets of the namespace (`-n`), each
    /// given as SECRET/KEY: what the chart's `zones[].dnssec.keys` name.
    SecretDs {
        /// The signed zone.
        #[arg(long)]
        zone: String,
        /// A key: SECRET/KEY (repeatable).
        #[arg(long = "key", value_name = "SECRET/KEY", required = true)]
        keys: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum DnssecCommand {
    /// A new private key (PKCS#8 PEM) on stdout: put it in a file or a Secret.
    Keygen {
        /// 13: ECDSA P-256 with SHA-256 (the default, what Route 53 uses); 15: Ed25519.
        #[arg(long, default_value_t = 13)]
        algorithm: u8,
    },
    /// The DS records (SHA-256) of each signed zone of a configuration, for its parent zone,
    /// with each key's DNSKEY.
    Ds(DsArgs),
}

#[derive(Args, Debug)]
pub struct DsArgs {
    /// The resolver's settings file (`--config`), or a standalone directory's
    /// healthroute.yaml; key files are read relative to where the resolver reads them.
    #[arg(long, value_name = "FILE", conflicts_with = "manifests")]
    pub config: Option<PathBuf>,
    /// A standalone directory: its healthroute.yaml.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
}

/// Runs `command`; the text to print.
pub fn run(command: &DnssecCommand) -> Result<String, Error> {
    match command {
        DnssecCommand::Keygen { algorithm } => {
            keys::generate_pem(*algorithm).map_err(|why| Error::DnssecKey {
                path: PathBuf::from("-"),
                why,
            })
        }
        DnssecCommand::Ds(args) => {
            let path = match (&args.config, &args.manifests) {
                (Some(file), _) => file.clone(),
                (None, Some(dir)) => dir.join(healthroute_compiler::manifests::CONFIG_FILE),
                (None, None) => {
                    return Err(Error::Push(
                        "dnssec ds: pass --config FILE or --manifests DIR".into(),
                    ));
                }
            };
            report_for(&path)
        }
    }
}

/// For each signed zone of `file` (read from `path`): its keys' DNSKEY, and for each key the
/// parent's DS may name (a CSK or KSK) its DS in zone-file form.
pub fn ds_report(file: &FileConfig, path: &Path) -> Result<String, Error> {
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = String::new();
    for zone in &file.zones {
        let ZoneEntry::Zone(zone) = zone else {
            continue;
        };
        let Some(entry) = &zone.dnssec else {
            continue;
        };
        let config = entry
            .config(base)
            .map_err(|(field, message)| Error::Config {
                file: path.to_owned(),
                line_column: None,
                field: format!("dnssec.{field}"),
                message,
            })?;
        out.push_str(&zone_report(&zone.name, &config.keys)?);
    }
    if out.is_empty() {
        out.push_str("; no zone of this configuration is signed (zones[].dnssec)\n");
    }
    Ok(out)
}

fn zone_report(zone: &str, keys: &[KeyConfig]) -> Result<String, Error> {
    let apex = apex_name(zone)?;
    let mut out = format!("; {apex} — hand the DS lines to the parent zone\n");
    for config in keys {
        let key = ZoneKey::load(config)?;
        let state = match key.state {
            KeyState::Active => "active",
            KeyState::Published => "published",
        };
        out.push_str(&format!(
            "; key {} ({}, {state}, algorithm {}): {}\n",
            key.tag,
            key.role.name(),
            u8::from(key.algorithm()),
            config.file.display()
        ));
        out.push_str(&key_lines(&apex, &key).map_err(|why| Error::DnssecKey {
            path: config.file.clone(),
            why,
        })?);
    }
    Ok(out)
}

/// The DNSKEY and DS of each key held in a Secret of `namespace` (`SECRET/KEY`), for `zone`.
pub async fn secret_ds(
    client: &kube::Client,
    namespace: &str,
    zone: &str,
    keys: &[String],
) -> Result<String, Error> {
    let apex = apex_name(zone)?;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), namespace);
    let mut out = format!("; {apex} — hand the DS lines to the parent zone\n");
    for given in keys {
        let bad = |why: String| Error::DnssecKey {
            path: PathBuf::from(format!("secret {namespace}/{given}")),
            why,
        };
        let (name, key) = given
            .split_once('/')
            .ok_or_else(|| bad("name it as SECRET/KEY".into()))?;
        let secret = secrets.get(name).await.map_err(|source| Error::Kube {
            what: "reading the key's Secret",
            source,
        })?;
        let pem = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .ok_or_else(|| bad(format!("the Secret has no key {key}")))?;
        let zone_key =
            ZoneKey::from_pem(&pem.0, keys::KeyRole::Csk, KeyState::Active).map_err(bad)?;
        out.push_str(&format!(
            "; key {} (algorithm {}): secret {namespace}/{given}\n",
            zone_key.tag,
            u8::from(zone_key.algorithm())
        ));
        out.push_str(&key_lines(&apex, &zone_key).map_err(bad)?);
    }
    Ok(out)
}

/// The zone's apex as a name, for its records.
fn apex_name(zone: &str) -> Result<Name, Error> {
    Name::from_ascii(healthroute_table::normalize_name(zone)?).map_err(|e| Error::DnssecKeys {
        zone: zone.to_owned(),
        why: e.to_string(),
    })
}

/// A key's DNSKEY line and, for a key the parent's DS may name (a CSK or KSK), its DS line,
/// in zone-file form.
fn key_lines(apex: &Name, key: &ZoneKey) -> Result<String, String> {
    let line = |data| {
        format!(
            "{}\n",
            Record::from_rdata(apex.clone(), 3600, RData::DNSSEC(data))
        )
    };
    let mut out = line(DNSSECRData::DNSKEY(key.dnskey.clone()));
    if key.is_entry_point() {
        out.push_str(&line(DNSSECRData::DS(key.ds(apex)?)));
    }
    Ok(out)
}

/// [`ds_report`] of the settings file at `path`.
pub fn report_for(path: &Path) -> Result<String, Error> {
    ds_report(&FileConfig::read(path)?, path)
}
