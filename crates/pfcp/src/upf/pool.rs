//! UE IP address allocation by the user plane (TS 29.244 5.21, UEIP): a PDR whose UE IP
//! Address says CHV4 or CHV6 gets an address from [`Config::ue_pool_v4`] (IPv4 prefixes; their
//! first and last address are not given out) or an IPv6 /64 from [`Config::ue_pool_v6`]. An
//! address is free when no session of this endpoint holds it (the UE index: unique across the
//! endpoint; the endpoints of one cluster must be given disjoint pools), and is free again
//! when its session goes. The PDRs of one request that ask share one address per family; the
//! Created PDR of each carries it. No pool, or none free: All dynamic addresses are occupied.
//!
//! In a Session Modification (a Create PDR, or an Update PDR whose new PDI asks) the session's
//! own address of that family is given when it holds one before the change (a PDU session has
//! one address per family: a PDR added for a new flow matches the same UE; the lowest PDR ID's
//! when several); a session holding none gets a free one from the pool as above. The address
//! is reserved only when the whole change is accepted ([`Upf::reserve`]) and freed again if
//! the cluster refuses it, like every UE address of a change.

use super::*;
use std::net::Ipv6Addr;

/// The UE addresses, one per family, that `pdrs` (a session's PDRs before a modification)
/// hold: the lowest PDR ID's of each family. An IPv6 one as its /64 (what the session holds,
/// [`ue_slot`], and what CHV6 gives).
pub(super) fn held_ues(
    pdrs: &VecMap<u16, (CreatePdr, Option<u32>)>,
) -> (Option<Ipv4Addr>, Option<Ipv6Addr>) {
    let (mut v4, mut v6) = (None, None);
    for (p, _) in pdrs.values() {
        for ue in pdr_ues(p) {
            match ue {
                IpAddr::V4(a) => {
                    v4.get_or_insert(a);
                }
                IpAddr::V6(a) => {
                    let net = u128::from(a) & !(u128::from(u64::MAX));
                    v6.get_or_insert(Ipv6Addr::from(net));
                }
            }
        }
    }
    (v4, v6)
}

/// The addresses an IPv4 prefix gives out.
fn v4_size(len: u8) -> u64 {
    let n = 1u64 << (32 - u32::from(len.min(32)));
    if n > 2 {
        n - 2
    } else {
        n
    }
}

/// Its `i`th.
fn v4_at((p, len): (Ipv4Addr, u8), i: u64) -> Ipv4Addr {
    let base = u32::from(p)
        & u32::MAX
            .checked_shl(32 - u32::from(len.min(32)))
            .unwrap_or(0);
    let skip = u64::from(v4_size(len) != 1u64 << (32 - u32::from(len.min(32))));
    Ipv4Addr::from(base.wrapping_add((i + skip) as u32))
}

/// The /64s an IPv6 prefix gives out (at most 2^32 counted).
fn v6_size(len: u8) -> u64 {
    1u64 << (64 - u32::from(len.min(64))).min(32)
}

fn v6_at((p, len): (Ipv6Addr, u8), i: u64) -> Ipv6Addr {
    let bits = 64 - u32::from(len.min(64));
    let hi = (u128::from(p) >> 64) as u64;
    let mask = u64::MAX.checked_shl(bits).unwrap_or(0);
    Ipv6Addr::from(u128::from((hi & mask) | i) << 64)
}

impl<S: Sessions> Upf<S> {
    /// Replaces CHV4/CHV6 in `rules`' PDRs with the session's address of that family in
    /// `held` (a modified session's, [`held_ues`]) or else a free one of the pools: the PDRs
    /// given one and the UE IP Address their Created PDR carries. Changes nothing but `rules`
    /// (and where the pools' searches go on): nothing is reserved here.
    pub(super) fn choose_ues(
        &mut self,
        rules: &mut Rules,
        held: (Option<Ipv4Addr>, Option<Ipv6Addr>),
    ) -> Result<Vec<(u16, UeIpAddress)>, Reject> {
        let asks = |want: fn(&UeIpAddress) -> bool| {
            (rules.pdrs.values()).any(|(p, _)| p.pdi.ue_ip_address.as_ref().is_some_and(want))
        };
        let v4 = asks(|u| matches!(u.ipv4, Some(UeAddr::Choose)));
        let v6 = asks(|u| matches!(u.ipv6, Some(UeAddr::Choose)));
        if !v4 && !v6 {
            return Ok(vec![]);
        }
        let full = Reject::cause(Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED);
        let a4 = match (v4, held.0) {
            (false, _) => None,
            (true, Some(a)) => Some(a),
            (true, None) => Some(self.free_v4().ok_or(full)?),
        };
        let a6 = match (v6, held.1) {
            (false, _) => None,
            (true, Some(a)) => Some(a),
            (true, None) => Some(self.free_v6().ok_or(full)?),
        };
        let mut chosen = Vec::new();
        for (id, (p, _)) in rules.pdrs.iter_mut() {
            let Some(ue) = &mut p.pdi.ue_ip_address else {
                continue;
            };
            let mut given = false;
            if let (Some(UeAddr::Choose), Some(a)) = (ue.ipv4, a4) {
                ue.ipv4 = Some(UeAddr::Addr(a));
                given = true;
            }
            if let (Some(UeAddr::Choose), Some(a)) = (ue.ipv6, a6) {
                ue.ipv6 = Some(UeAddr::Addr(a));
                ue.ipv6_prefix_length = Some(64);
                given = true;
            }
            if given {
                chosen.push((*id, *ue));
            }
        }
        Ok(chosen)
    }

    /// A free address of the IPv4 pools, from where the last search stopped.
    fn free_v4(&mut self) -> Option<Ipv4Addr> {
        let pools = self.config.ue_pool_v4.clone();
        let total: u64 = pools.iter().map(|&(_, l)| v4_size(l)).sum();
        for _ in 0..total {
            let mut i = self.next_ue_v4 % total;
            self.next_ue_v4 = self.next_ue_v4.wrapping_add(1);
            for &pool in &pools {
                if i < v4_size(pool.1) {
                    let a = v4_at(pool, i);
                    if self.ue_holder(&ue_slot(&IpAddr::V4(a))).is_none() {
                        return Some(a);
                    }
                    break;
                }
                i -= v4_size(pool.1);
            }
        }
        None
    }

    /// A free /64 of the IPv6 pools.
    fn free_v6(&mut self) -> Option<Ipv6Addr> {
        let pools = self.config.ue_pool_v6.clone();
        let total: u64 = pools.iter().map(|&(_, l)| v6_size(l)).sum();
        for _ in 0..total {
            let mut i = self.next_ue_v6 % total;
            self.next_ue_v6 = self.next_ue_v6.wrapping_add(1);
            for &pool in &pools {
                if i < v6_size(pool.1) {
                    let a = v6_at(pool, i);
                    if self.ue_holder(&ue_slot(&IpAddr::V6(a))).is_none() {
                        return Some(a);
                    }
                    break;
                }
                i -= v6_size(pool.1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_skip_the_network_and_broadcast_addresses() {
        let p = (Ipv4Addr::new(10, 45, 0, 0), 30);
        assert_eq!(v4_size(30), 2);
        assert_eq!(v4_at(p, 0), Ipv4Addr::new(10, 45, 0, 1));
        assert_eq!(v4_at(p, 1), Ipv4Addr::new(10, 45, 0, 2));
        assert_eq!(v4_size(32), 1);
        assert_eq!(
            v4_at((Ipv4Addr::new(10, 0, 0, 9), 32), 0),
            Ipv4Addr::new(10, 0, 0, 9)
        );
        let q = ("2001:db8:1::".parse().unwrap(), 48);
        assert_eq!(v6_size(48), 1 << 16);
        assert_eq!(v6_at(q, 5), "2001:db8:1:5::".parse::<Ipv6Addr>().unwrap());
    }
}
