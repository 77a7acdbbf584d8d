//! The maps' byte layouts, shared with `bpf/fastpath.bpf.c` (its `_Static_assert`s pin the
//! sizes), and what fills them: a SetSep image cut into per-block elements, the node's
//! configuration, a delta turned into block edits. Pure Rust, no I/O: tested without BPF.
//!
//! - `sb_gpt` (array, one element per 1024-key block, [`BLOCK_BYTES`] each, mmap'able): a
//!   32-bit version word (odd while a writer is in the block), 4 bytes of padding, the block's
//!   64 bucket-choice bytes, its 64 group records (`rec` bytes each, as in the image) and zero
//!   slack. The image keeps choices and records in two arrays; here each block's are adjacent,
//!   so a lookup reads one map element and one version word covers both.
//! - `sb_gpt_fb` (hash): the fallback table, `(hash lo, hash hi)` -> value (u32).
//! - `sb_fib` (hash, 16-byte key -> 32-byte value), `sb_uplink` (hash, 4-byte TEID -> 24-byte
//!   value): the engine's FIB slice and uplink table, values byte for byte as
//!   `sb_engine::lte` writes them.
//! - `sb_cfg` (array, one [`CFG_BYTES`] element): [`NodeSetup`], the [`Arch`] and the
//!   table's shape.
//! - `sb_nodes` (array, [`NODE_BYTES`] each): per node its fabric MAC (bytes 0..6), the node
//!   standing in for it while it is gone plus one (u16 little endian at 6..8; 0: none; the GPT's
//!   answers naming the node go to its stand-in, as `sb_setsep::LiveSetSep::set_redirects`
//!   does for the engine) and its `ran` address (8..12).

use sb_common::splitmix64 as splitmix;
use sb_common::{KeyHash, PageInfo};
use sb_setsep::{Config, Delta, SetSep, SetSepView, Stats};
use std::net::Ipv4Addr;

/// Groups per block (sb-setsep's layout, format version 6).
pub const GROUPS_PER_BLOCK: usize = 64;
/// Bucket-choice bytes per block.
pub const CHOICE_BYTES_PER_BLOCK: usize = 64;
const BUCKETS_PER_BLOCK: usize = 256;
const CHOICES: usize = 4;

/// The candidate groups of each bucket, `CAND[bucket][choice]`: sb-setsep's table (its
/// `layout::CAND`, which it does not export), made by the same construction from the same
/// seed. A difference would change GPT answers, which the tests compare with sb-setsep's.
pub static CAND: [[u8; CHOICES]; BUCKETS_PER_BLOCK] = make_cand();

const fn conflicts(t: &[[u8; CHOICES]; BUCKETS_PER_BLOCK], b: usize, c: usize, g: u8) -> bool {
    let mut j = 0;
    while j < c {
        if t[b][j] == g {
            return true;
        }
        j += 1;
    }
    false
}

const fn make_cand() -> [[u8; CHOICES]; BUCKETS_PER_BLOCK] {
    let mut t = [[0u8; CHOICES]; BUCKETS_PER_BLOCK];
    let mut rng = 0x5365_7453_6570_0001u64; // "SetSep" + 1
    let mut c = 0;
    while c < CHOICES {
        let mut perm = [0u16; BUCKETS_PER_BLOCK];
        let mut i = 0;
        while i < BUCKETS_PER_BLOCK {
            perm[i] = i as u16;
            i += 1;
        }
        i = BUCKETS_PER_BLOCK - 1;
        while i > 0 {
            let j = (splitmix(&mut rng) % (i as u64 + 1)) as usize;
            let x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
            i -= 1;
        }
        let mut b = 0;
        while b < BUCKETS_PER_BLOCK {
            t[b][c] = (perm[b] % GROUPS_PER_BLOCK as u16) as u8;
            b += 1;
        }
        b = 0;
        while b < BUCKETS_PER_BLOCK {
            while conflicts(&t, b, c, t[b][c]) {
                let r = (splitmix(&mut rng) % BUCKETS_PER_BLOCK as u64) as usize;
                let gb = t[b][c];
                let gr = t[r][c];
                if r != b && !conflicts(&t, b, c, gr) && !conflicts(&t, r, c, gb) {
                    t[b][c] = gr;
                    t[r][c] = gb;
                }
            }
            b += 1;
        }
        c += 1;
    }
    t
}

/// Largest group record (bytes) the BPF block holds: 16+8 with up to 8 value bits (256
/// nodes), 8+8 with up to 12, 16+16 with up to 6.
pub const MAX_REC: usize = 24;
/// Bytes of group records (and slack) in a block element.
pub const GROUP_BYTES: usize = GROUPS_PER_BLOCK * MAX_REC + 8;
/// Offset of the choice bytes in a block element (after the version word and padding).
pub const CHOICES_AT: usize = 8;
/// Offset of the group records in a block element.
pub const GROUPS_AT: usize = CHOICES_AT + CHOICE_BYTES_PER_BLOCK;
/// Bytes of one `sb_gpt` element.
pub const BLOCK_BYTES: usize = GROUPS_AT + GROUP_BYTES;
/// Bytes of the `sb_cfg` element.
pub const CFG_BYTES: usize = 1112;
/// Bytes of one `sb_nodes` element.
pub const NODE_BYTES: usize = 12;
/// Entries of `sb_nodes` (the largest cluster the fast path serves).
pub const MAX_NODES: usize = 1024;
/// The `sb_cfg` flag: tables are loaded (until it is set every packet takes the slow path).
pub const CFG_READY: u32 = 1;

/// The architecture the programs run (`sb_cfg`'s `arch` word), as `sb_engine::Arch`: what the
/// maps hold and where a packet goes follow the engine's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Arch {
    /// The GPT at ingress, the FIB slice of the flows the node handles; at most one crossing.
    /// `sb_fib` holds the node's slice.
    #[default]
    ScaleBricks = 0,
    /// No GPT: every node holds the whole FIB (`sb_fib` holds every entry), looks up at
    /// ingress and sends the encapsulated packet to the egress node (kind Transmit).
    FullDup = 1,
    /// The FIB entries whose key hashes to the node (`sb_engine::indirection_node`; `sb_fib`
    /// holds that slice): ingress to the indirection node (kind Lookup), then to the egress
    /// node (kind Transmit); up to two crossings.
    HashPart = 2,
}

impl Arch {
    /// The three, in `sb_engine::Arch::ALL`'s order.
    pub const ALL: [Arch; 3] = [Arch::ScaleBricks, Arch::FullDup, Arch::HashPart];

    /// `sb_engine::Arch`'s label: `scalebricks`, `full-dup`, `hash-part`.
    pub fn label(self) -> &'static str {
        match self {
            Arch::ScaleBricks => "scalebricks",
            Arch::FullDup => "full-dup",
            Arch::HashPart => "hash-part",
        }
    }

    /// Whether the programs look keys up in the GPT (ScaleBricks only; the others get
    /// [`GptImage::none`]).
    pub fn uses_gpt(self) -> bool {
        self == Arch::ScaleBricks
    }
}

impl std::str::FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        Arch::ALL
            .into_iter()
            .find(|a| a.label() == s)
            .ok_or_else(|| format!("unknown architecture {s:?} (scalebricks, full-dup, hash-part)"))
    }
}

/// The per-CPU counters of the programs, in `sb_stats` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Counter {
    /// Frames seen at `inet`.
    RxInet,
    /// Frames seen at `ran`.
    RxRan,
    /// Frames with the fabric shim seen at `fabric` (the others, the node's own traffic, go
    /// to the kernel uncounted).
    RxFabric,
    /// Downlink frames encapsulated and sent out of `ran`.
    ToRan,
    /// Downlink frames sent over the fabric to their handling node.
    ToFabric,
    /// Uplink frames decapsulated and sent out of `inet`.
    UpToInet,
    /// Fabric frames sent out of `ran` after one crossing (looked up here, or transmitted as
    /// the ingress or indirection node encapsulated them).
    FabricToRan,
    /// GTP-U Echo Requests answered.
    Echo,
    /// Frames passed to the slow path (every reason below).
    Slow,
    /// Slow path: not IPv4 (ARP, IPv6, VLAN, others).
    SlowNotIp,
    /// Slow path: a header the fast path does not take (options, fragments, malformed).
    SlowParse,
    /// Slow path: broadcast or multicast.
    SlowGroup,
    /// Slow path: TTL 1 or 0 (the engine answers Time Exceeded).
    SlowTtl,
    /// Slow path: no GPT answer (no table, a node past the cluster).
    SlowGpt,
    /// Slow path: the block was being written (version changed).
    SlowRetry,
    /// Slow path: FIB miss.
    SlowFibMiss,
    /// Slow path: a FIB value with a policy (any of bytes 16..28: MBRs, flags, local slot) or
    /// an uplink value with a local policy slot.
    SlowPolicy,
    /// Slow path: too big for the `ran` MTU (the engine answers Fragmentation Needed).
    SlowMtu,
    /// Slow path: another reason (no downlink tunnel, egress at another node, no config).
    SlowOther,
    /// Slow path: unknown TEID (the engine answers an Error Indication).
    SlowTeidMiss,
    /// Slow path: the inner source is not the tunnel's UE.
    SlowUplinkCheck,
    /// Slow path: ICMP.
    SlowIcmp,
    /// Fabric frames sent out of `ran` after two crossings (hash partitioning).
    FabricToRan2,
}

impl Counter {
    /// Number of counters.
    pub const COUNT: usize = 23;
    /// Every counter, in map order.
    pub const ALL: [Counter; Counter::COUNT] = [
        Counter::RxInet,
        Counter::RxRan,
        Counter::RxFabric,
        Counter::ToRan,
        Counter::ToFabric,
        Counter::UpToInet,
        Counter::FabricToRan,
        Counter::Echo,
        Counter::Slow,
        Counter::SlowNotIp,
        Counter::SlowParse,
        Counter::SlowGroup,
        Counter::SlowTtl,
        Counter::SlowGpt,
        Counter::SlowRetry,
        Counter::SlowFibMiss,
        Counter::SlowPolicy,
        Counter::SlowMtu,
        Counter::SlowOther,
        Counter::SlowTeidMiss,
        Counter::SlowUplinkCheck,
        Counter::SlowIcmp,
        Counter::FabricToRan2,
    ];

    /// A snake_case name (for JSON and metrics).
    pub fn label(self) -> &'static str {
        match self {
            Counter::RxInet => "rx_inet",
            Counter::RxRan => "rx_ran",
            Counter::RxFabric => "rx_fabric",
            Counter::ToRan => "to_ran",
            Counter::ToFabric => "to_fabric",
            Counter::UpToInet => "up_to_inet",
            Counter::FabricToRan => "fabric_to_ran",
            Counter::Echo => "echo",
            Counter::Slow => "slow",
            Counter::SlowNotIp => "slow_not_ip",
            Counter::SlowParse => "slow_parse",
            Counter::SlowGroup => "slow_group",
            Counter::SlowTtl => "slow_ttl",
            Counter::SlowGpt => "slow_gpt",
            Counter::SlowRetry => "slow_retry",
            Counter::SlowFibMiss => "slow_fib_miss",
            Counter::SlowPolicy => "slow_policy",
            Counter::SlowMtu => "slow_mtu",
            Counter::SlowOther => "slow_other",
            Counter::SlowTeidMiss => "slow_teid_miss",
            Counter::SlowUplinkCheck => "slow_uplink_check",
            Counter::SlowIcmp => "slow_icmp",
            Counter::FabricToRan2 => "fabric_to_ran_2",
        }
    }
}

/// Why a table or configuration cannot be mirrored into the maps.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The image did not load (checksum, version, sizes).
    #[error("GPT image: {0}")]
    Image(#[from] sb_setsep::LoadError),
    /// Group records wider than a block element holds.
    #[error("GPT group records of {rec} bytes: the fast path holds at most {MAX_REC}")]
    RecordTooWide {
        /// Bytes per group record.
        rec: usize,
    },
    /// More blocks than a BPF array holds.
    #[error("{0} GPT blocks: too many for a BPF array")]
    TooManyBlocks(u64),
    /// A cluster larger than `sb_nodes`, or a node index past it.
    #[error("node {node} of {nodes}: the fast path serves clusters of at most {MAX_NODES}")]
    Nodes {
        /// This node.
        node: u16,
        /// Cluster size.
        nodes: usize,
    },
    /// A delta of another shape than the mirrored table, or one that did not parse.
    #[error("GPT delta: {0}")]
    Delta(&'static str),
}

/// A SetSep table as the fast path's maps hold it: shape, seed, the block elements' content and
/// the fallback entries. It answers lookups as the table does ([`sb_setsep::GptLookup`],
/// through [`lookup_blocks`], the program's own steps: a check of the maps' layout, not a data
/// path: each lookup builds its block's element).
#[derive(Clone, Debug)]
pub struct GptImage {
    /// Index bits (x).
    pub xbits: u8,
    /// Array bits (y).
    pub ybits: u8,
    /// Value bits.
    pub vbits: u8,
    /// The hash seed.
    pub seed: u64,
    /// Blocks.
    pub n_blocks: u64,
    /// Bytes per group record.
    pub rec: usize,
    /// The choice bytes, 64 per block.
    pub choices: Vec<u8>,
    /// The group records, `64 * rec` per block.
    pub groups: Vec<u8>,
    /// The fallback entries: `(hash lo, hash hi, value)`.
    pub fallback: Vec<(u64, u64, u16)>,
    /// Keys the table was built with (as `SetSep::len`; block edits do not change it, as
    /// deltas do not change a live table's).
    pub n_keys: u64,
    /// The table's build id (part of its fingerprint).
    pub build_id: u64,
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(x)
}

impl GptImage {
    /// The table of `t` (through its image, `SetSep::to_bytes`).
    pub fn of(t: &SetSep) -> Result<GptImage, LayoutError> {
        GptImage::from_image(&t.to_bytes())
    }

    /// The table of an image in sb-setsep's format (validated by `SetSepView::from_bytes`
    /// first: version, sizes, checksum, fallback order).
    pub fn from_image(b: &[u8]) -> Result<GptImage, LayoutError> {
        SetSepView::from_bytes(b)?;
        // The sections as sb-setsep's format module documents them (a validated image).
        let (xbits, ybits, vbits) = (b[12], b[13], b[14]);
        let seed = u64_at(b, 16);
        let n_keys = u64_at(b, 24);
        let n_blocks = u64_at(b, 32);
        let build_id = u64_at(b, 48);
        let n_fb = u64_at(b, 40) as usize;
        let rec = (xbits as usize + ybits as usize) / 8 * vbits as usize;
        if rec > MAX_REC {
            return Err(LayoutError::RecordTooWide { rec });
        }
        if n_blocks > u32::MAX as u64 / 2 {
            return Err(LayoutError::TooManyBlocks(n_blocks));
        }
        let c = 72;
        let g = c + n_blocks as usize * CHOICE_BYTES_PER_BLOCK;
        let f = g + n_blocks as usize * GROUPS_PER_BLOCK * rec;
        let fallback = (0..n_fb)
            .map(|i| {
                let e = &b[f + i * 18..f + (i + 1) * 18];
                (
                    u64_at(e, 0),
                    u64_at(e, 8),
                    u16::from_le_bytes([e[16], e[17]]),
                )
            })
            .collect();
        Ok(GptImage {
            xbits,
            ybits,
            vbits,
            seed,
            n_blocks,
            rec,
            choices: b[c..g].to_vec(),
            groups: b[g..f].to_vec(),
            fallback,
            n_keys,
            build_id,
        })
    }

    /// The table of the architectures without a GPT ([`Arch::uses_gpt`]): one block of zeros
    /// (every key answers 0, never asked), carrying the key-hash seed `seed` that hash
    /// partitioning's indirection node is computed with (`sb_engine::NodeConfig::seed`).
    pub fn none(seed: u64) -> GptImage {
        GptImage {
            xbits: 16,
            ybits: 8,
            vbits: 1,
            seed,
            n_blocks: 1,
            rec: 3,
            choices: vec![0; CHOICE_BYTES_PER_BLOCK],
            groups: vec![0; GROUPS_PER_BLOCK * 3],
            fallback: Vec::new(),
            n_keys: 0,
            build_id: 0,
        }
    }

    /// Block `blk`'s element (version 0).
    pub fn block(&self, blk: u64) -> Vec<u8> {
        let mut e = vec![0u8; BLOCK_BYTES];
        self.write_block(blk, &mut e);
        e
    }

    /// Writes block `blk`'s choices and records into the element `e` (the version word is
    /// left as it is).
    pub fn write_block(&self, blk: u64, e: &mut [u8]) {
        let b = blk as usize;
        let gb = GROUPS_PER_BLOCK * self.rec;
        e[CHOICES_AT..GROUPS_AT].copy_from_slice(
            &self.choices[b * CHOICE_BYTES_PER_BLOCK..(b + 1) * CHOICE_BYTES_PER_BLOCK],
        );
        e[GROUPS_AT..GROUPS_AT + gb].copy_from_slice(&self.groups[b * gb..(b + 1) * gb]);
        e[GROUPS_AT + gb..].fill(0);
    }
}

impl GptImage {
    /// The table's index and array widths.
    fn config(&self) -> Config {
        Config {
            index_bits: self.xbits,
            array_bits: self.ybits,
        }
    }

    /// Whether group `g`'s keys are in the fallback table (its first record's index is the
    /// all-ones mark).
    fn is_fallback_group(&self, g: usize) -> bool {
        let eb = (usize::from(self.xbits) + usize::from(self.ybits)) / 8;
        let r = &self.groups[g * self.rec..g * self.rec + eb];
        let mut w = [0u8; 4];
        w[..eb.min(4)].copy_from_slice(&r[..eb.min(4)]);
        let xmask = (1u32 << self.xbits) - 1;
        u32::from_le_bytes(w) & xmask == xmask
    }
}

impl sb_setsep::GptLookup for GptImage {
    fn hash_key(&self, key: &[u8]) -> KeyHash {
        sb_common::hash128(key, self.seed)
    }

    fn lookup_hash(&self, h: KeyHash) -> u16 {
        lookup_blocks(self, |b| self.block(b), h.lo, h.hi)
    }

    fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
        assert_eq!(hs.len(), out.len(), "one value per hash");
        for (h, v) in hs.iter().zip(out.iter_mut()) {
            *v = self.lookup_hash(*h);
        }
    }

    fn value_bits(&self) -> u8 {
        self.vbits
    }

    fn len(&self) -> u64 {
        self.n_keys
    }

    /// As `SetSep::stats` counts them ([`Stats::of_shape`]), from the image (the maps are not
    /// on the heap's pages: `page_info` is empty).
    fn stats(&self) -> Stats {
        let groups = self.n_blocks as usize * GROUPS_PER_BLOCK;
        Stats::of_shape(
            self.config(),
            self.vbits,
            self.n_keys,
            self.n_blocks,
            self.fallback.len() as u64,
            (0..groups).filter(|&g| self.is_fallback_group(g)).count() as u64,
            PageInfo::default(),
        )
    }

    fn seed(&self) -> u64 {
        self.seed
    }

    fn fingerprint(&self) -> u64 {
        sb_setsep::fingerprint(
            self.seed,
            self.build_id,
            self.n_blocks,
            self.config(),
            self.vbits,
        )
    }

    fn to_fixed(&self) -> Option<SetSep> {
        None
    }
}

/// What a node's fast path needs to know besides its tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSetup {
    /// This node's index.
    pub node: u16,
    /// Every node's fabric MAC, by index (the cluster size is its length).
    pub fabric_macs: Vec<[u8; 6]>,
    /// Every node's `ran` address (the outer source of its tunnels).
    pub ran_addrs: Vec<Ipv4Addr>,
    /// The largest IP packet `ran` carries.
    pub ran_mtu: u32,
    /// The `inet` port's MAC and its neighbour's.
    pub inet_mac: [u8; 6],
    /// The `inet` neighbour's MAC (uplink frames' destination).
    pub inet_peer: [u8; 6],
    /// The `ran` port's MAC.
    pub ran_mac: [u8; 6],
    /// The `ran` neighbour's MAC (downlink frames' destination).
    pub ran_peer: [u8; 6],
    /// Interface indexes the programs redirect to: `inet`, `ran`, `fabric`.
    pub ifindex_inet: u32,
    /// The `ran` interface index.
    pub ifindex_ran: u32,
    /// The `fabric` interface index.
    pub ifindex_fabric: u32,
}

impl NodeSetup {
    /// Checks the cluster fits `sb_nodes`.
    pub fn check(&self) -> Result<(), LayoutError> {
        let nodes = self.fabric_macs.len();
        if nodes == 0
            || nodes > MAX_NODES
            || self.ran_addrs.len() != nodes
            || usize::from(self.node) >= nodes
        {
            return Err(LayoutError::Nodes {
                node: self.node,
                nodes,
            });
        }
        Ok(())
    }

    /// The `sb_cfg` element for this node, architecture `arch` and the table `gpt` (flags:
    /// `CFG_READY` when `ready`).
    pub fn cfg_bytes(&self, arch: Arch, gpt: &GptImage, ready: bool) -> [u8; CFG_BYTES] {
        let mut b = [0u8; CFG_BYTES];
        b[0..8].copy_from_slice(&gpt.seed.to_le_bytes());
        b[8..16].copy_from_slice(&gpt.n_blocks.to_le_bytes());
        let words = [
            u32::from(self.node),
            self.fabric_macs.len() as u32,
            u32::from(gpt.xbits),
            u32::from(gpt.ybits),
            u32::from(gpt.vbits),
            gpt.rec as u32,
            self.ran_mtu,
            self.ifindex_inet,
            self.ifindex_ran,
            self.ifindex_fabric,
            if ready { CFG_READY } else { 0 },
            arch as u32,
        ];
        for (i, w) in words.iter().enumerate() {
            b[16 + 4 * i..20 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        b[64..70].copy_from_slice(&self.inet_mac);
        b[70..76].copy_from_slice(&self.inet_peer);
        b[76..82].copy_from_slice(&self.ran_mac);
        b[82..88].copy_from_slice(&self.ran_peer);
        for (bkt, row) in CAND.iter().enumerate() {
            b[88 + 4 * bkt..92 + 4 * bkt].copy_from_slice(row);
        }
        b
    }

    /// Node `n`'s `sb_nodes` element (no stand-in).
    pub fn node_bytes(&self, n: usize) -> [u8; NODE_BYTES] {
        self.node_bytes_with(n, None)
    }

    /// Node `n`'s `sb_nodes` element with node `stand_in` standing in for it (None: none).
    pub fn node_bytes_with(&self, n: usize, stand_in: Option<u16>) -> [u8; NODE_BYTES] {
        let mut b = [0u8; NODE_BYTES];
        b[..6].copy_from_slice(&self.fabric_macs[n]);
        let s = stand_in.map_or(0, |s| s.saturating_add(1));
        b[6..8].copy_from_slice(&s.to_le_bytes());
        b[8..12].copy_from_slice(&self.ran_addrs[n].octets());
        b
    }
}

/// What a delta changes in the maps: one block's choices (a block delta) and records, and
/// fallback entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockEdit {
    /// The block.
    pub block: u64,
    /// The block's new 64 choice bytes (a re-balanced block), or none.
    pub choices: Option<Vec<u8>>,
    /// Byte offset of `records` in the block's group records.
    pub records_at: usize,
    /// The new record bytes (one group's, or the block's 64).
    pub records: Vec<u8>,
    /// Fallback entries that leave.
    pub fb_remove: Vec<(u64, u64)>,
    /// Fallback entries that join.
    pub fb_insert: Vec<(u64, u64, u16)>,
}

struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], LayoutError> {
        let s = self
            .b
            .get(self.pos..self.pos + n)
            .ok_or(LayoutError::Delta("truncated"))?;
        self.pos += n;
        Ok(s)
    }
    fn varint(&mut self) -> Result<u64, LayoutError> {
        let mut x = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            x |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(x);
            }
        }
        Err(LayoutError::Delta("varint too long"))
    }
}

impl BlockEdit {
    /// The edit of `d` (already accepted by the Rust table it was applied to) on the table
    /// `gpt` mirrors: its serialized form (sb-setsep's `Delta::to_bytes`) read back.
    pub fn of(d: &Delta, gpt: &GptImage) -> Result<BlockEdit, LayoutError> {
        let bytes = d.to_bytes();
        let mut r = Rd { b: &bytes, pos: 0 };
        if r.take(2)? != b"SD" {
            return Err(LayoutError::Delta("magic"));
        }
        let _version = r.take(1)?;
        let shape = r.take(3)?;
        if shape != [gpt.xbits, gpt.ybits, gpt.vbits] {
            return Err(LayoutError::Delta("another table shape"));
        }
        r.take(8)?; // table fingerprint
        let n_blocks = r.varint()?;
        if n_blocks != gpt.n_blocks {
            return Err(LayoutError::Delta("another block count"));
        }
        r.varint()?; // keys
        r.varint()?; // seq
        let group = r.varint()?;
        let block = group / GROUPS_PER_BLOCK as u64;
        if block >= gpt.n_blocks {
            return Err(LayoutError::Delta("group past the table"));
        }
        let (choices, records_at, n) = match r.take(1)?[0] {
            0 => (
                None,
                (group % GROUPS_PER_BLOCK as u64) as usize * gpt.rec,
                gpt.rec,
            ),
            1 => (
                Some(r.take(CHOICE_BYTES_PER_BLOCK)?.to_vec()),
                0,
                GROUPS_PER_BLOCK * gpt.rec,
            ),
            _ => return Err(LayoutError::Delta("kind")),
        };
        let records = r.take(n)?.to_vec();
        let nr = r.varint()? as usize;
        let mut fb_remove = Vec::with_capacity(nr.min(1024));
        for _ in 0..nr {
            let e = r.take(16)?;
            fb_remove.push((u64_at(e, 0), u64_at(e, 8)));
        }
        let ni = r.varint()? as usize;
        let mut fb_insert = Vec::with_capacity(ni.min(1024));
        for _ in 0..ni {
            let e = r.take(18)?;
            fb_insert.push((
                u64_at(e, 0),
                u64_at(e, 8),
                u16::from_le_bytes([e[16], e[17]]),
            ));
        }
        Ok(BlockEdit {
            block,
            choices,
            records_at,
            records,
            fb_remove,
            fb_insert,
        })
    }

    /// Applies the edit to the mirror's own image (what the maps then hold).
    pub fn apply_to(&self, gpt: &mut GptImage) {
        let b = self.block as usize;
        if let Some(c) = &self.choices {
            gpt.choices[b * CHOICE_BYTES_PER_BLOCK..(b + 1) * CHOICE_BYTES_PER_BLOCK]
                .copy_from_slice(c);
        }
        let at = b * GROUPS_PER_BLOCK * gpt.rec + self.records_at;
        gpt.groups[at..at + self.records.len()].copy_from_slice(&self.records);
        gpt.fallback
            .retain(|&(lo, hi, _)| !self.fb_remove.contains(&(lo, hi)));
        for &(lo, hi, v) in &self.fb_insert {
            gpt.fallback.retain(|&(l, h, _)| (l, h) != (lo, hi));
            gpt.fallback.push((lo, hi, v));
        }
    }
}

/// The lookup the BPF program does, over block elements (`blocks[b]` is block `b`'s element)
/// and the fallback entries: the reference the program is compared with, and the check that
/// the element layout answers as sb-setsep does.
pub fn lookup_blocks(gpt: &GptImage, block: impl Fn(u64) -> Vec<u8>, lo: u64, hi: u64) -> u16 {
    let gb = ((u128::from(lo) * u128::from(gpt.n_blocks << 8)) >> 64) as u64;
    let (blk, bkt) = (gb >> 8, (gb & 0xff) as usize);
    let e = block(blk);
    let cb = e[CHOICES_AT + bkt / 4];
    let ch = ((cb >> ((bkt & 3) * 2)) & 3) as usize;
    let g = CAND[bkt][ch] as usize;
    let (xb, yb) = (u32::from(gpt.xbits), u32::from(gpt.ybits));
    let eb = ((xb + yb) / 8) as usize;
    let shift = if yb == 8 { 29 } else { 28 };
    let xmask = (1u32 << xb) - 1;
    let ymask = ((1u64 << yb) - 1) as u32;
    let a = u32::from(hi as u16);
    let slope = ((hi >> 32) as u32 | 1) << 12;
    let mut v = 0u16;
    for j in 0..usize::from(gpt.vbits) {
        let off = GROUPS_AT + g * gpt.rec + j * eb;
        let w = u32::from_le_bytes([e[off], e[off + 1], e[off + 2], e[off + 3]]);
        let idx = w & xmask;
        if j == 0 && idx == xmask {
            return gpt
                .fallback
                .iter()
                .find(|&&(l, h, _)| (l, h) == (lo, hi))
                .map_or(0, |&(_, _, v)| v);
        }
        let pos = ((a << 16).wrapping_add(idx.wrapping_mul(slope))) >> shift;
        v |= ((((w >> xb) & ymask) >> pos) & 1) as u16 * (1 << j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use sb_setsep::{BuildOptions, Config, Updatable};

    fn keys(n: usize, salt: u64) -> Vec<[u8; 16]> {
        (0..n as u64)
            .map(|i| {
                let mut k = [0u8; 16];
                k[10] = 0xff;
                k[11] = 0xff;
                let x = (i ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                k[12..].copy_from_slice(&(x as u32).to_be_bytes());
                k[4..8].copy_from_slice(&((x >> 32) as u32).to_le_bytes());
                k
            })
            .collect()
    }

    fn table(n: usize, bits: u8, config: Config) -> (Vec<[u8; 16]>, Vec<u16>, SetSep) {
        let ks = keys(n, 7);
        let vals: Vec<u16> = (0..n)
            .map(|i| ((i * 7 + 3) % (1usize << bits)) as u16)
            .collect();
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let opts = BuildOptions {
            config,
            value_bits: bits,
            seed: 0x5eed,
            threads: 1,
            ..BuildOptions::default()
        };
        let t = SetSep::build(&refs, &vals, &opts).unwrap();
        (ks, vals, t)
    }

    /// The block elements answer every key as the table does (every shape the fast path
    /// takes), fallback keys included.
    #[test]
    fn block_elements_answer_as_setsep() {
        for (config, bits) in [
            (Config::C16_8, 1u8),
            (Config::C16_8, 2),
            (Config::C16_8, 8),
            (
                Config {
                    index_bits: 8,
                    array_bits: 8,
                },
                3,
            ),
            (
                Config {
                    index_bits: 16,
                    array_bits: 16,
                },
                4,
            ),
        ] {
            let (ks, vals, t) = table(20_000, bits, config);
            let img = GptImage::of(&t).unwrap();
            assert_eq!(img.n_blocks, 20);
            for (k, &v) in ks.iter().zip(&vals) {
                let h = sb_common_hash(k, img.seed);
                assert_eq!(lookup_blocks(&img, |b| img.block(b), h.0, h.1), v);
            }
            // Keys not in the table answer as the table does too.
            for k in keys(2000, 99) {
                let h = sb_common_hash(&k, img.seed);
                assert_eq!(
                    lookup_blocks(&img, |b| img.block(b), h.0, h.1),
                    t.lookup(&k)
                );
            }
        }
    }

    /// The mirror through the GPT's one lookup trait, alone and as an engine's `Gpt`: the
    /// table's values, batched or not, for held keys and others (fallback groups among them),
    /// and the table's shape, statistics and fingerprint.
    #[test]
    fn the_mirror_is_a_gpt() {
        use sb_setsep::GptLookup;
        for (n, bits, config) in [
            (20_000, 2u8, Config::C16_8),
            (
                3000,
                3,
                Config {
                    index_bits: 8,
                    array_bits: 8,
                },
            ),
        ] {
            let (ks, vals, t) = table(n, bits, config);
            let img = GptImage::of(&t).unwrap();
            let ts = t.stats();
            let ms = img.stats();
            assert!(
                config.index_bits > 8 || ts.fallback_groups > 0,
                "8-bit indexes leave some groups to the fallback table"
            );
            assert_eq!(
                (
                    ms.keys,
                    ms.value_bits,
                    ms.config,
                    ms.fallback_keys,
                    ms.bytes
                ),
                (
                    ts.keys,
                    ts.value_bits,
                    ts.config,
                    ts.fallback_keys,
                    ts.bytes
                )
            );
            assert_eq!(
                (ms.blocks, ms.groups, ms.fallback_groups),
                (ts.blocks, ts.groups, ts.fallback_groups)
            );
            assert_eq!(ms.bits_per_key, ts.bits_per_key);
            assert_eq!(
                (img.len(), img.value_bits(), img.seed(), img.fingerprint()),
                (t.len(), t.value_bits(), t.seed(), t.fingerprint())
            );
            assert!(img.to_fixed().is_none());
            let gpt = sb_engine::Gpt::new(std::sync::Arc::new(img.clone()));
            let all: Vec<[u8; 16]> = ks.iter().copied().chain(keys(1000, 5)).collect();
            let hs: Vec<KeyHash> = all.iter().map(|k| img.hash_key(k)).collect();
            assert_eq!(hs, all.iter().map(|k| t.hash_key(k)).collect::<Vec<_>>());
            let mut got = vec![0u16; hs.len()];
            gpt.lookup_batch_hashes(&hs, &mut got);
            let want: Vec<u16> = all.iter().map(|k| t.lookup(k)).collect();
            assert_eq!(got, want);
            assert_eq!(&got[..n], &vals[..]);
            for (k, &v) in all.iter().zip(&want).step_by(97) {
                assert_eq!((img.lookup(k), gpt.lookup(k)), (v, v));
            }
        }
    }

    fn sb_common_hash(k: &[u8], seed: u64) -> (u64, u64) {
        let h = sb_common::hash128(k, seed);
        (h.lo, h.hi)
    }

    #[test]
    fn wide_records_are_refused() {
        let (_, _, t) = table(
            3000,
            7,
            Config {
                index_bits: 16,
                array_bits: 16,
            },
        );
        assert!(matches!(
            GptImage::of(&t),
            Err(LayoutError::RecordTooWide { rec: 28 })
        ));
    }

    /// Deltas turned into block edits keep the mirror's image equal to the table's.
    #[test]
    fn block_edits_follow_deltas() {
        let ks = keys(5000, 3);
        let vals: Vec<u16> = (0..ks.len()).map(|i| (i % 4) as u16).collect();
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let opts = BuildOptions {
            value_bits: 2,
            seed: 11,
            threads: 1,
            capacity: 8000,
            ..BuildOptions::default()
        };
        let mut u = Updatable::build(&refs, &vals, &opts).unwrap();
        let mut img = GptImage::of(u.table()).unwrap();
        for (i, k) in keys(2500, 77).iter().enumerate() {
            let d = u.insert(k, (i % 4) as u16).unwrap();
            BlockEdit::of(&d, &img).unwrap().apply_to(&mut img);
            if i % 500 == 0 {
                let want = GptImage::of(u.table()).unwrap();
                assert_eq!(img.choices, want.choices);
                assert_eq!(img.groups, want.groups);
                let mut a = img.fallback.clone();
                a.sort_unstable();
                assert_eq!(a, want.fallback);
            }
        }
    }

    /// The architectures are the engine's, by label and order.
    #[test]
    fn arch_is_the_engines() {
        assert_eq!(Arch::ALL.len(), sb_engine::Arch::ALL.len());
        for (a, e) in Arch::ALL.iter().zip(sb_engine::Arch::ALL) {
            assert_eq!(a.label(), e.label());
            assert_eq!(e.label().parse::<Arch>(), Ok(*a));
            assert_eq!(a.uses_gpt(), e == sb_engine::Arch::ScaleBricks);
        }
        assert!("ring".parse::<Arch>().is_err());
    }

    /// The table of the architectures without a GPT answers 0 and carries the seed.
    #[test]
    fn no_gpt_image() {
        let g = GptImage::none(0xfeed);
        assert_eq!((g.seed, g.n_blocks, g.rec), (0xfeed, 1, 3));
        assert_eq!(g.block(0).len(), BLOCK_BYTES);
        for k in keys(100, 1) {
            let h = sb_common_hash(&k, g.seed);
            assert_eq!(lookup_blocks(&g, |b| g.block(b), h.0, h.1), 0);
        }
    }

    #[test]
    fn cfg_bytes_place_fields() {
        let (_, _, t) = table(1000, 2, Config::C16_8);
        let img = GptImage::of(&t).unwrap();
        let s = NodeSetup {
            node: 1,
            fabric_macs: vec![[1; 6], [2; 6]],
            ran_addrs: vec![Ipv4Addr::new(10, 1, 0, 1), Ipv4Addr::new(10, 1, 1, 1)],
            ran_mtu: 1500,
            inet_mac: [3; 6],
            inet_peer: [4; 6],
            ran_mac: [5; 6],
            ran_peer: [6; 6],
            ifindex_inet: 7,
            ifindex_ran: 8,
            ifindex_fabric: 9,
        };
        s.check().unwrap();
        let b = s.cfg_bytes(Arch::HashPart, &img, true);
        assert_eq!(u64_at(&b, 0), 0x5eed);
        assert_eq!(&b[16..20], &1u32.to_le_bytes());
        assert_eq!(&b[20..24], &2u32.to_le_bytes());
        assert_eq!(&b[36..40], &6u32.to_le_bytes()); // rec: 3 bytes x 2 bits
        assert_eq!(&b[56..60], &CFG_READY.to_le_bytes());
        assert_eq!(&b[60..64], &2u32.to_le_bytes());
        assert_eq!(&b[82..88], &[6; 6]);
        assert_eq!(&b[88..92], &CAND[0]);
        assert_eq!(s.node_bytes(1)[8..], [10, 1, 1, 1]);
    }
}
