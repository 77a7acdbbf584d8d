//! TEA (SIGCOMM 2020): a switch's large per-flow table kept in the memory of the rack's
//! servers, read by one-sided reads, with a small exact-match cache of hot keys in the switch.

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
pub use region::{MemoryRegion, OutOfBounds, Region};
pub use resolver::{Address, RangeEntry, RangeError, RangeTable, Resolver, ServerId};
pub use table::{
    InsertError, Lookup, LookupError, Placed, Step, TableParams, TableReader, TeaTable,
};
pub use wire::{serve_datagram, serve_read, ReadRequest, ReadResponse, Status, WireError};
