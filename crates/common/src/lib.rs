//! Pieces every scalebricks table shares: the key hash and arrays that the kernel can back with
//! 2 MB transparent huge pages; the one [`Mmap`] wrapper of kernel-shared mappings; and
//! [`shapes`], records kept as their differences from a template.
//!
//! Invariant: nothing here does packet I/O; the only syscalls are `mmap`/`madvise`/`munmap`
//! in [`huge`] and [`mmap`], the read of `/proc/self/smaps` that reports the page size actually used
//! ([`pages`]), and
//! the OS random source behind [`random_seed`] (the default seed of every table).

pub mod hash;
pub mod huge;
pub mod mmap;
pub mod pages;
pub mod shapes;

pub use hash::{hash128, random_seed, splitmix64, splitmix64_mix, KeyHash, SPLITMIX64_GAMMA};
pub use huge::{set_huge_advice, HugeArray};
pub use mmap::Mmap;
pub use pages::PageInfo;

/// Bytes of a hashbrown table (`HashMap`, `HashSet`, `HashTable`) of `capacity` elements of
/// `elem_bytes` each: its buckets (a power of two, loaded to 7/8 from 8 up), a control byte
/// each, and a group's worth (16) more control bytes. Computed from hashbrown's layout, not
/// measured.
pub fn hash_table_bytes(capacity: usize, elem_bytes: usize) -> usize {
    let buckets = match capacity {
        0 => return 0,
        1..8 => (capacity + 1).next_power_of_two(),
        _ => (capacity * 8).div_ceil(7).next_power_of_two(),
    };
    buckets * (elem_bytes + 1) + 16
}

/// The FIB key of a UE address, 16 bytes: an IPv4 address IPv4-mapped (`::ffff:a.b.c.d`), an
/// IPv6 address's /64 prefix (the interface identifier zeroed: a PDU session is given a /64
/// and the UE picks its addresses in it). An IPv4-mapped IPv6 address is the IPv4 address's
/// key. The engine's FIB and the PFCP endpoint's UE index key by it alike.
pub fn ue_key(addr: std::net::IpAddr) -> [u8; 16] {
    use std::net::IpAddr;
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => a.octets(),
        IpAddr::V6(a) => {
            let mut k = a.octets();
            k[8..].fill(0);
            k
        }
    }
}
