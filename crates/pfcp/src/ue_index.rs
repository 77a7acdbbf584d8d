//! The endpoint's index of UE addresses: which session holds each one.
//!
//! Most UE addresses are IPv4, and an index of 16-byte keys and 8-byte SEIDs gave each of them
//! 24 bytes of entry (plus hashbrown's control byte), 20 of them the IPv4-mapped prefix and the
//! alignment padding. Here IPv4 addresses live in a table of 8-byte entries (4 address bytes
//! and the session's slot in the endpoint's session slab, from which the slab gives its SEID)
//! presized for the endpoint's share of sessions; IPv6 addresses in a second table that grows
//! as they come.

use std::net::Ipv6Addr;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// UE address (as [`crate::upf`] writes it: IPv4-mapped or IPv6, 16 bytes) -> the slot of
/// the session holding it.
#[derive(Debug, Default)]
pub(crate) struct UeIndex {
    v4: HashMap<[u8; 4], u32>,
    v6: HashMap<[u8; 16], u32>,
}

/// The IPv4 address of an IPv4-mapped slot.
fn v4_of(slot: &[u8; 16]) -> Option<[u8; 4]> {
    Ipv6Addr::from(*slot).to_ipv4_mapped().map(|a| a.octets())
}

impl UeIndex {
    /// An index with room for `n` IPv4 addresses before it grows.
    pub(crate) fn with_capacity(n: usize) -> UeIndex {
        UeIndex {
            v4: HashMap::with_capacity_and_hasher(n, Default::default()),
            v6: HashMap::default(),
        }
    }

    /// The session slot holding `slot`.
    pub(crate) fn get(&self, slot: &[u8; 16]) -> Option<u32> {
        match v4_of(slot) {
            Some(a) => self.v4.get(&a).copied(),
            None => self.v6.get(slot).copied(),
        }
    }

    /// `slot` is session slot `holder`'s now.
    pub(crate) fn insert(&mut self, slot: [u8; 16], holder: u32) {
        match v4_of(&slot) {
            Some(a) => {
                self.v4.insert(a, holder);
            }
            None => {
                self.v6.insert(slot, holder);
            }
        }
    }

    /// Frees `slot`.
    pub(crate) fn remove(&mut self, slot: &[u8; 16]) {
        match v4_of(slot) {
            Some(a) => {
                self.v4.remove(&a);
            }
            None => {
                self.v6.remove(slot);
            }
        }
    }

    /// Addresses indexed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Bytes of both tables (from their capacities, as [`sb_common::hash_table_bytes`]).
    pub(crate) fn bytes(&self) -> usize {
        sb_common::hash_table_bytes(self.v4.capacity(), std::mem::size_of::<([u8; 4], u32)>())
            + sb_common::hash_table_bytes(
                self.v6.capacity(),
                std::mem::size_of::<([u8; 16], u32)>(),
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap as Oracle;
    use std::net::{IpAddr, Ipv4Addr};

    fn slot(a: &IpAddr) -> [u8; 16] {
        match a {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        }
    }

    #[test]
    fn an_ipv4_entry_takes_8_bytes() {
        assert_eq!(std::mem::size_of::<([u8; 4], u32)>(), 8);
        let mut i = UeIndex::with_capacity(1000);
        let before = i.bytes();
        i.insert(slot(&IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))), 7);
        assert_eq!(
            i.bytes(),
            before,
            "presized: no growth for the first address"
        );
        assert!(before < 1000 * 16 * 2, "{before}");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(IpAddr, u32),
        Remove(IpAddr),
    }

    fn addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            // A few addresses, so that inserts overwrite and removes hit.
            (0u8..8).prop_map(|x| IpAddr::V4(Ipv4Addr::new(10, 45, 0, x))),
            (0u16..8).prop_map(|x| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, x))),
            // An IPv6 address that is not IPv4-mapped but ends like one.
            (0u8..4).prop_map(|x| IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0x0a2d, x as u16))),
            any::<[u8; 16]>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
        ]
    }

    proptest! {
        /// Any sequence of inserts and removes reads back as a HashMap of the 16-byte slots.
        #[test]
        fn matches_a_hashmap(ops in proptest::collection::vec(
            prop_oneof![
                (addr(), any::<u32>()).prop_map(|(a, s)| Op::Insert(a, s)),
                addr().prop_map(Op::Remove),
            ],
            0..200,
        )) {
            let mut i = UeIndex::with_capacity(4);
            let mut o: Oracle<[u8; 16], u32> = Oracle::new();
            for op in &ops {
                match op {
                    Op::Insert(a, s) => {
                        i.insert(slot(a), *s);
                        o.insert(slot(a), *s);
                    }
                    Op::Remove(a) => {
                        i.remove(&slot(a));
                        o.remove(&slot(a));
                    }
                }
                prop_assert_eq!(i.len(), o.len());
            }
            for op in &ops {
                let a = match op {
                    Op::Insert(a, _) | Op::Remove(a) => a,
                };
                prop_assert_eq!(i.get(&slot(a)), o.get(&slot(a)).copied());
            }
        }
    }
}
