//! `dnssec keygen` and `dnssec ds` (K1, K4), in `healthroute-resolver` and
//! `kubectl healthroute`: a new key, and what to hand to the parent zone for a configuration's
//! signed zones (DS, with the DNSKEY and CDS beside it).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hickory_proto::rr::{Name, RData, Record};

use crate::config::{FileConfig, ZoneEntry};
use crate::dns::dnssec::keys::{self, KeyConfig, KeyState, ZoneKey};
use crate::error::Error;

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
    let apex = Name::from_ascii(healthroute_table::normalize_name(zone)?).map_err(|e| {
        Error::DnssecKeys {
            zone: zone.to_owned(),
            why: e.to_string(),
        }
    })?;
    let mut out = format!("; {apex} — hand the DS lines to the parent zone\n");
    for config in keys {
        let key = ZoneKey::load(config)?;
        let state = match key.state {
            KeyState::Active => "active",
            KeyState::Published => "published",
        };
        out.push_str(&format!(
            "; key {} ({:?}, {state}, algorithm {}): {}\n",
            key.tag,
            key.role,
            u8::from(key.algorithm()),
            keys::shown(&config.file)
        ));
        out.push_str(&line(
            &apex,
            RData::DNSSEC(hickory_proto::dnssec::rdata::DNSSECRData::DNSKEY(
                key.dnskey.clone(),
            )),
        ));
        if key.is_entry_point() {
            let ds = key.ds(&apex).map_err(|why| Error::DnssecKey {
                path: config.file.clone(),
                why,
            })?;
            out.push_str(&line(
                &apex,
                RData::DNSSEC(hickory_proto::dnssec::rdata::DNSSECRData::DS(ds)),
            ));
        }
    }
    Ok(out)
}

fn line(apex: &Name, data: RData) -> String {
    format!("{}\n", Record::from_rdata(apex.clone(), 3600, data))
}

/// [`ds_report`] of the settings file at `path`.
pub fn report_for(path: &Path) -> Result<String, Error> {
    ds_report(&FileConfig::read(path)?, path)
}
