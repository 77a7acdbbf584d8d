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
//! regions the memory servers registered in this process: bucket writes follow the version and
//! checksum protocol, so lookups in flight go on and never see a torn bucket), refresh the
//! switch's copy of the stash, and update or drop the key's cache entry.
//! [`TeaSwitch::update`] and [`TeaSwitch::remove_remote`] do the same for memory servers in
//! other processes or hosts, by one-sided writes over the fabric ([`sb_tea::wire`]'s write
//! request): the table logs each bucket it rewrote, and the switch sends each image to the
//! range's primary and secondary, the next bucket only once both acknowledged (retried after
//! the read timeout; a dead or silent copy is skipped and marked stale, and
//! [`TeaSwitch::resync`] rewrites its regions once it answers again). Its stash copy changes
//! once the writes before it are done. Lookups go on meanwhile; a reader that reads a bucket
//! while a server stores it sees an odd version or a wrong checksum and reads it again. [`TeaSwitch::run_control`] takes the
//! keys the sketch reported, reads their values from the table and offers them to the cache.
//! Epochs (sketch and Bloom filter cleared, cache aged) end every `epoch_lookups` lookups.
//!
//! # Bytes on the fabric
//! A remote lookup of a `P`-byte packet with `B`-byte buckets costs `136 + B + 2P` bytes per
//! read round over Ethernet/IPv4/UDP ([`sb_tea::wire`]; the request's 8 of them are its access
//! key); a key in its second bucket costs two rounds, a miss three. For the NAT (13-byte keys,
//! 8-byte values, 4 slots: `B` = 104): a 64-byte packet costs 368 bytes on the switch-server
//! link (5.75x the packet), a 1500-byte packet 3240 (2.2x). A packet served by the cache or
//! the stash costs nothing on the fabric.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use sb_engine::{App, Drop};
use sb_io::{Meta, PacketBatch};
use sb_tea::flow::{DropReason, Expired, FlowControl, FlowCounters, FlowParams, Health, Probe};
use sb_tea::table::{BucketWrite, InsertError, Lookup, LookupError, Placed, Step, TeaTable};
use sb_tea::wire::{
    opcode, Opcode, ReadRequest, ReadResponse, Status, WriteAck, WriteRequest, MAX_PACKET,
};
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
    /// The server answered with an error status (unknown region, out of bounds, access
    /// denied).
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
    /// Entries the control plane wrote through remote writes ([`TeaSwitch::update`]).
    pub updates: u64,
    /// Updates refused (the table full: no place and the stash full).
    pub update_failures: u64,
    /// Bucket write requests sent (one per copy; retries not counted).
    pub bucket_writes: u64,
    /// Write acknowledgements received.
    pub write_acks: u64,
    /// Write requests sent again after no acknowledgement within the read timeout.
    pub write_retries: u64,
    /// Copies not written: their server dead to flow control, or silent for
    /// [`WRITE_TRIES`] sends (the copy is stale until [`TeaSwitch::resync`]).
    pub write_skipped: u64,
    /// Acknowledgements with an error status (unknown region, out of bounds, unaligned,
    /// access denied).
    pub write_errors: u64,
    /// Whole regions rewritten to a server that had missed writes ([`TeaSwitch::resync`]).
    pub resyncs: u64,
}

/// Sends of one write to one copy before the copy is given up as stale.
pub const WRITE_TRIES: u32 = 5;

/// Where the switch's output goes: the driver's sockets and ports.
pub trait Sink {
    /// Sends `datagram` (a read or write request) to memory server `server`.
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

/// The bucket write in flight: one request per copy, each until acknowledged.
#[derive(Debug)]
struct WriteInFlight {
    write: BucketWrite,
    /// (server, request id, acknowledged, sends).
    copies: Vec<(ServerId, u32, bool, u32)>,
    sent: Instant,
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
    writes: VecDeque<BucketWrite>,
    write_in_flight: Option<WriteInFlight>,
    stash_after: Option<Vec<Entry>>,
    next_write_id: u32,
    stale: Vec<bool>,
    /// Per region: the access keys of its primary's and its secondary's copy (the table's).
    access_keys: Vec<[u64; 2]>,
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
        let access_keys = (0..table.resolver().ranges().entries().len() as u32)
            .map(|r| [table.access_key(r, 0), table.access_key(r, 1)])
            .collect();
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
            writes: VecDeque::new(),
            write_in_flight: None,
            stash_after: None,
            next_write_id: 0,
            stale: vec![false; servers],
            access_keys,
        };
        s.refresh_stash(table);
        Ok(s)
    }

    /// The access key of `region`'s primary copy, or of its secondary's (0, which no copy
    /// has, for a region or copy the table does not have).
    fn access_key(&self, region: u32, secondary: bool) -> u64 {
        (self.access_keys.get(region as usize)).map_or(0, |k| k[usize::from(secondary)])
    }

    /// The access key of `server`'s copy of `region`, by the range table (a resync's write
    /// names the stale server as its address's primary, whatever its role).
    fn server_access_key(&self, region: u32, server: ServerId) -> u64 {
        let entries = self.resolver.ranges().entries();
        let secondary = (entries.get(region as usize)).is_some_and(|e| e.primary != server);
        self.access_key(region, secondary)
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
            key: self.access_key(a.region, route.secondary),
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

    /// A datagram arrived from a memory server at `now`: a read's response or a write's
    /// acknowledgement.
    pub fn on_response<S: Sink>(&mut self, now: Instant, datagram: &[u8], sink: &mut S) {
        if opcode(datagram) == Some(Opcode::WriteAck) {
            match WriteAck::parse(datagram) {
                Ok(ack) => self.on_write_ack(now, ack, sink),
                Err(_) => self.counters.bad_responses += 1,
            }
            return;
        }
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
        self.poll_writes(now, sink);
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
                key: self.server_access_key(region, p.server),
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

    /// Writes `key` -> `value` into the servers' copies of the table by one-sided writes, while
    /// lookups go on: the table (its writes logged from here on, [`TeaTable::log_writes`]:
    /// the servers' copies must equal its regions before the first update) places
    /// the key (a free slot, a displacement chain, or the stash) and logs each bucket it
    /// rewrote; the switch sends each bucket's image to the range's primary and secondary
    /// ([`sb_tea::wire::WriteRequest`]) and sends the next bucket only once every copy
    /// acknowledged the last (the order the lookup protocol's miss confirmation needs, see
    /// [`sb_tea::table`]). The switch's stash copy changes once the writes before it are
    /// acknowledged, so a key moved from the stash into a bucket is never missing from both.
    /// The key's cache entry, if any, takes the new value at once. Drive the writes with
    /// [`on_response`](Self::on_response) and [`poll`](Self::poll) (retries);
    /// [`updates_pending`](Self::updates_pending) says when all are acknowledged.
    pub fn update<S: Sink>(
        &mut self,
        now: Instant,
        table: &mut TeaTable,
        key: &[u8],
        value: &[u8],
        sink: &mut S,
    ) -> Result<Placed, InsertError> {
        if !table.logs_writes() {
            table.log_writes(true);
        }
        let placed = match table.insert(key, value) {
            Ok(p) => p,
            Err(e) => {
                self.counters.update_failures += 1;
                return Err(e);
            }
        };
        self.counters.updates += 1;
        if let Some(c) = self.cache.as_mut() {
            if c.contains(key) {
                c.offer(key, value, 0);
            }
        }
        self.queue_writes(now, table, sink);
        Ok(placed)
    }

    /// Removes `key` from the cache, then from the servers' copies by remote writes (as
    /// [`update`](Self::update)); returns its value if it was there.
    pub fn remove_remote<S: Sink>(
        &mut self,
        now: Instant,
        table: &mut TeaTable,
        key: &[u8],
        sink: &mut S,
    ) -> Option<Vec<u8>> {
        if let Some(c) = self.cache.as_mut() {
            c.remove(key);
        }
        if !table.logs_writes() {
            table.log_writes(true);
        }
        let old = table.remove(key);
        self.queue_writes(now, table, sink);
        old
    }

    fn queue_writes<S: Sink>(&mut self, now: Instant, table: &mut TeaTable, sink: &mut S) {
        self.writes.extend(table.take_writes());
        self.stash_after = Some(
            table
                .stash_entries()
                .into_iter()
                .map(|(k, v)| (k.into_boxed_slice(), v.into_boxed_slice()))
                .collect(),
        );
        self.next_write(now, sink);
    }

    /// Bucket writes queued or in flight (the stash copy changes when they are all done).
    pub fn updates_pending(&self) -> usize {
        self.writes.len() + usize::from(self.write_in_flight.is_some())
    }

    /// Servers whose copies missed writes (dead or silent while they were sent).
    pub fn stale_servers(&self) -> Vec<ServerId> {
        (0..self.servers)
            .filter(|&s| self.stale[s])
            .map(|s| s as ServerId)
            .collect()
    }

    /// Brings the copies of every server that missed writes and answers again (up to flow
    /// control) back to the table: every bucket of each region it holds is written again
    /// (after the writes queued before). Returns how many servers were resynced. Call it from
    /// the control loop.
    pub fn resync<S: Sink>(&mut self, now: Instant, table: &TeaTable, sink: &mut S) -> usize {
        let mut n = 0;
        for s in 0..self.servers {
            if !self.stale[s] || !matches!(self.flow.health(s as ServerId), Health::Up) {
                continue;
            }
            self.stale[s] = false;
            n += 1;
            self.counters.resyncs += 1;
            for (r, e) in self.resolver.ranges().entries().iter().enumerate() {
                if e.primary as usize == s || e.secondary.map(usize::from) == Some(s) {
                    for mut w in table.region_writes(r as u32) {
                        // Only this server's copy.
                        w.address.primary = s as ServerId;
                        w.address.secondary = None;
                        self.writes.push_back(w);
                    }
                }
            }
        }
        self.next_write(now, sink);
        n
    }

    /// Sends the next queued bucket write if none is in flight; installs the new stash copy
    /// once the queue is empty.
    fn next_write<S: Sink>(&mut self, now: Instant, sink: &mut S) {
        while self.write_in_flight.is_none() {
            let Some(w) = self.writes.pop_front() else {
                if let Some(st) = self.stash_after.take() {
                    self.stash = st;
                }
                return;
            };
            let mut copies = Vec::with_capacity(2);
            for server in std::iter::once(w.address.primary).chain(w.address.secondary) {
                if matches!(self.flow.health(server), Health::Dead(_)) {
                    self.counters.write_skipped += 1;
                    if let Some(st) = self.stale.get_mut(server as usize) {
                        *st = true;
                    }
                    continue;
                }
                self.next_write_id = self.next_write_id.wrapping_add(1);
                copies.push((server, self.next_write_id, false, 0));
            }
            if copies.is_empty() {
                continue;
            }
            let mut f = WriteInFlight {
                write: w,
                copies,
                sent: now,
            };
            self.counters.bucket_writes += f.copies.len() as u64;
            self.send_writes(&mut f, sink);
            self.write_in_flight = Some(f);
        }
    }

    fn send_writes<S: Sink>(&mut self, f: &mut WriteInFlight, sink: &mut S) {
        for c in f.copies.iter_mut().filter(|c| !c.2) {
            self.scratch.clear();
            let key = self.server_access_key(f.write.address.region, c.0);
            WriteRequest {
                request_id: c.1,
                region: f.write.address.region,
                offset: f.write.address.offset,
                key,
                data: &f.write.image,
            }
            .emit(&mut self.scratch)
            .expect("a bucket image is at most MAX_WRITE bytes");
            c.3 += 1;
            self.counters.fabric_payload_bytes += self.scratch.len() as u64;
            sink.send(c.0, &self.scratch);
        }
    }

    fn on_write_ack<S: Sink>(&mut self, now: Instant, ack: WriteAck, sink: &mut S) {
        let Some(f) = self.write_in_flight.as_mut() else {
            self.counters.late += 1;
            return;
        };
        let Some(c) = f.copies.iter_mut().find(|c| c.1 == ack.request_id && !c.2) else {
            self.counters.late += 1;
            return;
        };
        c.2 = true;
        self.counters.write_acks += 1;
        self.counters.fabric_payload_bytes += sb_tea::wire::WRITE_ACK as u64;
        if ack.status != Status::Ok {
            self.counters.write_errors += 1;
        }
        if f.copies.iter().all(|c| c.2) {
            self.write_in_flight = None;
            self.next_write(now, sink);
        }
    }

    /// Retries a write not acknowledged within the read timeout; gives a copy up (stale) when
    /// its server is dead or after [`WRITE_TRIES`] sends.
    fn poll_writes<S: Sink>(&mut self, now: Instant, sink: &mut S) {
        let Some(mut f) = self.write_in_flight.take() else {
            return;
        };
        if now.saturating_duration_since(f.sent) < self.params.flow.timeout {
            self.write_in_flight = Some(f);
            return;
        }
        for c in f.copies.iter_mut().filter(|c| !c.2) {
            if c.3 >= WRITE_TRIES || matches!(self.flow.health(c.0), Health::Dead(_)) {
                c.2 = true;
                self.counters.write_skipped += 1;
                if let Some(st) = self.stale.get_mut(c.0 as usize) {
                    *st = true;
                }
            }
        }
        if f.copies.iter().all(|c| c.2) {
            self.next_write(now, sink);
            return;
        }
        self.counters.write_retries += f.copies.iter().filter(|c| !c.2).count() as u64;
        f.sent = now;
        self.send_writes(&mut f, sink);
        self.write_in_flight = Some(f);
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
