//! The TEA table (paper §4.2): a bucketed cuckoo hash table laid out in flat memory regions, one
//! region per range of buckets (copied on the range's secondary), plus a small stash for keys
//! that find no place; the control side ([`TeaTable`]) inserts and deletes while readers keep
//! reading; readers hold only a [`Resolver`] and run the [`Lookup`] protocol over the bytes of
//! one-sided reads.
//!
//! # Placement
//! Each key has two candidate buckets ([`Resolver::buckets`]). An insert takes a free slot of
//! either; if both are full it searches breadth-first (at most `max_search` buckets) for a
//! chain of keys each movable to its other candidate, ending at a bucket with a free slot, and
//! moves the chain from its end; if there is none, the key goes to the stash (at most
//! `stash_capacity` entries, kept in the switch, checked before any read). A delete that frees a
//! slot moves stash entries back into buckets when they fit.
//!
//! # Updates without stopping readers
//! Every bucket write follows the region's protocol ([`Region`]): version made odd, slot words,
//! checksum, even version with the new occupancy last. A reader's copy of a bucket is accepted
//! only if its version is even and its checksum matches ([`Layout::check`]); otherwise it reads
//! again. So a reader never uses a torn bucket, and never returns a torn value.
//!
//! Moves keep every key in at least one of its buckets at every moment: a chain is moved from
//! its free end, each bucket write adding a key that is still in its old bucket and dropping one
//! already written to its new one. What a reader can still see is a false *miss*: it reads the
//! first candidate before a key arrives there and the second after the key left it. The
//! [`Lookup`] protocol closes that: a miss in both buckets is confirmed by reading the first
//! bucket again, and counts only if its version did not change; otherwise the lookup starts
//! over. This holds when each read is issued after the previous one's answer (reads are
//! causally ordered), and when the writer finishes one bucket on every copy before it writes the
//! next bucket (what [`TeaTable`] does; a remote writer must wait for each write's
//! acknowledgement). Stash entries are moved to a bucket before they leave the stash, and
//! readers check the stash before the buckets, so a stash move cannot cause a miss either.
//!
//! A hit costs one read when the key is in its first bucket, two when in its second; a miss
//! costs three. In TEA's NFs a miss is a new flow and goes to the control plane anyway.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use crate::layout::{occupancy, version, BucketError, Layout};
use crate::region::{MemoryRegion, Region};
use crate::resolver::{Address, RangeTable, Resolver};

/// Parameters of a [`TeaTable`].
#[derive(Debug, Clone)]
pub struct TableParams {
    /// Key and value sizes, slots per bucket.
    pub layout: Layout,
    /// How many buckets, and which server holds which range of them.
    pub ranges: RangeTable,
    /// The key-hash seed every reader must know.
    pub seed: u64,
    /// Most keys in the stash (the paper keeps it in switch SRAM; 16 by default).
    pub stash_capacity: usize,
    /// Most buckets one insert's breadth-first search visits (256 by default).
    pub max_search: usize,
}

impl TableParams {
    /// Defaults for the stash (16) and the search (256 buckets).
    pub fn new(layout: Layout, ranges: RangeTable, seed: u64) -> TableParams {
        TableParams {
            layout,
            ranges,
            seed,
            stash_capacity: 16,
            max_search: 256,
        }
    }
}

/// Why an insert failed; the table is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// The key is not the layout's key length.
    #[error("key is {got} bytes, the table's keys are {expected}")]
    KeyLength {
        /// Layout's key size.
        expected: usize,
        /// Size given.
        got: usize,
    },
    /// The value is not the layout's value length.
    #[error("value is {got} bytes, the table's values are {expected}")]
    ValueLength {
        /// Layout's value size.
        expected: usize,
        /// Size given.
        got: usize,
    },
    /// Neither candidate bucket nor any displacement chain within the search bound had room,
    /// and the stash is full.
    #[error("table full: no displacement path and the stash is full")]
    Full,
}

/// Where an insert put the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// A new key in a bucket, after `moves` other keys moved to their other candidate.
    Bucket {
        /// The bucket now holding the key.
        bucket: u64,
        /// Keys displaced to make room.
        moves: usize,
    },
    /// A new key in the stash.
    Stash,
    /// The key was present; its value was replaced where it was.
    Updated,
}

type StashEntries = Vec<(Box<[u8]>, Box<[u8]>)>;

/// One bucket write, as [`TeaTable::take_writes`] logs it for a remote writer: the new image
/// of `bucket`, to be written at `address` on the range's primary and secondary copies, in the
/// log's order, each after the previous one is acknowledged by every copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketWrite {
    /// The bucket.
    pub bucket: u64,
    /// Where it lives: servers, region, offset, length.
    pub address: Address,
    /// Its sealed image (version and checksum set).
    pub image: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
enum Loc {
    Bucket(u64, usize),
    Stash(usize),
}

/// The control side's view of the TEA table: the authoritative bucket images, the regions
/// readers read (one per range and copy), the stash. One writer.
#[derive(Debug)]
pub struct TeaTable {
    resolver: Resolver,
    shadow: Vec<u8>,
    regions: Vec<Vec<Arc<Region>>>,
    /// Per region, per copy: the access key its memory server checks ([`TeaTable::access_key`]).
    access_keys: Vec<Vec<u64>>,
    stash: Arc<RwLock<StashEntries>>,
    stash_capacity: usize,
    max_search: usize,
    len: usize,
    bucket_writes: u64,
    write_log: Option<Vec<BucketWrite>>,
}

impl TeaTable {
    /// An empty table: every bucket an empty image at version 0, in every copy of its region,
    /// each copy with an access key of 64 random bits (the operating system's).
    pub fn new(params: TableParams) -> TeaTable {
        let TableParams {
            layout,
            ranges,
            seed,
            stash_capacity,
            max_search,
        } = params;
        let bb = layout.bucket_bytes();
        let empty = layout.empty_bucket();
        let shadow = empty.repeat(ranges.buckets() as usize);
        let regions = (0..ranges.entries().len())
            .map(|r| {
                let (first, end) = ranges.bounds(r);
                let image = &shadow[first as usize * bb..end as usize * bb];
                let copies = 1 + usize::from(ranges.entries()[r].secondary.is_some());
                (0..copies)
                    .map(|_| Arc::new(Region::from_image(image)))
                    .collect()
            })
            .collect::<Vec<Vec<Arc<Region>>>>();
        let access_keys = (regions.iter())
            .map(|copies| copies.iter().map(|_| random_key()).collect())
            .collect();
        TeaTable {
            resolver: Resolver::new(layout, seed, ranges),
            shadow,
            regions,
            access_keys,
            stash: Arc::new(RwLock::new(Vec::new())),
            stash_capacity,
            max_search: max_search.max(2),
            len: 0,
            bucket_writes: 0,
            write_log: None,
        }
    }

    /// The resolver readers use (layout, seed, range table).
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Keys in the table, stash included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots in all buckets (the stash not counted).
    pub fn capacity(&self) -> u64 {
        self.resolver.ranges().buckets() * self.resolver.layout().slots() as u64
    }

    /// Keys in the stash.
    pub fn stash_len(&self) -> usize {
        self.stash.read().expect("stash lock").len()
    }

    /// A copy of the stash, for a switch's own copy.
    pub fn stash_entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let s = self.stash.read().expect("stash lock");
        s.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    /// Bucket writes so far (each one write of one bucket to every copy).
    pub fn bucket_writes(&self) -> u64 {
        self.bucket_writes
    }

    /// Starts (or stops) logging every bucket write, for a remote writer: the memory servers
    /// of another process hold their own copies of the regions, and the control plane sends
    /// them what [`take_writes`](Self::take_writes) returns.
    pub fn log_writes(&mut self, on: bool) {
        self.write_log = on.then(Vec::new);
    }

    /// Whether bucket writes are logged ([`log_writes`](Self::log_writes)).
    pub fn logs_writes(&self) -> bool {
        self.write_log.is_some()
    }

    /// The bucket writes logged since the last call, in the order they were made (empty when
    /// logging is off).
    pub fn take_writes(&mut self) -> Vec<BucketWrite> {
        self.write_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The writes that bring a fresh copy of region `region` up to the authoritative images:
    /// every bucket of the range, in order (for a memory server that lost writes).
    pub fn region_writes(&self, region: u32) -> Vec<BucketWrite> {
        let (first, end) = self.resolver.ranges().bounds(region as usize);
        (first..end)
            .map(|b| BucketWrite {
                bucket: b,
                address: self.resolver.address(b),
                image: self.image(b).to_vec(),
            })
            .collect()
    }

    /// The copies of region `region` (range index): `[0]` for the primary, `[1]` for the
    /// secondary when the range has one. A memory server serves reads from these.
    pub fn region(&self, region: u32) -> &[Arc<Region>] {
        &self.regions[region as usize]
    }

    /// The access key of copy `copy` of region `region` (0: the range's primary, 1: its
    /// secondary): what a read or write of that copy must carry ([`crate::wire`]'s access
    /// keys); 0 for a copy the table does not have.
    pub fn access_key(&self, region: u32, copy: usize) -> u64 {
        (self.access_keys.get(region as usize))
            .and_then(|k| k.get(copy))
            .copied()
            .unwrap_or(0)
    }

    /// A reader that reads the regions in this process (copy `replica`, or the primary's when
    /// a range has fewer copies) and shares the stash.
    pub fn reader(&self, replica: usize) -> TableReader {
        TableReader {
            resolver: self.resolver.clone(),
            regions: self.regions.clone(),
            stash: Arc::clone(&self.stash),
            replica,
        }
    }

    fn image(&self, b: u64) -> &[u8] {
        let bb = self.resolver.layout().bucket_bytes();
        &self.shadow[b as usize * bb..(b as usize + 1) * bb]
    }

    fn image_mut(&mut self, b: u64) -> &mut [u8] {
        let bb = self.resolver.layout().bucket_bytes();
        &mut self.shadow[b as usize * bb..(b as usize + 1) * bb]
    }

    /// Seals bucket `b`'s image at its next version and writes it to every copy.
    fn publish(&mut self, b: u64) {
        let layout = *self.resolver.layout();
        let img = self.image_mut(b);
        let v = version(img).wrapping_add(2);
        layout.seal(img, v);
        let a = self.resolver.address(b);
        let image = &self.shadow[b as usize * a.len as usize..][..a.len as usize];
        for copy in &self.regions[a.region as usize] {
            copy.write_bucket(a.offset as usize, image);
        }
        if let Some(log) = self.write_log.as_mut() {
            log.push(BucketWrite {
                bucket: b,
                address: a,
                image: image.to_vec(),
            });
        }
        self.bucket_writes += 1;
    }

    fn find(&self, key: &[u8], hash: u64) -> Option<Loc> {
        let layout = self.resolver.layout();
        for b in self.resolver.buckets(hash) {
            let img = self.image(b);
            let occ = occupancy(img);
            if let Some(s) =
                (0..layout.slots()).find(|&s| occ & (1 << s) != 0 && layout.slot_key(img, s) == key)
            {
                return Some(Loc::Bucket(b, s));
            }
        }
        let stash = self.stash.read().expect("stash lock");
        stash
            .iter()
            .position(|(k, _)| &k[..] == key)
            .map(Loc::Stash)
    }

    /// The value of `key`, from the authoritative images and the stash.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        if key.len() != self.resolver.layout().key_len() {
            return None;
        }
        match self.find(key, self.resolver.hash(key))? {
            Loc::Bucket(b, s) => Some(self.resolver.layout().slot_value(self.image(b), s).to_vec()),
            Loc::Stash(i) => Some(self.stash.read().expect("stash lock")[i].1.to_vec()),
        }
    }

    /// Inserts `key` -> `value` or replaces the value of a present key.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<Placed, InsertError> {
        let layout = *self.resolver.layout();
        if key.len() != layout.key_len() {
            return Err(InsertError::KeyLength {
                expected: layout.key_len(),
                got: key.len(),
            });
        }
        if value.len() != layout.value_len() {
            return Err(InsertError::ValueLength {
                expected: layout.value_len(),
                got: value.len(),
            });
        }
        let hash = self.resolver.hash(key);
        match self.find(key, hash) {
            Some(Loc::Bucket(b, s)) => {
                layout.set_slot(self.image_mut(b), s, key, value);
                self.publish(b);
                return Ok(Placed::Updated);
            }
            Some(Loc::Stash(i)) => {
                self.stash.write().expect("stash lock")[i].1 = value.into();
                return Ok(Placed::Updated);
            }
            None => {}
        }
        if let Some(placed) = self.place(key, hash, value) {
            self.len += 1;
            return Ok(placed);
        }
        let mut stash = self.stash.write().expect("stash lock");
        if stash.len() >= self.stash_capacity {
            return Err(InsertError::Full);
        }
        stash.push((key.into(), value.into()));
        self.len += 1;
        Ok(Placed::Stash)
    }

    fn free_slot(&self, b: u64) -> Option<usize> {
        let occ = occupancy(self.image(b));
        (0..self.resolver.layout().slots()).find(|&s| occ & (1 << s) == 0)
    }

    /// Puts a key that is in no bucket into one of its candidates, moving others if needed.
    fn place(&mut self, key: &[u8], hash: u64, value: &[u8]) -> Option<Placed> {
        let layout = *self.resolver.layout();
        let roots = self.resolver.buckets(hash);
        for b in roots {
            if let Some(s) = self.free_slot(b) {
                layout.set_slot(self.image_mut(b), s, key, value);
                self.publish(b);
                return Some(Placed::Bucket {
                    bucket: b,
                    moves: 0,
                });
            }
        }
        // Breadth-first search for a displacement chain. Node i: a bucket, the node whose key
        // moves into it, and that key's slot there.
        struct Node {
            bucket: u64,
            parent: usize,
            slot: usize,
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut seen = HashSet::new();
        for b in roots {
            if seen.insert(b) {
                nodes.push(Node {
                    bucket: b,
                    parent: usize::MAX,
                    slot: 0,
                });
            }
        }
        let mut i = 0;
        let (end, free) = 'search: loop {
            if i >= nodes.len() {
                return None;
            }
            let b = nodes[i].bucket;
            for s in 0..layout.slots() {
                if nodes.len() >= self.max_search {
                    break;
                }
                let k = layout.slot_key(self.image(b), s);
                let alt = self.resolver.alternate(self.resolver.hash(k), b);
                if !seen.insert(alt) {
                    continue;
                }
                nodes.push(Node {
                    bucket: alt,
                    parent: i,
                    slot: s,
                });
                if let Some(f) = self.free_slot(alt) {
                    break 'search (nodes.len() - 1, f);
                }
            }
            i += 1;
        };
        // The chain root..end; move from the end: each write adds the key moving in (still in
        // its old bucket) over the slot of the key that moved out (already in its new one).
        let mut chain = vec![end];
        while nodes[*chain.last().expect("non-empty")].parent != usize::MAX {
            chain.push(nodes[*chain.last().expect("non-empty")].parent);
        }
        chain.reverse();
        let mut into_slot = free;
        for j in (1..chain.len()).rev() {
            let (from, to) = (&nodes[chain[j - 1]], &nodes[chain[j]]);
            let (fb, fs, tb) = (from.bucket, to.slot, to.bucket);
            let src = self.image(fb);
            let (k, v) = (
                layout.slot_key(src, fs).to_vec(),
                layout.slot_value(src, fs).to_vec(),
            );
            layout.set_slot(self.image_mut(tb), into_slot, &k, &v);
            self.publish(tb);
            into_slot = fs;
        }
        let root = nodes[chain[0]].bucket;
        layout.set_slot(self.image_mut(root), into_slot, key, value);
        self.publish(root);
        Some(Placed::Bucket {
            bucket: root,
            moves: chain.len() - 1,
        })
    }

    /// Removes `key`; returns its value if it was present.
    pub fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let layout = *self.resolver.layout();
        if key.len() != layout.key_len() {
            return None;
        }
        let old = match self.find(key, self.resolver.hash(key))? {
            Loc::Bucket(b, s) => {
                let v = layout.slot_value(self.image(b), s).to_vec();
                layout.clear_slot(self.image_mut(b), s);
                self.publish(b);
                v
            }
            Loc::Stash(i) => self
                .stash
                .write()
                .expect("stash lock")
                .remove(i)
                .1
                .into_vec(),
        };
        self.len -= 1;
        self.unstash();
        Some(old)
    }

    /// Moves stash entries into buckets where they now fit: bucket first, then out of the stash.
    fn unstash(&mut self) {
        let mut i = 0;
        loop {
            let entry = self.stash.read().expect("stash lock").get(i).cloned();
            let Some((k, v)) = entry else { return };
            if self.place(&k, self.resolver.hash(&k), &v).is_some() {
                self.stash.write().expect("stash lock").remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Checks the table's invariants, for tests: every copy of every region equals the
    /// authoritative images; every image is a valid bucket; every key is in one of its
    /// candidate buckets, once, and not in the stash; the count matches.
    pub fn check_invariants(&self) -> Result<(), String> {
        let layout = *self.resolver.layout();
        let bb = layout.bucket_bytes();
        let ranges = self.resolver.ranges();
        for (r, copies) in self.regions.iter().enumerate() {
            let (first, end) = ranges.bounds(r);
            for (c, region) in copies.iter().enumerate() {
                if region.snapshot() != self.shadow[first as usize * bb..end as usize * bb] {
                    return Err(format!("region {r} copy {c} differs from the images"));
                }
            }
        }
        let mut keys = HashSet::new();
        for b in 0..ranges.buckets() {
            let view = layout
                .check(self.image(b))
                .map_err(|e| format!("bucket {b}: {e}"))?;
            for (k, _) in view.entries() {
                if !self.resolver.buckets(self.resolver.hash(k)).contains(&b) {
                    return Err(format!("key {k:?} in bucket {b}, not a candidate"));
                }
                if !keys.insert(k.to_vec()) {
                    return Err(format!("key {k:?} twice"));
                }
            }
        }
        for (k, _) in self.stash.read().expect("stash lock").iter() {
            if !keys.insert(k.to_vec()) {
                return Err(format!("stash key {k:?} also elsewhere"));
            }
        }
        if keys.len() != self.len {
            return Err(format!("{} keys found, len says {}", keys.len(), self.len));
        }
        Ok(())
    }
}

/// Why a lookup gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// A read returned bytes that are not a bucket of this layout (not a torn copy: those are
    /// read again).
    #[error("read returned a bad bucket: {0}")]
    Bucket(BucketError),
    /// The buckets kept changing for `max_reads` reads.
    #[error("buckets kept changing; gave up after {0} reads")]
    Unstable(u32),
}

/// What the reader does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'b> {
    /// Read this bucket (map it with [`Resolver::address`]) and pass its bytes to
    /// [`Lookup::on_bucket`].
    Read(u64),
    /// The value, in the bytes just passed.
    Found(&'b [u8]),
    /// The key is in neither bucket (confirmed).
    Miss,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    First,
    Second,
    Confirm,
}

/// One remote lookup, sans-IO: [`Lookup::first`] names the first bucket to read; each read's
/// bytes go to [`Lookup::on_bucket`], which says what to read next or gives the answer. The
/// caller checks the stash first. The protocol is in the [module docs](self).
#[derive(Debug, Clone)]
pub struct Lookup {
    buckets: [u64; 2],
    stage: Stage,
    first_version: u32,
    reads: u32,
    max_reads: u32,
}

impl Lookup {
    /// A lookup of the key whose hash is `hash`, giving up after `max_reads` reads (16 is
    /// plenty: only concurrent writes to the same two buckets cost reads beyond three).
    pub fn new(resolver: &Resolver, hash: u64, max_reads: u32) -> Lookup {
        Lookup {
            buckets: resolver.buckets(hash),
            stage: Stage::First,
            first_version: 0,
            reads: 0,
            max_reads,
        }
    }

    /// The first bucket to read.
    pub fn first(&self) -> u64 {
        self.buckets[0]
    }

    /// Reads so far.
    pub fn reads(&self) -> u32 {
        self.reads
    }

    /// Takes the bytes of the bucket last asked for.
    pub fn on_bucket<'b>(
        &mut self,
        layout: &Layout,
        key: &[u8],
        bytes: &'b [u8],
    ) -> Result<Step<'b>, LookupError> {
        self.reads += 1;
        let again = |s: &Self, b| {
            if s.reads >= s.max_reads {
                Err(LookupError::Unstable(s.reads))
            } else {
                Ok(Step::Read(b))
            }
        };
        let current = match self.stage {
            Stage::First | Stage::Confirm => self.buckets[0],
            Stage::Second => self.buckets[1],
        };
        if key.len() != layout.key_len() {
            return Err(LookupError::Bucket(BucketError::KeyLength {
                expected: layout.key_len(),
                got: key.len(),
            }));
        }
        let view = match layout.check(bytes) {
            Ok(v) => v,
            Err(BucketError::Torn) => return again(self, current),
            Err(e) => return Err(LookupError::Bucket(e)),
        };
        if let Some(v) = view.find(key) {
            return Ok(Step::Found(v));
        }
        match self.stage {
            Stage::First => {
                self.first_version = view.version();
                self.stage = Stage::Second;
                again(self, self.buckets[1])
            }
            Stage::Second => {
                self.stage = Stage::Confirm;
                again(self, self.buckets[0])
            }
            Stage::Confirm if view.version() == self.first_version => Ok(Step::Miss),
            Stage::Confirm => {
                // The first bucket changed meanwhile: what the second held may be stale.
                self.first_version = view.version();
                self.stage = Stage::Second;
                again(self, self.buckets[1])
            }
        }
    }
}

/// A reader in this process: the stash, then the [`Lookup`] protocol over copies of the
/// regions (what a memory server's reads return, without the network).
#[derive(Debug, Clone)]
pub struct TableReader {
    resolver: Resolver,
    regions: Vec<Vec<Arc<Region>>>,
    stash: Arc<RwLock<StashEntries>>,
    replica: usize,
}

impl TableReader {
    /// The resolver.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// Reads the bytes at `a` from the chosen copy of its region.
    pub fn read(&self, a: &Address, out: &mut Vec<u8>) {
        let copies = &self.regions[a.region as usize];
        out.resize(a.len as usize, 0);
        copies[self.replica.min(copies.len() - 1)]
            .read_at(a.offset, out)
            .expect("a resolver's address is inside its region");
    }

    /// The value of `key`, and the bucket reads the last attempt took. A lookup that gives up
    /// as [`LookupError::Unstable`] (the writer was descheduled in the middle of a bucket, say)
    /// is started again after a yield; other errors are returned.
    pub fn lookup(&self, key: &[u8]) -> Result<(Option<Vec<u8>>, u32), LookupError> {
        loop {
            match self.try_lookup(key) {
                Err(LookupError::Unstable(_)) => std::thread::yield_now(),
                other => return other,
            }
        }
    }

    /// One attempt of [`lookup`](Self::lookup): at most 16 reads.
    pub fn try_lookup(&self, key: &[u8]) -> Result<(Option<Vec<u8>>, u32), LookupError> {
        {
            let stash = self.stash.read().expect("stash lock");
            if let Some((_, v)) = stash.iter().find(|(k, _)| &k[..] == key) {
                return Ok((Some(v.to_vec()), 0));
            }
        }
        let layout = *self.resolver.layout();
        let mut l = Lookup::new(&self.resolver, self.resolver.hash(key), 16);
        let mut bucket = l.first();
        let mut buf = Vec::with_capacity(layout.bucket_bytes());
        loop {
            self.read(&self.resolver.address(bucket), &mut buf);
            match l.on_bucket(&layout, key, &buf)? {
                Step::Read(b) => bucket = b,
                Step::Found(v) => return Ok((Some(v.to_vec()), l.reads())),
                Step::Miss => return Ok((None, l.reads())),
            }
        }
    }
}

/// 64 random bits from the operating system, never 0 (the key of no copy).
fn random_key() -> u64 {
    loop {
        let mut b = [0u8; 8];
        getrandom::getrandom(&mut b).expect("the operating system's random numbers");
        let k = u64::from_le_bytes(b);
        if k != 0 {
            return k;
        }
    }
}
