//! CIDR blocks for NetworkPolicy `ipBlock`: parsing and containment, IPv4 and IPv6,
//! without dependencies.
//!
//! Host bits below the prefix are ignored (`10.0.0.1/24` is `10.0.0.0/24`), as the
//! Kubernetes API accepts such blocks. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
//! compared as the IPv4 address it carries.

use std::net::IpAddr;

use super::Problem;

/// A parsed CIDR block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cidr {
    /// Network bits and prefix length (0..=32).
    V4(u32, u8),
    /// Network bits and prefix length (0..=128).
    V6(u128, u8),
}

impl Cidr {
    /// Parses `addr/len`; a bare address is not a CIDR.
    pub fn parse(s: &str) -> Result<Cidr, Problem> {
        let bad = || Problem::InvalidCidr(s.to_owned());
        let (addr, len) = s.split_once('/').ok_or_else(bad)?;
        // `u8::from_str` accepts a leading `+`; a CIDR length is digits only.
        if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let len: u8 = len.parse().map_err(|_| bad())?;
        match addr.parse::<IpAddr>().map_err(|_| bad())? {
            IpAddr::V4(a) if len <= 32 => Ok(Cidr::V4(u32::from(a) & mask32(len), len)),
            IpAddr::V6(a) if len <= 128 => Ok(Cidr::V6(u128::from(a) & mask128(len), len)),
            _ => Err(bad()),
        }
    }

    /// Whether `ip` lies in the block. An IPv4 block never contains an IPv6 address
    /// (other than a mapped IPv4 one), and the reverse.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (*self, Cidr::normalize(ip)) {
            (Cidr::V4(net, len), IpAddr::V4(a)) => u32::from(a) & mask32(len) == net,
            (Cidr::V6(net, len), IpAddr::V6(a)) => u128::from(a) & mask128(len) == net,
            _ => false,
        }
    }

    /// `ip` as blocks compare it: an IPv4-mapped IPv6 address as its IPv4 address.
    pub(super) fn normalize(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        }
    }
}

pub(super) fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

pub(super) fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_containment() {
        let c = Cidr::parse("172.17.0.0/16").unwrap();
        assert!(c.contains(ip("172.17.0.5")));
        assert!(c.contains(ip("172.17.255.255")));
        assert!(!c.contains(ip("172.18.0.0")));
        assert!(!c.contains(ip("2001:db8::1")));
        assert!(
            c.contains(ip("::ffff:172.17.1.1")),
            "mapped IPv4 compares as IPv4"
        );
        let host = Cidr::parse("203.0.113.10/32").unwrap();
        assert!(host.contains(ip("203.0.113.10")));
        assert!(!host.contains(ip("203.0.113.11")));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        assert!(!all.contains(ip("::1")));
    }

    #[test]
    fn ipv6_containment() {
        let c = Cidr::parse("2001:db8::/32").unwrap();
        assert!(c.contains(ip("2001:db8:ffff::1")));
        assert!(!c.contains(ip("2001:db9::1")));
        assert!(!c.contains(ip("10.0.0.1")));
        let host = Cidr::parse("2001:db8::7/128").unwrap();
        assert!(host.contains(ip("2001:db8::7")));
        assert!(!host.contains(ip("2001:db8::8")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("fe80::1")));
    }

    #[test]
    fn host_bits_are_masked() {
        assert_eq!(Cidr::parse("10.0.0.77/24"), Cidr::parse("10.0.0.0/24"));
        assert!(
            Cidr::parse("10.0.0.77/24")
                .unwrap()
                .contains(ip("10.0.0.1"))
        );
    }

    #[test]
    fn malformed_blocks_are_errors() {
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "10.0.0.0/",
            "/8",
            "10.0.0.0/+8",
            "x/1",
            "",
        ] {
            assert_eq!(
                Cidr::parse(bad),
                Err(Problem::InvalidCidr(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
