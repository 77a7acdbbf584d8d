//! TEA (SIGCOMM 2020): a switch's large per-flow table kept in the memory of the rack's
//! servers, read by one-sided reads, with a small exact-match cache of hot keys in the switch.
//!
//! This crate is the sans-IO foundation: data structures, wire format and state machines, no
//! sockets, threads or clocks of its own. A switch process and memory servers built on the
//! engine and the cluster put it on the fabric.
//!
//! - [`table`]: the TEA table (paper §4.2). A bucketed cuckoo hash table in flat byte regions,
//!   one region per range of buckets, each copied on the range's secondary server; buckets of
//!   fixed-size slots (key and value sizes chosen per NF), two candidate buckets per key, a
//!   breadth-first displacement search, and a small stash (in the switch, checked first) for
//!   keys that find no place. [`TeaTable`] is the control side (one writer); [`Lookup`] is a
//!   reader's protocol over the bytes of one-sided reads; [`TableReader`] runs it in process.
//! - [`layout`]: one bucket's bytes (16-byte header: version, occupancy, slot count,
//!   checksum) and [`Layout::lookup_in_bucket`], the checked lookup over fetched bytes.
//! - [`resolver`]: the memory address resolver: key -> hash -> candidate buckets -> range
//!   table -> (primary, secondary, region, offset, length). A reader needs nothing else.
//! - [`region`]: a registered region (atomic words: a read racing a write is torn, never
//!   undefined) and the [`MemoryRegion`] trait a memory server copies from.
//! - [`wire`]: the read protocol, a RoCE-like one-sided read over UDP that carries the
//!   original packet (Figure 5b), and the memory server's [`serve_read`]; the one-sided write
//!   of one bucket's image the control plane updates a remote table with ([`serve_write`],
//!   words stored version-last so a reader never uses a half-written bucket;
//!   [`TeaTable::take_writes`] logs them in the order they must be applied).
//! - [`hot`]: count-min sketch, Bloom-filtered reports, the exact-match cache (§4.3, §5.1).
//! - [`flow`]: outstanding-read limits, primary/secondary choice, dead and overloaded
//!   detection with probes and return (§5.3, Figure 10).
//! - [`zipf`]: a seeded generator and Zipf sampler for the paper's workloads.
//!
//! ```
//! use sb_tea::{Layout, Lookup, RangeTable, Step, TableParams, TeaTable};
//! use sb_tea::wire::{serve_datagram, ReadRequest, ReadResponse};
//!
//! // A NAT's table: 13-byte 5-tuples -> 6-byte (address, port), 4 slots per bucket,
//! // 1024 buckets over 2 servers (each range's secondary is the other server).
//! let layout = Layout::new(13, 6, 4).unwrap();
//! let ranges = RangeTable::even(1024, &[0, 1]).unwrap();
//! let mut table = TeaTable::new(TableParams::new(layout, ranges, 0x7ea));
//! let key = *b"5-tuple-bytes";
//! table.insert(&key, &[10, 0, 0, 1, 0x1f, 0x90]).unwrap();
//!
//! // The switch: resolve, send read requests carrying the packet, finish on the answer.
//! let resolver = table.resolver().clone();
//! let packet = [0u8; 64];
//! let mut lookup = Lookup::new(&resolver, resolver.hash(&key), 16);
//! let mut bucket = lookup.first();
//! let value = loop {
//!     let a = resolver.address(bucket);
//!     let mut req = Vec::new();
//!     // The primary copy's access key (a cluster's memory servers check it).
//!     let access = table.access_key(a.region, 0);
//!     ReadRequest { request_id: 1, region: a.region, offset: a.offset, length: a.len, key: access, packet: &packet }
//!         .emit(&mut req)
//!         .unwrap();
//!     // The memory server (primary copy) copies the bytes; no NF logic.
//!     let mut resp = Vec::new();
//!     serve_datagram(|r| table.region(r).first().map(|c| &**c), &req, &mut resp).unwrap();
//!     let resp = ReadResponse::parse(&resp).unwrap();
//!     match lookup.on_bucket(&layout, &key, resp.data).unwrap() {
//!         Step::Read(b) => bucket = b,
//!         Step::Found(v) => break Some(v.to_vec()),
//!         Step::Miss => break None,
//!     }
//! };
//! assert_eq!(value.as_deref(), Some(&[10, 0, 0, 1, 0x1f, 0x90][..]));
//! ```
//!
//! # Costs, and the paper's numbers that carry over
//! - Memory: a bucket is `16 + slots * (key + value)` bytes rounded up to 8 (the NAT layout
//!   above: 96 bytes for 4 entries). 4-slot buckets fill to about 0.96 before the first key
//!   goes to the stash (`load_factor_before_the_stash`: 0.960 of 16,384 slots); with a
//!   secondary copy every entry is stored twice across the servers.
//! - Reads: a hit costs one read of one bucket when the key is in its first candidate, two
//!   when in its second; a miss costs three (the third confirms it, see [`table`]).
//! - Fabric bytes per read round: `136 + B + 2P` for a `P`-byte packet and `B`-byte bucket
//!   over Ethernet/IPv4/UDP ([`wire`]): for the NAT's 104-byte buckets, 368 bytes for a
//!   64-byte packet, 3240 for 1500.
//!   The paper measured 1.8-2.2 us per lookup over RDMA (raw RDMA read: 0.1-0.2 us), the
//!   difference being these larger packets; 7.3-10.9 M lookups/s per server NIC.
//! - Hot keys: sketch 4 x 65,536 x 16 bits = 512 KiB, Bloom 8 KiB, cache 1,024 entries (the
//!   paper: about 55 KB of SRAM for an IPv6 NAT). On Zipf(0.99) over 1M keys the cache
//!   served 49.0% of lookups over 5 epochs of 1M (50.3% after the first; the 1,024 hottest
//!   keys carry 50.4%); the paper: 49% (`tests/hot.rs`).
//! - Flow control: 16 outstanding reads per server (the paper's NIC limit); failover to the
//!   secondary within `timeout` (20 ms) of a death being seen, back within a probe interval
//!   (100 ms) of recovery (the paper: within a second).

pub mod flow;
pub mod fuzzing;
pub mod hash;
pub mod hot;
pub mod layout;
pub mod region;
pub mod resolver;
pub mod table;
pub mod wire;
pub mod zipf;

pub use flow::{DropReason, Expired, FlowControl, FlowCounters, FlowParams, Health, Probe, Route};
pub use hot::{BloomFilter, CountMinSketch, HotCache, HotError, HotKeys, HotParams, Offer};
pub use layout::{BucketError, Layout, LayoutError};
pub use region::{MemoryRegion, OutOfBounds, Region, WriteError};
pub use resolver::{Address, RangeEntry, RangeError, RangeTable, Resolver, ServerId};
pub use table::{
    BucketWrite, InsertError, Lookup, LookupError, Placed, Step, TableParams, TableReader, TeaTable,
};
pub use wire::{
    serve_datagram, serve_read, serve_write, ReadRequest, ReadResponse, Status, WireError,
    WriteAck, WriteRequest,
};
