//! Which probe targets a checker may reach. Any namespace can create a HealthCheck, so a
//! checker must not become a scanner of private networks: denied ranges are reported as
//! rejected and never probed.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP network in CIDR notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        // IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: prefix must be 0 to {max}"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Allowed and denied target ranges. A target is probed when no denied range holds it and,
/// if any allowed range is set, one of them does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPolicy {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
}

impl TargetPolicy {
    /// Link-local ranges (cloud metadata services live there) are always denied by default.
    pub fn link_local() -> Vec<Cidr> {
        ["169.254.0.0/16", "fe80::/10"]
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }

    /// In a cluster: link-local and loopback denied.
    pub fn cluster_default() -> Self {
        let mut deny = Self::link_local();
        deny.extend(
            ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|s| s.parse::<Cidr>().ok()),
        );
        TargetPolicy {
            allow: Vec::new(),
            deny,
        }
    }

    /// Standalone: link-local denied; loopback is where local services are.
    pub fn standalone_default() -> Self {
        TargetPolicy {
            allow: Vec::new(),
            deny: Self::link_local(),
        }
    }

    /// The rule that denies `ip`, if one does.
    pub fn denies(&self, ip: IpAddr) -> Option<String> {
        if let Some(d) = self.deny.iter().find(|c| c.contains(ip)) {
            return Some(format!("in denied range {d}"));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|c| c.contains(ip)) {
            return Some("outside every allowed range".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_deny_metadata_and_loopback_in_cluster() {
        let cluster = TargetPolicy::cluster_default();
        for denied in [
            "169.254.169.254",
            "fe80::1",
            "127.0.0.1",
            "::1",
            "::ffff:169.254.169.254",
        ] {
            assert!(
                cluster.denies(denied.parse().expect("ip")).is_some(),
                "{denied}"
            );
        }
        assert!(cluster.denies("10.0.0.1".parse().expect("ip")).is_none());
        let standalone = TargetPolicy::standalone_default();
        assert!(
            standalone
                .denies("127.0.0.1".parse().expect("ip"))
                .is_none()
        );
        assert!(
            standalone
                .denies("169.254.169.254".parse().expect("ip"))
                .is_some()
        );
    }

    #[test]
    fn allow_list_and_parsing() {
        let policy = TargetPolicy {
            allow: vec!["10.0.0.0/8".parse().expect("cidr")],
            deny: vec!["10.1.0.0/16".parse().expect("cidr")],
        };
        assert!(policy.denies("10.2.3.4".parse().expect("ip")).is_none());
        assert!(policy.denies("10.1.3.4".parse().expect("ip")).is_some());
        assert!(policy.denies("192.0.2.1".parse().expect("ip")).is_some());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nope".parse::<Cidr>().is_err());
        assert!(
            "0.0.0.0/0"
                .parse::<Cidr>()
                .expect("cidr")
                .contains("8.8.8.8".parse().expect("ip"))
        );
    }
}
