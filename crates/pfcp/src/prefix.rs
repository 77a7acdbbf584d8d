//! IP prefixes in configuration: the addresses PFCP peers may come from
//! ([`crate::Config::allowed_peers`]) and the UE address pools
//! ([`crate::Config::ue_pool_v4`], [`crate::Config::ue_pool_v6`]), parsed from `ADDR/LEN` (or
//! a bare address: the host prefix), and a pool split among the endpoints of a cluster
//! ([`split`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a prefix was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not `ADDR/LEN` with an IPv4 or IPv6 address.
    #[error("{0:?} is not an IP address or ADDR/LEN prefix")]
    Syntax(String),
    /// The length is longer than the address.
    #[error("{0:?}: prefix length above {1}")]
    Length(String, u8),
    /// The prefix cannot be split into that many shares of the least size asked.
    #[error("{prefix} cannot be split into {shares} shares of at least /{longest} each")]
    TooSmall {
        /// The prefix, as `ADDR/LEN`.
        prefix: String,
        /// The shares asked.
        shares: usize,
        /// The longest prefix a share may have.
        longest: u8,
    },
}

/// The bits of an address of `ip`'s family.
fn width(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn bits(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

fn from_bits(v4: bool, b: u128) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(b as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(b))
    }
}

/// The mask of a prefix of `len` bits in `width` bits.
fn mask(width: u8, len: u8) -> u128 {
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    if len == 0 {
        0
    } else {
        all & !(all >> len)
    }
}

/// Parses `ADDR/LEN` or `ADDR` (the host prefix); the address's bits beyond the length are
/// cleared.
pub fn parse(s: &str) -> Result<(IpAddr, u8), PrefixError> {
    let s = s.trim();
    let syntax = || PrefixError::Syntax(s.to_string());
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| syntax())?)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| syntax())?;
    let w = width(&ip);
    let len = len.unwrap_or(w);
    if len > w {
        return Err(PrefixError::Length(s.to_string(), w));
    }
    Ok((from_bits(ip.is_ipv4(), bits(&ip) & mask(w, len)), len))
}

/// Whether `prefix` holds `ip` (an IPv4 address and its IPv4-mapped IPv6 form are one).
pub fn contains(prefix: (IpAddr, u8), ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    let (p, len) = prefix;
    if p.is_ipv4() != ip.is_ipv4() {
        return false;
    }
    let m = mask(width(&p), len.min(width(&p)));
    bits(&p) & m == bits(&ip) & m
}

/// Splits `prefix` into `shares` disjoint shares: it is cut into the least power of two
/// `2^k >= shares` equal sub-prefixes (length `len + k`), and share `i` gets sub-prefixes
/// `i, i + shares, i + 2 shares, ...`: every address of the prefix is in exactly one share, and
/// no share is more than twice another. A sub-prefix longer than `longest` is refused
/// ([`PrefixError::TooSmall`]).
pub fn split(
    prefix: (IpAddr, u8),
    shares: usize,
    longest: u8,
) -> Result<Vec<Vec<(IpAddr, u8)>>, PrefixError> {
    let (p, len) = prefix;
    let w = width(&p);
    let k = shares.max(1).next_power_of_two().trailing_zeros() as u8;
    let too_small = || PrefixError::TooSmall {
        prefix: format!("{p}/{len}"),
        shares,
        longest,
    };
    let sub = len.checked_add(k).ok_or_else(too_small)?;
    if sub > longest.min(w) {
        return Err(too_small());
    }
    let base = bits(&p) & mask(w, len);
    let mut out = vec![Vec::new(); shares.max(1)];
    for j in 0..(1u128 << k) {
        let at = base | (j << (w - sub));
        out[(j % shares.max(1) as u128) as usize].push((from_bits(p.is_ipv4(), at), sub));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> (IpAddr, u8) {
        parse(s).unwrap()
    }

    #[test]
    fn parses_prefixes_and_hosts() {
        assert_eq!(p("10.3.0.7/24"), ("10.3.0.0".parse().unwrap(), 24));
        assert_eq!(p("10.3.0.254"), ("10.3.0.254".parse().unwrap(), 32));
        assert_eq!(
            p("2001:db8:cafe::1/48"),
            ("2001:db8:cafe::".parse().unwrap(), 48)
        );
        assert_eq!(p("0.0.0.0/0"), ("0.0.0.0".parse().unwrap(), 0));
        assert!(matches!(parse("10.3.0.0/33"), Err(PrefixError::Length(..))));
        assert!(matches!(parse("10.3.0/24"), Err(PrefixError::Syntax(..))));
        assert!(matches!(parse("10.3.0.0/x"), Err(PrefixError::Syntax(..))));
        assert!(contains(p("10.3.0.0/24"), "10.3.0.254".parse().unwrap()));
        assert!(contains(
            p("10.3.0.0/24"),
            "::ffff:10.3.0.9".parse().unwrap()
        ));
        assert!(!contains(p("10.3.0.0/24"), "10.3.1.1".parse().unwrap()));
        assert!(!contains(p("10.3.0.254"), "10.3.0.253".parse().unwrap()));
        assert!(!contains(p("::/0"), "10.3.0.253".parse().unwrap()));
        assert!(contains(p("0.0.0.0/0"), "1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn a_pool_splits_among_endpoints() {
        let s = split(p("10.45.0.0/16"), 3, 30).unwrap();
        assert_eq!(
            s,
            vec![
                vec![p("10.45.0.0/18"), p("10.45.192.0/18")],
                vec![p("10.45.64.0/18")],
                vec![p("10.45.128.0/18")],
            ]
        );
        let s = split(p("2001:db8:cafe::/48"), 4, 64).unwrap();
        assert_eq!(s[3], vec![p("2001:db8:cafe:c000::/50")]);
        assert_eq!(
            split(p("10.45.0.0/16"), 1, 30).unwrap(),
            vec![vec![p("10.45.0.0/16")]]
        );
        assert!(matches!(
            split(p("10.45.0.0/29"), 4, 30),
            Err(PrefixError::TooSmall { .. })
        ));
    }

    proptest! {
        /// Every address of the pool is in exactly one share, and shares differ at most
        /// twofold.
        #[test]
        fn shares_are_disjoint_and_cover_the_pool(
            a in any::<u32>(), len in 8u8..24, n in 1usize..40, probe in any::<u32>()
        ) {
            let pool = (IpAddr::V4(Ipv4Addr::from(a)), len);
            let pool = p(&format!("{}/{}", pool.0, pool.1));
            let s = split(pool, n, 30).unwrap();
            prop_assert_eq!(s.len(), n);
            let ip = IpAddr::V4(Ipv4Addr::from(probe));
            let holders = s.iter().filter(|sh| sh.iter().any(|q| contains(*q, ip))).count();
            prop_assert_eq!(holders, usize::from(contains(pool, ip)));
            let sizes: Vec<usize> = s.iter().map(|sh| sh.len()).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(*hi <= 2 * *lo);
        }
    }
}
