//! Which probe targets a checker may reach. Any namespace can create a HealthCheck, so a
//! checker must not become a scanner of private networks: denied ranges are reported as
//! rejected and never probed.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IP network in CIDR notation (an `ipnet::IpNet`; a bare address is its /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr(ipnet::IpNet);

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        // IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}

impl FromStr for Cidr {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains('/') {
            let net: ipnet::IpNet = s
                .parse()
                .map_err(|_| crate::Error::NotACidr(s.to_owned()))?;
            // As written: 10.1.2.3/8 is the network 10.0.0.0/8.
            Ok(Cidr(net.trunc()))
        } else {
            let addr: IpAddr = s
                .parse()
                .map_err(|_| crate::Error::NotAnAddress(s.to_owned()))?;
            Ok(Cidr(ipnet::IpNet::from(addr)))
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Allowed and denied target ranges (SEMANTICS H12). A target is probed when
/// - no range the operator denied (`deny`, `--checker-deny`) holds it;
/// - no default-denied range holds it, unless an allowed range *inside* that default range
///   holds it (an explicit admission: `--checker-allow 127.0.0.0/8` admits loopback, a broad
///   `--checker-allow 0.0.0.0/0` admits nothing that is denied by default);
/// - if any allowed range is set, one of them holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPolicy {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
    /// Denied unless explicitly admitted.
    pub default_deny: Vec<Cidr>,
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().filter_map(|s| s.parse().ok()).collect()
}

impl Cidr {
    /// Whether every address of `self` lies in `outer`.
    pub fn within(&self, outer: &Cidr) -> bool {
        outer.0.contains(&self.0)
    }
}

impl TargetPolicy {
    /// Never a real destination, or one that reaches a node's own secrets: link-local (cloud
    /// metadata services live there), and `0.0.0.0/8` and `::`, which reach the local host
    /// on Linux.
    pub fn always_denied() -> Vec<Cidr> {
        cidrs(&["169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128"])
    }

    /// In a cluster: the above and loopback (the checker's own pod) denied.
    pub fn cluster_default() -> Self {
        let mut default_deny = Self::always_denied();
        default_deny.extend(cidrs(&["127.0.0.0/8", "::1/128"]));
        TargetPolicy {
            allow: Vec::new(),
            deny: Vec::new(),
            default_deny,
        }
    }

    /// Standalone: loopback is where local services are, so only the always-denied ranges.
    pub fn standalone_default() -> Self {
        TargetPolicy {
            allow: Vec::new(),
            deny: Vec::new(),
            default_deny: Self::always_denied(),
        }
    }

    /// The allowed ranges that admit part of a default-denied range, with the range: worth a
    /// line in the log at start.
    pub fn admissions(&self) -> Vec<(Cidr, Cidr)> {
        self.allow
            .iter()
            .filter_map(|a| {
                self.default_deny
                    .iter()
                    .find(|d| a.within(d))
                    .map(|d| (*a, *d))
            })
            .collect()
    }

    /// The rule that denies `ip`, if one does.
    pub fn denies(&self, ip: IpAddr) -> Option<String> {
        if let Some(d) = self.deny.iter().find(|c| c.contains(ip)) {
            return Some(format!("in denied range {d}"));
        }
        if let Some(d) = self.default_deny.iter().find(|c| c.contains(ip)) {
            let admitted = self.allow.iter().any(|a| a.within(d) && a.contains(ip));
            if !admitted {
                return Some(format!(
                    "in {d}, denied by default (admit it with an allowed range inside it)"
                ));
            }
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

    // SEM-H12: the local host is out of reach by every spelling, metadata too.
    #[test]
    fn defaults_deny_metadata_and_loopback_in_cluster() {
        let cluster = TargetPolicy::cluster_default();
        for denied in [
            "169.254.169.254",
            "fe80::1",
            "127.0.0.1",
            "::1",
            "::ffff:169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "::ffff:127.0.0.1",
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
        assert!(standalone.denies("0.0.0.0".parse().expect("ip")).is_some());
    }

    // SEM-H12: an allowed range inside a default-denied one admits it on purpose; a broad
    // one does not; what the operator denied stays denied.
    #[test]
    fn an_explicit_allow_admits_a_denied_range() {
        let mut p = TargetPolicy::cluster_default();
        p.allow = vec!["127.0.0.0/8".parse().expect("cidr")];
        assert!(
            p.denies("127.0.0.1".parse().expect("ip")).is_none(),
            "admitted"
        );
        assert!(
            p.denies("10.0.0.1".parse().expect("ip")).is_some(),
            "allow narrows"
        );
        assert!(p.denies("169.254.169.254".parse().expect("ip")).is_some());
        assert_eq!(p.admissions().len(), 1);
        let mut broad = TargetPolicy::cluster_default();
        broad.allow = vec![
            "0.0.0.0/0".parse().expect("cidr"),
            "127.0.0.0/8".parse().expect("cidr"),
        ];
        assert!(broad.denies("10.0.0.1".parse().expect("ip")).is_none());
        assert!(broad.denies("127.0.0.1".parse().expect("ip")).is_none());
        assert!(
            broad
                .denies("169.254.169.254".parse().expect("ip"))
                .is_some(),
            "0.0.0.0/0 admits no default-denied range"
        );
        broad.deny = vec!["127.0.0.0/8".parse().expect("cidr")];
        assert!(
            broad.denies("127.0.0.1".parse().expect("ip")).is_some(),
            "an explicit deny wins"
        );
    }

    #[test]
    fn allow_list_and_parsing() {
        let policy = TargetPolicy {
            allow: vec!["10.0.0.0/8".parse().expect("cidr")],
            deny: vec!["10.1.0.0/16".parse().expect("cidr")],
            default_deny: Vec::new(),
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
