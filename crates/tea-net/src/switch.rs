//! The TEA switch's data plane, sans-IO (paper §4, Figure 4): an engine [`App`] (the network
//! function) run over a table that lives in the memory servers.
//!
//! For each packet from outside ([`TeaSwitch::on_packet`]): the NF's parser gives the flow key
//! ([`App::downstream_key`]); the key's hash feeds the count-min sketch (a key that turns hot
//! is queued for the control plane, once per epoch); the stash (kept in the switch) and the
//! hot-key cache are looked up; on a miss the memory address resolver names the key's first
//! candidate bucket and its range's servers, flow control picks the primary or the secondary
//! ([`FlowControl::route`]) and a read request carrying **the whole packet** goes to it. The
//! switch keeps no packet buffer: the response brings back the bucket and the packet (Figure
//! 5b), the packet is parsed again, the bucket checked ([`Lookup::on_bucket`]); found: the NF's
//! action is applied with the value ([`App::apply`]) and the packet leaves; the key in its
//! other bucket: a second read, again carrying the packet; a confirmed miss: dropped
//! ([`SwitchDrop::Miss`], the NF's unknown flow).
//!
//! What the switch does keep per read in flight is the lookup's state (which buckets, which
//! stage, the first bucket's version: about 40 bytes, at most `max_outstanding` per server),
//! where the P4 program would carry it in a header of the packet; and flow control's
//! accounting. A read that gets no answer in time loses its packet (counted,
//! [`SwitchCounters::lost`]); a late answer is dropped.
//!
//! # Control plane
//! [`TeaSwitch::insert`] and [`TeaSwitch::remove`] write entries into the [`TeaTable`] (whose
//! regions the memory servers registered: bucket writes follow the version and checksum
//! protocol, so lookups in flight go on and never see a torn bucket), refresh the switch's copy
//! of the stash, and update or drop the key's cache entry. [`TeaSwitch::run_control`] takes the
//! keys the sketch reported, reads their values from the table and offers them to the cache.
//! Epochs (sketch and Bloom filter cleared, cache aged) end every `epoch_lookups` lookups.
//!
//! # Bytes on the fabric
//! A remote lookup of a `P`-byte packet with `B`-byte buckets costs `128 + B + 2P` bytes per
//! read round over Ethernet/IPv4/UDP ([`sb_tea::wire`]); a key in its second bucket costs two
//! rounds, a miss three. For the NAT (13-byte keys, 8-byte values, 4 slots: `B` = 104): a
//! 64-byte packet costs 360 bytes on the switch-server link (5.6x the packet), a 1500-byte
//! packet 3232 (2.2x). A packet served by the cache or the stash costs nothing on the fabric.

use std::collections::HashMap;
use std::time::Instant;

use sb_engine::{App, Drop};
use sb_io::{Meta, PacketBatch};
use sb_tea::flow::{DropReason, Expired, FlowControl, FlowCounters, FlowParams, Probe};
use sb_tea::table::{InsertError, Lookup, LookupError, Placed, Step, TeaTable};
use sb_tea::wire::{ReadRequest, ReadResponse, Status, MAX_PACKET};
use sb_tea::{HotCache, HotError, HotKeys, HotParams, Resolver, ServerId};

/// Sizes and limits of a [`TeaSwitch`].
#[derive(Debug, Clone, Copy)]
pub struct SwitchParams {
    /// Hot-key cache entries (1,024 as the paper's); 0 turns the cache off (every lookup
    /// remote, the stash aside).
    pub cache_entries: usize,
    /// Epochs a cache entry may go without a hit before it is dropped (2).
    pub cache_max_idle: u32,
    /// Sketch, threshold and Bloom filter.
    pub hot: HotParams,
    /// Lookups per epoch (1,000,000: with the threshold of 64, keys seen more than once in
    /// about 15,600 lookups).
    pub epoch_lookups: u64,
    /// Outstanding-read limits and failover timers.
    pub flow: FlowParams,
    /// Reads one lookup may take before it gives up (16).
    pub max_reads: u32,
}

impl Default for SwitchParams {
    fn default() -> SwitchParams {
        SwitchParams {
            cache_entries: 1024,
            cache_max_idle: 2,
            hot: HotParams::default(),
            epoch_lookups: 1_000_000,
            flow: FlowParams::default(),
            max_reads: 16,
        }
    }
}

/// Why the switch dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SwitchDrop {
    /// The NF's parser refused it (or its action did).
    #[error("the network function dropped it: {}", .0.label())]
    Nf(Drop),
    /// The key is in no bucket and not in the stash (the NF's unknown flow).
    #[error("no entry for the key")]
    Miss,
    /// Flow control sent no read: servers saturated or dead.
    #[error("no read sent: {0}")]
    Flow(DropReason),
    /// Longer than a read request carries.
    #[error("packet longer than a read request carries")]
    TooLong,
    /// The server answered with an error status (unknown region, out of bounds).
    #[error("server answered {0:?}")]
    Server(Status),
    /// The lookup failed: a bad bucket, or buckets that kept changing.
    #[error("lookup failed: {0}")]
    Lookup(LookupError),
}

/// What happened to packets and reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchCounters {
    /// Packets given to [`TeaSwitch::on_packet`].
    pub packets: u64,
    /// Packets that left, translated.
    pub out: u64,
    /// Lookups served by the hot-key cache.
    pub cache_hits: u64,
    /// Lookups served by the stash.
    pub stash_hits: u64,
    /// Lookups that went to the servers (their first read).
    pub remote_lookups: u64,
    /// Reads sent (every round of every lookup, probes not counted).
    pub reads: u64,
    /// Reads sent per server.
    pub reads_per_server: Vec<u64>,
    /// Read requests' bytes sent plus responses' bytes received (UDP payloads).
    pub fabric_payload_bytes: u64,
    /// Packets lost with a read that was not answered in time.
    pub lost: u64,
    /// Answers that came after their read timed out, or for no read.
    pub late: u64,
    /// Datagrams from the servers that are not responses.
    pub bad_responses: u64,
    /// Keys the sketch reported hot.
    pub reports: u64,
    /// Drops: the NF.
    pub drop_nf: u64,
    /// Drops: no entry.
    pub drop_miss: u64,
    /// Drops: flow control.
    pub drop_flow: u64,
    /// Drops: a server's error status.
    pub drop_server: u64,
    /// Drops: lookups that failed, or packets too long.
    pub drop_other: u64,
    /// Epochs ended.
    pub epochs: u64,
}

/// Where the switch's output goes: the driver's sockets and ports.
pub trait Sink {
    /// Sends `datagram` (a read request) to memory server `server`.
    fn send(&mut self, server: ServerId, datagram: &[u8]);
    /// A packet leaves the switch, translated.
    fn emit(&mut self, frame: &[u8]);
    /// A packet was dropped.
    fn drop_packet(&mut self, why: SwitchDrop) {
        let _ = why;
    }
}

/// A key and its value.
type Entry = (Box<[u8]>, Box<[u8]>);

#[derive(Debug, Clone)]
struct Pending {
    lookup: Lookup,
}

/// The switch: the NF, the resolver, the stash copy, the hot keys, flow control.
#[derive(Debug)]
pub struct TeaSwitch<A: App> {
    app: A,
    resolver: Resolver,
    params: SwitchParams,
    stash: Vec<Entry>,
    cache: Option<HotCache>,
    hot: HotKeys,
    reported: Vec<(Box<[u8]>, u16)>,
    flow: FlowControl,
    pending: HashMap<u32, Pending>,
    servers: usize,
    batch: PacketBatch,
    key: Vec<u8>,
    scratch: Vec<u8>,
    value: Vec<u8>,
    expired: Vec<Expired>,
    probes: Vec<Probe>,
    epoch_count: u64,
    counters: SwitchCounters,
}

impl<A: App> TeaSwitch<A> {
    /// A switch running `app` over the table `table` (its resolver and stash copied), with
    /// `servers` memory servers numbered `0..servers`.
    pub fn new(
        app: A,
        table: &TeaTable,
        servers: usize,
        params: SwitchParams,
    ) -> Result<TeaSwitch<A>, HotError> {
        let cache = if params.cache_entries > 0 {
            Some(HotCache::new(params.cache_entries, params.cache_max_idle)?)
        } else {
            None
        };
        let key_len = app.key_bytes();
        let mut s = TeaSwitch {
            app,
            resolver: table.resolver().clone(),
            params,
            stash: Vec::new(),
            cache,
            hot: HotKeys::new(params.hot)?,
            reported: Vec::new(),
            flow: FlowControl::new(servers, params.flow),
            pending: HashMap::new(),
            servers,
            batch: PacketBatch::with_buf_size(1, MAX_PACKET + 512),
            key: vec![0; key_len],
            scratch: Vec::with_capacity(MAX_PACKET + 64),
            value: Vec::new(),
            expired: Vec::new(),
            probes: Vec::new(),
            epoch_count: 0,
            counters: SwitchCounters {
                reads_per_server: vec![0; servers],
                ..SwitchCounters::default()
            },
        };
        s.refresh_stash(table);
        Ok(s)
    }

    /// The NF.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The NF, mutable (its own counters and tables).
    pub fn app_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// The counters.
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }

    /// Flow control's counters.
    pub fn flow_counters(&self) -> &FlowCounters {
        self.flow.counters()
    }

    /// Flow control (health and outstanding reads per server).
    pub fn flow(&self) -> &FlowControl {
        &self.flow
    }

    /// Reads in flight (packets waiting for an answer, probes aside).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Keys in the cache (0 when it is off).
    pub fn cached(&self) -> usize {
        self.cache.as_ref().map_or(0, HotCache::len)
    }

    /// A packet arrived from outside at `now`.
    pub fn on_packet<S: Sink>(&mut self, now: Instant, frame: &[u8], sink: &mut S) {
        self.counters.packets += 1;
        let mut meta = Meta::default();
        if let Err(d) = self.app.downstream_key(frame, &mut self.key, &mut meta) {
            self.drop_packet(SwitchDrop::Nf(d), sink);
            return;
        }
        let hash = self.resolver.hash(&self.key);
        if let Some(heat) = self.hot.observe(hash) {
            self.counters.reports += 1;
            self.reported
                .push((self.key.clone().into_boxed_slice(), heat));
        }
        self.epoch_count += 1;
        if self.epoch_count >= self.params.epoch_lookups {
            self.end_epoch();
        }
        if let Some(i) = self.stash.iter().position(|(k, _)| **k == self.key[..]) {
            self.counters.stash_hits += 1;
            let mut value = std::mem::take(&mut self.value);
            value.clear();
            value.extend_from_slice(&self.stash[i].1);
            self.finish(frame, meta, &value, sink);
            self.value = value;
            return;
        }
        if let Some(cache) = self.cache.as_mut() {
            if let Some(v) = cache.get(&self.key) {
                self.counters.cache_hits += 1;
                let mut value = std::mem::take(&mut self.value);
                value.clear();
                value.extend_from_slice(v);
                self.finish(frame, meta, &value, sink);
                self.value = value;
                return;
            }
        }
        if frame.len() > MAX_PACKET {
            self.drop_packet(SwitchDrop::TooLong, sink);
            return;
        }
        self.counters.remote_lookups += 1;
        let lookup = Lookup::new(&self.resolver, hash, self.params.max_reads);
        let bucket = lookup.first();
        self.read(now, bucket, Pending { lookup }, frame, sink);
    }

    fn end_epoch(&mut self) {
        self.epoch_count = 0;
        self.counters.epochs += 1;
        self.hot.new_epoch();
        if let Some(c) = self.cache.as_mut() {
            c.age();
        }
    }

    /// Sends the read of `bucket` carrying `frame`.
    fn read<S: Sink>(
        &mut self,
        now: Instant,
        bucket: u64,
        pending: Pending,
        frame: &[u8],
        sink: &mut S,
    ) {
        let a = self.resolver.address(bucket);
        let route = match self.flow.route(now, a.primary, a.secondary) {
            Ok(r) => r,
            Err(why) => {
                self.drop_packet(SwitchDrop::Flow(why), sink);
                return;
            }
        };
        self.scratch.clear();
        let req = ReadRequest {
            request_id: route.token,
            region: a.region,
            offset: a.offset,
            length: a.len,
            packet: frame,
        };
        req.emit(&mut self.scratch)
            .expect("lengths checked: a bucket and a packet of at most MAX_PACKET");
        self.pending.insert(route.token, pending);
        self.counters.reads += 1;
        if let Some(c) = self
            .counters
            .reads_per_server
            .get_mut(route.server as usize)
        {
            *c += 1;
        }
        self.counters.fabric_payload_bytes += self.scratch.len() as u64;
        sink.send(route.server, &self.scratch);
    }

    /// A datagram arrived from a memory server at `now`.
    pub fn on_response<S: Sink>(&mut self, now: Instant, datagram: &[u8], sink: &mut S) {
        let Ok(resp) = ReadResponse::parse(datagram) else {
            self.counters.bad_responses += 1;
            return;
        };
        if self.flow.on_response(now, resp.request_id).is_none() {
            self.counters.late += 1;
            return;
        }
        self.counters.fabric_payload_bytes += datagram.len() as u64;
        // A probe's answer has no lookup behind it.
        let Some(mut pending) = self.pending.remove(&resp.request_id) else {
            return;
        };
        if resp.status != Status::Ok {
            self.drop_packet(SwitchDrop::Server(resp.status), sink);
            return;
        }
        let frame = resp.packet;
        let mut meta = Meta::default();
        if let Err(d) = self.app.downstream_key(frame, &mut self.key, &mut meta) {
            self.drop_packet(SwitchDrop::Nf(d), sink);
            return;
        }
        let layout = *self.resolver.layout();
        match pending.lookup.on_bucket(&layout, &self.key, resp.data) {
            Ok(Step::Found(v)) => self.finish(frame, meta, v, sink),
            Ok(Step::Miss) => self.drop_packet(SwitchDrop::Miss, sink),
            Ok(Step::Read(b)) => self.read(now, b, pending, frame, sink),
            Err(e) => self.drop_packet(SwitchDrop::Lookup(e), sink),
        }
    }

    /// Expires reads past their deadline and sends the probes due, at `now`. Call it every
    /// millisecond or so, and at [`FlowControl::next_deadline`].
    pub fn poll<S: Sink>(&mut self, now: Instant, sink: &mut S) {
        self.expired.clear();
        self.flow.poll_timeouts(now, &mut self.expired);
        for e in &self.expired {
            if self.pending.remove(&e.token).is_some() {
                self.counters.lost += 1;
            }
        }
        self.probes.clear();
        self.flow.poll_probes(now, &mut self.probes);
        for p in std::mem::take(&mut self.probes) {
            // Any read of a region the server holds: the start of a range it serves.
            let ranges = self.resolver.ranges().entries();
            let region = ranges
                .iter()
                .position(|e| e.primary == p.server || e.secondary == Some(p.server))
                .unwrap_or(0) as u32;
            self.scratch.clear();
            ReadRequest {
                request_id: p.token,
                region,
                offset: 0,
                length: 0,
                packet: &[],
            }
            .emit(&mut self.scratch)
            .expect("an empty probe encodes");
            sink.send(p.server, &self.scratch);
        }
    }

    fn finish<S: Sink>(&mut self, frame: &[u8], meta: Meta, value: &[u8], sink: &mut S) {
        self.batch.clear();
        if !self.batch.push(frame) {
            self.drop_packet(SwitchDrop::TooLong, sink);
            return;
        }
        *self.batch.meta_mut(0) = meta;
        let r = self
            .app
            .apply(&mut self.batch, 0, value)
            .and_then(|()| self.app.admit(&mut self.batch, 0, value));
        match r {
            Ok(()) => {
                self.counters.out += 1;
                sink.emit(self.batch.get(0));
            }
            Err(d) => self.drop_packet(SwitchDrop::Nf(d), sink),
        }
    }

    fn drop_packet<S: Sink>(&mut self, why: SwitchDrop, sink: &mut S) {
        let c = &mut self.counters;
        match why {
            SwitchDrop::Nf(_) => c.drop_nf += 1,
            SwitchDrop::Miss => c.drop_miss += 1,
            SwitchDrop::Flow(_) => c.drop_flow += 1,
            SwitchDrop::Server(_) => c.drop_server += 1,
            SwitchDrop::TooLong | SwitchDrop::Lookup(_) => c.drop_other += 1,
        }
        sink.drop_packet(why);
    }

    // ---- control plane ----

    fn refresh_stash(&mut self, table: &TeaTable) {
        self.stash = table
            .stash_entries()
            .into_iter()
            .map(|(k, v)| (k.into_boxed_slice(), v.into_boxed_slice()))
            .collect();
    }

    /// Writes `key` -> `value` into the table (the servers' regions; the stash when both
    /// buckets and every displacement path are full) while lookups go on, and into the cache
    /// if the key is cached there.
    pub fn insert(
        &mut self,
        table: &mut TeaTable,
        key: &[u8],
        value: &[u8],
    ) -> Result<Placed, InsertError> {
        let placed = table.insert(key, value)?;
        if matches!(placed, Placed::Stash | Placed::Updated) || !self.stash.is_empty() {
            self.refresh_stash(table);
        }
        if let Some(c) = self.cache.as_mut() {
            if c.contains(key) {
                c.offer(key, value, 0);
            }
        }
        Ok(placed)
    }

    /// Removes `key` from the cache, then from the table; returns its value if it was there.
    pub fn remove(&mut self, table: &mut TeaTable, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(c) = self.cache.as_mut() {
            c.remove(key);
        }
        let old = table.remove(key);
        self.refresh_stash(table);
        old
    }

    /// The control loop's step: each key reported hot since the last call is read from the
    /// table and offered to the cache. Returns how many were offered.
    pub fn run_control(&mut self, table: &TeaTable) -> usize {
        let Some(cache) = self.cache.as_mut() else {
            self.reported.clear();
            return 0;
        };
        let mut n = 0;
        for (k, heat) in self.reported.drain(..) {
            if let Some(v) = table.get(&k) {
                cache.offer(&k, &v, heat);
                n += 1;
            }
        }
        n
    }

    /// Memory servers.
    pub fn servers(&self) -> usize {
        self.servers
    }
}
