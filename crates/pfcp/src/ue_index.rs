//! The endpoint's index of UE addresses: which session holds each one.
//!
//! Most UE addresses are IPv4, and an index of 16-byte keys and 8-byte SEIDs gave each of them
//! 24 bytes of entry (plus hashbrown's control byte), 20 of them the IPv4-mapped prefix and the
//! alignment padding. Here IPv4 addresses live in [`V4Table`], an open-addressing table of
//! 8-byte entries (4 address bytes and the session's slot in the endpoint's session slab, from
//! which the slab gives its SEID) sized to the endpoint's share of sessions at a load of 7/8
//! (a hash map's buckets are a power of two: 4,194,304 of 9 bytes for 3.1M sessions, 37.7 MB,
//! where this table takes 28.6 MB); IPv6 addresses in a hash map that grows as they come.

use std::hash::BuildHasher;
use std::net::Ipv6Addr;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// UE address (as [`crate::upf`] writes it: IPv4-mapped or IPv6, 16 bytes) -> the slot of
/// the session holding it.
#[derive(Debug, Default)]
pub(crate) struct UeIndex {
    v4: V4Table,
    v6: HashMap<[u8; 16], u32>,
    /// Prefixes the IPv6 map is allocated for at its first (not before: most deployments
    /// give their UEs IPv4 addresses only), so that it does not double under load.
    v6_expected: usize,
}

/// The IPv4 address of an IPv4-mapped slot.
fn v4_of(slot: &[u8; 16]) -> Option<[u8; 4]> {
    Ipv6Addr::from(*slot).to_ipv4_mapped().map(|a| a.octets())
}

impl UeIndex {
    /// An index with room for `n` IPv4 addresses before it grows, and for `n` IPv6 prefixes
    /// once it holds one.
    pub(crate) fn with_capacity(n: usize) -> UeIndex {
        UeIndex {
            v4: V4Table::with_capacity(n),
            v6: HashMap::default(),
            v6_expected: n,
        }
    }

    /// The session slot holding `slot`.
    pub(crate) fn get(&self, slot: &[u8; 16]) -> Option<u32> {
        match v4_of(slot) {
            Some(a) => self.v4.get(u32::from_be_bytes(a)),
            None => self.v6.get(slot).copied(),
        }
    }

    /// `slot` is session slot `holder`'s now.
    pub(crate) fn insert(&mut self, slot: [u8; 16], holder: u32) {
        match v4_of(&slot) {
            Some(a) => self.v4.insert(u32::from_be_bytes(a), holder),
            None => {
                if self.v6.capacity() == 0 {
                    self.v6.reserve(self.v6_expected);
                }
                self.v6.insert(slot, holder);
            }
        }
    }

    /// Frees `slot`.
    pub(crate) fn remove(&mut self, slot: &[u8; 16]) {
        match v4_of(slot) {
            Some(a) => self.v4.remove(u32::from_be_bytes(a)),
            None => {
                self.v6.remove(slot);
            }
        }
    }

    /// Addresses indexed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.v4.len + self.v6.len()
    }

    /// Bytes of both tables (the IPv6 map's from its capacity, as
    /// [`sb_common::hash_table_bytes`]).
    pub(crate) fn bytes(&self) -> usize {
        self.v4.bytes()
            + sb_common::hash_table_bytes(
                self.v6.capacity(),
                std::mem::size_of::<([u8; 16], u32)>(),
            )
    }
}

/// IPv4 address -> session slot: linear probing over `u64` entries (address in the high 32
/// bits, slot + 1 in the low 32; 0 is an empty entry), a slot picked from the address's hash by
/// a multiply (so any number of entries, not only a power of two), removal by backward shift
/// (no tombstones: a probe ends at the first empty entry, however many removals came before).
#[derive(Debug, Default)]
pub(crate) struct V4Table {
    entries: Box<[u64]>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

impl V4Table {
    /// Most entries per 8 of the table before it grows.
    const LOAD_EIGHTHS: usize = 7;

    /// A table that holds `n` addresses before it grows.
    pub(crate) fn with_capacity(n: usize) -> V4Table {
        V4Table {
            entries: vec![0; Self::size_for(n)].into_boxed_slice(),
            len: 0,
            hasher: Default::default(),
        }
    }

    /// Entries that hold `n` addresses at the most load.
    fn size_for(n: usize) -> usize {
        (n * 8).div_ceil(Self::LOAD_EIGHTHS).max(8)
    }

    /// Where `addr`'s probe starts.
    #[inline]
    fn home(&self, addr: u32) -> usize {
        let h = self.hasher.hash_one(addr);
        ((h as u128 * self.entries.len() as u128) >> 64) as usize
    }

    /// The entry holding `addr` (`Ok`), or the empty entry that ends its probe (`Err`).
    fn probe(&self, addr: u32) -> Result<usize, usize> {
        let m = self.entries.len();
        let mut i = self.home(addr);
        loop {
            let e = self.entries[i];
            if e == 0 {
                return Err(i);
            }
            if (e >> 32) as u32 == addr {
                return Ok(i);
            }
            i = if i + 1 == m { 0 } else { i + 1 };
        }
    }

    pub(crate) fn get(&self, addr: u32) -> Option<u32> {
        self.probe(addr)
            .ok()
            .map(|i| (self.entries[i] as u32).wrapping_sub(1))
    }

    /// Maps `addr` to `slot` (a slot below `u32::MAX`), replacing what it mapped to.
    pub(crate) fn insert(&mut self, addr: u32, slot: u32) {
        assert!(slot < u32::MAX, "slot {slot} out of range");
        let e = u64::from(addr) << 32 | u64::from(slot + 1);
        let mut i = match self.probe(addr) {
            Ok(i) => {
                self.entries[i] = e;
                return;
            }
            Err(empty) => empty,
        };
        if (self.len + 1) * 8 > self.entries.len() * Self::LOAD_EIGHTHS {
            self.resize(Self::size_for((self.len + 1) * 3 / 2));
            i = self.probe(addr).unwrap_err();
        }
        self.entries[i] = e;
        self.len += 1;
    }

    fn resize(&mut self, size: usize) {
        let old = std::mem::replace(&mut self.entries, vec![0; size].into_boxed_slice());
        for e in old.iter().copied().filter(|&e| e != 0) {
            // Addresses are distinct: the probe ends at an empty entry.
            let i = self.probe((e >> 32) as u32).unwrap_err();
            self.entries[i] = e;
        }
    }

    /// Unmaps `addr` (nothing if it is not mapped).
    pub(crate) fn remove(&mut self, addr: u32) {
        let Ok(mut hole) = self.probe(addr) else {
            return;
        };
        self.len -= 1;
        let m = self.entries.len();
        // Backward shift: move up every later entry of the run whose probe starts at or
        // before the hole, so that no probe crosses an empty entry to reach its address.
        let mut j = hole;
        loop {
            j = if j + 1 == m { 0 } else { j + 1 };
            let e = self.entries[j];
            if e == 0 {
                break;
            }
            let home = self.home((e >> 32) as u32);
            // `e` may move to the hole when its home is not cyclically in (hole, j].
            let dist_j = (j + m - home) % m;
            let dist_hole = (hole + m - home) % m;
            if dist_hole <= dist_j {
                self.entries[hole] = e;
                hole = j;
            }
        }
        self.entries[hole] = 0;
    }

    /// Bytes of its entries.
    pub(crate) fn bytes(&self) -> usize {
        self.entries.len() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv6 map takes no room before its first prefix, then room for the expected
    /// sessions at once: it does not double under load.
    #[test]
    fn the_v6_map_is_allocated_for_the_expected_sessions_at_its_first_prefix() {
        let mut u = UeIndex::with_capacity(5_000);
        assert_eq!(u.v6.capacity(), 0);
        let slot = |i: u32| {
            let mut s = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            s[4..8].copy_from_slice(&i.to_be_bytes());
            s
        };
        u.insert(slot(0), 1);
        let room = u.v6.capacity();
        assert!(room >= 5_000, "{room}");
        for i in 1..5_000 {
            u.insert(slot(i), i + 1);
        }
        assert_eq!(u.v6.capacity(), room, "the map grew");
        assert_eq!(u.get(&slot(4_999)), Some(5_000));
    }
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

    #[test]
    fn the_v4_table_is_sized_to_its_capacity_not_a_power_of_two() {
        // The bench's 10M sessions on 4 nodes: 3,125,313 sessions a node at capacity.
        let t = V4Table::with_capacity(3_125_313);
        assert_eq!(t.bytes(), 3_571_787 * 8);
        let mut t = V4Table::with_capacity(1000);
        let before = t.bytes();
        for a in 0..1000u32 {
            t.insert(a.wrapping_mul(0x9e37_79b9), a);
        }
        assert_eq!(t.bytes(), before, "grew before its capacity");
        t.insert(7, 7);
        assert!(t.bytes() > before);
        for a in 0..1000u32 {
            assert_eq!(t.get(a.wrapping_mul(0x9e37_79b9)), Some(a));
        }
    }

    proptest! {
        /// The IPv4 table alone, small and crowded: probes wrap around its end, removals shift
        /// runs back, it grows; after every operation each address reads back as in a HashMap.
        #[test]
        fn the_v4_table_matches_a_hashmap(
            n in 0usize..12,
            ops in proptest::collection::vec((any::<bool>(), 0u32..40, 0u32..1000), 0..400),
        ) {
            let mut t = V4Table::with_capacity(n);
            let mut o: Oracle<u32, u32> = Oracle::new();
            for &(ins, a, slot) in &ops {
                // Addresses in one /24 and some far apart.
                let addr = if a < 30 { 0x0a2d_0000 | a } else { a.wrapping_mul(0x6b43_a9b5) };
                if ins {
                    t.insert(addr, slot);
                    o.insert(addr, slot);
                } else {
                    t.remove(addr);
                    o.remove(&addr);
                }
                prop_assert_eq!(t.len, o.len());
                for a in 0..40u32 {
                    let addr = if a < 30 { 0x0a2d_0000 | a } else { a.wrapping_mul(0x6b43_a9b5) };
                    prop_assert_eq!(t.get(addr), o.get(&addr).copied(), "address {:x}", addr);
                }
            }
        }
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
